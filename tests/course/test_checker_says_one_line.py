"""The exercises' checker speaks to a closed-book student (issue 75): a wrong signature is one line
and its claims are not run, a cause shared by many claims is told once, a reason points into the
student's file and never into grpo_ba.py (the solution), a missing file says where the checker
looked and what to do, and `python -m exercises.check` runs from inside exercises/ too."""
import os
import re
import subprocess
import sys
import textwrap

from exercises import check

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BROKEN = textwrap.dedent('''\
    from grpo_ba import group_advantages, sign_weights  # noqa: F401  (two written right)


    def aggregate_token(per_token_loss, mask, advantages):          # group_size forgotten
        return per_token_loss.sum()


    def aggregate_sequence(per_token_loss, mask, advantages, group_size):
        raise ValueError("my own bug")                              # line 9


    def aggregate_balanced(per_token_loss, mask, advantages, group_size):
        return 0.5                                                  # fails inside grpo_ba.py's code
    ''')


def run_check(*args, cwd=ROOT, path=None):
    env = {**os.environ, **({"PYTHONPATH": path} if path else {})}
    return subprocess.run([sys.executable, "-m", "exercises.check", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_a_wrong_signature_a_repeated_cause_and_an_error_in_the_solution_each_read_in_few_lines(tmp_path):
    (tmp_path / "broken_answers.py").write_text(BROKEN)
    result = run_check("--module", "broken_answers", "aggregate_token", "aggregate_sequence", "aggregate_balanced",
                       "group_advantages", path=str(tmp_path))
    out = result.stdout
    assert result.returncode == 1 and "Traceback" not in out + result.stderr, out + result.stderr
    lines = {name: [line for line in out.splitlines() if line.startswith(name + " ")] for name in check.FUNCTIONS}
    token = lines["aggregate_token"][0]
    assert token.startswith(f"{'aggregate_token':20s} wrong signature: yours is aggregate_token(per_token_loss, "
                            "mask, advantages), the claims call aggregate_token(per_token_loss, mask, advantages, "
                            "group_size)"), token
    assert "aggregate_token() takes" not in out and "test_" not in token    # one line, no claim ran
    assert f"{'group_advantages':20s} passed" in out
    own_bug = [line for line in out.splitlines() if "my own bug" in line]
    assert len(own_bug) == 1 and re.search(r"^    \d+ claims \(test_", own_bug[0]), own_bug   # told once
    assert own_bug[0].endswith(f"({tmp_path / 'broken_answers.py'}:9)"), own_bug             # the student's line
    assert "grpo_ba.py" not in out                                          # never the solution's lines
    assert f"{'aggregate_balanced':20s} FAILED" in out


def test_a_missing_function_is_named_as_missing(tmp_path):
    (tmp_path / "half_answers.py").write_text("")
    result = run_check("--module", "half_answers", "sign_weights", path=str(tmp_path))
    assert result.stdout.splitlines()[-1] == (f"{'sign_weights':20s} missing: half_answers has no function "
                                              "sign_weights (restore its stub, exercises.math_core's)")


def test_the_checker_runs_from_inside_exercises():
    result = run_check("--solution", "aggregate_token", cwd=os.path.join(ROOT, "exercises"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{'aggregate_token':20s} passed" in result.stdout


def test_missing_files_say_where_the_checker_looked_and_what_to_do(capsys, monkeypatch, tmp_path):
    assert check.main(["--module", "not_there.py"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"exercises.check: error: no file not_there.py (looked for {os.path.abspath('not_there.py')}); "
        "copy exercises/math_core.py there, or name another file")
    assert check.main(["--module", "not_there"]) == 1
    assert capsys.readouterr().out.strip() == (
        f"cannot import not_there: no file {ROOT}/not_there.py or {ROOT}/exercises/not_there.py; "
        "copy exercises/math_core.py to exercises/not_there.py, or name another file with --module")
    monkeypatch.setattr(check, "CLAIMS", str(tmp_path / "test_math_core.py"))
    assert check.main([]) == 2
    said = capsys.readouterr().err.strip()
    assert said.startswith(f"exercises.check: error: the claims file is missing (looked for {tmp_path}")
    assert "\n" not in said
