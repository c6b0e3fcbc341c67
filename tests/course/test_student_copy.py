"""The instructor's kit: `python -m exercises.student_copy DIR` writes the course a student
needs for docs/lab-session.md, whole: grpo_ba.py as it is (the first hour runs on it), every
page and asset the README and the plan link to, no broken link, and exercises/math_core.py's
stubs with the checker's claims in their docstrings; not the lab, its pages, nor the answers
page. No page of the copy names a file or module the copy lacks without saying that it is in
the course repository, none says so twice, nor of what a student or a run writes (my_rules.py,
runs/), and the README's test commands are the copy's own.
`python -m exercises.check` fails on the copy's stubs and passes once the five are written."""
import ast
import filecmp
import functools
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


def differs_only_where_it_says_so(original, copied):
    """The copy's page has the original's lines, but for those that now say where the file
    or command they name is: in the course repository."""
    old, new = original.splitlines(), copied.splitlines()
    assert len(old) == len(new)
    changed = [(a, b) for a, b in zip(old, new) if a != b]
    assert all("in the course repository" in b for _, b in changed), [b for _, b in changed
                                                                      if "in the course repository" not in b]
    return changed


def test_the_readme_and_the_plan_are_copied_with_every_file_they_link(copy):
    """The plan's link to the instructor's answers page is unlinked in the copy, and what the
    README and the plan name that the copy lacks says where it is; nothing else changes but
    the README's way to run the tests."""
    readme = read(REPO, "README.md")
    assert "requirements/dev.txt" in student_copy.README_TESTS.search(readme).group(1)
    differs_only_where_it_says_so(student_copy.copy_readme_tests(readme), read(copy, "README.md"))
    plan = read(REPO, "docs/lab-session.md")
    changed = differs_only_where_it_says_so(plan, read(copy, "docs/lab-session.md"))
    assert ("    python -m exercises.student_copy DIR", "    python -m exercises.student_copy DIR   # in the course "
            "repository") in changed                                         # the instructor's command
    assert "the answers (docs/lab-session-answers.md in the course repository)" in read(copy, "docs/lab-session.md")
    for page in ("README.md", "docs/lab-session.md"):
        targets = [t for t in student_copy.links(page) if t not in student_copy.LEFT_OUT + student_copy.LAB_PAGES]
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
    for name in ("docs/lab-session-answers.md", "exercises/student_copy.py", "grpo_ba_lab", "scripts",
                 "docs/lab.md", "docs/verl.md", "docs/README.md", "tests/course/test_lab_session.py"):
        assert not os.path.exists(os.path.join(copy, name)), name
    assert re.search(r"docs/lab\.md(, | \()in the course repository", read(copy, "README.md"))   # its link: text now
    teaching = read(copy, "docs/teaching.md")                   # its link to the answers: plain text now
    assert "lab-session-answers.md" in read(REPO, "docs/teaching.md")
    assert "(lab-session-answers.md)" not in teaching and "in the course repository" in teaching
    assert student_copy.main([copy]) == 2                       # never over a copy


def test_a_missing_link_becomes_text_and_a_present_one_stays(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "here.md").write_text("x")
    text = ("[here](here.md), [gone](gone.md#a), ![a figure](../assets/gone.png), [web](https://example.org) "
            "(see [gone.md](gone.md))")
    out = student_copy.unlink_missing(text, "docs/page.md", str(tmp_path))
    assert out == ("[here](here.md), gone (docs/gone.md in the course repository), "
                   "a figure (assets/gone.png in the course repository), [web](https://example.org) "
                   "(see docs/gone.md, in the course repository)")      # not "(see docs/gone.md (in ...))"


