"""grpo_ba_lab/analysis/stability_probe.py -- an exploratory probe of the paper's stability
claim: does token aggregation collapse where wrong answers run to the length cap?

    python -m grpo_ba_lab.analysis.stability_probe --out runs/probe              # every setting
    python -m grpo_ba_lab.analysis.stability_probe --out runs/probe --settings cap-keep cap-mask
    python -m grpo_ba_lab.analysis.stability_probe --out runs/probe --report-only

Each setting is a toy world and a training recipe (SETTINGS) run from its own warm-up per
seed under the three rules; the seeds (PROBE_SEEDS) are exploratory and never confirm
anything. The report (probe.md, probe.png) gives, per run, the peak and last held-out
accuracy, the peak-to-last drop, and late truncated fraction, entropy, wrong-answer length
and pg-loss drift, and counts per rule the seeds whose drop exceeds COLLAPSE_DROP: the
question a registered design would ask next (docs/stability-probe.md). Finished runs are
skipped and stopped ones resumed.
"""
from __future__ import annotations

import argparse
import dataclasses
import os

from grpo_ba_support import run as grpo_ba_run
from grpo_ba_support.args import RULES
from grpo_ba_lab.analysis import paired_stats
from grpo_ba_lab.analysis.toy_consequences import peak_accuracy, peak_to_last_drop
from grpo_ba_lab.plumbing import run_dirs

PROBE_SEEDS = (900, 901)        # exploratory: no design uses them
COLLAPSE_DROP = 0.1             # a run "collapses" when peak - last held-out accuracy exceeds it
# Every setting: regime gap, each seed its own 600-step warm-up, 150 steps, greedy accuracy on
# 243 held-out prompts every 10 steps; --max-new-tokens 32 binds (endless slips reach it).
BASE = ["--design", "plain", "--regime", "gap", "--gap-size", "18", "--warmup-steps", "600",
        "--warmup-seed", "-1", "--steps", "150", "--eval-every", "10", "--eval-prompts", "243",
        "--max-new-tokens", "32", "--endless-slips", "0.3"]
LOOP, HOT = ["--slip-style", "loop"], ["--lr", "6e-4", "--inner-updates", "4"]
SETTINGS = {
    "cap-keep": ("loops in digits, 30% of slips endless, lr 3e-4; truncated answers kept",
                 BASE + LOOP + ["--lr", "3e-4"]),
    "cap-mask": ("as cap-keep, truncated answers masked out of the loss",
                 BASE + LOOP + ["--lr", "3e-4", "--truncated", "mask"]),
    "hot-keep": ("loops in digits, endless slips, lr 6e-4, 4 inner updates; kept",
                 BASE + LOOP + HOT),
    "hot-mask": ("as hot-keep, truncated answers masked", BASE + LOOP + HOT + ["--truncated", "mask"]),
    "tilde-hot-keep": ("as hot-keep with `~` rambles (a token right answers never use)",
                       BASE + HOT),
    # added after the five above had run (every rule fell from step 0 at lr >= 3e-4): the
    # designs' lr, where nothing fell, with 4 inner updates and twice the steps
    "slow-keep": ("loops in digits, endless slips, lr 1e-4, 4 inner updates, 300 steps; kept",
                  BASE + LOOP + ["--lr", "1e-4", "--inner-updates", "4", "--steps", "300"]),
    "slow-mask": ("as slow-keep, truncated answers masked",
                  BASE + LOOP + ["--lr", "1e-4", "--inner-updates", "4", "--steps", "300",
                                 "--truncated", "mask"]),
}


def run_folder(out: str, setting: str, rule: str, seed: int) -> str:
    return os.path.join(out, setting, f"{rule}-s{seed}")


def probe_args(setting: str, rule: str, seed: int, out: str, threads: int):
    from grpo_ba_lab.lab_args import parse_args
    return parse_args([*SETTINGS[setting][1], "--aggregator", rule, "--seed", str(seed),
                       "--threads", str(threads), "--output-dir", run_folder(out, setting, rule, seed)])


