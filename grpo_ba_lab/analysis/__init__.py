"""analysis -- what you study about runs, after (or instead of) training them.

- sweep: `python -m grpo_ba_lab.analysis.sweep`: seeds x three rules, a design's registered seeds
- report: `python -m grpo_ba_lab.analysis.report RUNS_DIR`, every figure and table saved runs allow
- plots: the analytic figures of the three rules, training curves, the summary table
- paired_stats: paired differences between rules with 95% intervals by seed, the verdicts
- regime_map: which rule wins where on the toy's (gap, spread) plane (runs a grid of runs)
- diagnose: the bias of your own rollouts file, as in the paper's figures
- toy_consequences: a design's full report: every row, its label and verdict, the mechanism figure

May import the course (the algorithm it measures), plumbing (run_dirs reads runs) and
modules of this package. The course never imports it.
"""