def test_each_stub_says_what_the_checker_checks_and_nothing_else_changes(copy):
    claims = student_copy.claims_by_function()
    assert set(claims) == set(FUNCTIONS) and all(claims.values())
    original, stubs = read(REPO, "exercises/math_core.py"), read(copy, "exercises/math_core.py")
    assert without_docstrings(original) == without_docstrings(stubs)      # the code is the same
    docs = {n.name: ast.get_docstring(n) for n in ast.parse(stubs).body if isinstance(n, ast.FunctionDef)}
    cases = student_copy.claim_cases()
    for name in FUNCTIONS:
        listed = docs[name].split(f"python -m exercises.check {name}`", 1)[1]
        lines = [line[2:] for line in listed.splitlines() if line.startswith("- ")]
        assert lines == student_copy.claim_lines(cases[name]), name
        counted = [int(m.group(1)) if (m := re.search(r"\((\d+) claims: ", line)) else 1 for line in lines]
        assert sum(counted) == len(claims[name]) == len(cases[name]), name       # every case, counted
        assert len(set(lines)) == len(lines), name                              # no line said twice
        assert not re.search(r"\b[gl]\b|\bnan\b|\bdr grpo\b", " ".join(lines)), lines   # the pages' spelling
    assert "batch that does not split into groups (it must raise ValueError)" in docs["group_advantages"]
    # several cases of one claim: one line, its cases together (a student found three lines that
    # differ in one word, under one function, hard to read)
    assert "- sign weights of the worked example (3 claims: rule token, sequence and balanced)" in docs["sign_weights"]
    assert ("- all rules give zero with finite gradients when k is 0 or G (2 claims: rewards [1, 1, 1, 1] and "
            "[0, 0, 0, 0])") in docs["aggregate_token"]
    assert "a claim named for all rules checks this function's rule alone" in docs["aggregate_token"]
    assert "advantages none scale is Dr. GRPO centering" in docs["group_advantages"]
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
    claims = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             "tests/course/test_math_core.py"], cwd=copy, capture_output=True, text=True, timeout=600)
    assert claims.returncode == 0 and " passed" in claims.stdout, claims.stdout[-2000:]   # the README's test line
    failed = check(copy)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert all(f"{name:20s} not implemented yet" in failed.stdout for name in FUNCTIONS), failed.stdout
    write_solutions(copy)
    passed = check(copy)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert all(f"{name:20s} passed" in passed.stdout for name in FUNCTIONS), passed.stdout


# ------------------------------------------------------------------ every reference true in the copy
# Written apart from exercises/student_copy.py's own marking, so that either can catch the other:
# what the repository tracks (git) is what a page can name; a name the copy lacks must say,
# nearby (or on its command line), that it is in the course repository.

@functools.lru_cache(maxsize=1)
def tracked():
    """(files, folders) git tracks in the repository."""
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    folders = {os.path.dirname(f) for f in files}
    folders |= {os.path.join(*f.split("/")[:k]) for f in folders for k in range(1, f.count("/") + 1)}
    return set(files), folders - {""}


NAMED_PATH = re.compile(r"(?<![\w./~$-])(\.?[\w-][\w.-]*(?:/[\w.-]+)*/?)")
NAMED_MODULE = re.compile(r"(?:python3? -m )?(?<![\w./-])([a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)+)")


def module_path(dotted):
    """The repository file or package a dotted name's longest module prefix is, else None."""
    files, _ = tracked()
    parts, found = dotted.split("."), None
    for k in range(1, len(parts) + 1):
        stem = "/".join(parts[:k])
        if stem + ".py" in files:
            found = stem + ".py"
        elif stem + "/__init__.py" in files:
            found = stem + "/__init__.py"
        else:
            break
    return found


def unmarked_missing_names(text, page, copy):
    """[name] of what `text` (of `page`) names that the repository tracks and the copy lacks,
    where no "in the course repository" follows within 120 characters or on its line (HTML
    comments, which a reader does not see, aside)."""
    files, folders = tracked()
    text = re.sub(r"<!--.*?-->", lambda m: " " * len(m.group(0)), text, flags=re.S)   # not shown to a reader
    found = []
    def check(name, start, end):
        if not os.path.exists(os.path.join(copy, name)):
            line_end = text.find("\n", end)
            after = text[end:max(end + 120, line_end if line_end >= 0 else len(text))]
            before = text[max(0, start - 60, text.rfind("\n", 0, start)):start]
            if "course repository" not in after and "course repository" not in before:
                found.append(name)
    for m in NAMED_PATH.finditer(text):
        token = m.group(1).rstrip(".,")
        if "/" not in token and "." not in token:
            continue
        for name in (token.rstrip("/"), os.path.normpath(os.path.join(os.path.dirname(page), token))):
            if name in files or name in folders:
                check(name, m.start(1), m.start(1) + len(token))
                break
    for m in NAMED_MODULE.finditer(text):
        path = module_path(m.group(1))
        if path:
            check(path, m.start(1), m.end(1))
    return found


