"""toy_tasks/model.py -- the toy's policy: a character-level tokenizer, a tiny Qwen3 from its config
(nothing downloaded), its supervised warm-up on the toy corpus, cached by its settings (every rule
and seed starts from the same weights), or a design's shipped file (toy_tasks/warmups/, hashed)."""
import hashlib
import json
import math
import os
import platform
import shutil
import time

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen3Config

from toy_tasks.arithmetic import VOCAB_CHARS, ToyWorld, make_problems, warmup_corpus

fcntl = None if os.name == "nt" else __import__("fcntl")   # Windows: no lock, two may train


def char_tokenizer(chars: str = VOCAB_CHARS) -> PreTrainedTokenizerFast:
    """One token per character, plus <pad> <bos> <eos> <unk>: a real HF fast tokenizer."""
    vocab = {tok: i for i, tok in enumerate(["<pad>", "<bos>", "<eos>", "<unk>", *chars])}
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
    # one tokenizer call per batch: 2.5x faster than per row
    prompts = tokenizer([p for p, _ in pairs], add_special_tokens=False)["input_ids"]
    responses = tokenizer([r for _, r in pairs], add_special_tokens=False)["input_ids"]
    input_rows, label_rows = [], []
    for p, r in zip(prompts, responses):
        p = [tokenizer.bos_token_id] + p
        ids = (p + r + [tokenizer.eos_token_id])[:width]
        input_rows.append(ids + [tokenizer.pad_token_id] * (width - len(ids)))
        label_rows.append(([-100] * len(p) + ids[len(p):] + [-100] * width)[:width])  # the response
    return torch.tensor(input_rows), torch.tensor(label_rows)


def warmup_toy_model(world: ToyWorld, steps: int, seed: int, batch_size: int = 64,
                     lr: float = 3e-3, log=print, stop=None):
    """Supervised warm-up on the toy corpus: AdamW, linear warm-up then cosine decay.
    `stop(step, model)`, if given, is asked after each step whether to end here."""
    tokenizer = char_tokenizer()
    model = tiny_qwen3(tokenizer, seed=seed)
    train, _ = make_problems()
    corpus = warmup_corpus(world, train["prompt"], steps * batch_size, seed)
    width = 1 + 8 + world.longest_response()          # BOS, prompt, response
    torch.set_flush_denormal(True)    # Adam's tiny, denormal second moments: 10x slower sqrt
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    ramp = max(1, steps // 20)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / ramp) * 0.5
                                                 * (1 + math.cos(math.pi * min(s, steps) / steps)))
    model.train()
    start = time.time()
    for step in range(steps):
        input_ids, labels = encode_pairs(
            tokenizer, corpus[step * batch_size:(step + 1) * batch_size], width)
        loss = model(input_ids=input_ids, labels=labels,
                     attention_mask=(input_ids != tokenizer.pad_token_id).long()).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        if step % max(1, steps // 10) == 0 or step == steps - 1:
            spent = time.time() - start
            left = spent / (step + 1) * (steps - step - 1)
            log(f"warm-up step {step:5d}/{steps}  loss {loss.item():.3f}  ({spent:.0f}s, "
                f"about {left:.0f}s left)")
        if stop is not None and stop(step, model):
            break
    model.eval()
    return model, tokenizer, time.time() - start


def machine_variant() -> dict:
    """This process's floating-point path (CPU, kernels: ATEN_CPU_CAPABILITY, threads, torch)."""
    try:                                        # e.g. 'AMD EPYC 7B13'
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):            # not Linux
        cpu = platform.processor() or platform.machine()
    return {"cpu_model": cpu, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "aten_cpu_capability": os.environ.get("ATEN_CPU_CAPABILITY", ""),
            "threads": torch.get_num_threads(), "torch": torch.__version__}


