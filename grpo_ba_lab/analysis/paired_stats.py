"""grpo_ba_lab/analysis/paired_stats.py -- compare the aggregation rules paired by seed, with intervals.

The three rules of one seed start from the same warmed-up weights and draw the same
prompts, so their runs are pairs, not independent samples: the seed-to-seed spread
(one warm-up may simply be luckier) cancels in the differences. For each pair of
rules and each seed s we take d_s = metric(rule A, s) - metric(rule B, s) and report

    mean d  +-  t_{0.975, n-1} * sd(d) / sqrt(n)        (Student t interval, n seeds)

An interval that excludes 0 is a difference the seeds support; one that contains 0
is a tie at this number of seeds. With one seed there is no interval.

    python -m grpo_ba_lab.analysis.sweep        # writes paired_differences.md beside table.md
"""
from __future__ import annotations

import functools
import math

from grpo_ba_lab.plumbing import run_io

PAIRS = [("balanced", "token"), ("balanced", "sequence"), ("token", "sequence")]


# ------------------------------------------------------------------ Student t, no scipy

def _t_density(x: float, df: int) -> float:
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    return math.exp(log_norm - (df + 1) / 2 * math.log1p(x * x / df))


def t_cdf(x: float, df: int, intervals: int = 1000) -> float:
    """P(T <= x) for Student's t with df degrees of freedom (Simpson's rule from 0)."""
    if x < 0:
        return 1.0 - t_cdf(-x, df, intervals)
    h = x / intervals
    total = _t_density(0.0, df) + _t_density(x, df)
    total += sum((4 if i % 2 else 2) * _t_density(i * h, df) for i in range(1, intervals))
    return 0.5 + total * h / 3


@functools.lru_cache(maxsize=None)
def t_critical(df: int, level: float = 0.95) -> float:
    """The two-sided critical value t_{(1+level)/2, df}, by bisection on t_cdf."""
    if df < 1:
        raise ValueError("a t interval needs at least 2 paired values (df >= 1)")
    target, low, high = (1 + level) / 2, 0.0, 1000.0
    for _ in range(45):
        mid = (low + high) / 2
        low, high = (mid, high) if t_cdf(mid, df) < target else (low, mid)
    return (low + high) / 2


# |mean difference| below this is float noise around an identity, never a difference
# (sequence's and balanced's weight shares are both 1/2 by formula; they differ by ~1e-8).
EXACT_TIE = 1e-6


def paired_difference(a: list[float], b: list[float], level: float = 0.95) -> dict:
    """Mean of a_s - b_s over paired seeds with its Student t interval.

    Returns {"n", "mean", "low", "high", "excludes_zero"}; low/high are None (and
    excludes_zero False) with fewer than 2 pairs; an exact tie (EXACT_TIE) excludes nothing."""
    if len(a) != len(b) or not a:
        raise ValueError(f"paired values need equal, non-zero counts (got {len(a)} and {len(b)})")
    diffs = [x - y for x, y in zip(a, b)]
    n, mean = len(diffs), sum(diffs) / len(diffs)
    if n < 2:
        return {"n": n, "mean": mean, "low": None, "high": None, "excludes_zero": False}
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    half = t_critical(n - 1, level) * sd / math.sqrt(n)
    return {"n": n, "mean": mean, "low": mean - half, "high": mean + half,
            "excludes_zero": abs(mean) >= EXACT_TIE and (mean - half > 0 or mean + half < 0)}


# ------------------------------------------------------------------ per-run numbers

def evaluations(metrics: list[dict]) -> tuple[list[int], list[float]]:
    """(steps, held-out accuracy) of the steps that evaluated."""
    points = [(m["step"], m["accuracy"]) for m in metrics if m.get("accuracy") is not None]
    return [p[0] for p in points], [p[1] for p in points]


def accuracy_gain(metrics: list[dict], last: int = 3) -> float:
    """Mean of the last `last` evaluations minus the step-0 evaluation."""
    _, acc = evaluations(metrics)
    if len(acc) < 2:
        return float("nan")
    tail = acc[1:][-last:]
    return sum(tail) / len(tail) - acc[0]


def accuracy_area(metrics: list[dict]) -> float:
    """Area under the held-out accuracy curve over the run, divided by its length: the
    run's average accuracy (trapezoids between evaluations). Rewards learning early."""
    steps, acc = evaluations(metrics)
    if len(acc) < 2:
        return acc[0] if acc else float("nan")
    area = sum((s1 - s0) * (a0 + a1) / 2 for s0, s1, a0, a1 in zip(steps, steps[1:], acc, acc[1:]))
    return area / (steps[-1] - steps[0])


def late_reward(metrics: list[dict], fraction: float = 0.1) -> float:
    """Mean sampled reward over the last `fraction` of the steps."""
    rewards = [m["reward_mean"] for m in metrics if m.get("reward_mean") is not None]
    tail = rewards[-max(1, int(len(rewards) * fraction)):]
    return sum(tail) / len(tail) if tail else float("nan")


