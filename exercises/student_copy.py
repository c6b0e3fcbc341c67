"""Write a student's copy of the course: the five exercise functions of grpo_ba.py with their
bodies removed (signature and docstring kept, the body a NotImplementedError), everything
else as it is.

    python -m exercises.student_copy DIR             # then, in DIR:
    python -m exercises.check --module grpo_ba       # fails until the five are written again

The copy holds the course (grpo_ba.py and what it imports, exercises/, the claims of
tests/course/test_math_core.py, the pages a student reads), not the lab, the research pages or
the instructor's answers. Writing the five functions back makes the check pass, and the demo
(`python grpo_ba.py`) runs again on the student's own code.
"""
from __future__ import annotations

import argparse
import ast
import os
import shutil
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from exercises.check import FUNCTIONS  # noqa: E402  (the five, in the order of exercises/README.md)

COURSE = ("grpo_ba.py", "grpo_ba_plots.py", "verifier.py", "grpo_ba_support", "toy_tasks", "exercises",
          "tests/conftest.py", "tests/course/test_math_core.py", "docs/method.md", "docs/handout.md",
          "docs/explore.html", "docs/lab-session.md", "README.md", "LICENSE", "requirements.txt",
          "pyproject.toml")
STUB = '    raise NotImplementedError("exercise: write this function (exercises/README.md)")'


def strip_bodies(source: str, names=FUNCTIONS) -> str:
    """`source` with the bodies of the top-level functions `names` replaced by STUB (their
    signature, docstring and the comments above them kept)."""
    lines = source.splitlines()
    found = {node.name: node for node in ast.parse(source).body
             if isinstance(node, ast.FunctionDef) and node.name in names}
    missing = [name for name in names if name not in found]
    if missing:
        raise ValueError(f"grpo_ba.py has no function {missing[0]!r}")
    for node in sorted(found.values(), key=lambda n: n.lineno, reverse=True):   # bottom up
        body = node.body[1:] if isinstance(node.body[0], ast.Expr) and isinstance(
            getattr(node.body[0], "value", None), ast.Constant) else node.body
        start = body[0].lineno - 1 if body else node.end_lineno
        lines[start:node.end_lineno] = [STUB]
    return "\n".join(lines) + "\n"


def write_copy(out: str) -> str:
    """Copy the course to `out` (which must not exist) with the exercise bodies removed."""
    if os.path.exists(out):
        raise FileExistsError(f"{out} exists; give a new directory")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "runs", ".ipynb_checkpoints")
    for name in COURSE:
        src, dst = os.path.join(ROOT, name), os.path.join(out, name)
        os.makedirs(os.path.dirname(dst) or out, exist_ok=True)
        if os.path.isdir(src):
            shutil.copytree(src, dst, ignore=ignore)
        elif os.path.exists(src):
            shutil.copy2(src, dst)
    os.remove(os.path.join(out, "exercises", "student_copy.py"))      # the instructor's tool
    with open(os.path.join(ROOT, "grpo_ba.py")) as f:
        stripped = strip_bodies(f.read())
    with open(os.path.join(out, "grpo_ba.py"), "w") as f:
        f.write(stripped)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m exercises.student_copy",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("out", metavar="DIR", help="a new directory for the student's copy")
    out = parser.parse_args(argv).out
    try:
        write_copy(out)
    except (OSError, ValueError) as err:
        print(f"exercises.student_copy: error: {err}", file=sys.stderr)
        return 2
    print(f"{out}: the course with {', '.join(FUNCTIONS)} to write in grpo_ba.py; "
          f"check with `python -m exercises.check --module grpo_ba` there")
    return 0


if __name__ == "__main__":
    sys.exit(main())