def run_probe(out: str, settings, seeds, threads: int = 1, cache_dir: str = "", log=print):
    """Trains every (setting, seed, rule) not yet finished, one after another: each seed
    under every setting before the next seed, so a probe stopped early covers every setting."""
    from grpo_ba_lab.train import train
    plan = [(s, seed, rule) for seed in seeds for s in settings for rule in RULES]
    for k, (setting, seed, rule) in enumerate(plan, 1):
        args = probe_args(setting, rule, seed, out, threads)
        if cache_dir:
            args = dataclasses.replace(args, cache_dir=cache_dir)
        status = run_dirs.run_status(args.output_dir, args.steps, log)
        log(f"[{k}/{len(plan)}] {setting}, seed {seed}, {rule}"
            + (" (done before)" if status == "finished" else ""))
        if status != "finished":
            train(dataclasses.replace(args, resume=args.output_dir if status == "resume" else ""), log)


# ------------------------------------------------------------------ what each run did

def _fifth(metrics, key: str, last: bool = True) -> float:
    """Mean of a per-step metric over the last (or first) fifth of the training steps."""
    steps = run_dirs.step_lines(metrics)[0]
    n = max(1, len(steps) // 5)
    return paired_stats.mean_finite(m.get(key) for m in (steps[-n:] if last else steps[:n]))


def run_summary(metrics: list[dict]) -> dict:
    """The probe's numbers of one run (late = the last fifth of the steps)."""
    return {"step0": paired_stats.evaluations(metrics)[1][0], "peak": peak_accuracy(metrics),
            "last": paired_stats.last_accuracy(metrics), "drop": peak_to_last_drop(metrics),
            "truncated": _fifth(metrics, "truncated_frac"), "entropy": _fifth(metrics, "entropy"),
            "len_wrong": _fifth(metrics, "len_wrong"),
            "pg_drift": _fifth(metrics, "pg_loss") - _fifth(metrics, "pg_loss", last=False)}


def collect(out: str) -> dict:
    """{setting: {rule: {seed: metrics}}} of the finished probe runs under `out`."""
    found = {}
    for run_dir, args, metrics in run_dirs.saved_runs(out):
        if run_dirs.is_finished(run_dir, metrics, args["steps"]):
            setting = os.path.basename(os.path.dirname(run_dir))
            found.setdefault(setting, {}).setdefault(args["aggregator"], {})[args["seed"]] = metrics
    return found


def collapses(runs: dict) -> dict:
    """{rule: (seeds whose drop exceeds COLLAPSE_DROP, seeds)} of one setting."""
    return {rule: (sum(run_summary(m)["drop"] > COLLAPSE_DROP for m in by_seed.values()), len(by_seed))
            for rule, by_seed in runs.items()}


def pattern_found(runs: dict) -> bool:
    """The issue's criterion: token's drop exceeds COLLAPSE_DROP in at least half its seeds
    while balanced's does in none."""
    counts = collapses(runs)
    token, balanced = counts.get("token", (0, 0)), counts.get("balanced", (0, 0))
    return token[1] > 0 and 2 * token[0] >= token[1] and balanced[1] > 0 and balanced[0] == 0


def report_text(found: dict) -> str:
    lines = ["| setting | rule | seed | step-0 acc | peak | last | drop | late truncated | "
             "late entropy | late wrong length | pg-loss drift |", "|---" * 11 + "|"]
    for setting in SETTINGS:
        for rule in RULES:
            for seed, metrics in sorted(found.get(setting, {}).get(rule, {}).items()):
                s = run_summary(metrics)
                lines.append(f"| {setting} | {rule} | {seed} | {s['step0']:.3f} | {s['peak']:.3f} | "
                             f"{s['last']:.3f} | {s['drop']:.3f} | {s['truncated']:.2f} | "
                             f"{s['entropy']:.3f} | {s['len_wrong']:.1f} | {s['pg_drift']:+.4f} |")
    verdicts = ["", f"Seeds whose peak-to-last drop exceeds {COLLAPSE_DROP} (of the seeds run):", ""]
    for setting, runs in found.items():
        counts = collapses(runs)
        verdicts.append(f"- {setting} ({SETTINGS[setting][0]}): " + ", ".join(
            f"{rule} {counts[rule][0]}/{counts[rule][1]}" for rule in RULES if rule in counts)
            + ("; token collapses in half its seeds or more while balanced never does"
               if pattern_found(runs) else ""))
    return "\n".join(lines + verdicts) + "\n"


def probe_figure(found: dict, path: str):
    """Per setting: held-out accuracy, entropy, wrong-answer length and truncated fraction over
    steps, per rule, each seed faint behind the mean."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from grpo_ba_plots import COLORS
    panels = [("accuracy", "held-out accuracy"), ("entropy", "entropy"),
              ("len_wrong", "wrong-answer length"), ("truncated_frac", "truncated fraction")]
    fig, axes = plt.subplots(len(found), 4, figsize=(16, 3 * len(found)), squeeze=False)
    for row, (setting, runs) in enumerate(sorted(found.items())):
        for col, (key, label) in enumerate(panels):
            ax = axes[row][col]
            for rule in RULES:
                curves = []
                for metrics in runs.get(rule, {}).values():
                    points = [(m["step"], m[key]) for m in run_dirs.step_lines(metrics)[0]
                              if m.get(key) is not None]
                    if points:
                        ax.plot(*zip(*points), color=COLORS[rule], alpha=0.25, lw=0.8)
                        curves.append(dict(points))
                common = sorted(set.intersection(*(set(c) for c in curves))) if curves else []
                if common:
                    ax.plot(common, [sum(c[s] for c in curves) / len(curves) for s in common],
                            color=COLORS[rule], lw=1.8, label=rule)
            ax.set_title(f"{setting}: {label}", fontsize=9)
            ax.set_xlabel("step")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(out: str, log=print) -> str:
    """probe.md and probe.png from the finished runs under `out`; returns probe.md's text."""
    found = collect(out)
    if not found:
        raise ValueError(f"no finished probe runs under {out!r}")
    text, table, figure = report_text(found), os.path.join(out, "probe.md"), os.path.join(out, "probe.png")
    grpo_ba_run.write_atomic(table, text)
    probe_figure(found, figure)
    log(text + f"wrote {table} and {figure}")
    return text


def study_main(argv, prog: str, doc: str, kind: str, choices, seeds, run, report_fn) -> int:
    """The command line of an exploratory study: --out, its `kind` (settings, worlds) among
    `choices`, --seeds, --threads, --cache-dir, --report-only; run(out, chosen, seeds, threads,
    cache_dir) trains what is not finished, then report_fn(out) writes the table."""
    parser = argparse.ArgumentParser(prog=prog, description=doc.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="the study's runs and its report")
    parser.add_argument(f"--{kind}", nargs="+", choices=sorted(choices), default=list(choices))
    parser.add_argument("--seeds", nargs="+", type=int, default=list(seeds))
    parser.add_argument("--threads", type=int, default=1, help="CPU threads per run")
    parser.add_argument("--cache-dir", default="", help="warm-up cache (default: the lab's)")
    parser.add_argument("--report-only", action="store_true", help="train nothing; report")
    options = parser.parse_args(argv)
    if not options.report_only:
        run(options.out, getattr(options, kind), options.seeds, options.threads, options.cache_dir)
    report_fn(options.out)
    return 0


def main(argv=None) -> int:
    return study_main(argv, "python -m grpo_ba_lab.analysis.stability_probe", __doc__, "settings",
                      SETTINGS, PROBE_SEEDS, run_probe, report)


if __name__ == "__main__":
    raise SystemExit(main())
