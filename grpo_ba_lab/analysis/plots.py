"""grpo_ba_lab/analysis/plots.py -- figures and tables of the bias phenomena.

Analytic figures (seconds, no training) call the real aggregators of grpo_ba.py
through autograd; nothing here re-types their formulas. Training figures and the
summary table read the `metrics.jsonl` files that grpo_ba.py writes.

    python -m grpo_ba_lab.analysis.plots --analytic assets/        # the three analytic figures
    python -m grpo_ba_lab.analysis.report runs/sweep               # training figures + table.md of a sweep
"""
from __future__ import annotations

import argparse
import math
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

import grpo_ba  # noqa: E402
from grpo_ba_lab.analysis import paired_stats  # noqa: E402
from grpo_ba_lab.plumbing import run_dirs

from grpo_ba import (AGGREGATORS, clipped_token_loss, group_advantages, mask_from_lengths,  # noqa: E402
                     token_weights)

from grpo_ba_plots import COLORS, STYLES, style  # noqa: E402  (the course's palette and lines)
G, K = 8, 4                       # analytic group: G responses, K of them right


def _group(len_pos, len_neg, k=K, group_size=G):
    """A binary group: k right answers of length len_pos, the rest of length len_neg."""
    mask = mask_from_lengths(torch.tensor([len_pos] * k + [len_neg] * (group_size - k)))
    rewards = torch.tensor([1.0] * k + [0.0] * (group_size - k))
    return mask, group_advantages(rewards, group_size)


# ------------------------------------------------------------------ analytic curves

def positive_share_curve(ratios, rule, len_neg=10):
    """Share of the total gradient weight on the right answers, against Lbar+/Lbar-: the
    course's own curve (grpo_ba.bias_curves), on these ratios."""
    return grpo_ba.bias_curves(G, K, len_neg, ratios=list(ratios))["share"][rule]


def token_weight_curve(lengths, rule):
    """Gradient weight of one token against its response's length, inside the positive
    sign: a group whose right answers have lengths `lengths`, wrong ones length 10."""
    k = len(lengths)
    mask = mask_from_lengths(torch.tensor(list(lengths) + [10] * k))
    adv = group_advantages(torch.tensor([1.0] * k + [0.0] * k), 2 * k)
    return token_weights(mask, adv, 2 * k, rule)[:k, 0].tolist()


def loss_at_ratio_one_curve(gaps, rule, len_pos=6):
    """Policy-gradient loss at ratio 1 against the gap Lbar- - Lbar+."""
    values = []
    for gap in gaps:
        mask, adv = _group(len_pos, len_pos + gap)
        logp = torch.zeros_like(mask)
        values.append(AGGREGATORS[rule](clipped_token_loss(logp, logp, adv, mask), mask, adv, G).item())
    return values


def plot_positive_share(path):
    ratios = [0.2 + 0.1 * i for i in range(49)]
    fig, ax = plt.subplots(figsize=(5.5, 4))
    shares = grpo_ba.bias_curves(G, K, ratios=ratios)["share"]          # every rule at once
    for rule in AGGREGATORS:
        ax.plot(ratios, shares[rule], **style(rule))
    ax.axhline(0.5, color="gray", lw=0.5)
    ax.axvline(1.0, color="gray", lw=0.5)
    ax.set(xscale="log", xlabel="mean length right / wrong  (Lbar+ / Lbar-)",
           ylabel="share of gradient weight on right answers",
           title=f"Sign-length coupling (G={G}, k={K}, ratio 1)")
    ax.set_xticks([0.25, 0.5, 1, 2, 4], ["1/4", "1/2", "1", "2", "4"])
    ax.minorticks_off()
    ax.legend()
    return _save(fig, path)


def plot_token_weight(path):
    lengths = list(range(1, 41))
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for rule in AGGREGATORS:
        ax.plot(lengths, token_weight_curve(lengths, rule), **style(rule))
    ax.set(yscale="log", xlabel="length of the response (tokens)", ylabel="gradient weight of each of its tokens",
           title="Sequence equal-weighting (inside the positive sign)")
    ax.legend()
    return _save(fig, path)


def plot_loss_vs_gap(path):
    gaps = list(range(-5, 41))
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for rule in AGGREGATORS:
        ax.plot(gaps, loss_at_ratio_one_curve(gaps, rule), **style(rule))
    ax.axhline(0, color="gray", lw=0.5)
    ax.set(xlabel="length gap  Lbar- - Lbar+  (tokens; Lbar+ = 6)", ylabel="policy-gradient loss at ratio 1",
           title="The loss drifts with the gap only under token aggregation")
    ax.legend()
    return _save(fig, path)


