"""grpo_ba_plots.py -- what a run shows: the demo's story, `mechanism_figure` (each rule over its
steps), `bias_curves` (the two biases in one group), a progress line; the keys: docs/metrics.md.
`python -m grpo_ba_plots runs/demo-s22` redraws a run directory's figures (docs/outputs.md)."""
from __future__ import annotations

import argparse
import glob
import importlib.util
import json
import math
import os
import sys
import textwrap
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from grpo_ba_support import own_rule  # noqa: E402
from grpo_ba_support.run import RunError, RunLogger, read_args, read_metrics  # noqa: E402
from grpo_ba_support.args import run_command  # noqa: E402
from toy_tasks import designs  # noqa: E402

# Okabe-Ito, for any colour vision. Where two rules' lines coincide (sequence, balanced at 1/2 or
# 0; token, balanced at 1) both stay visible: token wide below, the others' dashes interleaved.
COLORS = {"token": "#D55E00", "sequence": "#0072B2", "balanced": "#009E73"}
STYLES = {"token": "-", "sequence": (0, (4, 4)), "balanced": (4, (4, 4))}
LINES = {"token": dict(lw=4, zorder=2),
         "sequence": dict(lw=2, marker="o", ms=4, markevery=(0, 4), zorder=3),
         "balanced": dict(lw=2, marker="s", ms=4, markevery=(2, 4), zorder=4)}
PANELS = [("accuracy", "held-out greedy accuracy"),
          ("pos_share", "weight share on right answers\n(sign-length coupling; 0.5: unbiased)"),
          ("long_right_weight", "long/short right answer, weight per token\n"
                                "(sequence equal-weighting; 1: none)"),
          ("pg_loss", "pg-loss at ratio 1, a step's first update\n({pg})"),     # PG_NOTE
          ("len_right", "mean length of right answers (tokens)"),
          ("len_wrong", "mean length of wrong answers (tokens)"),
          ("forced_frac", "responses the world started with {start}"),     # STARTS' first word
          ("entropy", "entropy per token (nats): how spread\nthe policy's next-token choice is")]
REFERENCE = {"pos_share": 0.5, "long_right_weight": 1.0, "pg_loss": 0.0}
PG_NOTE = {"token": "token: off 0 by its coupling", False: "each rule's loss, as it returned it",
           True: "0 where the two signs' weights balance"}    # what holds for the linear three
WORLD = dict(color="gray", lw=1.5, label="the world")
# by gap_sign, a world's forced start: its name, example, long side, token's share's side
STARTS = {"wrong-long": ("a slip", "a slip (57+6+3= -> 57: the 6 forgotten)", "wrong", "below"),
          "right-long": ("a re-check", "a right answer, re-checked (57+6+3= -> 63 66?)", "right",
                         "above"), None: ("a forced start\n(none in this run)", "", "", "")}
OWN = ["#CC79A7", "#E69F00", "#56B4E9", "#000000"]   # your own rules (Okabe-Ito's others)


def style(rule: str) -> dict:
    """The demo's colour, dashes and width per rule; your own rule (FILE.py:FUNCTION) another."""
    if rule in COLORS:
        return dict(color=COLORS[rule], ls=STYLES[rule], label=rule, **LINES[rule])
    colour = OWN[sum(map(ord, rule)) % len(OWN)]
    return dict(color=colour, ls="-", lw=2.5, marker="D", ms=3, label=own_rule.name_of(rule))


def _steps(metrics: list[dict], key: str):
    """(steps, values) of the lines that logged `key` (the final evaluation only for accuracy)."""
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


