"""grpo_ba_lab/analysis/regime_v4.py -- the confirmatory regime design (registrations/regime-v4.md):
the paper's "which of token and sequence wins depends on the gap", asked as one primary, the
interaction, on regime-v3's weak (gap 6) and strong (gap 30) worlds with fresh seeds.

    python -m grpo_ba_lab.analysis.regime_v4 run --variant avx2-1t --output-dir RUNS
    python -m grpo_ba_lab.analysis.regime_v4 run --variant default-1t --output-dir RUNS
    python -m grpo_ba_lab.analysis.regime_v4 progress RUNS          # counts only, no accuracy
    python -m grpo_ba_lab.analysis.regime_v4 archive RUNS --out assets/regime-v4/archive
    python -m grpo_ba_lab.analysis.regime_v4 report RUNS --out assets/regime-v4

The stopping rule is the registered n (designs.REGIME_V4_SEEDS), not a clock: `run` may be
paused (`--pause-at`: no unit starts after it) and started again, and it skips every finished
unit; a unit that did not finish (a failure, a pause) is deleted and trained again from scratch,
with the same seed. `progress` prints how many units are finished and reads no accuracy, so the
primary stays unseen until the last registered seed is in; `report` refuses until then.
`archive` writes the finished units not yet archived into a new part (append only).

A unit is (seed, level, variant): its warm-up (regime-v3's band rule), then token and sequence
from it, one process each (they share the warm-up through the cache, and the seed's prompts).

    primary       (token - sequence) at strong minus (token - sequence) at weak, per seed,
                  last held-out accuracy; judged by paired_stats.claim_test (the pooled
                  interval over seeds and each variant's own exclude 0 on the same side)

Every other row is secondary. Each level has its manipulation check (regime-v3's ranges): a
level outside its range gives no verdict to any row that reads it.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import time

from grpo_ba_lab import designs
from grpo_ba_lab.analysis import paired_stats, toy_consequences
from grpo_ba_lab.analysis.regime_design import (finish_figure, rule_means_table, token_share, variant_env,
                                                write_report)
from grpo_ba_lab.plumbing import run_dirs
from grpo_ba_support import run as grpo_ba_run

LEVELS = designs.REGIME_V4_LEVELS          # {"weak": "regime-v4-weak", "strong": "regime-v4-strong"}
SEEDS = designs.REGIME_V4_SEEDS
RULES = designs.REGIME_V4_RULES            # ("token", "sequence")
VARIANTS = designs.REGIME_V4_VARIANTS      # ("avx2-1t", "default-1t"): pinned kernel paths
GAPS = {level: designs.REGIME_GAPS[level] for level in LEVELS}
REGISTRATION = "registrations/regime-v4.md"
# regime-v3's registered manipulation check at these levels (token's weight share on right
# answers, mean over each token run's steps, then over token's runs at the level)
SHARE_CHECK = {"weak": (0.38, 0.49), "strong": (0.0, 0.40)}
ARCHIVED_FILES = ("args.json", "metrics.jsonl", "run.json")


# ------------------------------------------------------------------ the runs

def unit_dir(runs_dir: str, level: str, seed: int, variant: str) -> str:
    """One unit's folder; its rules' runs are its subfolders token/ and sequence/."""
    return os.path.join(runs_dir, LEVELS[level], f"s{seed}-{variant}")


def rule_command(level: str, seed: int, variant: str, rule: str, runs_dir: str, cache_dir: str) -> list[str]:
    return [sys.executable, "-m", "grpo_ba_lab.train", "--design", LEVELS[level], "--aggregator", rule,
            "--seed", str(seed), "--threads", str(designs.VARIANTS[variant]["threads"]),
            "--cache-dir", cache_dir, "--output-dir",
            os.path.join(unit_dir(runs_dir, level, seed, variant), rule)]


def unit_finished(runs_dir: str, level: str, seed: int, variant: str) -> bool:
    """Whether both rules of a unit finished. Reads only: a stream may be writing a run now,
    so nothing is repaired (the stream itself retrains an unfinished unit from scratch)."""
    steps = designs.DESIGNS[LEVELS[level]]["flags"]["steps"]
    for rule in RULES:
        out = os.path.join(unit_dir(runs_dir, level, seed, variant), rule)
        try:
            metrics = grpo_ba_run.read_metrics(os.path.join(out, "metrics.jsonl"), lambda *a: None)
        except (OSError, ValueError, grpo_ba_run.RunError):   # none yet, or torn in the middle
            return False
        if not run_dirs.is_finished(out, metrics, steps):
            return False
    return True


def plan() -> list[tuple[int, str]]:
    """The run order of one stream: seed by seed, each seed's levels weak then strong."""
    return [(seed, level) for seed in SEEDS for level in LEVELS]


