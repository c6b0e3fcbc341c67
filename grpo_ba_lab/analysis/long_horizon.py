"""grpo_ba_lab/analysis/long_horizon.py -- an exploratory long-horizon probe of the paper's
stability claim where the sign-length coupling is strong (docs/stability-probe.md).

    python -m grpo_ba_lab.analysis.long_horizon --out runs/long-horizon --threads 1
    python -m grpo_ba_lab.analysis.long_horizon --out runs/long-horizon --settings strong-endless --seeds 1600
    python -m grpo_ba_lab.analysis.long_horizon --out runs/long-horizon --report-only

The paper's first result: token aggregation often falls late in training, far from its peak,
while balanced keeps its last-step accuracy. strong-band's 30 steps are too short to see late
training. This probe runs strong-band's world and band warm-ups for STEPS steps, the three
rules from each seed's warm-up, with held-out evaluations every 10 steps (SETTINGS), and one
setting where the long wrong answers cannot shrink by ending early: half of the corpus's slips
never end, so the warm-up learns slips that run to the 48-token cap.

What counts as a collapse, and what would send the project on to a registered design, is fixed
here before any of the probe's runs (COLLAPSE_DROP, DEFICIT, move_on); the seeds (SEEDS) are
exploratory and never confirm anything. The report (long-horizon.md, long-horizon.png: held-out
accuracy over steps, one line per seed, one panel per rule and setting) says per setting how
many runs of each rule collapsed and whether the move-on rule is met.
"""
from __future__ import annotations

import os

from grpo_ba_support.args import RULES
from grpo_ba_lab import designs
from grpo_ba_lab.analysis import coupling_pilot, paired_stats
from grpo_ba_lab.analysis.stability_probe import study_main
from grpo_ba_lab.analysis.toy_consequences import peak_accuracy, peak_to_last_drop

SEEDS = (1600, 1601, 1602, 1603)       # exploratory: no design uses them
STEPS = 200
# strong-band's registered world, band warm-up and lr, as flags; only the steps and the
# evaluation schedule change (and, in strong-endless, the corpus's endless slips)
STRONG = {k: v for k, v in designs.DESIGNS["strong-band"]["flags"].items() if k not in ("steps", "eval_every")}
BASE = ["--design", "plain", *(x for k, v in STRONG.items() for x in (f"--{k.replace('_', '-')}", str(v))),
        "--steps", str(STEPS), "--eval-every", "10", "--aggregator", "all"]
SETTINGS = {
    "strong-long": ("strong-band's world, 200 steps", BASE),
    "strong-endless": ("as strong-long, half of the corpus's slips never end (they run to the "
                       "48-token cap, so a slip's answer cannot get shorter by ending)",
                       BASE + ["--endless-slips", "0.5"]),
}

# The criteria, committed before the probe's first run. A run collapses when its held-out
# accuracy falls from its peak to its last evaluation by more than COLLAPSE_DROP, or ends more
# than DEFICIT below balanced's last accuracy on the same seed and setting (token and sequence
# only). The project moves on to a registered design for a setting when token collapses in at
# least half of its runs there and balanced in at most a quarter of its own.
COLLAPSE_DROP = 0.1
DEFICIT = 0.1


def command(setting: str, seed: int, out: str, threads: int) -> list[str]:
    """The lab trainer's command line of one (setting, seed): the three rules from one warm-up."""
    return [*SETTINGS[setting][1], "--seed", str(seed), "--threads", str(threads),
            "--output-dir", coupling_pilot.run_folder(out, setting, seed)]


def run_probe(out: str, settings, seeds, threads: int = 1, cache_dir: str = "", log=print):
    """Trains every (setting, seed), seed by seed, each seed under every setting before the
    next (a probe stopped early covers both settings); a unit with all three runs finished is
    skipped."""
    from grpo_ba_lab.plumbing import run_dirs
    from grpo_ba_lab.train import main as train_main
    for seed in seeds:
        for setting in settings:
            folder = coupling_pilot.run_folder(out, setting, seed)
            if all(run_dirs.run_status(os.path.join(folder, rule), STEPS, lambda *a: None) == "finished"
                   for rule in RULES):
                continue
            argv = command(setting, seed, out, threads) + (["--cache-dir", cache_dir] if cache_dir else [])
            log(f"{setting}, seed {seed}: python -m grpo_ba_lab.train {' '.join(argv)}")
            if train_main(argv):
                raise SystemExit(f"{setting}, seed {seed}: the unit failed")


# ------------------------------------------------------------------ what each run did

def run_summary(metrics: list[dict], balanced_last: float | None) -> dict:
    """Peak, the step of the peak, last accuracy, the drop, the deficit against balanced on
    the same seed, and whether the run collapsed by the committed criteria."""
    steps, accuracy = paired_stats.evaluations(metrics)
    peak, last = peak_accuracy(metrics), paired_stats.last_accuracy(metrics)
    deficit = balanced_last - last if balanced_last is not None else 0.0
    drop = peak_to_last_drop(metrics)
    return {"peak": peak, "peak_step": steps[accuracy.index(peak)], "last": last, "drop": drop,
            "deficit": deficit, "collapsed": drop > COLLAPSE_DROP or deficit > DEFICIT}


def summaries(found: dict) -> dict:
    """{(setting, seed): {rule: run_summary}} of the units with all three rules finished."""
    out = {}
    for (setting, seed), runs in found.items():
        if set(runs) >= set(RULES):
            balanced_last = paired_stats.last_accuracy(runs["balanced"])
            out[(setting, seed)] = {rule: run_summary(runs[rule], None if rule == "balanced" else balanced_last)
                                    for rule in RULES}
    return out


