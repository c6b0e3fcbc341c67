"""grpo_ba_lab/analysis/regime_design.py -- the regime design (registrations/regime-v3.md,
docs/regime-design.md): which rule wins depends on the length gap, in one world family whose
levels differ in the gap alone. Its level designs (designs.REGIME_DESIGNS) joined DESIGNS in
the commit that registered them.

    python -m grpo_ba_lab.analysis.regime_design run --variant native-1t --output-dir RUNS
    python -m grpo_ba_lab.analysis.regime_design run --variant default-1t --output-dir RUNS
    python -m grpo_ba_lab.analysis.regime_design report RUNS --out assets/regime-v3

Each level is a design of grpo_ba_lab/designs.py (REGIME_LEVELS: `regime-none`, `regime-weak`,
`regime-strong`), with the same seeds on both machine variants (seeds crossed with levels and
variants). `run` trains one variant's units seed by seed, every level of a seed before the next
seed (one process per unit: its warm-up, then the three rules from it), so that the registered
time limit cuts the design at a whole seed. `report` takes exactly the registered runs
(toy_consequences.design_runs checks every run's settings, machine and provenance), keeps the
first seeds finished at every level on every variant, and writes regime.md and the figure
"which rule wins where" (regime.png): the paired differences of last held-out accuracy
against the level, with their intervals.

Three primaries, Holm over the three (paired_stats.holm), each judged by the claim rule of
paired_stats.claim_test (the pooled interval over seeds and each variant's own exclude 0 on the
same side):

    interaction   (token - sequence) at `strong` minus (token - sequence) at `weak`, per seed
    strong        balanced - token at `strong`
    weak          balanced - sequence at `weak`

Every other row is secondary, the declared one among them balanced against the better of the
other two at each level (the better chosen by its mean at that level, a choice made from the
data and labelled so), with the margin NON_INFERIORITY: a level where the pooled interval's low
end lies above -margin has balanced "best or level" there.
"""
from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import time

from grpo_ba_support.args import RULES
from grpo_ba_lab import designs
from grpo_ba_lab.analysis import paired_stats, toy_consequences
from grpo_ba_lab.plumbing import run_dirs

LEVELS = designs.REGIME_LEVELS            # {"none": design, "weak": design, "strong": design}
PRIMARIES = ("interaction", "strong", "weak")
NON_INFERIORITY = 0.02                    # balanced is "best or level" when its low end > -this
REGISTRATION = "registrations/regime-v3.md"
# The registered manipulation check per level (token's weight share on right answers, mean
# over each token run's steps, then over token's runs): a level outside its range makes no
# accuracy verdict, and a primary that reads it makes none either.
SHARE_CHECK = {"none": (0.45, 1.0), "weak": (0.38, 0.49), "strong": (0.0, 0.40)}

# Each level's registration entry (toy_consequences.REGISTRATIONS: no primaries of its own, the
# time limit as the stopping rule) lives with the others in toy_consequences.


# ------------------------------------------------------------------ the runs

def unit_dir(runs_dir: str, level: str, seed: int, variant: str) -> str:
    """One unit's folder (its three rules below it, as `--aggregator all` writes them)."""
    return os.path.join(runs_dir, LEVELS[level], f"s{seed}-{variant}")


def unit_command(level: str, seed: int, variant: str, runs_dir: str, cache_dir: str) -> list[str]:
    return [sys.executable, "-m", "grpo_ba_lab.train", "--design", LEVELS[level], "--aggregator", "all",
            "--seed", str(seed), "--threads", str(designs.VARIANTS[variant]["threads"]),
            "--cache-dir", cache_dir, "--output-dir", unit_dir(runs_dir, level, seed, variant)]


def unit_finished(runs_dir: str, level: str, seed: int, variant: str) -> bool:
    base = unit_dir(runs_dir, level, seed, variant)
    steps = designs.REGIME_DESIGNS[LEVELS[level]]["flags"]["steps"]
    for rule in RULES:
        out = os.path.join(base, rule)
        if run_dirs.run_status(out, steps, lambda *a: None) != "finished":
            return False
    return True


