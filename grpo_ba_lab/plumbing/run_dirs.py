"""grpo_ba_lab/plumbing/run_dirs.py -- run directories as the studies see them: which runs a
folder holds, whether each has finished, and the lines a power cut lost, restored from the
checkpoint before a sweep decides to skip, resume or train a run (grpo_ba_support/run.py writes them)."""
from __future__ import annotations

import glob
import json
import os

import torch

from grpo_ba_support.run import RunError, _first_line, _note, _restore_from_checkpoint, read_metrics, write_jsonl


def repair_metrics(out: str, log=_note) -> list[dict]:
    """The metrics of run directory `out`, after restoring from its checkpoint the lines
    a power cut tore or lost (the file is rewritten only then). A bad middle line is a
    RunError; no metrics file is an OSError."""
    metrics_path, ckpt_path = os.path.join(out, "metrics.jsonl"), os.path.join(out, "checkpoint.pt")
    metrics = read_metrics(metrics_path, log)
    if not os.path.exists(ckpt_path):
        return metrics
    try:                                           # mmap: the kept lines, not gigabytes of weights
        state = torch.load(ckpt_path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as err:
        raise RunError(f"{ckpt_path}: cannot be read, corrupt or truncated ({_first_line(err)})") from None
    if not isinstance(state, dict) or not isinstance(state.get("step"), int):
        raise RunError(f"{ckpt_path}: not a grpo_ba checkpoint")
    repaired = _restore_from_checkpoint(metrics, state, metrics_path, ckpt_path, log)
    if len(repaired) != len(metrics):
        write_jsonl(metrics_path, repaired)
    return repaired


def step_lines(metrics: list[dict]) -> tuple[list[dict], list[dict]]:
    """(the lines of training steps, the final-evaluation lines) of a run's metrics: the
    evaluation after the last update is logged as step --steps and is not a step."""
    return ([m for m in metrics if not m.get("final_evaluation")],
            [m for m in metrics if m.get("final_evaluation")])


def run_status(out: str, steps: int, log=_note) -> str:
    """What a sweep or the regime map does with run directory `out`: "finished" (it holds
    `steps` lines of metrics and the evaluation after step `steps`, after restoring any its
    checkpoint kept), "resume" (a
    checkpoint to continue from) or "train" (nothing usable yet). A bad middle line is a
    RunError rather than a silent retrain over the run."""
    try:
        metrics = repair_metrics(out, log)
    except OSError:
        return "train"
    if is_finished(out, metrics, steps):
        return "finished"
    return "resume" if os.path.exists(os.path.join(out, "checkpoint.pt")) else "train"


def is_finished(run_dir: str, metrics: list[dict], steps: int) -> bool:
    """Has the run in `run_dir` done its `steps` steps? Its evaluation after the last update
    (logged as step `steps`, after the last step's line) says so. What the sweeps skip and
    what a design's report accepts. A run without run.json is from before that evaluation
    was logged: `steps` step lines finish it."""
    trained, finals = step_lines(metrics)
    if any(m["step"] == steps for m in finals):
        return True
    return not os.path.exists(os.path.join(run_dir, "run.json")) and len(trained) >= steps


def saved_args(runs_dir: str):
    """(run directory, args.json as a dict) of every run under runs_dir."""
    for args_path in sorted(glob.glob(os.path.join(runs_dir, "**", "args.json"), recursive=True)):
        with open(args_path) as f:
            yield os.path.dirname(args_path), json.load(f)


def saved_runs(runs_dir: str):
    """(run directory, args.json as a dict, metrics) of every run under runs_dir that has
    logged a step."""
    for run_dir, args in saved_args(runs_dir):
        metrics = read_metrics(os.path.join(run_dir, "metrics.jsonl"))
        if metrics:
            yield run_dir, args, metrics


def run_label(args: dict) -> str:
    """What a run is about, for its directory, figure and table row: the toy's regime,
    or the model's name ("Qwen3-1.7B", "SmolLM2-135M-Instruct.Q4_1" for a .gguf file)."""
    if not args.get("model"):                      # the lab's toy knobs, or the course's design
        return args.get("regime") or args.get("design", "toy")
    name = os.path.basename(os.path.normpath(os.path.expanduser(args["model"])))
    return name[:-len(".gguf")] if name.lower().endswith(".gguf") else name
