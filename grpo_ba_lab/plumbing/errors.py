"""grpo_ba_lab/plumbing/errors.py -- the error every part of a run's setup raises on input the user can
fix. Below every other module of the package; imports nothing of the project."""


class SetupError(ValueError):
    """Bad input the user can fix (missing file, column, model path...): one line, exit code 2."""
