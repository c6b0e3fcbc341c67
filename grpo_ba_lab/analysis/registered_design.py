"""grpo_ba_lab/analysis/registered_design.py -- a registered design run as streams, from the data
file that describes it (registrations/NAME.json): its levels, seeds, rules, machine variants,
manipulation checks and rows. One machinery for every such design: regime-v4's and headline-v5's.

    python -m grpo_ba_lab.analysis.registered_design DESIGN.json run --variant avx2-1t --output-dir RUNS
    python -m grpo_ba_lab.analysis.registered_design DESIGN.json progress RUNS     # counts only, no accuracy
    python -m grpo_ba_lab.analysis.registered_design DESIGN.json archive RUNS      # a new part, committed at once
    python -m grpo_ba_lab.analysis.registered_design DESIGN.json extract RUNS      # the parts, unpacked
    python -m grpo_ba_lab.analysis.registered_design DESIGN.json report RUNS       # once every seed is in

The stopping rule is the registered n, not a clock: `run` may be paused (`--pause-at`: no unit
starts after it) and started again, and it skips every finished unit; a unit that did not finish
is deleted and trained again from scratch with the same seed. `progress` reads no accuracy, so
the rows stay unseen until the last registered seed is in; `report` refuses until then. A unit
is (seed, level, variant): its warm-up, then each registered rule from it, one process each
(they share the warm-up through the cache, and the seed's prompts).

A row is a paired difference, seed by seed, of last held-out accuracy ("last") or the area
under the accuracy curve ("area"): `pair` A - B at one level, or an `interaction`, (A - B) at
`high` minus at `low`. It is judged by paired_stats.claim_test (the pooled interval over seeds
and each variant's own exclude 0 on the same side), the primaries with Holm among themselves.
A level whose manipulation check fails gives no verdict to any row that reads it.
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time

from grpo_ba_lab import designs
from grpo_ba_lab.analysis import paired_stats, toy_consequences
from grpo_ba_lab.analysis.regime_design import finish_figure, rule_means_table, token_share, variant_env
from grpo_ba_lab.plumbing import run_dirs
from grpo_ba_support import run as grpo_ba_run

ARCHIVED_FILES = ("args.json", "metrics.jsonl", "run.json")
METRICS = {"last": ("last held-out acc", paired_stats.last_accuracy),
           "area": ("area under the acc curve", paired_stats.accuracy_area)}


class Design:
    """A registered design, as its data file says it."""

    def __init__(self, path: str):
        self.path = path if os.path.isabs(path) else os.path.join(designs.REPO, path)
        with open(self.path) as f:
            self.data = json.load(f)
        d = self.data
        self.name, self.registration = d["name"], d["registration"]
        self.levels = dict(d["levels"])                        # level -> the lab design of its runs
        self.seeds = tuple(range(d["seeds"]["first"], d["seeds"]["first"] + d["seeds"]["count"]))
        self.rules, self.variants = tuple(d["rules"]), tuple(d["variants"])
        self.share_check = {level: tuple(r) for level, r in d["share_check"].items()}
        self.archive_dir = os.path.join(designs.REPO, d["archive"])
        self.report_dir = os.path.join(designs.REPO, d["report_dir"])
        # how the report words its rows: in the data file, or (a data file registered before its
        # report's words were written, and append-only) in the report folder's report-texts.json
        texts_file = os.path.join(self.report_dir, "report-texts.json")
        if "report" not in d and os.path.exists(texts_file):
            with open(texts_file) as f:
                d = {**d, "report": json.load(f)}
        self.texts = d.get("report", {})
        self.direction = d.get("direction", self.texts.get("direction", 0))   # +1: the registered side

    def gap(self, level: str) -> int:
        return designs.DESIGNS[self.levels[level]]["flags"]["gap_size"]

    def steps(self, level: str) -> int:
        return designs.DESIGNS[self.levels[level]]["flags"]["steps"]


def load(path: str) -> Design:
    return Design(path)


# ------------------------------------------------------------------ the runs

def unit_dir(design: Design, runs_dir: str, level: str, seed: int, variant: str) -> str:
    """One unit's folder; its rules' runs are its subfolders, one per rule."""
    return os.path.join(runs_dir, design.levels[level], f"s{seed}-{variant}")


def rule_command(design: Design, level: str, seed: int, variant: str, rule: str, runs_dir: str,
                 cache_dir: str) -> list[str]:
    return [sys.executable, "-m", "grpo_ba_lab.train", "--design", design.levels[level], "--aggregator", rule,
            "--seed", str(seed), "--threads", str(designs.VARIANTS[variant]["threads"]),
            "--cache-dir", cache_dir, "--output-dir",
            os.path.join(unit_dir(design, runs_dir, level, seed, variant), rule)]


def unit_finished(design: Design, runs_dir: str, level: str, seed: int, variant: str) -> bool:
    """Whether every rule of a unit finished. Reads only: a stream may be writing a run now,
    so nothing is repaired (the stream itself retrains an unfinished unit from scratch)."""
    for rule in design.rules:
        out = os.path.join(unit_dir(design, runs_dir, level, seed, variant), rule)
        try:
            metrics = grpo_ba_run.read_metrics(os.path.join(out, "metrics.jsonl"), lambda *a: None)
        except (OSError, ValueError, grpo_ba_run.RunError):   # none yet, or torn in the middle
            return False
        if not run_dirs.is_finished(out, metrics, design.steps(level)):
            return False
    return True


def plan(design: Design) -> list[tuple[int, str]]:
    """The run order of one stream: seed by seed, each seed's levels in the file's order."""
    return [(seed, level) for seed in design.seeds for level in design.levels]


def run_variant(design: Design, variant: str, runs_dir: str, cache_dir: str = "", pause_at: float | None = None,
                log=print):
    """Trains one variant's units in plan() order, skipping finished ones; an unfinished unit is
    deleted and trained from scratch. No unit starts after `pause_at` (seconds since the epoch):
    a pause of the work, never a stopping rule."""
    cache_dir = cache_dir or os.path.join(runs_dir, f"cache-{variant}")
    env = variant_env(variant)
    units = plan(design)
    for k, (seed, level) in enumerate(units, 1):
        if unit_finished(design, runs_dir, level, seed, variant):
            continue
        if pause_at is not None and time.time() >= pause_at:
            log(f"paused: no unit starts after the pause time ({k - 1} of {len(units)} units passed)")
            return
        base = unit_dir(design, runs_dir, level, seed, variant)
        if os.path.exists(base):
            log(f"{base}: unfinished, deleted and trained again from scratch")
            shutil.rmtree(base)
        log(f"[{k}/{len(units)}] {design.levels[level]}, seed {seed} ({variant}) at {time.strftime('%Y-%m-%dT%H:%M:%S')}")
        for rule in design.rules:
            command = rule_command(design, level, seed, variant, rule, runs_dir, cache_dir)
            if subprocess.run(command, env=env, stdout=subprocess.DEVNULL).returncode != 0:
                raise ValueError(f"the run failed (registered: rerun the seed from scratch): {' '.join(command)}")
    log(f"variant {variant}: every registered unit is finished")


def finished_units(design: Design, runs_dir: str) -> list[tuple[int, str, str]]:
    """[(seed, level, variant)] of the finished units under runs_dir, in plan order."""
    return [(seed, level, variant) for seed, level in plan(design) for variant in design.variants
            if unit_finished(design, runs_dir, level, seed, variant)]


def progress_text(design: Design, runs_dir: str) -> str:
    """How far the design is: finished units per variant and level, and whole seeds. Reads
    whether runs finished, never their accuracies."""
    done = set(finished_units(design, runs_dir))
    whole = [s for s in design.seeds if all((s, lv, v) in done for lv in design.levels for v in design.variants)]
    lines = [f"{design.name}: {len(whole)} of {len(design.seeds)} registered seeds finished at every level on "
             f"every variant"]
    for variant in design.variants:
        counts = ", ".join(f"{level} {sum((s, level, variant) in done for s in design.seeds)}"
                           for level in design.levels)
        lines.append(f"  {variant}: units finished: {counts} (of {len(design.seeds)} each)")
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


def archive(design: Design, runs_dir: str, archive_dir: str = "", log=print) -> str:
    """A new part (part-NN.tar.gz) of the finished units not yet archived: each rule's
    args.json, metrics.jsonl and run.json, with fixed metadata. '' when there is nothing new."""
    archive_dir = archive_dir or design.archive_dir
    os.makedirs(archive_dir, exist_ok=True)
    before = archived_units(archive_dir)
    new = [os.path.relpath(unit_dir(design, runs_dir, level, seed, variant), runs_dir)
           for seed, level, variant in finished_units(design, runs_dir)]
    new = [u for u in new if u not in before]
    if not new:
        log(f"no finished unit under {runs_dir} is missing from {archive_dir}")
        return ""
    parts = [p for p in os.listdir(archive_dir) if p.startswith("part-") and p.endswith(".tar.gz")]
    path = os.path.join(archive_dir, f"part-{len(parts) + 1:02d}.tar.gz")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for unit in new:
            for rule in design.rules:
                for name in ARCHIVED_FILES:
                    with open(os.path.join(runs_dir, unit, rule, name), "rb") as f:
                        data = f.read()
                    info = tarfile.TarInfo(os.path.join(unit, rule, name))
                    info.size, info.mtime, info.mode = len(data), 0, 0o644
                    tar.addfile(info, io.BytesIO(data))
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

def load_runs(design: Design, runs_dir: str) -> dict:
    """{level: (by_rule, records)}: every registered unit of every level, each passing
    toy_consequences.design_runs (settings, variant, all registered seeds and rules)."""
    return {level: toy_consequences.design_runs(os.path.join(runs_dir, name), name)
            for level, name in design.levels.items()}


def per_unit(by_rule: dict, pair, fn=paired_stats.last_accuracy) -> dict:
    """{variant: {seed: fn(A) - fn(B)}} at one level, pair = (A, B)."""
    a, b = pair
    out = {}
    for (seed, variant), metrics in by_rule[a].items():
        out.setdefault(variant, {})[seed] = fn(metrics) - fn(by_rule[b][(seed, variant)])
    return out


def row_differences(runs: dict, row: dict) -> dict:
    """{variant: {seed: d}} of one row of the data file."""
    fn = METRICS[row["metric"]][1]
    if row["kind"] == "pair":
        return per_unit(runs[row["level"]][0], row["pair"], fn)
    high, low = per_unit(runs[row["high"]][0], row["pair"], fn), per_unit(runs[row["low"]][0], row["pair"], fn)
    return {v: {s: high[v][s] - low[v][s] for s in high[v]} for v in high}


def row_levels(row: dict) -> tuple:
    return (row["level"],) if row["kind"] == "pair" else (row["high"], row["low"])


def row_what(row: dict) -> str:
    a, b = row["pair"]
    label = METRICS[row["metric"]][0]
    if row["kind"] == "pair":
        return f"{a} - {b} at {row['level']}, {label}"
    return f"({a} - {b}) at {row['high']} minus at {row['low']}, {label}"


def manipulation(design: Design, runs: dict) -> dict:
    """{level: (share, passed)}: the registered check of each level."""
    out = {}
    for level, (by_rule, _) in runs.items():
        share = token_share(by_rule)
        low, high = design.share_check[level]
        out[level] = (share, low <= share <= high)
    return out


def rows(design: Design, runs: dict) -> list[dict]:
    """Every row of the data file, in its order, judged: the primaries with Holm among
    themselves (none with one), with the registered direction where there is one (a primary
    that rejects on the other side is contradicted); every other row on its own."""
    checks = manipulation(design, runs)
    out = [dict(label=r["label"], levels=row_levels(r), what=row_what(r),
                test=paired_stats.claim_test(row_differences(runs, r))) for r in design.data["rows"]]
    primaries = [r for r in out if r["label"] == "primary"]
    adjusted = paired_stats.holm({k: r["test"]["p_claim"] for k, r in enumerate(primaries)})
    for k, r in enumerate(primaries):
        r["p"] = adjusted[k]
        if len(primaries) > 1:                # what the whole rule sees at Holm's first step
            r["test"]["claim_detectable"] = paired_stats.claim_detectable(r["test"],
                                                                          paired_stats.ALPHA / len(primaries))
    direction = design.direction
    for r in out:
        failed = [lv for lv in r["levels"] if not checks[lv][1]]
        if failed:
            r["verdict"], r["why"] = "no verdict", f"the manipulation check failed at {', '.join(failed)}"
            continue
        r["why"] = ""
        r["verdict"] = paired_stats.verdict(r["test"], r.get("p"))
        if (direction and r["verdict"] == paired_stats.HOLDS
                and paired_stats._sign(r["test"]["mean"]) != direction):
            r["verdict"] = paired_stats.CONTRADICTED
    return out


def verdict_words(design: Design, r: dict) -> str:
    if r["verdict"] == "no verdict":
        return f"no verdict ({r['why']})"
    if r["verdict"] == paired_stats.CONTRADICTED:      # against the registered direction, not an earlier value
        return f"{r['verdict']} (the other side than the registered direction)"
    return paired_stats.verdict_text(r["test"], r["verdict"], excluded=False)


def _format(template: str, design: Design, runs: dict | None = None) -> str:
    return template.format(registration=design.registration, n=len(design.seeds), first=design.seeds[0],
                           last=design.seeds[-1], variants=", ".join(design.variants),
                           rules=" and ".join(design.rules) if len(design.rules) == 2 else
                           ", ".join(design.rules[:-1]) + " and " + design.rules[-1])


def report_text(design: Design, runs: dict) -> str:
    checks = manipulation(design, runs)
    texts = design.texts
    lines = [_format(texts["intro"], design), "",
             "| level | design | gap (a slip rambles) | step-0 acc | step-0 wrong / right (right, wrong tokens) | "
             "token's run-mean share | manipulation check (registered range) |", "|---|---|---|---|---|---|---|"]
    for level, (by_rule, _) in runs.items():
        s = toy_consequences.step0_stats(by_rule)
        share, passed = checks[level]
        low, high = design.share_check[level]
        lines.append(f"| {level} | {design.levels[level]} | {design.gap(level)} | {s['acc']:.3f} | "
                     f"{s['wrong_over_right']:.2f} ({s['len_right']:.1f}, {s['len_wrong']:.1f}) | {share:.3f} | "
                     f"{'passed' if passed else 'failed'} ([{low:.2f}, {high:.2f}]) |")
    lines += ["", "Machines (the design runs over several sessions; each run records its CPU):", "",
              "| variant | CPU model, kernels torch reports | runs |", "|---|---|---|"]
    for variant, machine, count in machines(design, runs):
        lines.append(f"| {variant} | {machine} | {count} |")
    lines += ["", f"Every row ({toy_consequences.CLAIM_RULE}; {texts['rows_rule']}):", "",
              "| row | label | seeds | pooled mean [95% interval] | "
              + " | ".join(f"{v}: own [95% interval]" for v in design.variants) + " | verdict |",
              "|---|---|---|---|" + "---|" * len(design.variants) + "---|"]
    table = rows(design, runs)
    for r in table:
        t = r["test"]
        lines.append(f"| {r['what']} | {r['label']} | {t['n']} | {paired_stats._fmt_interval(t)} | "
                     + " | ".join(paired_stats._fmt_interval(t["variants"][v]) for v in design.variants)
                     + f" | {verdict_words(design, r)} |")
    primaries = [r for r in table if r["label"] == "primary"]
    lines += [""] + [power_line(design, r, len(primaries)) for r in primaries]
    return "\n".join(lines + rule_means_table(runs, design.rules)) + "\n"


def power_line(design: Design, r: dict, primaries: int = 1) -> str:
    """What the registered seeds could detect on a primary, from the sds they measured (each
    registration's "Seeds by power" planned with earlier sds and promised this line)."""
    test = r["test"]
    sds = ", ".join(f"{v} {test['variants'][v]['sd']:.4f}" for v in design.variants)
    subject = "The primary's" if primaries == 1 else f"{r['what']}: the"
    return (f"{subject} per-seed sd as these {test['n']} seeds measured it: {sds}, pooled {test['sd']:.4f}. "
            f"With them the whole rule (the pooled interval and each variant's own) detects "
            f"{test['claim_detectable']:.3f} or more at {paired_stats.POWER:.0%} power; {design.texts['planned']}")


def machines(design: Design, runs: dict) -> list[tuple[str, str, int]]:
    """[(variant, "CPU model, kernels", runs)] over every run of every level and rule."""
    counts = {}
    for level, (by_rule, records) in runs.items():
        for (seed, variant), record in records.items():
            for start in record.get("starts", []):
                m = start.get("machine") or {}
                key = (variant, f"{m.get('cpu_model')}, {m.get('cpu_capability')}")
                counts[key] = counts.get(key, 0) + len(design.rules)
    return [(v, m, n) for (v, m), n in sorted(counts.items())]


# ------------------------------------------------------------------ the figure

def figure_points(design: Design, runs: dict, pair) -> dict:
    """{series: [(level, mean, low, high)]}: pair A - B at each level on last held-out accuracy,
    each variant's own interval and the pooled one; what one panel of the figure draws."""
    out = {}
    for level in design.levels:
        t = paired_stats.claim_test(per_unit(runs[level][0], pair))
        for series, part in [*((v, t["variants"][v]) for v in design.variants), ("pooled", t)]:
            out.setdefault(series, []).append((level, part["mean"], part["low"], part["high"]))
    return out


def figure(design: Design, runs: dict, path: str):
    """One panel per registered figure pair: A - B at each level (categorical: no line joins
    the levels), each path's own 95% interval and the pooled one."""
    from grpo_ba_lab.analysis import plots                     # matplotlib, Agg
    spec = design.texts["figure"]
    pairs = [tuple(p) for p in spec["pairs"]]
    fig, axes = plots.plt.subplots(1, len(pairs), figsize=(7.0 * len(pairs) ** 0.8, 4.4), squeeze=False)
    for ax, pair in zip(axes[0], pairs):
        ax.axhline(0, color="0.4", lw=0.8)
        series = figure_points(design, runs, pair)
        for k, (name, pts) in enumerate(series.items()):
            x = [i + (k - 1) * 0.12 for i in range(len(pts))]
            means = [p[1] for p in pts]
            err = [[m - p[2] for m, p in zip(means, pts)], [p[3] - m for m, p in zip(means, pts)]]
            ax.errorbar(x, means, yerr=err, fmt="o" if name != "pooled" else "s", capsize=4, label=name,
                        gid=f"series:{name}" if len(pairs) == 1 else f"series:{' - '.join(pair)}:{name}")
        ax.set_xticks(range(len(design.levels)))
        ax.set_xticklabels([f"gap {design.gap(level)} ({level})" for level in design.levels])
        ax.set_xlim(-0.5, len(design.levels) - 0.5)
        ax.set_ylabel(f"{' - '.join(pair)}, last held-out accuracy\n(below 0: {pair[1]} ahead)")
        if len(pairs) > 1:
            ax.set_title(f"{' - '.join(pair)}", fontsize=10)
            ax.legend(fontsize=9)
            ax.grid(alpha=0.3)
    title = spec["title"].format(n=len(design.seeds), primary=primary_words(design, runs))
    if len(pairs) == 1:
        axes[0][0].set_title(title, fontsize=10)
        return finish_figure(fig, axes[0][0], path)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plots.plt.close(fig)
    return fig


def primary_words(design: Design, runs: dict) -> str:
    """The primaries' pooled intervals and verdict words, for the figure's title."""
    table = [r for r in rows(design, runs) if r["label"] == "primary"]
    names = design.texts.get("primary_names") or [r["what"] for r in table]
    return "; ".join(f"{name}: {paired_stats._fmt_interval(r['test'])} pooled, {r['verdict']}"
                     for name, r in zip(names, table))


def write_report(design: Design, out: str, text: str, draw, log=print) -> str:
    """The report (text) and its figure (draw(path)) under out, named as the data file says."""
    os.makedirs(out, exist_ok=True)
    md, png = (os.path.join(out, design.texts[key]) for key in ("file", "figure_file"))
    with open(md, "w") as f:
        f.write(text)
    draw(png)
    log(text + f"wrote {md} and {png}")
    return text


def report(design: Design, runs_dir: str, out: str = "", log=print) -> str:
    runs = load_runs(design, runs_dir)            # refuses unless every registered unit is finished
    return write_report(design, out or design.report_dir, report_text(design, runs),
                        lambda path: figure(design, runs, path), log)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grpo_ba_lab.analysis.registered_design",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("design_file", help="the design's data file, e.g. registrations/headline-v5.json")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="train one machine variant's units in the registered order")
    run.add_argument("--variant", required=True)
    run.add_argument("--output-dir", required=True)
    run.add_argument("--cache-dir", default="")
    run.add_argument("--pause-at", default="", help="no unit starts after this UTC time (YYYY-MM-DDTHH:MM): "
                     "a pause; run again to go on")
    prog = sub.add_parser("progress", help="finished units per variant and level (no accuracy)")
    prog.add_argument("runs_dir")
    arc = sub.add_parser("archive", help="a new part of the finished units not yet archived")
    arc.add_argument("runs_dir")
    arc.add_argument("--out", default="", help="the parts folder (default: the data file's archive)")
    ext = sub.add_parser("extract", help="unpack every archived part into a runs folder")
    ext.add_argument("runs_dir")
    ext.add_argument("--parts", default="", help="the parts folder (default: the data file's archive)")
    rep = sub.add_parser("report", help="the report and its figure, once every registered seed is in")
    rep.add_argument("runs_dir")
    rep.add_argument("--out", default="", help="where they go (default: the data file's report folder)")
    options = parser.parse_args(argv)
    try:
        design = load(options.design_file)
    except (OSError, ValueError, KeyError) as error:
        parser.error(f"cannot read the design file {options.design_file}: {error}")
    if options.command == "run":
        if options.variant not in design.variants:
            parser.error(f"--variant {options.variant}: {design.name} registered {', '.join(design.variants)}")
        from grpo_ba_lab.analysis.sweep import until_time
        run_variant(design, options.variant, options.output_dir, options.cache_dir,
                    until_time(options.pause_at) if options.pause_at else None)
    elif options.command == "progress":
        print(progress_text(design, options.runs_dir))
    elif options.command == "archive":
        archive(design, options.runs_dir, options.out)
    elif options.command == "extract":
        parts = options.parts or design.archive_dir
        print(f"{extract(parts, options.runs_dir)} units unpacked into {options.runs_dir}")
    else:
        report(design, options.runs_dir, options.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