def run_variant(variant: str, runs_dir: str, cache_dir: str = "", pause_at: float | None = None, log=print):
    """Trains one variant's units in plan() order, skipping finished ones; an unfinished unit is
    deleted and trained from scratch. No unit starts after `pause_at` (seconds since the epoch):
    a pause of the work, never a stopping rule."""
    cache_dir = cache_dir or os.path.join(runs_dir, f"cache-{variant}")
    env = variant_env(variant)
    units = plan()
    for k, (seed, level) in enumerate(units, 1):
        if unit_finished(runs_dir, level, seed, variant):
            continue
        if pause_at is not None and time.time() >= pause_at:
            log(f"paused: no unit starts after the pause time ({k - 1} of {len(units)} units passed)")
            return
        base = unit_dir(runs_dir, level, seed, variant)
        if os.path.exists(base):
            log(f"{base}: unfinished, deleted and trained again from scratch")
            shutil.rmtree(base)
        log(f"[{k}/{len(units)}] {LEVELS[level]}, seed {seed} ({variant}) at {time.strftime('%Y-%m-%dT%H:%M:%S')}",
            )
        for rule in RULES:
            command = rule_command(level, seed, variant, rule, runs_dir, cache_dir)
            if subprocess.run(command, env=env, stdout=subprocess.DEVNULL).returncode != 0:
                raise ValueError(f"the run failed (registered: rerun the seed from scratch): {' '.join(command)}")
    log(f"variant {variant}: every registered unit is finished")


def finished_units(runs_dir: str) -> list[tuple[int, str, str]]:
    """[(seed, level, variant)] of the finished units under runs_dir, in plan order."""
    return [(seed, level, variant) for seed, level in plan() for variant in VARIANTS
            if unit_finished(runs_dir, level, seed, variant)]


def progress_text(runs_dir: str) -> str:
    """How far the design is: finished units per variant and level, and whole seeds. Reads
    whether runs finished, never their accuracies."""
    done = set(finished_units(runs_dir))
    whole = [s for s in SEEDS if all((s, lv, v) in done for lv in LEVELS for v in VARIANTS)]
    lines = [f"regime-v4: {len(whole)} of {len(SEEDS)} registered seeds finished at both levels on both variants"]
    for variant in VARIANTS:
        counts = ", ".join(f"{level} {sum((s, level, variant) in done for s in SEEDS)}" for level in LEVELS)
        lines.append(f"  {variant}: units finished: {counts} (of {len(SEEDS)} each)")
    return "\n".join(lines)


# ------------------------------------------------------------------ the archive, in parts

def archived_units(archive_dir: str) -> set:
    """The unit folders (relative to the runs folder) already in a part under archive_dir."""
    found = set()
    for part in sorted(os.listdir(archive_dir)) if os.path.isdir(archive_dir) else []:
        if part.endswith(".tar.gz"):
            with tarfile.open(os.path.join(archive_dir, part)) as tar:
                found |= {os.path.dirname(os.path.dirname(m.name)) for m in tar.getmembers() if m.isfile()}
    return found


