"""grpo_ba_lab/analysis/report.py -- figures and tables from the runs saved under a directory.

    python -m grpo_ba_lab.analysis.report runs/sweep       # training figures, table.md,
                                                           # paired_differences.md
    python -m grpo_ba_lab.analysis.report runs/loop-gap    # ... and consequences.md, mechanism.png
    python -m grpo_ba_lab.analysis.report runs/regime_map  # regime_map.png and regime_map.md
    python -m grpo_ba_lab.analysis.report runs/sweep --figures-dir assets
    python -m grpo_ba_lab.analysis.report runs/demo-s22    # one seed: a course run or the demo

It trains nothing: it reads the args.json and metrics.jsonl files that grpo_ba.py, the
demo, `python -m grpo_ba_lab.analysis.sweep` and `python -m grpo_ba_lab.analysis.regime_map`
write, and draws what those commands draw when they finish. Runs of one seed (one course run,
`python grpo_ba.py --aggregator token`, or the demo's three) get the course's figures
(`python -m grpo_ba_plots`) and the table, with no design's paired report: that needs the
design's registered seeds. (The analytic figures, which need no runs:
`python -m grpo_ba_lab.analysis.plots --analytic DIR`.)
"""
from __future__ import annotations

import argparse
import os
import sys

import grpo_ba_plots
from grpo_ba_support.args import run_command
from grpo_ba_lab.analysis import plots, regime_map, toy_consequences
from grpo_ba_lab.plumbing import run_dirs


def report(runs_dir: str, figures_dir: str = "", log=print, seeds=None) -> str:
    """Draw everything the runs under `runs_dir` allow (a design's report: only `seeds`, if
    given, as the demo's one seed); returns their toy design's name ('' if none)."""
    if os.path.exists(os.path.join(runs_dir, regime_map.INDEX_FILE)):
        regime_map.report(runs_dir, figures_dir or None, log)
        return ""
    design = toy_consequences.saved_design(runs_dir)     # a design's runs: its paired report too
    if seeds is None and one_seed(runs_dir):             # a course run, or the demo's three
        plots.report(runs_dir, figures_dir or None, log)
        log("wrote " + ", ".join(grpo_ba_plots.redraw(runs_dir)) + (
            f"; one seed: no paired report of design {design} (it needs the design's registered "
            f"seeds: python -m grpo_ba_lab.analysis.sweep --design {design})" if design else ""))
        return ""
    # exactly the design's registered runs, checked before anything is drawn from them
    checked = toy_consequences.design_runs(runs_dir, design, seeds) if design else None
    plots.report(runs_dir, figures_dir or None, log)
    if design:
        toy_consequences.report(runs_dir, figures_dir or runs_dir, title=f"Design {design}:",
                                log=log, seeds=seeds, checked=checked)
    return design


def one_seed(runs_dir: str) -> bool:
    """Is runs_dir what grpo_ba.py writes: one run, or the demo's (one run per rule of a single
    seed, in its subdirectories)? Then `python -m grpo_ba_plots` can draw it."""
    found, top = list(run_dirs.saved_args(runs_dir)), os.path.abspath(runs_dir)
    near = all(top in (os.path.abspath(d), os.path.dirname(os.path.abspath(d))) for d, _ in found)
    runs = {(args.get("aggregator"), args.get("seed")) for _, args in found}
    return bool(found) and near and len(runs) == len(found) and len({s for _, s in runs}) == 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grpo_ba_lab.analysis.report",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("runs_dir", metavar="RUNS_DIR", help="runs under it, searched recursively")
    parser.add_argument("--figures-dir", default="", help="where figures go (default: RUNS_DIR)")
    options = parser.parse_args(argv)
    def command():
        report(options.runs_dir, options.figures_dir)
    return run_command("grpo_ba_lab.analysis.report", command)


if __name__ == "__main__":
    sys.exit(main())