def mechanism_figure(runs: dict, path: str | None, title: str, args=None):
    """{rule: metrics} of one seed -> 8 panels by step, saved to `path` (-> path) or the figure."""
    fig, axes = plt.subplots(2, 4, figsize=(17, 7.5))
    start = forced_start(args, next(iter(runs.values())))[0]        # args: its world (None: demo's)
    pg = PG_NOTE["token" if "token" in runs else set(runs) <= set(COLORS)]    # of the rules run
    for ax, (key, label) in zip(axes.flat, PANELS):
        for rule, metrics in runs.items():       # the world's forced starts: the same every run
            steps, values = _steps(metrics, key)
            line = dict(style(rule) if key != "forced_frac" else WORLD)
            if key == "long_right_weight":        # a gap: a step with no such group, not a 0
                found, steps = dict(zip(steps, values)), [m["step"] for m in metrics
                                                          if not m.get("final_evaluation")]
                values = [found.get(step, math.nan) for step in steps]     # every step: nan, a gap
                lone = [(x, y) for i, (x, y) in enumerate(zip(steps, values)) if math.isfinite(y)
                        and all(not 0 <= j < len(values) or math.isnan(values[j])
                                for j in (i - 1, i + 1))]
                if lone:                          # a step between two gaps: a dot, not nothing
                    ax.plot(*zip(*lone), ls="none", marker="o", ms=4, color=line["color"],
                            label="_lone")
            if len(steps) < 3:                    # a point or two: shown, not a bare axis
                line.update(marker="o", ms=5)
            ax.plot(steps, values, **line)
        empty = not any(math.isfinite(y) for line in ax.get_lines() for y in line.get_ydata())
        if key in REFERENCE:
            ax.axhline(REFERENCE[key], color="gray", lw=0.8)
        ys = [y for line in ax.get_lines() for y in line.get_ydata() if math.isfinite(y)]
        if ys and max(ys) - min(ys) < 1e-3:       # a flat line, not float noise blown up
            middle = (max(ys) + min(ys)) / 2
            ax.set_ylim(middle - 0.1 * max(1.0, abs(middle)), middle + 0.1 * max(1.0, abs(middle)))
        gaps = _gaps_note(runs) if key == "long_right_weight" else ""     # said on the figure
        ax.set(title=label.format(start=start, pg=pg), xlabel="step" + gaps)
        ax.xaxis.get_major_locator().set_params(integer=True)    # steps: never 0.5 of a step
        if key == "long_right_weight" and empty:                  # the steps' axis, said empty
            ax.set_xlim(-0.5, max(m["step"] for m in next(iter(runs.values()))) + 0.5)
            ax.text(0.5, 0.5, "no step had two right answers\nof different lengths", ha="center",
                    transform=ax.transAxes, color="gray")
        ax.grid(alpha=0.3)
    axes.flat[0].legend()
    what = "What each rule did" if len(runs) > 1 else f"What {own_rule.name_of(*runs)} did"
    fig.suptitle(f"{what}, one seed ({title}): the mechanism, not a ranking")
    return _save(fig, path) if path else fig


def _gaps_note(runs) -> str:
    """The long/short panel's missing steps, explained on the figure: per rule, or of one run."""
    steps = {own_rule.name_of(rule): [m for m in metrics if not m.get("final_evaluation")]
             for rule, metrics in runs.items()}
    missing = {name: sum(m.get("long_right_weight") is None for m in run)
               for name, run in steps.items()}
    counts = (", ".join(f"{name} {n}" for name, n in missing.items()) if len(runs) > 1 else
              f"{sum(missing.values())} of {sum(map(len, steps.values()))}")
    return textwrap.fill(f"; a gap: a step where no group had two right answers of different "
                         f"lengths to compare (steps without one: {counts})", 48)


def bias_curves(curves: dict, path: str | None):
    """method.md §3's two biases (grpo_ba.bias_curves) -> `path` and its .json, or the figure."""
    fig, (share, weight) = plt.subplots(1, 2, figsize=(11, 4))
    for rule in COLORS:
        share.plot(curves["ratios"], curves["share"][rule], **style(rule))
        weight.plot(curves["lengths"], curves["relative_weight"][rule], **style(rule))
    share.axhline(0.5, color="gray", lw=0.5)
    share.axvline(1.0, color="gray", lw=0.5)
    share.set(xscale="log", xlabel="mean length of right / wrong answers",
              ylabel="share of gradient weight on right answers",
              title="Sign-length coupling: token's share follows the lengths")
    share.set_xticks([0.25, 0.5, 1, 2, 4], ["1/4", "1/2", "1", "2", "4"])
    reference = curves["reference_length"]
    weight.set(xscale="log", yscale="log", xlabel="length L of one right answer (tokens)",
               ylabel=f"per-token weight (1: a {reference}-token one's)",
               title=f"Sequence equal-weighting: sequence gives {reference}/L")
    weight.set_xticks([2, 5, 10, 20, 40], ["2", "5", "10", "20", "40"])
    weight.set_yticks([0.25, 0.5, 1, 2, 4], ["1/4", "1/2", "1", "2", "4"])
    for ax in (share, weight):
        ax.minorticks_off()
    share.legend()
    if not path:
        return fig
    with open(os.path.splitext(path)[0] + ".json", "w") as f:
        json.dump(curves, f)
    return _save(fig, path)


