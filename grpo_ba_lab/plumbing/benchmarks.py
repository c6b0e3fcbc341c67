"""grpo_ba_lab/plumbing/benchmarks.py -- the prompt sets a run's accuracy is measured on (grpo_ba.evaluate).

- Without --eval-dataset: the first --eval-prompts held-out prompts (the toy's held-out
  problems, or the slice of --dataset kept out of training), logged as `accuracy`.
- With --eval-dataset A B ...: every row of each benchmark (a hub id or a local
  .json/.jsonl/.parquet file), logged as `accuracy_<name>` (the file name without its
  extension, or the hub id's last part: `accuracy_MATH-500`), and `accuracy` as their
  unweighted mean, like the average column of the paper's tables.

Each value is avg@K over --eval-samples K samples per prompt at --eval-temperature.
Benchmark rows go through the same loader as --dataset (lm_setup.load_prompt_dataset),
so a malformed row or an unreadable gold answer is refused the same way.
"""
from __future__ import annotations

import os
import re

from grpo_ba_lab.plumbing import lm_setup
from grpo_ba_support.run import SetupError


def benchmark_name(source: str) -> str:
    """'data/math500.jsonl' -> 'math500', 'HuggingFaceH4/MATH-500' -> 'MATH-500'."""
    base = os.path.basename(source.rstrip("/\\"))
    stem, extension = os.path.splitext(base)
    name = stem if extension.lower() in (".json", ".jsonl", ".parquet") else base
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name) or "eval"


def load_benchmark(source: str, args) -> list:
    """Every row of one benchmark, [{"prompt", "answer"}], checked like --dataset."""
    rows, _ = lm_setup.load_prompt_dataset(source, args.eval_prompt_column or args.prompt_column,
                                           args.eval_answer_column or args.answer_column, args.eval_split, heldout=0)
    return rows


def eval_sets(args, task) -> dict:
    """{metric name: rows} for grpo_ba.grpo_step; several benchmarks cannot share a name."""
    if not args.eval_dataset:
        return {"accuracy": task.heldout[:args.eval_prompts]}
    sets = {}
    for source in args.eval_dataset:
        name = "accuracy_" + benchmark_name(source)
        if name in sets:
            raise SetupError(f"two --eval-dataset entries are both logged as {name!r}; rename one of the files")
        sets[name] = load_benchmark(source, args)
    return sets
