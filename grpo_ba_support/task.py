"""grpo_ba_support/task.py -- what train() trains on: the policy, its tokenizer, the task: the toy
of --design (toy_tasks/), or --model (a HF causal LM) with --dataset (docs/code-tour.md)."""
import contextlib
import json
import os
import random
import weakref
from dataclasses import dataclass

import torch

from grpo_ba_support.run import SetupError
from toy_tasks import designs, make_problems, score_running_sums
from toy_tasks.model import default_cache_dir, load_or_warmup_toy, load_warmup_file

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
CACHE_DIR = default_cache_dir()   # warmed-up toy policies: $GRPO_BA_CACHE, XDG, ~/.cache/grpo_ba


@dataclass
class Task:
    train: list                   # [{"prompt", "answer"}]
    heldout: list
    prompt_text: object           # prompt -> the text the policy continues
    forced_prefix: object         # (prompt, random.Random) -> forced start ('' = none)
    data_report: object = None    # what the lab's data checks found (None: the toy)
    warmup: dict | None = None    # the toy's warm-up: its source, settings and sha256
    reference: object = None      # pi_ref when --beta > 0 (None: a frozen copy of the start)
    score: object = None          # (completion, gold) -> 1.0 or 0.0; None: verifier.verify


def build(args, log=print):
    """(policy, tokenizer, task): the toy of --design (default) or --model with --dataset."""
    if args.model:
        if not args.dataset:
            raise SetupError("--model needs --dataset (a hub id or a local .json/.jsonl/.parquet "
                             "file)")
        tokenizer, policy = load_tokenizer(args.model), load_model(args.model)   # paths checked
        context = getattr(policy.config.get_text_config(), "max_position_embeddings", None)
        room = context and max(1, context - args.max_new_tokens)     # the prompt's share
        rows = read_dataset(args.dataset, tokenizer, room,
                            f"context {context} - --max-new-tokens {args.max_new_tokens}")
        train, heldout = split_heldout(rows, args.eval_prompts)
        log(f"dataset {args.dataset}: {len(train)} training rows, {len(heldout)} held out")
        task = Task(train, heldout, lambda p: format_prompt(tokenizer, p), lambda p, rng: "")
    else:
        world = designs.world(args.design)
        seed = designs.warmup_seed(args.design, args.seed)
        shipped = designs.shipped_warmup(args.design, seed)
        if shipped:                                  # the same start on every machine
            path, sha256 = shipped
            log(f"warm-up: the policy shipped for design {args.design}, seed {seed}")
            policy, tokenizer = load_warmup_file(path, sha256)
            warmup = {"source": "shipped", "path": os.path.relpath(path, designs.REPO),
                      "sha256": sha256, "world": vars(world), "seed": seed,
                      "steps": designs.DESIGNS[args.design].get("shipped_steps", {}).get(
                          seed, designs.warmup_steps(args.design)),    # trained: a band stops it
                      "planned_steps": designs.warmup_steps(args.design)}
        else:
            policy, tokenizer, warmup = load_or_warmup_toy(
                CACHE_DIR, world, designs.warmup_steps(args.design), seed, log)
        task = toy_task(world, tokenizer, warmup)
    if args.gradient_checkpointing:
        getattr(policy, "activation_checkpointing_enable", policy.gradient_checkpointing_enable)()
    return policy, tokenizer, task


def toy_task(world, tokenizer, warmup: dict | None = None) -> Task:
    """The toy's problems, prompts (<bos> then the sum), forced starts, score (the last number)."""
    train, heldout = make_problems()
    bos = tokenizer.bos_token
    return Task(train.to_list(), heldout.to_list(), lambda p: bos + p, world.forced_prefix,
                warmup=warmup, score=score_running_sums)


# ------------------------------------------------------------------ a real model
def check_model_path(name_or_path: str):
    """A local directory or something shaped like a hub id ("org/name")."""
    is_hub_id = name_or_path.count("/") == 1 and not name_or_path.startswith((".", "/", "~"))
    if not os.path.isdir(os.path.expanduser(name_or_path)) and not is_hub_id:
        raise SetupError(f"model path {name_or_path!r} does not exist")


@contextlib.contextmanager
def no_progress_bars():
    """Progress bars off for one load, then back as they were (a caller keeps its own setting)."""
    from huggingface_hub import utils as hub_utils
    from transformers.utils import logging as hf_logging
    was_on, hub_was_off = (hf_logging.is_progress_bar_enabled(),
                           hub_utils.are_progress_bars_disabled())
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()
        (hub_utils.disable_progress_bars if hub_was_off else hub_utils.enable_progress_bars)()


def from_pretrained(auto_class, what: str, name_or_path: str, **kwargs):
    """auto_class.from_pretrained, quietly; an unreadable path or id is a SetupError in one line."""
    check_model_path(name_or_path)
    try:
        with no_progress_bars():
            return auto_class.from_pretrained(os.path.expanduser(name_or_path), **kwargs)
    except OSError as err:
        raise SetupError(f"cannot load {what} {name_or_path!r}: "
                         f"{str(err).splitlines()[0]}") from None


