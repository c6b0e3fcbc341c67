"""grpo_ba_lab/plumbing/lm_setup.py -- models, tokenizers and datasets: everything grpo_ba.py trains on
that is not the algorithm.

- The toy: a character-level Hugging Face tokenizer, a tiny Qwen3 built from its
  config (no download), and its supervised warm-up on the toy corpus, cached on disk
  by its settings so that every rule and seed starts from the same weights.
- The real path: `--model NAME_OR_PATH` and `--dataset` (hub id or local
  JSON / JSONL / Parquet), prompts through the chat template when there is one.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import random
import time
import dataclasses
from dataclasses import dataclass

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast, Qwen3Config

from transformers.utils import logging as hf_logging

from grpo_ba_lab.plumbing.chat_template import format_prompt
from grpo_ba_lab.plumbing.errors import SetupError
from toy_tasks import VOCAB_CHARS, ToyWorld, make_problems, warmup_corpus

SPECIAL_TOKENS = ["<pad>", "<bos>", "<eos>", "<unk>"]


# ------------------------------------------------------------------ the toy model

def char_tokenizer(chars: str = VOCAB_CHARS) -> PreTrainedTokenizerFast:
    """One token per character, plus <pad> <bos> <eos> <unk>: a real HF fast tokenizer."""
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + list(chars))}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    # padding on the left: generation continues from the prompt's end. Given here, not set
    # afterwards, it is saved with the tokenizer, so a reloaded one builds the same batches.
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", bos_token="<bos>",
                                   eos_token="<eos>", unk_token="<unk>", padding_side="left")


def tiny_qwen3(tokenizer, hidden: int = 64, layers: int = 2, heads: int = 4, seed: int = 0):
    """A ~130k-parameter Qwen3 from its config: random weights, nothing downloaded."""
    config = Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=4 * hidden,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
        head_dim=hidden // heads, max_position_embeddings=128, tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, attn_implementation="sdpa")
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config)


def encode_pairs(tokenizer, pairs, width: int):
    """Right-padded <bos> prompt response <eos> rows; labels only on the response."""
    prompts = tokenizer([p for p, _ in pairs], add_special_tokens=False)["input_ids"]    # one call per batch:
    responses = tokenizer([r for _, r in pairs], add_special_tokens=False)["input_ids"]  # 2.5x faster than per row
    input_rows, label_rows = [], []
    for p, r in zip(prompts, responses):
        p = [tokenizer.bos_token_id] + p
        ids = (p + r + [tokenizer.eos_token_id])[:width]
        labels = [-100] * width
        labels[len(p):len(ids)] = ids[len(p):]
        input_rows.append(ids + [tokenizer.pad_token_id] * (width - len(ids)))
        label_rows.append(labels)
    return torch.tensor(input_rows), torch.tensor(label_rows)


def warmup_toy_model(world: ToyWorld, steps: int, seed: int, batch_size: int = 64,
                     lr: float = 3e-3, log=print):
    """Supervised warm-up on the toy corpus: AdamW, linear warm-up then cosine decay."""
    tokenizer = char_tokenizer()
    model = tiny_qwen3(tokenizer, seed=seed)
    train, _ = make_problems()
    corpus = warmup_corpus(world, train["prompt"], steps * batch_size, seed)
    width = 1 + 8 + world.longest_response()          # BOS, prompt, response
    torch.set_flush_denormal(True)    # Adam's tiny second moments are denormal: a 10x slower sqrt otherwise
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    ramp = max(1, steps // 20)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / ramp) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
    model.train()
    start = time.time()
    for step in range(steps):
        input_ids, labels = encode_pairs(tokenizer, corpus[step * batch_size:(step + 1) * batch_size], width)
        loss = model(input_ids=input_ids, attention_mask=(input_ids != tokenizer.pad_token_id).long(),
                     labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        if step % max(1, steps // 5) == 0 or step == steps - 1:
            spent = time.time() - start
            left = spent / (step + 1) * (steps - step - 1)
            log(f"warm-up step {step:5d}/{steps}  loss {loss.item():.3f}  ({spent:.0f}s, "
                f"about {left:.0f}s left)")
    model.eval()
    return model, tokenizer, time.time() - start


def warmup_cache_dir(cache_dir: str, world: ToyWorld, steps: int, seed: int) -> str:
    """Where a warm-up with these settings lives; the settings' hash names it."""
    corpus = {k: v for k, v in vars(world).items() if k != "force_frac"}   # RL-only setting
    if corpus.get("slip_style") == "ramble":       # the default style keeps the keys (and caches) it had before
        del corpus["slip_style"]
    # the floating-point path is part of the key: a long warm-up trained with other kernels or
    # threads is another policy (docs/toy-designs.md), and must never be served in its place
    fp_path = {"cpu_capability": torch.backends.cpu.get_cpu_capability(), "threads": torch.get_num_threads()}
    key = json.dumps({"world": corpus, "steps": steps, "seed": seed, "fp_path": fp_path, "version": 8}, sort_keys=True)
    return os.path.join(os.path.expanduser(cache_dir), "warmup-" + hashlib.sha1(key.encode()).hexdigest()[:12])


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def save_warmup_file(model, path: str) -> str:
    """The toy policy's weights as one safetensors file (the tokenizer and config are
    rebuilt from code); returns the file's sha256."""
    from safetensors.torch import save_model
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    save_model(model, path, metadata={"format": "pt"})
    return file_sha256(path)