def move_on(units: dict, setting: str) -> tuple[dict, bool]:
    """({rule: (collapsed runs, runs)}, whether token collapsed in at least half of its runs
    and balanced in at most a quarter) for one setting."""
    counts = {rule: (sum(u[rule]["collapsed"] for (s, _), u in units.items() if s == setting),
                     sum(1 for s, _ in units if s == setting)) for rule in RULES}
    token, balanced = counts["token"], counts["balanced"]
    return counts, token[1] > 0 and 2 * token[0] >= token[1] and 4 * balanced[0] <= balanced[1]


# Paired by seed, per setting (exploratory: intervals describe these seeds, they confirm
# nothing): the rule's peak-to-last drop minus balanced's, and balanced's last accuracy minus
# the rule's, each with the smallest true difference its seeds would detect at 80% power.
PAIRED = (("drop", "peak - last", lambda s, b: s["drop"] - b["drop"], "{rule} - balanced"),
          ("last", "last held-out acc", lambda s, b: b["last"] - s["last"], "balanced - {rule}"))


def paired_lines(units: dict, setting: str) -> list[str]:
    """Table rows of the paired differences of one setting (two or more seeds)."""
    seeds = sorted(seed for s, seed in units if s == setting)
    if len(seeds) < 2:
        return []
    rows = []
    for rule in ("token", "sequence"):
        for _, what, diff, name in PAIRED:
            d = paired_stats.difference_summary([diff(units[(setting, seed)][rule], units[(setting, seed)]["balanced"])
                                                 for seed in seeds])
            rows.append(f"| {setting} | {name.format(rule=rule)}, {what} | {d['n']} | {d['mean']:+.3f} "
                        f"[{d['low']:+.3f}, {d['high']:+.3f}] | {d['detectable']:.3f} |")
    return rows


def report_text(found: dict) -> str:
    units = summaries(found)
    lines = ["| setting | seed | rule | peak (step) | last | peak - last | balanced's last - last | collapsed |",
             "|---|---|---|---|---|---|---|---|"]
    for (setting, seed), by_rule in sorted(units.items(), key=lambda kv: (list(SETTINGS).index(kv[0][0]), kv[0][1])):
        for rule, s in by_rule.items():
            deficit = "" if rule == "balanced" else f"{s['deficit']:+.3f}"
            lines.append(f"| {setting} | {seed} | {rule} | {s['peak']:.3f} ({s['peak_step']}) | {s['last']:.3f} | "
                         f"{s['drop']:.3f} | {deficit} | {'yes' if s['collapsed'] else 'no'} |")
    lines += ["", f"A run collapsed when peak - last > {COLLAPSE_DROP} or balanced's last - its last > {DEFICIT} "
                  "(committed before the runs). Move on to a registered design when token collapsed in at "
                  "least half of its runs and balanced in at most a quarter:", ""]
    for setting in SETTINGS:
        counts, met = move_on(units, setting)
        if counts["token"][1]:
            lines.append(f"- {setting} ({SETTINGS[setting][0]}): " + ", ".join(
                f"{rule} {c}/{n}" for rule, (c, n) in counts.items()) + f"; move-on rule {'met' if met else 'not met'}")
    paired = [row for setting in SETTINGS for row in paired_lines(units, setting)]
    if paired:
        lines += ["", "Paired by seed (exploratory; the last column is the smallest true difference these "
                      "seeds would detect at 80% power):", "",
                  "| setting | pair | seeds | difference [95% interval] | detectable |", "|---|---|---|---|---|", *paired]
    return "\n".join(lines) + "\n"


def curves(found: dict) -> dict:
    """{(setting, rule): {seed: [(step, accuracy)]}}: what long-horizon.png draws."""
    out = {}
    for (setting, seed), runs in sorted(found.items()):
        for rule, metrics in runs.items():
            out.setdefault((setting, rule), {})[seed] = list(zip(*paired_stats.evaluations(metrics)))
    return out


def figure(found: dict, path: str):
    """Held-out accuracy over steps: one panel per (setting, rule), one line per seed."""
    from grpo_ba_lab.analysis import plots                     # matplotlib, Agg
    drawn = curves(found)
    settings = [s for s in SETTINGS if any(k[0] == s for k in drawn)]
    fig, axes = plots.plt.subplots(len(settings), len(RULES), figsize=(12, 3.2 * len(settings)),
                                   squeeze=False, sharey=True)
    for row, setting in enumerate(settings):
        for col, rule in enumerate(RULES):
            ax = axes[row][col]
            for seed, points in sorted(drawn.get((setting, rule), {}).items()):
                ax.plot(*zip(*points), lw=1.2, marker=".", label=f"seed {seed}", gid=f"{setting}/{rule}/{seed}")
            ax.set_title(f"{setting}: {rule}", fontsize=9)
            ax.set_xlabel("step")
            ax.grid(alpha=0.3)
        axes[row][0].set_ylabel("held-out accuracy")
        axes[row][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plots.plt.close(fig)
    return fig


def report(out: str, log=print) -> str:
    """long-horizon.md and long-horizon.png from the finished units under `out`."""
    text = coupling_pilot.report(out, log, report_text, name="long-horizon.md")
    figure(coupling_pilot.collect(out), os.path.join(out, "long-horizon.png"))
    log(f"wrote {os.path.join(out, 'long-horizon.png')}")
    return text


def main(argv=None) -> int:
    return study_main(argv, "python -m grpo_ba_lab.analysis.long_horizon", __doc__, "settings",
                      SETTINGS, SEEDS, run_probe, report)


if __name__ == "__main__":
    raise SystemExit(main())