def mean_finite(values):
    values = [v for v in values if v is not None and math.isfinite(v)]
    return sum(values) / len(values) if values else float("nan")


def regime_stats(metrics: list[dict], window: int = 20) -> dict:
    """The regime statistics at step 0 and averaged over the last `window` steps."""
    tail = metrics[-window:]
    return {"step0_wrong_over_right": metrics[0].get("wrong_over_right") if metrics else None,
            "step0_std_over_mean": metrics[0].get("std_over_mean") if metrics else None,
            "late_wrong_over_right": mean_finite(m.get("wrong_over_right") for m in tail),
            "late_std_over_mean": mean_finite(m.get("std_over_mean") for m in tail)}


def last_accuracy(metrics: list[dict]) -> float:
    """Held-out accuracy of the last evaluation."""
    _, acc = evaluations(metrics)
    return acc[-1] if acc else float("nan")


METRICS = [("last_acc", "last held-out acc", last_accuracy),
           ("acc_area", "area under the acc curve (mean acc)", accuracy_area),
           ("late_reward", "sampled reward, last 10% of steps", late_reward)]


# ------------------------------------------------------------------ runs on disk -> table

def load_seed_runs(runs_dir: str) -> dict:
    """{(regime, rule): {seed: metrics}} from every run under runs_dir."""
    runs = {}
    for _, args, metrics in run_io.saved_runs(runs_dir):
        runs.setdefault((run_io.run_label(args), args["aggregator"]), {})[args["seed"]] = metrics   # regime or model
    return runs


def _fmt_interval(d: dict, digits: int = 3) -> str:
    if d["low"] is None:
        return f"{d['mean']:+.{digits}f} (no interval: 1 seed)"
    return f"{d['mean']:+.{digits}f} [{d['low']:+.{digits}f}, {d['high']:+.{digits}f}]"


def paired_rows(runs: dict, metrics=METRICS) -> list[dict]:
    """One row per (regime, pair of rules, metric): the paired difference over the seeds
    both rules have run. `metrics`: (key, label, per-run function) triples."""
    rows = []
    for regime in sorted({r for r, _ in runs}, key=str):
        for rule_a, rule_b in PAIRS:
            a_runs, b_runs = runs.get((regime, rule_a), {}), runs.get((regime, rule_b), {})
            seeds = sorted(set(a_runs) & set(b_runs))
            if not seeds:
                continue
            for key, label, fn in metrics:
                d = paired_difference([fn(a_runs[s]) for s in seeds], [fn(b_runs[s]) for s in seeds])
                rows.append({"regime": regime, "pair": f"{rule_a} - {rule_b}", "metric": label, "key": key, **d})
    return rows


def paired_table(runs: dict) -> str:
    """Markdown of paired_rows, with the number of seeds in words."""
    rows = paired_rows(runs)
    n_seeds = sorted({r["n"] for r in rows})
    lines = [f"Paired differences between rules, {', '.join(map(str, n_seeds))} seeds "
             f"(mean [95% Student t interval] of the per-seed difference; the rules of one seed share "
             f"the warm-up weights and the prompt order).", "",
             "| regime | pair | metric | seeds | mean difference [95% interval] | interval excludes 0 |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        verdict = "n/a" if r["low"] is None else ("yes" if r["excludes_zero"] else "no")
        lines.append(f"| {r['regime']} | {r['pair']} | {r['metric']} | {r['n']} | {_fmt_interval(r)} | {verdict} |")
    return "\n".join(lines) + "\n"


def learning_table(runs: dict) -> str:
    """Markdown: per (regime, rule), the per-seed accuracy gain and the regime statistics."""
    lines = ["| regime | rule | seeds | step-0 acc | gain (last 3 evals - step 0), per seed | mean gain | "
             "step-0 wrong/right | last-20 wrong/right | step-0 std/mean |",
             "|---|---|---|---|---|---|---|---|---|"]
    for (regime, rule), by_seed in sorted(runs.items(), key=str):
        seeds = sorted(by_seed)
        gains = [accuracy_gain(by_seed[s]) for s in seeds]
        stats = [regime_stats(by_seed[s]) for s in seeds]
        acc0 = mean_finite(evaluations(by_seed[s])[1][0] if evaluations(by_seed[s])[1] else None for s in seeds)
        lines.append(f"| {regime} | {rule} | {len(seeds)} | {acc0:.3f} | " + ", ".join(f"{g:+.2f}" for g in gains)
                     + f" | {mean_finite(gains):+.3f} | {mean_finite(s['step0_wrong_over_right'] for s in stats):.2f}"
                     f" | {mean_finite(s['late_wrong_over_right'] for s in stats):.2f}"
                     f" | {mean_finite(s['step0_std_over_mean'] for s in stats):.2f} |")
    return "\n".join(lines) + "\n"
