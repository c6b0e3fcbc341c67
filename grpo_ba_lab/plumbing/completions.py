"""grpo_ba_lab/plumbing/completions.py -- what the policy wrote, step by step: completions.jsonl
(TRL's `log_completions`), one line per response:

    {"prompt": "12+7=", "completion": "19", "reward": 1.0, "length": 3, "group": "step4-prompt2", "step": 4}

`length` is the response's tokens in the loss and `group` names the prompt's group
within its step, so the file is what `python -m grpo_ba_lab.analysis.diagnose` reads: the whole
file as one batch, and with `step`, the bias step by step (docs/diagnose.md).
"""
from __future__ import annotations

import json
import math
import os

from grpo_ba_support import run as grpo_ba_run


def completion_rows(step: int, prompts, completions, rewards, lengths) -> list[dict]:
    """The lines of one step. prompts: one per group (P), groups contiguous;
    completions, rewards, lengths: one per response (B = P * G; lists or tensors)."""
    rewards = [float(r) for r in (rewards.tolist() if hasattr(rewards, "tolist") else rewards)]
    lengths = [int(n) for n in (lengths.tolist() if hasattr(lengths, "tolist") else lengths)]
    prompts, completions = list(prompts), list(completions)
    n = len(completions)
    if not prompts or n % len(prompts) or len(rewards) != n or len(lengths) != n:
        raise ValueError(f"completions.jsonl: {len(prompts)} prompts, {n} completions, {len(rewards)} rewards and "
                         f"{len(lengths)} lengths do not make groups of equal size")
    group_size = n // len(prompts)
    return [{"prompt": prompts[i // group_size], "completion": completions[i],
             "reward": rewards[i] if math.isfinite(rewards[i]) else None, "length": lengths[i],
             "group": f"step{step}-prompt{i // group_size}", "step": int(step)} for i in range(n)]


def append_completions(path: str, step: int, prompts, completions, rewards, lengths) -> int:
    """Append one step's responses to `path` (created if missing); returns the lines written."""
    rows = completion_rows(step, prompts, completions, rewards, lengths)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a") as f:
        f.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    return len(rows)


def lines_before(path: str, step: int) -> list[dict]:
    """The lines of the steps before `step` ([] without a file), read as metrics.jsonl is:
    a torn last line (a kill while appending) is dropped with a note, a bad one is a RunError."""
    return [row for row in grpo_ba_run.read_metrics(path) if row["step"] < step] if os.path.exists(path) else []


def keep_steps_before(path: str, step: int) -> int:
    """A resumed run redoes the steps after its checkpoint: drop their lines (rewritten
    atomically), so no group appears twice. Returns the lines kept; no file, 0."""
    if not os.path.exists(path):
        return 0
    kept = lines_before(path, step)
    grpo_ba_run.write_jsonl(path, kept)
    return len(kept)
