"""analysis -- what you study about runs, after (or instead of) training them.

- sweep: the demo (python grpo_ba.py) and `python -m grpo_ba_lab.analysis.sweep`: seeds x three rules
- report: `python -m grpo_ba_lab.analysis.report RUNS_DIR`, every figure and table saved runs allow
- plots: the analytic figures of the three rules, training curves, the summary table
- paired_stats: paired differences between rules with 95% intervals, by seed
- regime_map: which rule wins where on the toy's (gap, spread) plane (runs a grid of runs)
- diagnose: the bias of your own rollouts file, as in the paper's figures
- toy_consequences: the toy designs where the rules' outcomes differ (docs/toy-designs.md):
  last and peak accuracy, the peak-to-last drop, paired by seed, and the mechanism figure

May import: grpo_ba and grpo_ba_args (the algorithm it measures, the flags of its runs),
plumbing (run_io reads runs) and modules of this package. grpo_ba.py imports it only in
main(), to run the demo.
"""