def archive(runs_dir: str, archive_dir: str, log=print) -> str:
    """A new part (part-NN.tar.gz) of the finished units not yet archived: each rule's
    args.json, metrics.jsonl and run.json, with fixed metadata. '' when there is nothing new."""
    os.makedirs(archive_dir, exist_ok=True)
    before = archived_units(archive_dir)
    new = [os.path.relpath(unit_dir(runs_dir, level, seed, variant), runs_dir)
           for seed, level, variant in finished_units(runs_dir)]
    new = [u for u in new if u not in before]
    if not new:
        log(f"no finished unit under {runs_dir} is missing from {archive_dir}")
        return ""
    parts = [p for p in os.listdir(archive_dir) if p.startswith("part-") and p.endswith(".tar.gz")]
    path = os.path.join(archive_dir, f"part-{len(parts) + 1:02d}.tar.gz")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for unit in new:
            for rule in RULES:
                for name in ARCHIVED_FILES:
                    with open(os.path.join(runs_dir, unit, rule, name), "rb") as f:
                        data = f.read()
                    info = tarfile.TarInfo(os.path.join(unit, rule, name))
                    info.size, info.mtime, info.mode = len(data), 0, 0o644
                    tar.addfile(info, io.BytesIO(data))
    import gzip
    with open(path, "wb") as f:
        f.write(gzip.compress(buffer.getvalue(), mtime=0))
    log(f"wrote {path}: {len(new)} units ({hashlib.sha256(open(path, 'rb').read()).hexdigest()[:12]})")
    return path


def extract(archive_dir: str, runs_dir: str) -> int:
    """Unpacks every part into runs_dir (so `run` skips what is archived); returns the units."""
    if not os.path.isdir(archive_dir):
        return 0
    units = archived_units(archive_dir)
    for part in sorted(os.listdir(archive_dir)):
        if part.endswith(".tar.gz"):
            with tarfile.open(os.path.join(archive_dir, part)) as tar:
                tar.extractall(runs_dir, filter="data")
    return len(units)


# ------------------------------------------------------------------ the rows

def load_design(runs_dir: str) -> dict:
    """{level: (by_rule, records)}: every registered unit of both levels, each passing
    toy_consequences.design_runs (settings, variant, one CPU model, all registered seeds)."""
    return {level: toy_consequences.design_runs(os.path.join(runs_dir, name), name)
            for level, name in LEVELS.items()}


def per_unit(by_rule: dict, fn=paired_stats.last_accuracy) -> dict:
    """{variant: {seed: fn(token) - fn(sequence)}} at one level."""
    out = {}
    for (seed, variant), metrics in by_rule["token"].items():
        out.setdefault(variant, {})[seed] = fn(metrics) - fn(by_rule["sequence"][(seed, variant)])
    return out


def interaction(runs: dict, fn=paired_stats.last_accuracy) -> dict:
    """{variant: {seed: (token - sequence) at strong - (token - sequence) at weak}}."""
    high, low = per_unit(runs["strong"][0], fn), per_unit(runs["weak"][0], fn)
    return {v: {s: high[v][s] - low[v][s] for s in high[v]} for v in high}


def manipulation(runs: dict) -> dict:
    """{level: (share, passed)}: the registered check of each level."""
    out = {}
    for level, (by_rule, _) in runs.items():
        share = token_share(by_rule)
        out[level] = (share, SHARE_CHECK[level][0] <= share <= SHARE_CHECK[level][1])
    return out


def rows(runs: dict) -> list[dict]:
    """The primary, then the secondaries: token - sequence at each level (last accuracy, area)
    and the interaction on the area."""
    checks = manipulation(runs)
    out = [dict(label="primary", levels=("strong", "weak"),
                what="(token - sequence) at strong minus at weak, last held-out acc",
                test=paired_stats.claim_test(interaction(runs)))]
    for level in LEVELS:
        for key, fn in (("last held-out acc", paired_stats.last_accuracy),
                        ("area under the acc curve", paired_stats.accuracy_area)):
            out.append(dict(label="secondary", levels=(level,), what=f"token - sequence at {level}, {key}",
                            test=paired_stats.claim_test(per_unit(runs[level][0], fn))))
    out.append(dict(label="secondary", levels=("strong", "weak"),
                    what="(token - sequence) at strong minus at weak, area under the acc curve",
                    test=paired_stats.claim_test(interaction(runs, paired_stats.accuracy_area))))
    for r in out:
        failed = [lv for lv in r["levels"] if not checks[lv][1]]
        r["verdict"] = "no verdict" if failed else paired_stats.verdict(r["test"])
        r["why"] = f"the manipulation check failed at {', '.join(failed)}" if failed else ""
    return out


