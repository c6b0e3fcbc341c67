"""grpo_ba_plots.py -- what the demo shows: its story in a few lines and two figures.

- `mechanism_figure`: one run per rule over its steps: accuracy, each rule's weight share on
  right answers, the lengths of right and wrong answers, entropy, truncation.
- `bias_curves`: the analytic bias of each rule in one group (grpo_ba.bias_curves computes
  them with the real rules; here they are only drawn).
Reads metrics lines as grpo_ba.py writes them (docs/metrics.md); never imports grpo_ba.
"""
from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# Okabe-Ito: told apart with any colour vision; sequence dashed, as it sits at balanced's 1/2
COLORS = {"token": "#D55E00", "sequence": "#0072B2", "balanced": "#009E73"}
STYLES = {"token": "-", "sequence": "--", "balanced": "-"}
PANELS = [("accuracy", "held-out greedy accuracy"),
          ("pos_share", "weight share on right answers (own rule)"),
          ("len_right", "mean length of right answers (tokens)"),
          ("len_wrong", "mean length of wrong answers (tokens)"),
          ("entropy", "entropy per token"), ("truncated_frac", "fraction cut at --max-new-tokens")]


def _steps(metrics: list[dict], key: str):
    """(steps, values) of the training lines that logged `key` (the final evaluation, logged
    as step --steps, included for accuracy)."""
    points = [(m["step"], m[key]) for m in metrics
              if m.get(key) is not None and (key == "accuracy" or not m.get("final_evaluation"))]
    return [s for s, _ in points], [v for _, v in points]


def _mean(values):
    values = [v for v in values if v is not None and math.isfinite(v)]
    return sum(values) / len(values) if values else float("nan")


def _save(fig, path: str) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def mechanism_figure(runs: dict, path: str, title: str) -> str:
    """runs: {rule: metrics lines} of one seed -> six panels over the steps."""
    fig, axes = plt.subplots(2, 3, figsize=(14, 7))
    for ax, (key, label) in zip(axes.flat, PANELS):
        for rule, metrics in runs.items():
            steps, values = _steps(metrics, key)
            ax.plot(steps, values, color=COLORS[rule], ls=STYLES[rule], lw=1.6, label=rule,
                    marker="." if key == "accuracy" else None)
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes.flat[0].legend()
    fig.suptitle(f"What each rule did, one seed ({title}): the mechanism, not a ranking")
    return _save(fig, path)


def bias_curves(curves: dict, path: str) -> str:
    """The two biases of docs/method.md §3 from grpo_ba.bias_curves' numbers."""
    fig, (share, weight) = plt.subplots(1, 2, figsize=(11, 4))
    for rule in COLORS:
        share.plot(curves["ratios"], curves["share"][rule], color=COLORS[rule], ls=STYLES[rule],
                   lw=2, label=rule)
        weight.plot(curves["lengths"], curves["token_weight"][rule], color=COLORS[rule],
                    ls=STYLES[rule], lw=2, label=rule)
    share.axhline(0.5, color="gray", lw=0.5)
    share.axvline(1.0, color="gray", lw=0.5)
    share.set(xscale="log", xlabel="mean length of right / wrong answers",
              ylabel="share of gradient weight on right answers",
              title="Sign-length coupling: token follows the lengths")
    share.set_xticks([0.25, 0.5, 1, 2, 4], ["1/4", "1/2", "1", "2", "4"])
    share.minorticks_off()
    weight.set(yscale="log", xlabel="length of one right answer (tokens)",
               ylabel="gradient weight of each of its tokens",
               title="Length devaluation: sequence shrinks long answers")
    share.legend()
    return _save(fig, path)


def story(runs: dict, args, figures) -> list[str]:
    """The demo's last lines: what each rule did in this run, and what one seed cannot say."""
    def row(label, value):
        return f"{label:<40}" + "".join(f"{value(m):>15}" for m in runs.values())

    def first(metrics, key):                       # nan when no step logged it (no right answer)
        return (_steps(metrics, key)[1] or [math.nan])[0]

    def late(metrics, key):                        # the last 10 steps' mean
        return _mean(_steps(metrics, key)[1][-10:])

    def change(key, digits=1, last=late):
        return lambda m: f"{_text(first(m, key), digits)} -> {_text(last(m, key), digits)}"

    compare = f"--design {args.design}" if args.design != "plain" else "--seeds 5"
    return ["", f"What each rule did (design {args.design}, seed {args.seed}, {args.steps} steps):",
            f"{'':<40}" + "".join(f"{rule:>15}" for rule in runs),
            row("weight share on right answers, mean",
                lambda m: _text(_mean(_steps(m, "pos_share")[1]), 3)),
            row("right-answer length, step 0 -> last 10", change("len_right")),
            row("wrong-answer length, step 0 -> last 10", change("len_wrong")),
            row("held-out accuracy, step 0 -> final",
                change("accuracy", 3, lambda m, key: (_steps(m, key)[1] or [math.nan])[-1])),
            "",
            "One seed ranks no rule: its differences mix the rule with this seed's luck. To",
            f"compare them paired over many seeds: python -m grpo_ba_lab.analysis.sweep {compare}",
            f"Figures: {figures[0]} (this run over its steps),",
            f"         {figures[1]} (each rule's bias in one group, docs/method.md §3)"]


def _text(value: float, digits: int) -> str:
    return "n/a" if math.isnan(value) else f"{value:.{digits}f}"
