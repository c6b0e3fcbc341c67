"""The exercises: the checker fails on the stubs, passes on grpo_ba, and says per function why."""
import os
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


def test_check_passes_against_grpo_ba_with_solution():
    result = run_check("--solution")
    assert result.returncode == 0, result.stdout + result.stderr
    for name in check.FUNCTIONS:
        assert f"{name:20s} passed" in result.stdout


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
