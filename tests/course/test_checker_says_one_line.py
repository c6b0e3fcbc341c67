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


WRONG_NORMALISER = textwrap.dedent('''\
    def aggregate_token(per_token_loss, mask, advantages, group_size):
        return (per_token_loss * mask).sum() / mask.shape[0]       # divides by B, not by sum L_i
    ''')


def test_a_failed_comparison_says_what_the_code_gave_and_what_was_expected_one_line_each(tmp_path):
    """The worked example (docs/method.md §3: J_tok = 0.4) divided by B = 4 instead of by the 10
    tokens gives 1.0: the checker prints both values under the claim, and never the solution."""
    (tmp_path / "wrong_token.py").write_text(WRONG_NORMALISER)
    out = run_check("--module", "wrong_token", "aggregate_token", path=str(tmp_path)).stdout
    lines = out.splitlines()
    claim = next(i for i, line in enumerate(lines) if "test_worked_example_of_method_section_3[token" in line)
    assert lines[claim + 1] == "        got:      1", out
    assert lines[claim + 2] == "        expected: 0.4 (within 1e-07)", out
    per_token = next(i for i, line in enumerate(lines) if "test_per_token_gradient_weight_matches_method_table" in line)
    assert re.fullmatch(r"        got:      [\d.]+ at \[\d+, \d+\] of a \(8, \d+\) tensor", lines[per_token + 1]), out
    assert lines[per_token + 2].startswith("        expected: "), out
    assert "grpo_ba.py" not in out and "def aggregate_token" not in out and "Traceback" not in out


def test_got_and_expected_in_words():
    import pytest
    import torch
    assert check.got_and_expected("==", 0.30000001, pytest.approx(0.4, abs=1e-7)) == ("0.3", "0.4 (within 1e-07)")
    assert check.got_and_expected("!=", 1.0, pytest.approx(1.0, rel=0.05)) == ("1", "anything but 1 (within 0.05)")
    assert check.got_and_expected(">", 0.0, 1e-3) == ("0", "> 0.001")
    got, expected = check.got_and_expected("allclose", torch.zeros(2, 4), torch.tensor([[0.0] * 4, [0, 0, 2.5, 0]]))
    assert (got, expected) == ("0 at [1, 2] of a (2, 4) tensor", "2.5 at [1, 2] of a (2, 4) tensor")
    assert check.got_and_expected("equal", torch.zeros(3), torch.zeros(2)) == ("[0, 0, 0] (shape (3,))",
                                                                             "[0, 0] (shape (2,))")