def warmup_cache_dir(cache_dir: str, world: ToyWorld, steps: int, seed: int) -> str:
    """Where a warm-up with these settings lives; the settings' hash names it."""
    # force_frac is RL-only; the default slip style and no endless slips keep the old keys (caches)
    corpus = {k: v for k, v in vars(world).items() if k != "force_frac"
              and (k, v) not in (("slip_style", "ramble"), ("endless_slips", 0))}
    # the floating-point path is part of the key: a long warm-up trained with other kernels or
    # threads is another policy (docs/toy-designs.md), and must never be served in its place
    fp_path = {k: v for k, v in machine_variant().items() if k in ("cpu_capability", "threads")}
    key = json.dumps({"world": corpus, "steps": steps, "seed": seed, "fp_path": fp_path,
                      "version": 9}, sort_keys=True)
    return os.path.join(os.path.expanduser(cache_dir),
                        "warmup-" + hashlib.sha1(key.encode()).hexdigest()[:12])


def file_sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def save_warmup_file(model, path: str) -> str:
    """The toy policy's weights as one safetensors file (tokenizer, config: from code) -> sha256."""
    from safetensors.torch import save_model
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    save_model(model, path, metadata={"format": "pt"})
    return file_sha256(path)


def load_warmup_file(path: str, sha256: str | None = None):
    """A warm-up file: (policy, tokenizer). With `sha256` (a shipped warm-up) a file whose hash is
    not the registered one is refused: a changed file would silently change the demo's start."""
    from safetensors.torch import load_model as load_weights
    if not os.path.exists(path):
        raise ValueError(f"warm-up {path} is missing; re-create a shipped one with "
                         f"`python -m grpo_ba_lab.shipped_warmups`")
    found = file_sha256(path) if sha256 else None
    if found != sha256:
        raise ValueError(f"shipped warm-up {path} has sha256 {found[:12]}..., registered "
                         f"{sha256[:12]}...: the file changed; restore it (git checkout)")
    tokenizer = char_tokenizer()
    model = tiny_qwen3(tokenizer)
    load_weights(model, path)
    return model.eval(), tokenizer


def default_cache_dir() -> str:
    """The warm-ups' cache: $GRPO_BA_CACHE, else $XDG_CACHE_HOME/grpo_ba, else ~/.cache/grpo_ba."""
    chosen = os.environ.get("GRPO_BA_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache"), "grpo_ba")
    return os.path.abspath(os.path.expanduser(chosen))      # expanded: never a folder named `~`


# torch makes its compile cache's folder the first time a model loads, by default in /tmp, so
# every run left an empty /tmp/torchinductor_USER: it goes beside the warm-ups (yours is kept).
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(default_cache_dir(), "torchinductor"))


def load_or_warmup_toy(cache_dir: str, world: ToyWorld, steps: int, seed: int, log=print):
    """(policy, tokenizer, record) of these settings' warm-up: cached, or trained and cached."""
    path = warmup_cache_dir(cache_dir, world, steps, seed)
    os.makedirs(os.path.dirname(path), exist_ok=True)        # the cache, made where it is used
    with open(path + ".lock", "a") as lock:   # parallel runs (the tests' workers) wait, not retrain
        if fcntl:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if os.path.exists(os.path.join(path, "warmup.json")):
            log(f"warm-up: loading cached policy from {path}")
            return cached_warmup(path, "cache")
        log(f"warm-up: training the toy policy ({steps} steps, with no accuracy band: step 0's "
            f"accuracy is this seed's own), cached in {path} (set GRPO_BA_CACHE to move it)")
        model, _, seconds = warmup_toy_model(world, steps, seed, log=log)
        return store_warmup(model, path, {"world": vars(world), "steps": steps, "seed": seed,
                                          "seconds": seconds})


def store_warmup(model, path: str, record: dict):
    """Caches `model` in `path` (weights, `record` + machine + sha256), then loads it back."""
    tmp = path + f".tmp{os.getpid()}"
    sha256 = save_warmup_file(model, os.path.join(tmp, "model.safetensors"))
    with open(os.path.join(tmp, "warmup.json"), "w") as f:
        json.dump({**record, "machine": machine_variant(), "sha256": sha256}, f)
    if os.path.exists(path):                  # a concurrent run won the race: keep its copy
        shutil.rmtree(tmp)
    else:
        os.replace(tmp, path)
    return cached_warmup(path, "trained")


def cached_warmup(path: str, source: str):
    """(policy, tokenizer, record) of the warm-up cached in `path`; source: cache | trained."""
    with open(os.path.join(path, "warmup.json")) as f:
        record = {"source": source, "path": path, **json.load(f)}
    return (*load_warmup_file(os.path.join(path, "model.safetensors")), record)