def redraw(run_dir: str) -> list[str]:
    """Redraw mechanism.png of a run or the demo (a run per rule below it), and bias_curves.png."""
    found = glob.glob(os.path.join(run_dir, "args.json")) or sorted(
        glob.glob(os.path.join(run_dir, "*", "args.json")))
    runs, args = {}, {}
    for path in found:
        args = read_args(os.path.dirname(path))
        if args.get("aggregator") in runs:
            raise RunError(f"{run_dir} holds several {args['aggregator']} runs; this draws one "
                           "per rule (many: the lab's analysis.report)")
        runs[args.get("aggregator")] = read_metrics(path[:-len("args.json")] + "metrics.jsonl")
    if not runs:
        raise RunError(f"no run (args.json, metrics.jsonl) in {run_dir} or below it")
    order = [*COLORS, *sorted(k for k in runs if k not in COLORS)]       # token first, then yours
    runs = dict(sorted(runs.items(), key=lambda item: order.index(item[0])))
    title = f"design {args.get('design')}, seed {args.get('seed')}"
    figures = [mechanism_figure(runs, os.path.join(run_dir, "mechanism.png"), title,
                                argparse.Namespace(**args))]     # its world's forced start
    if os.path.exists(os.path.join(run_dir, "bias_curves.json")):
        with open(os.path.join(run_dir, "bias_curves.json")) as f:
            figures.append(bias_curves(json.load(f), os.path.join(run_dir, "bias_curves.png")))
    return figures


class Progress(RunLogger):
    """A run's steps on one terminal line rewritten in place (step k/N, seconds since step 0, last
    accuracy), elsewhere every tenth and the last; as grpo_ba.demo's `log`, a warm-up's lines."""

    def __init__(self, steps: int, stream=None, log=None):
        self.stream, self.steps, self.started = stream or sys.stdout, steps, time.time()
        self.shown, self.accuracy, self.width, self.passed = self.stream.isatty(), "", 0, log

    def __call__(self, line="", *more):             # the run's log lines: dropped, but a warm-up's
        if self.passed and str(line).startswith(("warm-up: training", "warm-up step")):
            self.passed(line, *more)

    def begin(self, run, start: int, task):          # step 0: the warm-up's time is not counted
        self.started = time.time()

    def log(self, metrics: dict):
        if metrics.get("accuracy") is not None:
            self.accuracy = f", accuracy at step {metrics['step']}: {metrics['accuracy']:.3f}"
        k = metrics["step"]                         # the final evaluation's: self.steps
        line = (f"      step {min(k + 1, self.steps)}/{self.steps}, "       # the warm-up's: apart
                f"{time.time() - self.started:.0f} s of GRPO{self.accuracy}")
        if self.shown:
            self.stream.write("\r" + line.ljust(self.width))
            self.stream.flush()
            self.width = max(self.width, len(line))
        elif k >= self.steps or (k + 1) % 10 == 0 < self.steps - 1 - k:   # every 10th, the final
            print(line.strip(), file=self.stream, flush=True)    # a log file, a notebook's `!`

    def close(self):
        if self.width:
            self.stream.write("\n")


