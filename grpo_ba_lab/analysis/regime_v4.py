"""grpo_ba_lab/analysis/regime_v4.py -- the confirmatory regime design (registrations/regime-v4.md),
run and reported by the machinery every registered design runs on (registered_design.py), from
its data file registrations/regime-v4.json: the paper's "which of token and sequence wins
depends on the gap", asked as one primary, the interaction, on regime-v3's weak (gap 6) and
strong (gap 30) worlds with fresh seeds. The commands its registration names still work:

    python -m grpo_ba_lab.analysis.regime_v4 run --variant avx2-1t --output-dir RUNS
    python -m grpo_ba_lab.analysis.regime_v4 progress RUNS          # counts only, no accuracy
    python -m grpo_ba_lab.analysis.regime_v4 archive RUNS --out assets/regime-v4/archive
    python -m grpo_ba_lab.analysis.regime_v4 extract assets/regime-v4/archive RUNS
    python -m grpo_ba_lab.analysis.regime_v4 report RUNS --out assets/regime-v4

    primary       (token - sequence) at strong minus (token - sequence) at weak, per seed,
                  last held-out accuracy; judged by paired_stats.claim_test
"""
from __future__ import annotations

import argparse

from grpo_ba_lab import designs
from grpo_ba_lab.analysis import paired_stats
from grpo_ba_lab.analysis import registered_design as rd

DESIGN = rd.load("registrations/regime-v4.json")
LEVELS = DESIGN.levels                     # {"weak": "regime-v4-weak", "strong": "regime-v4-strong"}
SEEDS = DESIGN.seeds
RULES = DESIGN.rules                       # ("token", "sequence")
VARIANTS = DESIGN.variants                 # ("avx2-1t", "default-1t"): pinned kernel paths
GAPS = {level: DESIGN.gap(level) for level in LEVELS}
REGISTRATION = DESIGN.registration
SHARE_CHECK = DESIGN.share_check
assert (LEVELS, SEEDS, RULES, VARIANTS) == (designs.REGIME_V4_LEVELS, designs.REGIME_V4_SEEDS,
                                            designs.REGIME_V4_RULES, designs.REGIME_V4_VARIANTS)


def unit_dir(runs_dir: str, level: str, seed: int, variant: str) -> str:
    return rd.unit_dir(DESIGN, runs_dir, level, seed, variant)


def unit_finished(runs_dir: str, level: str, seed: int, variant: str) -> bool:
    return rd.unit_finished(DESIGN, runs_dir, level, seed, variant)


def finished_units(runs_dir: str) -> list[tuple[int, str, str]]:
    return rd.finished_units(DESIGN, runs_dir)


def progress_text(runs_dir: str) -> str:
    return rd.progress_text(DESIGN, runs_dir)


archived_units, extract = rd.archived_units, rd.extract


def archive(runs_dir: str, archive_dir: str, log=print) -> str:
    return rd.archive(DESIGN, runs_dir, archive_dir, log)


def load_design(runs_dir: str) -> dict:
    return rd.load_runs(DESIGN, runs_dir)


def per_unit(by_rule: dict, fn=paired_stats.last_accuracy) -> dict:
    """{variant: {seed: fn(token) - fn(sequence)}} at one level."""
    return rd.per_unit(by_rule, ("token", "sequence"), fn)


def interaction(runs: dict, fn=paired_stats.last_accuracy) -> dict:
    """{variant: {seed: (token - sequence) at strong - (token - sequence) at weak}}."""
    high, low = per_unit(runs["strong"][0], fn), per_unit(runs["weak"][0], fn)
    return {v: {s: high[v][s] - low[v][s] for s in high[v]} for v in high}


def manipulation(runs: dict) -> dict:
    return rd.manipulation(DESIGN, runs)


def rows(runs: dict) -> list[dict]:
    return rd.rows(DESIGN, runs)


def report_text(runs: dict) -> str:
    return rd.report_text(DESIGN, runs)


def power_line(test: dict) -> str:
    return rd.power_line(DESIGN, {"test": test})


def figure_points(runs: dict) -> dict:
    return rd.figure_points(DESIGN, runs, ("token", "sequence"))


def regime_figure(runs: dict, path: str):
    return rd.figure(DESIGN, runs, path)


def report(runs_dir: str, out: str, log=print) -> str:
    return rd.report(DESIGN, runs_dir, out, log)


def main(argv=None) -> int:
    """The registration's command lines, mapped onto registered_design's."""
    parser = argparse.ArgumentParser(prog="python -m grpo_ba_lab.analysis.regime_v4", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, places in (("run", ()), ("progress", ("runs_dir",)), ("archive", ("runs_dir",)),
                         ("extract", ("archive_dir", "runs_dir")), ("report", ("runs_dir",))):
        p = sub.add_parser(name)
        for place in places:
            p.add_argument(place)
        if name == "run":
            p.add_argument("--variant", required=True, choices=VARIANTS)
            p.add_argument("--output-dir", required=True)
            p.add_argument("--cache-dir", default="")
            p.add_argument("--pause-at", default="")
        if name in ("archive", "report"):
            p.add_argument("--out", required=True)
    o = parser.parse_args(argv)
    args = [DESIGN.path, o.command]
    if o.command == "run":
        args += ["--variant", o.variant, "--output-dir", o.output_dir, "--cache-dir", o.cache_dir, "--pause-at", o.pause_at]
    elif o.command == "extract":
        args += [o.runs_dir, "--parts", o.archive_dir]
    else:
        args += [o.runs_dir] + (["--out", o.out] if o.command in ("archive", "report") else [])
    return rd.main(args)


if __name__ == "__main__":
    raise SystemExit(main())