def test_no_page_of_the_copy_names_a_file_or_module_the_copy_lacks(copy):
    pages = copied_pages(copy)
    assert len(pages) >= 15
    unmarked = {}
    for page in pages:
        missing = unmarked_missing_names(student_copy.page_text(os.path.join(copy, page)), page, copy)
        if missing:
            unmarked[page] = sorted(set(missing))
    assert unmarked == {}, unmarked
    for page in student_copy.LAB_PAGES:
        assert not os.path.exists(os.path.join(copy, page)), page
    assert len(re.findall("in the course repository", read(copy, "docs/install.md"))) >= 10   # marked, not left


def test_the_check_above_finds_what_the_repositorys_own_pages_name_that_the_copy_lacks(copy):
    """It can fail: the repository's pages, unmarked, name what the copy lacks."""
    readme = unmarked_missing_names(read(REPO, "README.md"), "README.md", copy)
    assert {"requirements/dev.txt", "requirements/verl.txt", ".ci/run", "scripts/gpu_check.py"} <= set(readme), readme
    plan = unmarked_missing_names(read(REPO, "docs/lab-session.md"), "docs/lab-session.md", copy)
    assert {"exercises/student_copy.py", "scripts/time_lab_plan.py"} <= set(plan), plan
    old_handout = "own functions (`tests/course/test_lab_session.py` recomputes each one)."
    assert unmarked_missing_names(old_handout, "docs/handout.md", copy) == ["tests/course/test_lab_session.py"]
    assert unmarked_missing_names(read(REPO, "docs/handout.md"), "docs/handout.md", copy) == []   # true in both
    assert os.path.exists(os.path.join(REPO, "tests", "course", "test_lab_session.py"))


def test_the_copys_readme_runs_the_tests_the_copy_holds(copy):
    readme = read(copy, "README.md")
    tests = readme.split("## Run the tests", 1)[1].split("\n## ", 1)[0]
    assert "requirements/dev.txt" not in tests and "no-deps" not in tests and ".ci/run" not in tests
    commands = [line.split("#")[0].strip() for line in tests.splitlines() if line.startswith("    python")]
    assert "python -m pytest -q tests/course/test_math_core.py" in commands
    assert "python -m exercises.check --solution" in commands
    for command in commands:
        module = command.split()[2]
        assert module == "pytest" or os.path.exists(os.path.join(copy, *module.split(".")) + ".py"), command
        for word in command.split()[3:]:
            assert word.startswith("-") or os.path.exists(os.path.join(copy, word)), (command, word)


def test_marking_a_name_the_copy_lacks_leaves_what_it_holds(tmp_path):
    (tmp_path / "exercises").mkdir()
    (tmp_path / "exercises" / "check.py").write_text("")
    text = ("Run `python -m exercises.check` and `python -m grpo_ba_lab.train --design demo`;\n"
            "five `.ci/run`s, `scripts/time_lab_plan.py`, and docs/lab.md (in the course repository).\n"
            "    python -m grpo_ba_lab.analysis.sweep --design demo\n"
            "    python -m exercises.check   # the stubs\n"
            "own functions (in the course repository, `scripts/time_lab_plan.py` recomputes each one).\n"
            "the GPU tests (5 tests, which run `python -m grpo_ba_lab.train`) skip\n")
    assert student_copy.mark_missing(text, "docs/page.md", str(tmp_path)) == (
        "Run `python -m exercises.check` and `python -m grpo_ba_lab.train --design demo` (in the course repository);\n"
        "five `.ci/run`s (in the course repository), `scripts/time_lab_plan.py` (in the course repository), "
        "and docs/lab.md (in the course repository).\n"
        "    python -m grpo_ba_lab.analysis.sweep --design demo   # in the course repository\n"
        "    python -m exercises.check   # the stubs\n"
        "own functions (in the course repository, `scripts/time_lab_plan.py` recomputes each one).\n"
        "the GPU tests (5 tests, which run `python -m grpo_ba_lab.train`, in the course repository) skip\n")


# ------------------------------------------------------------------ the student's work beside the course
# An instructor who did the exercises in the course repository holds what the pages tell a student
# to write (my_rules.py, exercises/my_answers.py) and what a run writes (runs/). The copy must not
# say they are in the course repository: a student trial's copy marked my_rules.py so, and with it
# a command that runs in the copy.

STUDENTS_WORK = {"my_rules.py": "import grpo_ba\n", "exercises/my_answers.py": "from grpo_ba import *  # noqa\n",
                 "runs/demo-capped_token_mean-s22/metrics.jsonl": "{}\n"}
ELSEWHERE = "in the course repository"