def story(runs: dict, args, figures) -> list[str]:
    """The demo's last lines: the table (method.md §3), the world, how to read it, what next."""
    def row(label, value):
        return f"{label:<40}" + "".join(f"{value(m):>15}" for m in runs.values())
    def first(metrics, key):                       # nan when no step logged it (no right answer)
        return (_steps(metrics, key)[1] or [math.nan])[0]
    tail = min(10, args.steps)                     # a 5-step run's "last" is its last 5 steps
    def late(metrics, key):                        # the last `tail` steps' mean
        return _mean(_steps(metrics, key)[1][-tail:])
    def change(key, digits=1, last=late):
        return lambda m: f"{_text(first(m, key), digits)} -> {_text(last(m, key), digits)}"
    def mean(key, sign=""):
        return lambda m: _text(_mean(_steps(m, key)[1]), 3, sign)

    names = [own_rule.name_of(rule) for rule in runs]
    what = "What each rule did" if len(names) > 1 else f"What {names[0]} did"
    table = [f"{what} (design {args.design}, seed {args.seed}, {args.steps} steps, "
             f"G = {args.group_size} answers to P = {args.prompts_per_step} prompts each):",
             f"{'':<40}" + "".join(f"{name:>15}" for name in names),
             row("weight share on right answers, mean", mean("pos_share")),
             row("long/short right answer's token weight", mean("long_right_weight")),
             row("pg-loss at ratio 1, mean", mean("pg_loss", "+")),
             row(f"right-answer length, step 0 -> last {tail}", change("len_right")),
             row(f"wrong-answer length, step 0 -> last {tail}", change("len_wrong")),
             row("held-out accuracy, step 0 -> final",
                 change("accuracy", 3, lambda m, key: (_steps(m, key)[1] or [math.nan])[-1]))]
    start, _, long, side = forced_start(args, next(iter(runs.values())))   # long: "" if none
    lengths = (f"lengths at step 0 (one batch) and over the last {tail} steps"
               + f": {long} answers are the world's rambles" * bool(long))
    others = {rule: [round(f(m, f"len_{long}"), 1) for f in (first, late)]       # as printed
              for rule, m in runs.items()}
    (was, now), others = others.pop("sequence", [math.nan] * 2), list(others.values())
    ends = [end for _, end in others]
    if long and ends and all(map(math.isfinite, [now, was, *sum(others, [])])):
        rank = ("longest of the rules run" if now > max(ends) else "shortest of the rules run" if
                now < min(ends) else "level with another rule" if now in ends else "between others")
        said = ("shrank under sequence," if now < was else "did not shrink under sequence," if any(
            end < start for start, end in others) else "shrank under no rule, sequence's")
        lengths += f"; on this seed they {said} ending {rank}"    # not as if another's had shrunk
    design = designs.DESIGNS.get(args.design, {})         # a shipped seed: how it was chosen
    token = ("" if "token" not in runs else " Token's share is expected " + (   # if token ran
        f"{side} it here" if side else "off it where right and wrong answers differ in length")
        + ": sign-length coupling (all tokens alike: the side writing more gets more).")
    read = [f"- {text}" for text in (
        f"share: the update's weight on right answers; 0.5 is unbiased.{token}",
        "long/short: a group's longest right answer's weight per token over its shortest's; 1 is "
        "unbiased, under it sequence equal-weighting (1/L to each token of an L-token answer). "
        "A gap in its panel, n/a for a whole run: no two weighted right answers of unequal length.",
        "pg-loss at ratio 1 (before the policy moves): " + ("0 where the two signs' weights "
            "balance." if set(runs) <= set(COLORS) else "each rule's loss as it returned it."),
        lengths + ".",
        f"accuracy: greedy, {args.eval_prompts} held-out prompts. One seed ranks no rule"
        + (f"; seed {args.seed} and its world were picked after runs were "
                                 f"seen{design.get('seed_choice', '')} (docs/toy-designs.md)."
                                 if args.seed in design.get("shipped", {}) else "."),
        f"last two panels: responses the world started with {start} (every rule alike); entropy.")]
    for name in ("sign-length coupling", "sequence equal-weighting", "held-out prompts"):
        read = [text.replace(name, name.replace(" ", "\xa0")) for text in read]   # one line each
    read = ["Reading the rows:", *(line.replace("\xa0", " ") for text in read for line in
                                   textwrap.wrap(text, 92, subsequent_indent="  ",
                                                 break_on_hyphens=False))]
    where = "" if args.design == designs.DEMO else f" --design {args.design}"
    if len(runs) == 1:                            # one rule: the three beside it, same seed
        nxt = ["Next: the three rules from the same weights and seed, three runs like this one:",
               f"python grpo_ba.py --seed {args.seed}{where} --steps {args.steps}"    # its warm-up:
               + f" --threads {args.threads}" * bool(args.threads)]      # keyed by the threads
    else:           # no minutes: no committed log times a warm-up; a one-seed design: no sweep
        compared_by = design.get("compare", args.design)
        sweep = (f"python -m grpo_ba_lab.analysis.sweep --design {compared_by}"   # the lab's
                 if importlib.util.find_spec("grpo_ba_lab")    # a student copy has no lab
                 else f"the lab's sweep of {compared_by}, in the course repository")
        own = len({designs.warmup_seed(args.design, seed) for seed in (args.seed, args.seed + 1)})
        nxt = textwrap.wrap(f"Next: python grpo_ba.py --seed {args.seed + 1}{where}, " + (
            f"which trains its own warm-up first ({designs.warmup_steps(args.design)} supervised "
            "steps, which no committed log times), then three runs like these." if own > 1 else
            "from this warm-up (cached): three runs like these."), 92, break_on_hyphens=False)
        nxt += [f"Over many seeds, several CPU-hours: {sweep}"] * (compared_by != args.design)
    told = world(args, next(iter(runs.values())))
    return ["", *table, "", *told, *([""] if told else []), *read, *nxt,
            f"Figure{'s' * (len(figures) > 1)}: {figures[0]} (this run over its steps)"
            + ("," if len(figures) > 1 else ""),
            *([f"         {figures[1]} (each rule's bias in one group, docs/method.md §3)"]
              if len(figures) > 1 else [])]


