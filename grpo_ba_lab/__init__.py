"""grpo_ba_lab -- the lab around the course (grpo_ba.py, verifier.py, toy_tasks/).

- plumbing: what a run is built from and writes to (models, data, run directories)
- analysis: what you study about runs, each a `python -m grpo_ba_lab.analysis.NAME` command
- integrations: Balanced Aggregation and the bias metrics inside TRL and verl

The lab imports the course; the course never imports the lab. Importing the lab adds its
registered designs (designs.py) to the course's toy_tasks.designs.DESIGNS.
"""
from grpo_ba_lab import designs  # noqa: F401  (registers the lab's designs)
