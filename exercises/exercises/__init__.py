"""The exercises package, as seen from inside exercises/: there `python -m exercises.check` (or
`exercises.prelab_check`) would find no package of that name and stop with Python's raw
ModuleNotFoundError. This one stands for its parent folder and puts the course's root on the
path, so each command runs from here as it does from the root."""
import os
import sys

_EXERCISES = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
__path__ = [_EXERCISES]                        # exercises.check is ../check.py
sys.path.insert(0, os.path.dirname(_EXERCISES))   # grpo_ba, toy_tasks, verifier: the course's root