def verdict_words(r: dict) -> str:
    if r["verdict"] == "no verdict":
        return f"no verdict ({r['why']})"
    return paired_stats.verdict_text(r["test"], r["verdict"], excluded=False)


def report_text(runs: dict) -> str:
    checks = manipulation(runs)
    lines = [f"Regime design, version 4 (confirmatory; registered in {REGISTRATION}): all {len(SEEDS)} "
             f"registered seeds ({SEEDS[0]}-{SEEDS[-1]}), each at both levels on the machine variants "
             f"{', '.join(VARIANTS)}; token and sequence of a unit (seed, level, variant) share its warm-up "
             f"and prompts. Never pooled with version 3.", "",
             "| level | design | gap (a slip rambles) | step-0 acc | step-0 wrong / right (right, wrong tokens) | "
             "token's run-mean share | manipulation check (registered range) |", "|---|---|---|---|---|---|---|"]
    for level, (by_rule, _) in runs.items():
        s = toy_consequences.step0_stats(by_rule)
        share, passed = checks[level]
        low, high = SHARE_CHECK[level]
        lines.append(f"| {level} | {LEVELS[level]} | {GAPS[level]} | {s['acc']:.3f} | "
                     f"{s['wrong_over_right']:.2f} ({s['len_right']:.1f}, {s['len_wrong']:.1f}) | {share:.3f} | "
                     f"{'passed' if passed else 'failed'} ([{low:.2f}, {high:.2f}]) |")
    lines += ["", "Machines (the design runs over several sessions; each run records its CPU):", "",
              "| variant | CPU model, kernels torch reports | runs |", "|---|---|---|"]
    for variant, machine, count in machines(runs):
        lines.append(f"| {variant} | {machine} | {count} |")
    lines += ["", f"Every row ({toy_consequences.CLAIM_RULE}; here one primary, so no Holm, and no earlier value is "
              "registered for any row, so none can read contradicted):", "",
              "| row | label | seeds | pooled mean [95% interval] | "
              + " | ".join(f"{v}: own [95% interval]" for v in VARIANTS) + " | verdict |",
              "|---|---|---|---|" + "---|" * len(VARIANTS) + "---|"]
    table = rows(runs)                     # the primary first
    for r in table:
        t = r["test"]
        lines.append(f"| {r['what']} | {r['label']} | {t['n']} | {paired_stats._fmt_interval(t)} | "
                     + " | ".join(paired_stats._fmt_interval(t["variants"][v]) for v in VARIANTS)
                     + f" | {verdict_words(r)} |")
    lines += ["", power_line(table[0]["test"])]
    return "\n".join(lines + rule_means_table(runs, RULES)) + "\n"


def power_line(test: dict) -> str:
    """What the registered seeds could detect on the primary, from the sds they measured (the
    registration's "Seeds by power" planned with regime-v3's sds and promised this line)."""
    sds = ", ".join(f"{v} {test['variants'][v]['sd']:.4f}" for v in VARIANTS)
    return (f"The primary's per-seed sd as these {test['n']} seeds measured it: {sds}, pooled {test['sd']:.4f}. "
            f"With them the whole rule (the pooled interval and each variant's own) detects "
            f"{test['claim_detectable']:.3f} or more at {paired_stats.POWER:.0%} power; the registration planned about "
            f"0.034 from regime-v3's sds.")


def machines(runs: dict) -> list[tuple[str, str, int]]:
    """[(variant, "CPU model, kernels", runs)] over every run of both levels and rules."""
    counts = {}
    for level, (by_rule, records) in runs.items():
        for (seed, variant), record in records.items():
            for start in record.get("starts", []):
                m = start.get("machine") or {}
                key = (variant, f"{m.get('cpu_model')}, {m.get('cpu_capability')}")
                counts[key] = counts.get(key, 0) + len(RULES)
    return [(v, m, n) for (v, m), n in sorted(counts.items())]