def analytic_figures(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    return [plot_positive_share(os.path.join(out_dir, "analytic_positive_share.png")),
            plot_token_weight(os.path.join(out_dir, "analytic_token_weight.png")),
            plot_loss_vs_gap(os.path.join(out_dir, "analytic_loss_vs_gap.png"))]


# ------------------------------------------------------------------ training runs

def load_runs(runs_dir):
    """{(regime, rule): [metrics of each seed]} from every run under runs_dir."""
    runs = {}
    for _, args, metrics in run_dirs.saved_runs(runs_dir):    # a torn last line is dropped, with a note
        runs.setdefault((run_dirs.run_label(args), args["aggregator"]), []).append(metrics)   # regime or model
    return runs


def _series(metrics, key):
    points = [(m["step"], m[key]) for m in metrics if m.get(key) is not None]
    return [p[0] for p in points], [p[1] for p in points]


TRAINING_PANELS = [("accuracy", "held-out greedy accuracy"), ("reward_mean", "sampled reward"),
                   ("len_pos", "mean length, A > 0"), ("len_neg", "mean length, A < 0"),
                   ("pg_loss", "policy-gradient loss (first inner update)"), ("pos_share", "weight share on A > 0")]


def mean_over_seeds(seed_runs, key):
    """(steps, mean, std) of metric `key` over the runs that logged a finite value at each step."""
    by_step = {}
    for metrics in seed_runs:
        for step, value in zip(*_series(metrics, key)):
            if isinstance(value, (int, float)) and math.isfinite(value):
                by_step.setdefault(step, []).append(value)
    steps = sorted(by_step)
    return steps, [sum(by_step[s]) / len(by_step[s]) for s in steps], [_std(by_step[s]) for s in steps]


def plot_training(seed_runs_by_rule, regime, path):
    """One panel per metric, one line per rule, a band of +-1 std over seeds."""
    fig, axes = plt.subplots(2, 3, figsize=(13, 6.5))
    for ax, (key, title) in zip(axes.flat, TRAINING_PANELS):
        for rule, seed_runs in sorted(seed_runs_by_rule.items()):
            steps, mean, std = mean_over_seeds(seed_runs, key)
            if not steps:
                continue
            if key not in ("accuracy",) and len(steps) > 20:          # smooth noisy per-step curves
                mean, std = _smooth(mean), _smooth(std)
            ax.plot(steps, mean, color=COLORS.get(rule), label=f"{rule} ({len(seed_runs)} seeds)", lw=1.6,
                    ls=STYLES.get(rule, "-"))
            ax.fill_between(steps, [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)],
                            color=COLORS.get(rule), alpha=0.2, lw=0)
        ax.set(title=title, xlabel="step")
    axes.flat[0].legend(fontsize=8)
    subject = f"the toy, regime '{regime}'" if regime in ("gap", "variance") else regime   # or a model's name
    fig.suptitle(f"GRPO on {subject} (mean +- std over seeds)")
    return _save(fig, path)


def _std(values):
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def _smooth(values, window=9):
    half = window // 2
    return [sum(values[max(0, i - half):i + half + 1]) / len(values[max(0, i - half):i + half + 1])
            for i in range(len(values))]


def run_summary(metrics):
    """Per-run numbers of the table, recomputed from its metrics."""
    steps, acc = _series(metrics, "accuracy")
    peak = max(acc) if acc else float("nan")
    last = acc[-1] if acc else float("nan")
    losses = [abs(v) for v in _series(metrics, "pg_loss")[1]]
    gaps = [m["len_neg"] - m["len_pos"] for m in metrics if m.get("len_neg") is not None and m.get("len_pos") is not None]
    rewards = _series(metrics, "reward_mean")[1]
    tail = rewards[-max(1, len(rewards) // 10):]
    return {"peak_acc": peak, "last_acc": last, "drop": peak - last,
            "mean_abs_pg_loss": sum(losses) / len(losses) if losses else float("nan"),
            "mean_gap": sum(gaps) / len(gaps) if gaps else float("nan"),
            "final_reward": sum(tail) / len(tail) if tail else float("nan")}


TABLE_COLUMNS = [("peak_acc", "peak acc", 3), ("last_acc", "last acc", 3), ("drop", "peak-last drop", 3),
                 ("mean_abs_pg_loss", "mean abs pg_loss", 4), ("mean_gap", "mean gap Lbar- - Lbar+", 1),
                 ("final_reward", "sampled reward, last 10%", 3)]


def summary_table(runs) -> str:
    """Markdown: per regime and rule, mean +- std over seeds of each column (+- only
    with two or more seeds)."""
    lines = ["| regime | rule | seeds | " + " | ".join(c[1] for c in TABLE_COLUMNS) + " |",
             "|---|---|---|" + "---|" * len(TABLE_COLUMNS)]
    for (regime, rule), seed_runs in sorted(runs.items()):
        summaries = [run_summary(m) for m in seed_runs]
        cells = []
        for key, _, digits in TABLE_COLUMNS:
            values = [s[key] for s in summaries]
            spread = f" +- {_std(values):.{digits}f}" if len(values) >= 2 else ""   # one seed: no spread measured
            cells.append(f"{sum(values) / len(values):.{digits}f}{spread}")
        lines.append(f"| {regime} | {rule} | {len(seed_runs)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def report(runs_dir, figures_dir=None, log=print):
    """Training figures per regime, the analytic figures and table.md for a runs directory."""
    figures_dir = figures_dir or runs_dir
    runs = load_runs(runs_dir)
    if not runs:
        raise ValueError(f"no runs (args.json + metrics.jsonl) under {runs_dir!r}")
    written = analytic_figures(figures_dir)
    for regime in sorted({r for r, _ in runs}):
        by_rule = {rule: seed_runs for (reg, rule), seed_runs in runs.items() if reg == regime}
        written.append(plot_training(by_rule, regime, os.path.join(figures_dir, f"training_{regime}.png")))
    table = summary_table(runs)
    with open(os.path.join(figures_dir, "table.md"), "w") as f:
        f.write(table)
    log(table)
    seed_runs = paired_stats.load_seed_runs(runs_dir)      # rules compared paired by seed
    paired = (paired_stats.paired_table(seed_runs) + "\nLearning and regime statistics per rule "
              "(gain = mean of the last three evaluations minus step 0):\n\n" + paired_stats.learning_table(seed_runs))
    with open(os.path.join(figures_dir, "paired_differences.md"), "w") as f:
        f.write(paired)
    log(paired)
    log("wrote " + ", ".join(written + [os.path.join(figures_dir, n) for n in ("table.md", "paired_differences.md")]))
    return written


def _save(fig, path):
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Analytic figures of the three aggregation rules.")
    parser.add_argument("--analytic", metavar="DIR", required=True, help="write the analytic figures here")
    print("\n".join(analytic_figures(parser.parse_args().analytic)))
