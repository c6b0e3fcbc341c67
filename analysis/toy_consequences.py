"""analysis/toy_consequences.py -- do the paper's consequences show on the toy?

The toy shows the mechanism of each aggregation rule exactly; this module measures the
*consequences* the paper reports, on designs written down before they ran
(docs/toy-designs.md): the last held-out accuracy, the peak, and the drop from the peak
to the last step, paired by seed between rules (analysis/paired_stats.py), and the curves that
explain them (entropy, the weight on the positive side, right and wrong lengths).

    python -m analysis.toy_consequences runs/d1-loop-gap --out runs/d1-loop-gap/report

Each design is a named set of grpo_ba.py flags (toy_tasks/designs.py); its runs are one
directory per (rule, seed) under one folder, as `python -m analysis.sweep --design NAME`
writes them (that command also writes this report).
"""
from __future__ import annotations

import argparse
import math
import os

from analysis import paired_stats
from toy_tasks.designs import DESIGNS


def design_args(name: str, **overrides):
    """grpo_ba.Args of a named design, as `--design NAME` parses them (the rule, seed and
    output directory are overrides)."""
    import dataclasses

    import grpo_ba
    return dataclasses.replace(grpo_ba.parse_args(["--design", name]), **overrides)


def step0_statistics(name: str, cache_dir: str, seed: int = 0, batches: int = 4, eval_prompts: int = 200) -> dict:
    """The design's step-0 statistics on a fixed seed, as its step-0 rollouts measure them:
    `batches` batches of P * G sampled responses (forced prefixes included) from the
    warmed-up policy, and greedy accuracy on the first `eval_prompts` held-out prompts."""
    import random

    import torch

    import grpo_ba
    from plumbing import lm_setup
    from toy_tasks import length_stats
    args = design_args(name, seed=seed, eval_prompts=eval_prompts, cache_dir=cache_dir)
    policy, tokenizer, task = lm_setup.build(args, grpo_ba.WARMUP_STEPS, log=lambda *a: None)
    lengths, rewards = [], []
    for b in range(batches):                       # what steps 0..batches-1 of a run sample, before any update
        step_seed = grpo_ba.seed_step(seed, b)
        batch, batch_rewards, _ = grpo_ba.sample_groups(policy, tokenizer, task, grpo_ba.step_rows(task, step_seed, args),
                                                        random.Random(step_seed), args)
        lengths.append(batch.response_mask.sum(1))
        rewards.append(batch_rewards)
    lengths, rewards = torch.cat(lengths), torch.cat(rewards)
    accuracy = grpo_ba.evaluate(policy, tokenizer, task, task.heldout[:eval_prompts], args)
    return {**length_stats(lengths, rewards), "reward": rewards.float().mean().item(), "accuracy": accuracy}


# ------------------------------------------------------------------ per-run numbers (pre-registered)

last_accuracy = paired_stats.last_accuracy


def peak_accuracy(metrics: list[dict]) -> float:
    """The best held-out accuracy of any evaluation, step 0 included."""
    _, acc = paired_stats.evaluations(metrics)
    return max(acc) if acc else float("nan")


def peak_to_last_drop(metrics: list[dict]) -> float:
    """peak - last held-out accuracy: 0 for a run that ends at its best, the size of the
    fall otherwise (the paper's token-aggregation collapse is a large one)."""
    return peak_accuracy(metrics) - last_accuracy(metrics)


def tail_accuracy(metrics: list[dict], last: int = 5) -> float:
    """Mean held-out accuracy of the last `last` evaluations (a less noisy 'end')."""
    _, acc = paired_stats.evaluations(metrics)
    tail = acc[-last:]
    return sum(tail) / len(tail) if tail else float("nan")


METRICS = [("last_acc", "last held-out acc", last_accuracy),
           ("peak_acc", "peak held-out acc", peak_accuracy),
           ("drop", "peak-to-last drop", peak_to_last_drop),
           ("tail_acc", "mean of the last 5 evals", tail_accuracy),
           ("acc_area", "area under the acc curve (mean acc)", paired_stats.accuracy_area)]
RULES = ("token", "sequence", "balanced")


# ------------------------------------------------------------------ runs -> tables

def load(runs_dir: str, finished_only: bool = True) -> dict:
    """{rule: {seed: metrics}} of every run under runs_dir (one design); a run still going
    (fewer logged steps than its --steps) is left out unless finished_only is False."""
    from plumbing import run_io
    by_rule = {}
    for args, metrics in run_io.saved_runs(runs_dir):
        if finished_only and len(metrics) < args["steps"]:
            continue
        by_rule.setdefault(args["aggregator"], {})[args["seed"]] = metrics
    return by_rule


def saved_design(runs_dir: str) -> str:
    """The named design every run under runs_dir was trained with ('' if none or several)."""
    from plumbing import run_io
    names = {args.get("design") for args, _ in run_io.saved_runs(runs_dir)}
    return names.pop() if len(names) == 1 and names <= set(DESIGNS) else ""