def variant_env(variant: str) -> dict:
    """The environment of a unit's process on a machine variant: its kernels (set before torch
    loads) and the repository on the path."""
    env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
    if designs.VARIANTS[variant]["cpu_capability"]:
        env["ATEN_CPU_CAPABILITY"] = designs.VARIANTS[variant]["cpu_capability"]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (designs.REPO, env.get("PYTHONPATH"))))
    return env


def run_variant(variant: str, runs_dir: str, cache_dir: str = "", until: float | None = None, log=print):
    """Trains one variant's units, seed by seed, each seed's levels in LEVELS' order; a
    finished unit is skipped, an unfinished one trained again from its start. No unit starts
    after `until` (seconds since the epoch): the registered time limit."""
    cache_dir = cache_dir or os.path.join(runs_dir, f"cache-{variant}")
    env = variant_env(variant)
    plan = [(seed, level) for seed in designs.REGIME_SEEDS for level in LEVELS]
    for k, (seed, level) in enumerate(plan, 1):
        if unit_finished(runs_dir, level, seed, variant):
            log(f"[{k}/{len(plan)}] {LEVELS[level]}, seed {seed} ({variant}): done before")
            continue
        if until is not None and time.time() >= until:
            log(f"the time limit has come: no unit starts after it ({k - 1} of {len(plan)} done)")
            return
        log(f"[{k}/{len(plan)}] {LEVELS[level]}, seed {seed} ({variant}) at {time.strftime('%H:%M:%S')}")
        command = unit_command(level, seed, variant, runs_dir, cache_dir)
        done = subprocess.run(command, env=env, stdout=subprocess.DEVNULL)
        if done.returncode != 0:
            raise ValueError(f"the unit failed: {' '.join(command)}")


# ------------------------------------------------------------------ the registered runs, checked

def kept_seeds(level_runs: dict) -> list[int]:
    """The design's seeds under the time limit: the longest prefix of REGIME_SEEDS finished on
    every variant at every level (a seed after the first incomplete one is left out)."""
    kept = []
    for seed in designs.REGIME_SEEDS:
        if not all(any(unit[0] == seed for unit in by_rule["token"]) and
                   all((seed, v) in by_rule["token"] for v in designs.REGIME_VARIANTS)
                   for by_rule, _ in level_runs.values()):
            break
        kept.append(seed)
    return kept


def load_design(runs_dir: str) -> tuple[dict, list[int]]:
    """({level: (by_rule, records)} restricted to the kept seeds, kept seeds). Every level's
    runs pass toy_consequences.design_runs (its registered runs, each with the level's
    settings, on its variant, one CPU model)."""
    level_runs = {level: toy_consequences.design_runs(os.path.join(runs_dir, name), name)
                  for level, name in LEVELS.items()}
    kept = kept_seeds(level_runs)
    out = {}
    for level, (by_rule, records) in level_runs.items():
        out[level] = ({rule: {u: m for u, m in runs.items() if u[0] in kept} for rule, runs in by_rule.items()},
                      {u: r for u, r in records.items() if u[0] in kept})
    return out, kept


# ------------------------------------------------------------------ the rows

def per_unit(by_rule: dict, rule_a: str, rule_b: str, fn=paired_stats.last_accuracy) -> dict:
    """{variant: {seed: fn(rule_a) - fn(rule_b)}} of one level."""
    out = {}
    for unit, metrics in by_rule[rule_a].items():
        seed, variant = unit
        out.setdefault(variant, {})[seed] = fn(metrics) - fn(by_rule[rule_b][unit])
    return out


def interaction(runs: dict, pair=("token", "sequence"), high="strong", low="weak") -> dict:
    """{variant: {seed: d(high) - d(low)}}: a pair's difference at one level minus the other's."""
    a, b = per_unit(runs[high][0], *pair), per_unit(runs[low][0], *pair)
    return {v: {s: a[v][s] - b[v][s] for s in a[v]} for v in a}