def figure_points(runs: dict) -> dict:
    """{series: [(level, mean, low, high)]}: token - sequence at each level, each variant's own
    interval and the pooled one; what regime.png draws."""
    out = {}
    for level in LEVELS:
        t = paired_stats.claim_test(per_unit(runs[level][0]))
        for series, part in [*((v, t["variants"][v]) for v in VARIANTS), ("pooled", t)]:
            out.setdefault(series, []).append((level, part["mean"], part["low"], part["high"]))
    return out


def regime_figure(runs: dict, path: str):
    """token - sequence at the two gaps (categorical: no line joins the levels), each path's own
    95% interval and the pooled one."""
    from grpo_ba_lab.analysis import plots                     # matplotlib, Agg
    fig, ax = plots.plt.subplots(figsize=(7.0, 4.4))
    ax.axhline(0, color="0.4", lw=0.8)
    series = figure_points(runs)
    for k, (name, pts) in enumerate(series.items()):
        x = [i + (k - 1) * 0.12 for i in range(len(pts))]
        means = [p[1] for p in pts]
        err = [[m - p[2] for m, p in zip(means, pts)], [p[3] - m for m, p in zip(means, pts)]]
        ax.errorbar(x, means, yerr=err, fmt="o" if name != "pooled" else "s", capsize=4, label=name,
                    gid=f"series:{name}")
    ax.set_xticks(range(len(LEVELS)))
    ax.set_xticklabels([f"gap {GAPS[level]} ({level})" for level in LEVELS])
    ax.set_xlim(-0.5, len(LEVELS) - 0.5)
    ax.set_ylabel("token - sequence, last held-out accuracy\n(below 0: sequence ahead)")
    # the primary is the change between the two gaps, not either point: the title says it and its verdict
    ax.set_title(f"regime-v4: token - sequence at two gaps ({len(SEEDS)} seeds; 95% intervals)\n"
                 f"{primary_words(runs)}", fontsize=10)
    return finish_figure(fig, ax, path)


def primary_words(runs: dict) -> str:
    """One line for the figure: the primary's pooled interval and its verdict word."""
    r = rows(runs)[0]
    return (f"primary, the change from gap {GAPS['weak']} to gap {GAPS['strong']}: "
            f"{paired_stats._fmt_interval(r['test'])} pooled, {r['verdict']}")


def report(runs_dir: str, out: str, log=print) -> str:
    runs = load_design(runs_dir)            # refuses unless every registered unit is finished
    return write_report(out, report_text(runs), lambda path: regime_figure(runs, path), log)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grpo_ba_lab.analysis.regime_v4",
                                     description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="train one machine variant's units in the registered order")
    run.add_argument("--variant", required=True, choices=VARIANTS)
    run.add_argument("--output-dir", required=True)
    run.add_argument("--cache-dir", default="")
    run.add_argument("--pause-at", default="", help="no unit starts after this UTC time (YYYY-MM-DDTHH:MM): "
                     "a pause; run again to go on")
    prog = sub.add_parser("progress", help="finished units per variant and level (no accuracy)")
    prog.add_argument("runs_dir")
    arc = sub.add_parser("archive", help="a new part of the finished units not yet archived")
    arc.add_argument("runs_dir")
    arc.add_argument("--out", required=True)
    ext = sub.add_parser("extract", help="unpack every archived part into a runs folder")
    ext.add_argument("archive_dir")
    ext.add_argument("runs_dir")
    rep = sub.add_parser("report", help="regime.md and regime.png, once every registered seed is in")
    rep.add_argument("runs_dir")
    rep.add_argument("--out", required=True)
    options = parser.parse_args(argv)
    if options.command == "run":
        from grpo_ba_lab.analysis.sweep import until_time
        run_variant(options.variant, options.output_dir, options.cache_dir,
                    until_time(options.pause_at) if options.pause_at else None)
    elif options.command == "progress":
        print(progress_text(options.runs_dir))
    elif options.command == "archive":
        archive(options.runs_dir, options.out)
    elif options.command == "extract":
        print(f"{extract(options.archive_dir, options.runs_dir)} units unpacked into {options.runs_dir}")
    else:
        report(options.runs_dir, options.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
