"""The instructor's kit: `python -m exercises.student_copy DIR` writes the course a student
needs for docs/lab-session.md, whole: grpo_ba.py as it is (the first hour runs on it), every
page and asset the README and the plan link to, no broken link, and exercises/math_core.py's
stubs with the checker's claims in their docstrings; not the lab, nor the answers page.
`python -m exercises.check` fails on the copy's stubs and passes once the five are written."""
import ast
import json
import os
import re
import subprocess
import sys

import pytest

from exercises import student_copy
from exercises.check import FUNCTIONS

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def copy(tmp_path_factory):
    return student_copy.write_copy(str(tmp_path_factory.mktemp("student") / "copy"))


def read(root, name):
    with open(os.path.join(root, name), encoding="utf-8") as f:
        return f.read()


def copied_pages(copy):
    return [os.path.relpath(os.path.join(d, f), copy) for d, _, files in os.walk(copy) for f in files
            if f.endswith((".md", ".html", ".ipynb"))]


def without_docstrings(source):
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.Module)) and ast.get_docstring(node) is not None:
            node.body = node.body[1:] or [ast.Pass()]
    return ast.dump(tree)


def test_the_copy_keeps_grpo_ba_whole_because_the_first_hour_runs_on_it(copy):
    for name in ("grpo_ba.py", "grpo_ba_plots.py", "verifier.py", "exercises/prelab_check.py",
                 "exercises/check.py", "tests/course/test_math_core.py"):
        assert read(copy, name) == read(REPO, name), name


def test_the_readme_and_the_plan_are_copied_with_every_file_they_link(copy):
    """Only the plan's link to the instructor's answers page is unlinked in the copy."""
    assert read(copy, "README.md") == read(REPO, "README.md")
    plan = read(REPO, "docs/lab-session.md")
    assert read(copy, "docs/lab-session.md") == plan.replace(
        "[the answers](lab-session-answers.md)", "the answers (docs/lab-session-answers.md in the course repository)"
    ).replace("[lab-session-answers.md](lab-session-answers.md)", "docs/lab-session-answers.md (in the course repository)")
    for page in ("README.md", "docs/lab-session.md"):
        targets = [t for t in student_copy.links(page) if t not in student_copy.LEFT_OUT]
        assert len(targets) >= 5, page
        for target in targets:
            assert os.path.exists(os.path.join(copy, target)), (page, target)
    assert os.path.exists(os.path.join(copy, "assets", "demo_seed22.png"))


def test_every_link_of_every_copied_page_resolves_inside_the_copy(copy):
    pages = copied_pages(copy)
    assert {"README.md", "docs/lab-session.md", "docs/code-tour.md", "docs/install.md", "docs/teaching.md",
            "docs/handout.md", "docs/explore.html", "exercises/README.md",
            "exercises/balanced_aggregation_lab.ipynb"} <= set(pages)
    for page in pages:
        for target in student_copy.links(page, root=copy):
            assert os.path.exists(os.path.join(copy, target)), (page, target)


def test_the_answers_page_the_lab_and_the_instructors_tool_stay_out(copy):
    for name in ("docs/lab-session-answers.md", "exercises/student_copy.py", "grpo_ba_lab", "scripts"):
        assert not os.path.exists(os.path.join(copy, name)), name
    teaching = read(copy, "docs/teaching.md")                   # its link to the answers: plain text now
    assert "lab-session-answers.md" in read(REPO, "docs/teaching.md")
    assert "(lab-session-answers.md)" not in teaching and "in the course repository" in teaching
    assert student_copy.main([copy]) == 2                       # never over a copy


def test_a_missing_link_becomes_text_and_a_present_one_stays(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "here.md").write_text("x")
    text = "[here](here.md), [gone](gone.md#a), ![a figure](../assets/gone.png), [web](https://example.org)"
    out = student_copy.unlink_missing(text, "docs/page.md", str(tmp_path))
    assert out == ("[here](here.md), gone (docs/gone.md in the course repository), "
                   "a figure (assets/gone.png in the course repository), [web](https://example.org)")


def test_each_stub_says_what_the_checker_checks_and_nothing_else_changes(copy):
    claims = student_copy.claims_by_function()
    assert set(claims) == set(FUNCTIONS) and all(claims.values())
    original, stubs = read(REPO, "exercises/math_core.py"), read(copy, "exercises/math_core.py")
    assert without_docstrings(original) == without_docstrings(stubs)      # the code is the same
    docs = {n.name: ast.get_docstring(n) for n in ast.parse(stubs).body if isinstance(n, ast.FunctionDef)}
    for name in FUNCTIONS:
        listed = docs[name].split(f"python -m exercises.check {name}`", 1)[1]
        assert [line[2:] for line in listed.splitlines() if line.startswith("- ")] == claims[name], name
    assert "batch that does not split into groups (it must raise ValueError)" in docs["group_advantages"]
    tagged = len(re.findall(r"^@checks\(", read(REPO, "tests/course/test_math_core.py"), flags=re.M))
    assert sum(len(set(c)) for c in claims.values()) >= tagged       # every tagged claim is listed


def test_the_copied_notebook_is_the_committed_one(copy):
    assert json.loads(read(copy, "exercises/balanced_aggregation_lab.ipynb")) == \
        json.loads(read(REPO, "exercises/balanced_aggregation_lab.ipynb"))


def check(copy, *functions):
    return subprocess.run([sys.executable, "-m", "exercises.check", *functions], cwd=copy,
                          capture_output=True, text=True, timeout=600)


SOLUTIONS = "\n\nfrom grpo_ba import (group_advantages, aggregate_sequence, aggregate_token,  # noqa\n" \
            "                     aggregate_balanced, sign_weights)\n"


def write_solutions(copy):
    """The student writes the five: here, grpo_ba's own, imported over the stubs."""
    with open(os.path.join(copy, "exercises", "math_core.py"), "a", encoding="utf-8") as f:
        f.write(SOLUTIONS)


@pytest.mark.slow
def test_the_check_fails_on_the_copys_stubs_and_passes_once_the_five_are_written(tmp_path):
    copy = student_copy.write_copy(str(tmp_path / "copy"))
    failed = check(copy)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert all(f"{name:20s} not implemented yet" in failed.stdout for name in FUNCTIONS), failed.stdout
    write_solutions(copy)
    passed = check(copy)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert all(f"{name:20s} passed" in passed.stdout for name in FUNCTIONS), passed.stdout
