"""Exercises: write the math core of GRPO's three aggregation rules yourself.

Edit exercises/math_core.py, then check it with `python -m exercises.check`
(see exercises/README.md).
"""