def load_warmup_file(path: str, sha256: str):
    """A shipped warm-up: (policy, tokenizer), refused unless the file's sha256 is the
    registered one (a changed or truncated file would silently change the demo's start)."""
    from safetensors.torch import load_model as load_weights
    if not os.path.exists(path):
        raise SetupError(f"shipped warm-up {path} is missing; re-create it with `python -m toy_tasks.shipped_warmups`, "
                         f"or train one with --warmup-from-scratch")
    found = file_sha256(path)
    if found != sha256:
        raise SetupError(f"shipped warm-up {path} has sha256 {found[:12]}..., registered {sha256[:12]}...: the file "
                         f"changed; restore it (git checkout) or train one with --warmup-from-scratch")
    tokenizer = char_tokenizer()
    model = tiny_qwen3(tokenizer)
    load_weights(model, path)
    return model.eval(), tokenizer


def load_or_warmup_toy(cache_dir: str, world: ToyWorld, steps: int, seed: int, log=print):
    """The warmed-up toy policy and tokenizer, from the cache or freshly trained, and the
    warm-up's record (its settings, the machine that trained it, its weights' sha256)."""
    path = warmup_cache_dir(cache_dir, world, steps, seed)
    if os.path.exists(os.path.join(path, "warmup.json")):
        log(f"warm-up: loading cached policy from {path}")
        with open(os.path.join(path, "warmup.json")) as f:
            record = {"source": "cache", "path": path, **json.load(f)}
        return load_model(path), load_tokenizer(path), record
    log(f"warm-up: training the toy policy ({steps} steps; cached in {path})")
    model, tokenizer, seconds = warmup_toy_model(world, steps, seed, log=log)
    tmp = path + f".tmp{os.getpid()}"
    with no_progress_bars():
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    from grpo_ba_lab.plumbing.run_io import machine_variant
    record = {"world": vars(world), "steps": steps, "seed": seed, "seconds": seconds, "machine": machine_variant(),
              "sha256": file_sha256(os.path.join(tmp, "model.safetensors"))}
    with open(os.path.join(tmp, "warmup.json"), "w") as f:
        json.dump(record, f)
    if os.path.exists(path):                  # a concurrent run won the race: keep its copy
        import shutil
        shutil.rmtree(tmp)
    else:
        os.replace(tmp, path)
    with open(os.path.join(path, "warmup.json")) as f:
        record = {"source": "trained", "path": path, **json.load(f)}
    return load_model(path), load_tokenizer(path), record


# ------------------------------------------------------------------ what grpo_ba.py trains on

@dataclass
class Task:
    train: list                   # [{"prompt", "answer"}]
    heldout: list
    prompt_text: object           # prompt -> the text the policy continues
    forced_prefix: object         # (prompt, random.Random) -> forced start of the response ('' = none)
    data_report: object = None    # real_data.DataReport of --dataset (None: the toy)
    warmup: dict | None = None    # the toy's warm-up: where it came from, its settings and sha256


def toy_world(args) -> ToyWorld:
    """The toy environment that grpo_ba.Args describe."""
    return ToyWorld(args.regime, args.gap_sign, args.gap_size, args.force_frac, spread_size=args.spread_size,
                    slip_style=args.slip_style)


def warmup_seed(args) -> int:
    """--warmup-seed, or with -1 the run's own --seed (each seed its own warm-up)."""
    return args.seed if args.warmup_seed < 0 else args.warmup_seed


def toy_warmup(args, warmup_steps_by_regime, log=print):
    """(policy, tokenizer, record) of the warm-up a toy run starts from: the file shipped
    for its design and seed when the run uses the design's own toy settings (the same
    start on every machine), else the cache, else a fresh warm-up."""
    from toy_tasks import designs
    world = toy_world(args)
    steps = args.warmup_steps or warmup_steps_by_regime[args.regime]
    seed = warmup_seed(args)
    shipped = designs.shipped_warmup(args.design, seed)
    if shipped and not args.warmup_from_scratch:
        flags = designs.design_flags(args.design)
        design_world = toy_world(dataclasses.replace(args, **flags))
        if vars(design_world) | {"force_frac": 0} == vars(world) | {"force_frac": 0} and steps == flags["warmup_steps"]:
            path, sha256 = shipped
            log(f"warm-up: the policy shipped for design {args.design}, seed {seed} ({os.path.relpath(path)})")
            policy, tokenizer = load_warmup_file(path, sha256)
            return policy, tokenizer, {"source": "shipped", "path": os.path.relpath(path, designs.REPO),
                                       "sha256": sha256, "world": vars(world), "steps": steps, "seed": seed}
    return load_or_warmup_toy(args.cache_dir, world, steps, seed, log)