def load_model(name_or_path: str, attn_implementation: str | None = "sdpa"):
    """Any HF causal LM (hub id or local directory), weights in float32 (--dtype: autocast's)."""
    from transformers import AutoModelForCausalLM
    attention = {"attn_implementation": attn_implementation} if attn_implementation else {}
    return from_pretrained(AutoModelForCausalLM, "model", name_or_path, dtype=torch.float32,
                           **attention)


def load_tokenizer(name_or_path: str):
    """Its tokenizer, padding on the left (generation continues from the prompt's end)."""
    from transformers import AutoTokenizer
    tokenizer = from_pretrained(AutoTokenizer, "tokenizer", name_or_path, padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


# ------------------------------------------------------------------ a dataset, every row checked
# Shared with the lab (plumbing/real_data.py): a gold the verifier never rewards, or a prompt the
# policy cannot be fed, corrupts the very signal this project studies.

MISSING = object()                               # a column a row does not have at all
PROBLEMS = {"malformed_json": "malformed JSON", "missing_prompt": "no prompt",
            "bad_prompt": "prompt is neither text nor a list of chat messages",
            "bad_messages": "chat messages without a text role and content",
            "template_error": "the chat template refuses the prompt",
            "missing_answer": "no gold answer", "prompt_too_long": "prompt too long",
            "unreadable_answer": "gold answer the verifier cannot read"}


def read_dataset(source: str, tokenizer=None, max_tokens: int = 0, why: str = "") -> list:
    """[{"prompt", "answer"}] of a file or hub id (prompt: text or chat; answer: text, number or
    list); the first row training cannot use stops the run in one line: file, row, problem."""
    rows = []
    for where, row in read_records(source):
        fields = {} if isinstance(row, str) else row     # a str: why the line is not JSON
        prompt, answer = fields.get("prompt", MISSING), fields.get("answer", MISSING)
        problem = (("malformed_json", row) if isinstance(row, str) else prompt_problem(prompt) or
                   answer_problem(answer) or measure_prompt(tokenizer, prompt, max_tokens, why)[1])
        if problem:
            raise SetupError(f"{source} {where}: {PROBLEMS[problem[0]]} ({problem[1]})")
        rows.append({"prompt": prompt, "answer": as_gold(answer)})
    if len(rows) < 2:
        found = ["empty, no rows", "one row"][len(rows)]
        raise SetupError(f"{source}: {found}; a run needs two or more")
    return rows


def read_records(source: str, split: str = "train") -> list:
    """[(where, row)] in file order: "line N" of a .jsonl file as an editor numbers it (a line
    that is not a JSON object: the parser's complaint, a str), "row N" of anything else."""
    extension = os.path.splitext(source)[1].lower()
    if extension in (".json", ".jsonl", ".parquet") and not os.path.isfile(source):
        raise SetupError(f"dataset file {source!r} does not exist")
    if extension == ".jsonl":
        with open(source, "rb") as f:
            return json_lines(f.read())
    if os.path.exists(source) and extension not in (".json", ".parquet"):
        raise SetupError(f"dataset {source!r}: use a .json, .jsonl or .parquet file")
    import datasets
    datasets.disable_progress_bars()
    kind = {".json": "json", ".parquet": "parquet"}.get(extension)
    try:
        data = datasets.load_dataset(kind or source, data_files=kind and source,
                                     split="train" if kind else split)   # a file is one split
    except Exception as err:                             # malformed, offline, unknown id ...
        raise SetupError(f"cannot read dataset {source!r}: {str(err).splitlines()[0]}") from None
    return [(f"row {n}", row) for n, row in enumerate(data, 1)]


def json_lines(raw: bytes) -> list:
    """[("line N", the line's JSON object or why it is not one)], blank lines skipped."""
    records = []
    for n, line in enumerate(raw.removeprefix(b"\xef\xbb\xbf").split(b"\n"), 1):   # less a BOM
        if line.strip():
            try:
                row = json.loads(line.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as err:
                row = f"{err.msg}, column {err.colno}" if hasattr(err, "colno") else "not UTF-8"
            records.append((f"line {n}", row if isinstance(row, (dict, str)) else
                            f"a row must be a JSON object, not {type(row).__name__}"))
    return records


def prompt_problem(prompt, column: str = "prompt"):
    """(kind, detail) unless the prompt is text or chat messages with a text role and content."""
    if prompt is MISSING or prompt is None or (isinstance(prompt, str) and not prompt.strip()):
        state = "missing" if prompt is MISSING else "null" if prompt is None else "empty"
        return "missing_prompt", f"column {column!r} is {state}"
    if not isinstance(prompt, (str, list)):
        return "bad_prompt", f"got {type(prompt).__name__}"
    if prompt == []:
        return "bad_messages", "an empty list of messages"
    for i, message in enumerate([] if isinstance(prompt, str) else prompt, 1):
        if not isinstance(message, dict):
            return "bad_messages", f"message {i} is {type(message).__name__}, not an object"
        for key in ("role", "content"):
            value = message.get(key)
            if not isinstance(value, str) or not value.strip():
                state = ("no" if value is None else
                         "an empty" if isinstance(value, str) else "a non-text")
                return "bad_messages", f"message {i} has {state} {key!r}"
    return None


def answer_problem(answer, column: str = "answer"):
    """(kind, detail) unless every acceptable answer is one the verifier can read."""
    import verifier                                  # sympy: only for a dataset's golds
    if answer is MISSING or answer is None or answer == [] or not str(answer).strip():
        state = "missing" if answer is MISSING else "null" if answer is None else "empty"
        return "missing_answer", f"column {column!r} is {state}"
    for gold in answer if isinstance(answer, list) else [answer]:
        if isinstance(gold, bool) or not isinstance(gold, (str, int, float)) \
                or verifier.parse_gold(str(gold)) is None:
            inside = f" in {repr(answer)[:60]}" if isinstance(answer, list) else ""
            return "unreadable_answer", f"{repr(gold)[:60]}{inside}"
    return None


def measure_prompt(tokenizer, prompt, max_tokens: int = 0, why: str = ""):
    """(tokens as rollout() feeds them, (kind, detail) if the chat template refuses it or it exceeds
    max_tokens (0: none)); (None, None) without a tokenizer."""
    if tokenizer is None:
        return None, None
    try:
        text = format_prompt(tokenizer, prompt)
    except Exception as err:                             # jinja: unknown role, bad order ...
        first_line = (str(err) or "?").splitlines()[0]
        return None, ("template_error", f"{type(err).__name__}: {first_line}")
    tokens = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    if not max_tokens or tokens <= max_tokens:
        return tokens, None
    templated = " after the chat template" if getattr(tokenizer, "chat_template", None) else ""
    return tokens, ("prompt_too_long", f"{tokens} tokens{templated} > {max_tokens}: {why}")


def as_gold(answer):
    """Numbers become their text; a list of acceptable answers stays a list (of texts)."""
    return [str(a) for a in answer] if isinstance(answer, list) else str(answer)


def split_heldout(rows: list, heldout: int, seed: int = 0):
    """(train, heldout): a seeded shuffle, then min(heldout, n // 5 or 1) rows held out."""
    rows = list(rows)
    random.Random(seed).shuffle(rows)
    n_heldout = min(heldout, len(rows) // 5 or 1)
    return rows[n_heldout:], rows[:n_heldout]


# ------------------------------------------------------------------ chat templates and stops
def format_prompt(tokenizer, prompt) -> str:
    """The text the policy continues: the chat template (asking for \\boxed{}), else the prompt."""
    if getattr(tokenizer, "chat_template", None):
        messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": f"{prompt}"
            "\nPlease reason step by step, and put your final answer within \\boxed{}."}]
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return "\n".join(m["content"] for m in prompt) if isinstance(prompt, list) else str(prompt)


def stop_token_ids(tokenizer, generation_config=None) -> list[int]:
    """Every id that ends a response: the tokenizer's EOS, the generation config's (Qwen3's two),
    the chat template's end of turn (a base model through a template stops there too)."""
    ids = [tokenizer.eos_token_id]
    configured = getattr(generation_config, "eos_token_id", None)
    ids += configured if isinstance(configured, (list, tuple)) else [configured]
    ids += end_of_turn_ids(tokenizer)
    return list(dict.fromkeys(i for i in ids if i is not None))


# tokenizer -> (its template, end-of-turn ids): the template is not rendered per rollout
_END_OF_TURN = weakref.WeakKeyDictionary()


def end_of_turn_ids(tokenizer) -> list[int]:
    """[id] of the special token right after an assistant message in the chat template (rendered
    once per tokenizer and template); [] without a template or a special token there."""
    template, marker, ids = getattr(tokenizer, "chat_template", None), "END_OF_TURN_PROBE", []
    cached = _END_OF_TURN.get(tokenizer)
    if cached is not None and cached[0] == template:
        return cached[1]
    try:
        text = template and tokenizer.apply_chat_template(
            [{"role": "user", "content": "q"}, {"role": "assistant", "content": marker}],
            tokenize=False)
    except Exception:                  # a template that refuses this exchange: no extra stop id
        text = None
    if text and marker in text:
        first = tokenizer.encode(text.split(marker, 1)[1], add_special_tokens=False)[:1]
        special = set(tokenizer.all_special_ids) | {
            i for i, t in tokenizer.added_tokens_decoder.items() if t.special}
        ids = [i for i in first if i in special]
    _END_OF_TURN[tokenizer] = (template, ids)
    return ids