def step0_stats(by_rule: dict) -> dict:
    """Step-0 statistics of the design (the three rules of a seed share step 0)."""
    runs = [m for by_seed in by_rule.values() for m in by_seed.values() if m]
    pick = lambda key: paired_stats.mean_finite(m[0].get(key) for m in runs)
    return {"acc": pick("accuracy"), "wrong_over_right": pick("wrong_over_right"), "std_over_mean": pick("std_over_mean"),
            "len_right": pick("len_right"), "len_wrong": pick("len_wrong"), "reward": pick("reward_mean")}


def per_rule_table(by_rule: dict) -> str:
    lines = ["| rule | seeds | " + " | ".join(label + " (mean; per seed)" for _, label, _ in METRICS) + " |",
             "|---|---|" + "---|" * len(METRICS)]
    for rule in RULES:
        runs = by_rule.get(rule, {})
        seeds = sorted(runs)
        cells = []
        for _, _, fn in METRICS:
            values = [fn(runs[s]) for s in seeds]
            cells.append(f"{paired_stats.mean_finite(values):.3f}; " + " ".join(f"{v:.3f}" for v in values))
        lines.append(f"| {rule} | {len(seeds)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def paired_rows(by_rule: dict) -> list[dict]:
    """paired_stats.paired_rows of one design's runs, on this module's METRICS."""
    return paired_stats.paired_rows({("design", rule): by_seed for rule, by_seed in by_rule.items()}, METRICS)


def paired_table(by_rule: dict) -> str:
    lines = ["| pair | metric | seeds | mean difference [95% interval] | interval excludes 0 |", "|---|---|---|---|---|"]
    for r in paired_rows(by_rule):
        verdict = "n/a" if r["low"] is None else ("yes" if r["excludes_zero"] else "no")
        lines.append(f"| {r['pair']} | {r['metric']} | {r['n']} | {paired_stats._fmt_interval(r)} | {verdict} |")
    return "\n".join(lines) + "\n"


def report_text(by_rule: dict) -> str:
    s = step0_stats(by_rule)
    return (f"Step 0: greedy held-out accuracy {s['acc']:.3f}, wrong/right {s['wrong_over_right']:.2f} "
            f"(right {s['len_right']:.1f}, wrong {s['len_wrong']:.1f} tokens), std/mean {s['std_over_mean']:.2f}, "
            f"sampled reward {s['reward']:.2f} (mean over the runs' step-0 rollouts).\n\n"
            "Per rule:\n\n" + per_rule_table(by_rule) +
            "\nPaired by seed (mean [95% Student t interval] of the per-seed difference):\n\n" + paired_table(by_rule))


# ------------------------------------------------------------------ the mechanism curves

def _smooth(values, window: int = 10):
    out = []
    for i in range(len(values)):
        chunk = [v for v in values[max(0, i - window + 1):i + 1] if v is not None and math.isfinite(v)]
        out.append(sum(chunk) / len(chunk) if chunk else float("nan"))
    return out


PANELS = [("accuracy", "held-out greedy accuracy", False), ("entropy", "entropy per token", True),
          ("pos_share", "weight share on right answers (own rule)", True), ("len_right", "mean length, right answers", True),
          ("len_wrong", "mean length, wrong answers", True), ("wrong_over_right", "wrong/right mean length", True),
          ("reward_mean", "sampled reward", True), ("truncated_frac", "truncated fraction", True)]


def mechanism_figure(by_rule: dict, path: str, title: str = ""):
    from analysis import plots                     # matplotlib, Agg
    fig, axes = plots.plt.subplots(2, 4, figsize=(17, 7))
    for ax, (key, label, smooth) in zip(axes.flat, PANELS):
        for rule in RULES:
            if rule not in by_rule:
                continue
            steps, values, _ = plots.mean_over_seeds(by_rule[rule].values(), key)
            ax.plot(steps, _smooth(values) if smooth else values, color=plots.COLORS[rule], label=rule,
                    marker=None if smooth else ".", lw=1.4, ls="--" if rule == "sequence" else "-")   # seq = BA at 1/2
        ax.set_title(label + (" (10-step mean)" if smooth else ""), fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes.flat[0].legend()
    n = min(len(v) for v in by_rule.values()) if by_rule else 0
    fig.suptitle(f"{title} mean over {n} seeds".strip())
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plots.plt.close(fig)


def report(runs_dir: str, out: str, figure: str = "", title: str = "", log=print) -> str:
    """consequences.md (step 0, per rule, paired) and the mechanism figure of one design's
    runs; returns the report's text."""
    os.makedirs(out, exist_ok=True)
    by_rule = load(runs_dir)
    if not by_rule:
        raise ValueError(f"no finished runs (args.json + metrics.jsonl) under {runs_dir!r}")
    text = report_text(by_rule)
    with open(os.path.join(out, "consequences.md"), "w") as f:
        f.write(text)
    figure = figure or os.path.join(out, "mechanism.png")
    mechanism_figure(by_rule, figure, title)
    log(text)
    log(f"wrote {os.path.join(out, 'consequences.md')}, {figure}")
    return text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs_dir")
    parser.add_argument("--out", default="", help="where consequences.md and mechanism.png go (default: runs_dir)")
    parser.add_argument("--title", default="")
    parser.add_argument("--figure", default="", help="where the mechanism figure goes (default: <out>/mechanism.png)")
    args = parser.parse_args(argv)
    report(args.runs_dir, args.out or args.runs_dir, args.figure, args.title)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