def token_share(by_rule: dict) -> float:
    """Token's weight share on right answers, mean over each token run's steps, then over runs."""
    fn = dict((k, f) for k, _, f in toy_consequences.METRICS)["pos_share"]
    return paired_stats.mean_finite(fn(m) for m in by_rule["token"].values())


def manipulation(runs: dict) -> dict:
    """{level: (share, passed)} of the registered per-level check."""
    return {level: (token_share(by_rule), SHARE_CHECK[level][0] <= token_share(by_rule) <= SHARE_CHECK[level][1])
            for level, (by_rule, _) in runs.items()}


def rows(runs: dict) -> list[dict]:
    """Every row: the three primaries (Holm over them), then each level's pairs on last
    accuracy and area, the other pairs' interactions, and balanced against the better of the
    other two at each level."""
    checks = manipulation(runs)
    out = [dict(key="interaction", label="primary", levels=("strong", "weak"),
                what="(token - sequence) at strong minus at weak, last held-out acc",
                test=paired_stats.claim_test(interaction(runs))),
           dict(key="strong", label="primary", levels=("strong",), what="balanced - token at strong, last held-out acc",
                test=paired_stats.claim_test(per_unit(runs["strong"][0], "balanced", "token"))),
           dict(key="weak", label="primary", levels=("weak",), what="balanced - sequence at weak, last held-out acc",
                test=paired_stats.claim_test(per_unit(runs["weak"][0], "balanced", "sequence")))]
    adjusted = paired_stats.holm({r["key"]: r["test"]["p_claim"] for r in out})
    for r in out:
        r["p"] = adjusted[r["key"]]
        r["test"]["claim_detectable"] = paired_stats.claim_detectable(r["test"], paired_stats.ALPHA / len(out))
    for level in LEVELS:
        for a, b in paired_stats.PAIRS:
            for key, label, fn in (("last", "last held-out acc", paired_stats.last_accuracy),
                                   ("area", "area under the acc curve", paired_stats.accuracy_area)):
                out.append(dict(key=f"{level}/{a} - {b}/{key}", label="secondary", levels=(level,),
                                what=f"{a} - {b} at {level}, {label}",
                                test=paired_stats.claim_test(per_unit(runs[level][0], a, b, fn))))
    for high, low in (("strong", "weak"), ("strong", "none"), ("weak", "none")):
        for a, b in paired_stats.PAIRS:
            if (high, low, a, b) == ("strong", "weak", "token", "sequence"):
                continue                                   # the primary
            out.append(dict(key=f"interaction {high}-{low}/{a} - {b}", label="secondary", levels=(high, low),
                            what=f"({a} - {b}) at {high} minus at {low}, last held-out acc",
                            test=paired_stats.claim_test(interaction(runs, (a, b), high, low))))
    for r in out:
        r.setdefault("p", r["test"]["p_claim"])
        failed = [lv for lv in r["levels"] if not checks[lv][1]]
        r["verdict"] = ("no verdict" if failed else paired_stats.verdict(r["test"], r["p"]))
        r["why"] = (f"the manipulation check failed at {', '.join(failed)}" if failed else "")
    return out


def better_of_the_others(runs: dict) -> list[dict]:
    """Per level: the better of token and sequence by mean last accuracy at that level (chosen
    from the data), balanced - that rule, and whether the pooled interval's low end lies
    above -NON_INFERIORITY."""
    out = []
    for level, (by_rule, _) in runs.items():
        means = {rule: paired_stats.mean_finite(paired_stats.last_accuracy(m) for m in by_rule[rule].values())
                 for rule in ("token", "sequence")}
        better = max(means, key=lambda r: (means[r], r == "sequence"))
        test = paired_stats.claim_test(per_unit(by_rule, "balanced", better))
        out.append(dict(level=level, better=better, test=test,
                        level_or_best=test["low"] is not None and test["low"] > -NON_INFERIORITY))
    return out


# ------------------------------------------------------------------ the report

def _interval(t: dict) -> str:
    return paired_stats._fmt_interval(t)


def verdict_words(r: dict) -> str:
    if r["verdict"] == "no verdict":
        return f"no verdict ({r['why']})"
    text = paired_stats.verdict_text(r["test"], r["verdict"], excluded=False)
    return text + (f" (Holm over {len(PRIMARIES)} primaries)" if r["label"] == "primary" else "")