@pytest.fixture(scope="module")
def copy_beside_students_work(tmp_path_factory):
    """The copy written from a checkout holding STUDENTS_WORK beside the repository's files (linked)."""
    root = tmp_path_factory.mktemp("checkout")
    (root / "exercises").mkdir()
    for name in os.listdir(REPO) + ["exercises/" + name for name in os.listdir(os.path.join(REPO, "exercises"))]:
        if name not in ("exercises", "runs", ".git", *STUDENTS_WORK):
            os.symlink(os.path.join(REPO, name), root / name)
    for name, text in STUDENTS_WORK.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(student_copy, "ROOT", str(root))
        return student_copy.write_copy(str(tmp_path_factory.mktemp("student") / "copy"))


def pages_of(*copies):
    return {(copy, page): read(copy, page) for copy in copies for page in copied_pages(copy)}


def test_what_the_student_or_a_run_writes_is_never_marked_nor_copied(copy, copy_beside_students_work):
    named = [line for text in pages_of(copy, copy_beside_students_work).values() for line in text.splitlines()
             if "my_rules.py" in line or "my_answers.py" in line]
    assert len(named) >= 10 and [line for line in named if ELSEWHERE in line] == []
    files = {os.path.relpath(os.path.join(d, f), copy) for d, _, names in os.walk(copy) for f in names}
    assert {os.path.relpath(os.path.join(d, f), copy_beside_students_work)
            for d, _, names in os.walk(copy_beside_students_work) for f in names} == files
    assert [f for f in sorted(files)                                    # runs/ named on a page too
            if not filecmp.cmp(os.path.join(copy, f), os.path.join(copy_beside_students_work, f), shallow=False)] == []


def names_the_copy_lacks(command, copy):
    """What a command line names that the repository tracks and the copy lacks: the module it
    runs, or a file or folder among its words (`my_rules.py:capped_token_mean`: my_rules.py)."""
    files, folders = tracked()
    words = [w.strip("'\"").split(":")[0].rstrip("/") for w in command.split()]
    names = [module_path(w) for w in words] + [w for w in words if w in files or w in folders]
    return [name for name in names if name and not os.path.exists(os.path.join(copy, name))]


def test_a_command_is_marked_only_when_it_names_what_the_copy_lacks(copy, copy_beside_students_work):
    marked = [(where, line) for where, text in pages_of(copy, copy_beside_students_work).items()
              for line in text.splitlines() if re.match(r"\s*(\$ )?(python3?|pip|bash) ", line)
              and line.rstrip().endswith((f"# {ELSEWHERE}", f"({ELSEWHERE})"))]
    assert len(marked) >= 20
    assert [(where, line) for where, line in marked if not names_the_copy_lacks(line, where[0])] == []


def test_no_name_is_marked_twice_nor_inside_a_clause_that_already_says_where_it_is(copy, copy_beside_students_work):
    twice = [(where, line) for where, text in pages_of(copy, copy_beside_students_work).items()
             for line in text.splitlines() if re.search(f"{ELSEWHERE}[^)\n]*{ELSEWHERE}", line)]
    assert twice == []


def test_no_mark_is_followed_by_a_possessive_or_by_another_parenthesis(copy, copy_beside_students_work):
    """Issue 75: teaching.md's copy read "`... rollouts.jsonl` (in the course repository)
    (docs/diagnose.md (in the course repository)'s example ...)"; a page's copy reads as prose."""
    clumsy = [(where, line) for where, text in pages_of(copy, copy_beside_students_work).items()
              for line in text.splitlines() if re.search(f"{ELSEWHERE}\\)(?:'s\\b| \\()", line)]
    assert clumsy == []


def test_a_mark_joins_the_parenthesis_after_it_and_goes_before_a_possessive(tmp_path):
    (tmp_path / "docs").mkdir()
    text = ("train with `python -m grpo_ba_lab.train` (same flags): it writes `model/`.\n"
            "the last lines of `.ci/run`'s output, and the `.ci/run`'s log; [diagnose.md](diagnose.md)'s example.\n")
    marked = student_copy.mark_missing(student_copy.unlink_missing(text, "docs/page.md", str(tmp_path)),
                                       "docs/page.md", str(tmp_path))
    assert marked == (
        "train with `python -m grpo_ba_lab.train` (in the course repository; same flags): it writes `model/`.\n"
        "the last lines of the course repository's `.ci/run`'s output, and the course repository's `.ci/run`'s log; "
        "the course repository's docs/diagnose.md's example.\n")