def toy_task(args, tokenizer, warmup: dict | None = None) -> Task:
    """The toy's problems, prompts and forced prefixes for the world `args` describe."""
    train, heldout = make_problems()
    bos = tokenizer.bos_token
    return Task(train.to_list(), heldout.to_list(), lambda p: bos + p, toy_world(args).forced_prefix, warmup=warmup)


def build(args, warmup_steps_by_regime, log=print):
    """The policy, its tokenizer and the task: the toy (default) or --model/--dataset."""
    if args.model:
        if not args.dataset:
            raise SetupError("--model needs --dataset (a hub id or a local .json/.jsonl/.parquet file)")
        from grpo_ba_lab.plumbing import real_data                      # every row checked before the model loads
        model_path = args.model
        if model_path.lower().endswith(".gguf"):   # converted once into a cached model directory
            from grpo_ba_lab.plumbing import gguf_models
            model_path = gguf_models.converted_dir(model_path, args.cache_dir, log)
        check_model_path(model_path)
        tokenizer = load_tokenizer(model_path)
        limit, reason = real_data.prompt_token_limit(real_data.model_context(model_path, tokenizer),
                                                     args.max_new_tokens, args.max_prompt_tokens)
        rows, report = real_data.load_rows(args.dataset, args.prompt_column, args.answer_column, args.dataset_split,
                                           tokenizer, limit, args.skip_bad_rows, reason)
        train, heldout = split_heldout(rows, args.eval_prompts)
        report.n_train, report.n_heldout = len(train), len(heldout)
        log(report.summary())
        policy = load_model(model_path, args.attn_implementation)
        task = Task(train, heldout, lambda p: format_prompt(tokenizer, p), lambda p, rng: "", report)
    else:
        policy, tokenizer, warmup = toy_warmup(args, warmup_steps_by_regime, log)
        task = toy_task(args, tokenizer, warmup)
    if args.gradient_checkpointing:
        getattr(policy, "activation_checkpointing_enable", policy.gradient_checkpointing_enable)()
    return policy, tokenizer, task


# ------------------------------------------------------------------ the real path

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def check_model_path(name_or_path: str):
    """A local directory or something shaped like a hub id ("org/name")."""
    is_hub_id = name_or_path.count("/") == 1 and not name_or_path.startswith((".", "/", "~"))
    if not os.path.isdir(os.path.expanduser(name_or_path)) and not is_hub_id:
        raise SetupError(f"model path {name_or_path!r} does not exist")


@contextlib.contextmanager
def no_progress_bars():
    """transformers' (and the hub's) progress bars off for one load: every run of a sweep
    loads the cached toy, and a bar per load would drown the training log. They are put
    back as they were, so neither importing nor using this module changes the setting of
    a program around it (a TRL user keeps their download bars)."""
    from huggingface_hub import utils as hub_utils
    was_on, hub_was_off = hf_logging.is_progress_bar_enabled(), hub_utils.are_progress_bars_disabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()
        (hub_utils.disable_progress_bars if hub_was_off else hub_utils.enable_progress_bars)()


def load_model(name_or_path: str, attn_implementation: str | None = None):
    """Any HF causal LM, from the hub or a local directory."""
    check_model_path(name_or_path)
    path = os.path.expanduser(name_or_path)
    kwargs = {"dtype": torch.float32}         # master weights; --dtype is autocast compute
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    try:
        with no_progress_bars():
            return AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except OSError as err:
        raise SetupError(f"cannot load model {name_or_path!r}: {str(err).splitlines()[0]}") from None


def load_tokenizer(name_or_path: str):
    try:
        with no_progress_bars():
            tokenizer = AutoTokenizer.from_pretrained(os.path.expanduser(name_or_path),
                                                      padding_side="left")   # saved with it (char_tokenizer)
    except OSError as err:
        raise SetupError(f"cannot load tokenizer {name_or_path!r}: {str(err).splitlines()[0]}") from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_prompt_dataset(source: str, prompt_column: str, answer_column: str, split: str = "train",
                        heldout: int = 64, seed: int = 0):
    """(train, heldout) lists of {"prompt", "answer"} from a hub id or a local
    .json/.jsonl/.parquet file, every row checked by real_data.load_rows (no token
    lengths: that needs the tokenizer, see build). A prompt may be a string or a list
    of chat messages (DAPO-Math-17k); the answer a number, a worked solution ending in
    `#### 42` (GSM8K), or a list of acceptable answers."""
    from grpo_ba_lab.plumbing import real_data
    rows, _ = real_data.load_rows(source, prompt_column, answer_column, split)
    return split_heldout(rows, heldout, seed)


def split_heldout(rows: list, heldout: int, seed: int = 0):
    """(train, heldout): a seeded shuffle, then min(heldout, n // 5 or 1) rows held out."""
    rows = list(rows)
    random.Random(seed).shuffle(rows)
    n_heldout = min(heldout, len(rows) // 5 or 1)
    return rows[n_heldout:], rows[:n_heldout]