def step0(by_rule: dict) -> dict:
    return toy_consequences.step0_stats(by_rule)


def report_text(runs: dict, kept: list[int]) -> str:
    n_reg = len(designs.REGIME_SEEDS)
    count = (f"all {n_reg} registered seeds" if len(kept) == n_reg else
             f"{len(kept)} of its {n_reg} registered seeds ({kept[0]}-{kept[-1]}: the first seeds finished "
             f"at every level on every variant when the registered time limit came)" if kept else
             f"none of its {n_reg} registered seeds")
    checks = manipulation(runs)
    lines = [f"Regime design (version 3, registered in {REGISTRATION}): {count}, each seed at every level "
             f"on the machine variants {', '.join(designs.REGIME_VARIANTS)}; the three rules of a unit "
             f"(seed, level, variant) share its warm-up and prompts.", "",
             "| level | design | gap (a slip rambles) | step-0 acc | step-0 wrong / right (right, wrong tokens) | "
             "token's run-mean share | manipulation check (registered range) |",
             "|---|---|---|---|---|---|---|"]
    for level, (by_rule, _) in runs.items():
        s = step0(by_rule)
        share, passed = checks[level]
        low, high = SHARE_CHECK[level]
        lines.append(f"| {level} | {LEVELS[level]} | {designs.REGIME_GAPS[level]} | "
                     f"{s['acc']:.3f} | {s['wrong_over_right']:.2f} ({s['len_right']:.1f}, {s['len_wrong']:.1f}) | "
                     f"{share:.3f} | {'passed' if passed else 'failed'} ([{low:.2f}, {high:.2f}]) |")
    lines += ["", f"Every row ({toy_consequences.CLAIM_RULE}; here three primaries, Holm over the three; "
                  f"step-0 wrong / right is the mean over the runs of each step-0 batch's mean wrong-answer "
                  f"length over its mean right-answer length):", "",
              "| row | label | seeds | pooled mean [95% interval] | "
              + " | ".join(f"{v}: own [95% interval]" for v in designs.REGIME_VARIANTS) + " | verdict |",
              "|---|---|---|---|" + "---|" * len(designs.REGIME_VARIANTS) + "---|"]
    for r in rows(runs):
        t = r["test"]
        lines.append(f"| {r['what']} | {r['label']} | {t['n']} | {_interval(t)} | "
                     + " | ".join(_interval(t["variants"][v]) for v in designs.REGIME_VARIANTS)
                     + f" | {verdict_words(r)} |")
    lines += ["", f"Balanced against the better of the other two at each level (declared secondary; the "
                  f"better one is chosen by its mean last accuracy at that level, from these runs; margin "
                  f"{NON_INFERIORITY}: \"best or level\" when the pooled interval's low end lies above "
                  f"-{NON_INFERIORITY}):", "",
              "| level | better of token, sequence | balanced - it, last held-out acc | best or level | "
              "difference the pooled interval detects at 80% power |", "|---|---|---|---|---|"]
    for b in better_of_the_others(runs):
        lines.append(f"| {b['level']} | {b['better']} | {_interval(b['test'])} | "
                     f"{'yes' if b['level_or_best'] else 'no'} | {b['test']['detectable']:.3f} |")
    return "\n".join(lines + rule_means_table(runs, RULES)) + "\n"


def rule_means_table(runs: dict, rules) -> list[str]:
    """The report's last table: per level and rule, last held-out accuracy, mean over units."""
    lines = ["", "Per level and rule, last held-out accuracy (mean over units):", "",
             "| level | " + " | ".join(rules) + " |", "|---|" + "---|" * len(rules)]
    for level, (by_rule, _) in runs.items():
        lines.append(f"| {level} | " + " | ".join(
            f"{paired_stats.mean_finite(paired_stats.last_accuracy(m) for m in by_rule[rule].values()):.3f}"
            for rule in rules) + " |")
    return lines


