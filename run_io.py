"""run_io.py -- a run on disk: its directory, metrics.jsonl and atomic checkpoints.

Nothing here is the algorithm; it is what makes a run survive Ctrl-C and a crash:
metrics are appended one valid JSON line per step, checkpoints are written to a
temporary file and renamed, and a resumed run drops the lines written after its
checkpoint so the file reads as if the run had never stopped.
"""
from __future__ import annotations

import json
import math
import os
import random

import torch


def prepare_output_dir(out: str) -> str:
    """Create `out` and make sure it can be written, or fail with one clear line."""
    try:
        os.makedirs(out, exist_ok=True)
        probe = os.path.join(out, ".write_test")
        open(probe, "w").close()
        os.remove(probe)
    except OSError as err:
        raise ValueError(f"cannot write to output directory {out!r}: {err.strerror}") from None
    return out


def _json_line(metrics: dict) -> str:
    """One JSON object per line; NaN and inf (not JSON) become null."""
    clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in metrics.items()}
    return json.dumps(clean) + "\n"


def append_metrics(path: str, metrics: dict):
    with open(path, "a") as f:
        f.write(_json_line(metrics))


def read_metrics(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def model_state(policy) -> dict:
    """What a checkpoint keeps of the model: its state dict, or only the trainable tensors
    when part of it is frozen (LoRA adapters: megabytes, not the base model's weights)."""
    state = policy.state_dict()
    trainable = {name for name, p in policy.named_parameters() if p.requires_grad}
    if len(trainable) == len(list(policy.parameters())):
        return state
    return {name: tensor for name, tensor in state.items() if name in trainable}


def save_checkpoint(path, policy, optimizer, step):
    """Model, optimizer, RNG states and step, written atomically (temp file, then rename)."""
    state = {"step": step, "model": model_state(policy), "optimizer": optimizer.state_dict(),
             "torch_rng": torch.get_rng_state(), "python_rng": random.getstate(),
             "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}
    tmp = path + ".tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)


def restore_checkpoint(path, policy, optimizer, metrics_path, device) -> int:
    """Load a checkpoint into policy and optimizer, drop the metrics lines written after
    it, and return the first step still to run."""
    state = torch.load(path, map_location=device, weights_only=False)
    policy.load_state_dict(state["model"], strict=False)   # names checked by _check_fits; adapters only under LoRA
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["torch_rng"])
    random.setstate(state["python_rng"])
    if state.get("cuda_rng") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda_rng"])
    start = state["step"] + 1
    kept = [_json_line(m) for m in read_metrics(metrics_path) if m["step"] < start]
    with open(metrics_path, "w") as f:
        f.writelines(kept)
    return start


def is_finished(out: str, steps: int) -> bool:
    """True when `out` already holds `steps` lines of metrics (a sweep skips it)."""
    try:
        return len(read_metrics(os.path.join(out, "metrics.jsonl"))) >= steps
    except (OSError, ValueError):
        return False
