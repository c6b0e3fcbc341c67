"""The exercises: the checker fails on the stubs, passes on grpo_ba, and says per function why."""
import os
import re
import subprocess
import sys

import pytest

from exercises import check, math_core

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_check(*args):
    return subprocess.run([sys.executable, "-m", "exercises.check", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def test_every_stub_raises_not_implemented_and_states_its_task():
    for name in check.FUNCTIONS:
        stub = getattr(math_core, name)
        assert "docs/method.md §" in stub.__doc__
        with pytest.raises(NotImplementedError):
            stub(*[None] * (stub.__code__.co_argcount))


def test_check_fails_on_the_stubs_and_reports_every_function():
    result = run_check()
    assert result.returncode == 1, result.stdout + result.stderr
    for name in check.FUNCTIONS:
        assert f"{name:20s} not implemented yet" in result.stdout


def test_check_passes_against_grpo_ba_with_solution_and_counts_the_claims_the_stubs_list():
    """The checker's count per function is the number of claims the copy's stubs list in their
    docstrings (exercises/student_copy.py writes them from the same claims file, over this
    repository's exercises/math_core.py), and the one docs/teaching.md shows."""
    import ast

    from exercises import student_copy
    result = run_check("--solution")
    assert result.returncode == 0, result.stdout + result.stderr
    counts = {}
    for name in check.FUNCTIONS:
        line = next(line for line in result.stdout.splitlines() if line.startswith(f"{name:20s} passed"))
        counts[name] = int(re.search(r"passed \((\d+) claims?\)", line).group(1))
    with open(os.path.join(ROOT, "exercises", "math_core.py"), encoding="utf-8") as f:
        stubs = student_copy.stubs_with_claims(f.read(), student_copy.claim_cases())
    docs = {n.name: ast.get_docstring(n) for n in ast.parse(stubs).body if isinstance(n, ast.FunctionDef)}
    for name, count in counts.items():
        listed = docs[name].split(f"python -m exercises.check {name}`", 1)[1]
        assert f"its {count} claims" in listed, (name, count)
        listed_cases = [int(m.group(1)) if (m := re.search(r"\((\d+) claims: ", line)) else 1
                        for line in listed.splitlines() if line.startswith("- ")]
        assert sum(listed_cases) == count, (name, count)
    with open(os.path.join(ROOT, "docs", "teaching.md"), encoding="utf-8") as f:
        teaching = f.read()
    for name, count in counts.items():
        assert f"{name:20s} passed ({count} claims)" in teaching, name


def test_module_names_a_file_of_exercises_by_its_bare_name_or_path(tmp_path):
    (tmp_path / "exercises").mkdir()
    (tmp_path / "exercises" / "my_answers.py").write_text("")
    (tmp_path / "mine.py").write_text("")
    resolve = check.resolve_module
    assert resolve("my_answers", root=str(tmp_path)) == "exercises.my_answers"
    assert resolve("exercises.my_answers", root=str(tmp_path)) == "exercises.my_answers"
    assert resolve(str(tmp_path / "exercises" / "my_answers.py"), root=str(tmp_path)) == "exercises.my_answers"
    assert resolve("mine", root=str(tmp_path)) == "mine"                 # a module at the root stays itself
    assert resolve("grpo_ba") == "grpo_ba" and resolve("exercises.math_core") == "exercises.math_core"
    assert resolve("not_there", root=str(tmp_path)) == "not_there"       # and fails to import, said as such


def test_the_documented_module_form_checks_a_copy_of_math_core_in_exercises(tmp_path):
    """exercises/README.md's `python -m exercises.check --module my_answers`, with the student's
    exercises/my_answers.py (here: math_core.py with grpo_ba's aggregate_token), in a copy."""
    from exercises import student_copy
    copy = student_copy.write_copy(str(tmp_path / "copy"))
    with open(os.path.join(ROOT, "exercises", "math_core.py"), encoding="utf-8") as f:
        answers = f.read() + "\n\nfrom grpo_ba import aggregate_token  # noqa: E402,F401\n"
    with open(os.path.join(copy, "exercises", "my_answers.py"), "w", encoding="utf-8") as f:
        f.write(answers)
    with open(os.path.join(ROOT, "exercises", "README.md"), encoding="utf-8") as f:
        documented = next(line.split("#")[0].split() for line in f if "--module my_answers" in line)
    assert documented[:4] == ["python", "-m", "exercises.check", "--module"]
    result = subprocess.run([sys.executable, *documented[1:], "aggregate_token", "group_advantages"], cwd=copy,
                            capture_output=True, text=True, timeout=300)
    assert "checking exercises.my_answers against" in result.stdout, result.stdout + result.stderr
    assert f"{'aggregate_token':20s} passed" in result.stdout, result.stdout
    assert f"{'group_advantages':20s} not implemented yet" in result.stdout and result.returncode == 1


def test_every_exercise_function_has_claims():
    """A claim renamed away from its tag would silently leave a function unchecked."""
    import test_math_core
    tagged = {tag.replace("{rule}", rule) for test in vars(test_math_core).values()
              for tag in getattr(test, "checks", ()) for rule in test_math_core.RULES}
    assert set(check.FUNCTIONS) <= tagged


def test_report_names_the_failed_claims_of_each_function_only():
    text, all_passed = check.report({
        "group_advantages": [("claim_a", True, ""), ("claim_b", False, "assert x == 1")],
        "aggregate_token": [("claim_c", True, "")],
        "sign_weights": [("claim_d", False, "NotImplementedError: sign_weights: your code here")],
    })
    assert not all_passed
    assert "group_advantages     FAILED 1 of 2 claims\n    claim_b: assert x == 1" in text
    assert "aggregate_token      passed (1 claim)" in text
    assert "sign_weights         not implemented yet" in text
    assert check.report({"aggregate_token": [("claim_c", True, "")]}) == ("aggregate_token      passed (1 claim)", True)


def test_unknown_function_is_a_usage_error():
    assert check.main(["no_such_function"]) == 2


def test_readme_documents_every_command_of_the_exercises():
    def text(name):
        with open(os.path.join(ROOT, "exercises", name)) as f:
            return f.read()
    readme = text("README.md")
    commands = {name[:-3] for name in os.listdir(os.path.join(ROOT, "exercises"))
                if name.endswith(".py") and "__main__" in text(name)}
    assert commands >= {"check", "prelab_check"}
    for command in commands:
        assert f"python -m exercises.{command}" in readme, command