def run_story(run_dir: str, args) -> list[str]:
    """One run's figure (redrawn) and its story, as `python grpo_ba.py --aggregator RULE` ends."""
    return story({args.aggregator: read_metrics(os.path.join(run_dir, "metrics.jsonl"))}, args,
                 redraw(run_dir))


def world(args, metrics: list[dict]) -> list[str]:
    """The story's lines on what the environment imposed: its forced starts, the length gap."""
    _, example, long, _ = forced_start(args, metrics)      # long: "" where it forced none
    step0 = _steps(metrics, "wrong_over_right")[1][:1] or [math.nan]
    forced = _mean(_steps(metrics, "forced_frac")[1])
    return [] if not long else textwrap.wrap(
        f"The world: the environment starts {_text(forced, 2)} of the responses with {example}, "
        f"which the policy continues with a ramble, so {long} answers run long: this seed's "
        f"wrong/right length at step 0 is {_text(step0[0], 2)} (its warm-up's; mean lengths).", 92)


def forced_start(args, metrics: list[dict]) -> tuple[str, str, str, str]:
    """STARTS' entry for the run's gap_sign (a lab run's flag, else its design's; None: demo's)."""
    flags = designs.DESIGNS.get(getattr(args, "design", designs.DEMO), {}).get("flags", {})
    sign = getattr(args, "gap_sign", None) or flags.get("gap_sign", "wrong-long")
    return STARTS[sign if _mean(_steps(metrics, "forced_frac")[1]) > 0 else None]


def _text(value: float, digits: int, sign: str = "") -> str:
    """`value` to `digits` places, 'n/a' for nan; what rounds to 0 shows as 0 (never -0.000)."""
    return ("n/a" if math.isnan(value)
            else f"{0.0 if abs(value) < 0.5 * 10 ** -digits else value:{sign}.{digits}f}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grpo_ba_plots", description="Redraw the "
                                     "figures of a run directory: one run's, or the demo's.")
    parser.add_argument("run_dir", metavar="RUN_DIR")
    run_dir = parser.parse_args(argv).run_dir
    return run_command("grpo_ba_plots", lambda: print("\n".join(redraw(run_dir))))


if __name__ == "__main__":
    sys.exit(main())
