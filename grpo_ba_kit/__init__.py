"""grpo_ba_kit -- everything around the algorithm of grpo_ba.py, in one package.

- toy_tasks: the toy arithmetic world and its named designs (docs/toy-designs.md)
- verifier, verifier_parser: the reward on real data (docs/verifier.md)
- plumbing: what a run is built from and writes to (models, data, run directories)
- analysis: what you study about runs, each a `python -m grpo_ba_kit.analysis.NAME` command
- integrations: Balanced Aggregation and the bias metrics inside TRL and verl

Why one package: installed, the project adds only `grpo_ba`, `grpo_ba_args` and this name
to site-packages, so it never shadows another package's `analysis` or `verifier`.
From a clone, the top-level verifier.py and toy_tasks/ are short doors into it.
"""