FIGURE_PAIRS = (("token", "sequence"), ("balanced", "token"), ("balanced", "sequence"))


def figure_points(runs: dict) -> dict:
    """{pair: [(level, mean, low, high)]}: what regime.png draws, pooled over seeds."""
    return {f"{a} - {b}": [(level, t["mean"], t["low"], t["high"])
                           for level in LEVELS
                           for t in [paired_stats.claim_test(per_unit(runs[level][0], a, b))]]
            for a, b in FIGURE_PAIRS}


def regime_figure(runs: dict, path: str, kept: list[int]):
    """Which rule wins where: per pair, the paired difference of last held-out accuracy at each
    level (pooled mean, 95% interval), against the level's step-0 wrong/right length ratio."""
    from grpo_ba_lab.analysis import plots                     # matplotlib, Agg
    points = figure_points(runs)
    ratios = [step0(runs[level][0])["wrong_over_right"] for level in LEVELS]
    fig, ax = plots.plt.subplots(figsize=(7.5, 4.6))
    ax.axhline(0, color="0.4", lw=0.8)
    for k, (pair, pts) in enumerate(points.items()):
        x = [i + (k - 1) * 0.08 for i in range(len(pts))]
        means = [p[1] for p in pts]
        err = [[m - p[2] for m, p in zip(means, pts)], [p[3] - m for m, p in zip(means, pts)]]
        # the levels are categories: points with their intervals, no line between levels
        ax.errorbar(x, means, yerr=err, fmt="o", capsize=4, label=pair, gid=f"pair:{pair}")
    ax.set_xticks(range(len(LEVELS)))
    ax.set_xticklabels([f"gap {designs.REGIME_GAPS[level]} ({level})\nwrong/right {r:.2f}"
                        for level, r in zip(LEVELS, ratios)])
    ax.set_xlim(-0.5, len(LEVELS) - 0.5)
    ax.set_ylabel("paired difference, last held-out accuracy")
    # pooled intervals only: a row's verdict also needs each path's own interval (regime.md)
    ax.set_title(f"regime-v3: paired differences by gap ({len(kept)} seeds x {len(designs.REGIME_VARIANTS)} "
                 f"paths; pooled 95% intervals;\nverdicts need each path's own interval too: regime.md)", fontsize=10)
    return finish_figure(fig, ax, path)


def finish_figure(fig, ax, path: str):
    """Legend, grid, saved at 100 dpi and closed: the regime figures' last steps."""
    from grpo_ba_lab.analysis import plots
    ax.legend(fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plots.plt.close(fig)
    return fig


def write_report(out: str, text: str, draw, log=print) -> str:
    """regime.md (the text) and regime.png (draw(path)) under out."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "regime.md"), "w") as f:
        f.write(text)
    draw(os.path.join(out, "regime.png"))
    log(text + f"wrote {os.path.join(out, 'regime.md')} and {os.path.join(out, 'regime.png')}")
    return text


def report(runs_dir: str, out: str, log=print) -> str:
    runs, kept = load_design(runs_dir)
    if not kept:
        raise ValueError(f"no seed of the regime design is finished at every level and variant under {runs_dir}")
    return write_report(out, report_text(runs, kept), lambda path: regime_figure(runs, path, kept), log)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grpo_ba_lab.analysis.regime_design",
                                     description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="train one machine variant's units, seed by seed")
    run.add_argument("--variant", required=True, choices=designs.REGIME_VARIANTS)
    run.add_argument("--output-dir", required=True)
    run.add_argument("--cache-dir", default="")
    run.add_argument("--until", default="", help="no unit starts after this UTC time (YYYY-MM-DDTHH:MM)")
    rep = sub.add_parser("report", help="regime.md and regime.png from the runs")
    rep.add_argument("runs_dir")
    rep.add_argument("--out", required=True)
    options = parser.parse_args(argv)
    if options.command == "run":
        from grpo_ba_lab.analysis.sweep import until_time      # the trainer's imports: run only
        until = until_time(options.until) if options.until else None
        run_variant(options.variant, options.output_dir, options.cache_dir, until)
    else:
        report(options.runs_dir, options.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
