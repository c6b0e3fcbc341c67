"""The instructor's kit: `python -m exercises.student_copy DIR` writes the course with the five
exercise functions' bodies removed from grpo_ba.py; `python -m exercises.check --module grpo_ba`
fails on that copy and passes once the five are written again."""
import ast
import os
import subprocess
import sys

import pytest

from exercises import student_copy
from exercises.check import FUNCTIONS

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def functions_of(source):
    tree = ast.parse(source)
    return {node.name: ast.get_source_segment(source, node) for node in tree.body if isinstance(node, ast.FunctionDef)}


def check(copy):
    return subprocess.run([sys.executable, "-m", "exercises.check", "--module", "grpo_ba"], cwd=copy,
                          capture_output=True, text=True, timeout=600)


def test_the_copy_removes_the_five_bodies_and_nothing_else(tmp_path):
    copy = student_copy.write_copy(str(tmp_path / "copy"))
    with open(os.path.join(REPO, "grpo_ba.py")) as f:
        original = functions_of(f.read())
    with open(os.path.join(copy, "grpo_ba.py")) as f:
        stripped = functions_of(f.read())
    assert set(stripped) == set(original)
    for name in original:
        if name in FUNCTIONS:
            assert stripped[name].rstrip().endswith(student_copy.STUB.strip()) and stripped[name] != original[name]
        else:
            assert stripped[name] == original[name], name
    assert not os.path.exists(os.path.join(copy, "grpo_ba_lab"))                 # the course only
    assert not os.path.exists(os.path.join(copy, "docs", "lab-session-answers.md"))
    assert student_copy.main([copy]) == 2                                        # never over a copy


@pytest.mark.slow
def test_the_check_fails_on_the_copy_and_passes_once_the_five_are_written(tmp_path):
    copy = student_copy.write_copy(str(tmp_path / "copy"))
    failed = check(copy)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert all(f"{name:20s} FAILED" in failed.stdout or f"{name:20s} not implemented" in failed.stdout
               for name in FUNCTIONS), failed.stdout
    with open(os.path.join(REPO, "grpo_ba.py")) as f:
        solutions = functions_of(f.read())
    path = os.path.join(copy, "grpo_ba.py")
    with open(path) as f:
        text = f.read()
    for name in FUNCTIONS:                                      # the student writes them
        text = text.replace(functions_of(text)[name], solutions[name])
    with open(path, "w") as f:
        f.write(text)
    passed = check(copy)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert all(f"{name:20s} passed" in passed.stdout for name in FUNCTIONS), passed.stdout
