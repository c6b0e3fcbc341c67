"""Your own rule is first class (issue 65): `python grpo_ba.py --aggregator FILE.py:FUNCTION` trains
on the gradient of the rule exactly as written, measures its weight share, long/short weight and
pg-loss with autograd as it does the three's, names it in the log, the story and the figure,
records its spec and its file's sha256 so that --resume runs the same rule (and refuses a changed
file), and refuses bad input in one line with exit code 2 before anything is written."""
import dataclasses
import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest
import torch

import grpo_ba
import grpo_ba_plots
from grpo_ba_support import own_rule
from grpo_ba_support import run as grpo_ba_run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RULES_FILE = '''
import torch
import grpo_ba


def capped_token_mean(per_token_loss, mask, advantages, group_size):
    """token's per-group mean, each token term capped at +-1: not linear in l."""
    return grpo_ba.aggregate_token(per_token_loss.clamp(-1, 1), mask, advantages, group_size)


def softplus_token(per_token_loss, mask, advantages, group_size):
    return grpo_ba.aggregate_token(torch.nn.functional.softplus(per_token_loss), mask, advantages,
                                   group_size)


def wrong_signature(per_token_loss, mask):
    return per_token_loss.sum()


def not_scalar(per_token_loss, mask, advantages, group_size):
    return per_token_loss.sum(1)


def not_finite(per_token_loss, mask, advantages, group_size):
    return per_token_loss.sum() / 0.0


def no_gradient(per_token_loss, mask, advantages, group_size):
    return torch.tensor(1.0)


def calls_the_course_wrongly(per_token_loss, mask, advantages, group_size):
    return grpo_ba.aggregate_sequence(per_token_loss, mask, group_size)
'''
SHORT = ["--steps", "2", "--prompts-per-step", "2", "--eval-prompts", "8", "--eval-every", "1000",
         "--max-new-tokens", "16", "--threads", "1"]


@pytest.fixture
def rules(tmp_path, monkeypatch):
    """my_rules.py in a fresh working directory, as a student writes it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_rules.py").write_text(RULES_FILE)
    own_rule._LOADED.clear()
    yield tmp_path
    own_rule._LOADED.clear()


@pytest.mark.parametrize("spec, says", [
    ("missing.py:capped_token_mean", "no file {cwd}/missing.py (a path is read from the working directory"),
    ("my_rules.py:capped", "{cwd}/my_rules.py has no function capped"),
    ("my_rules.py:wrong_signature", "must take (per_token_loss, mask, advantages, group_size)"),
    ("my_rules.py:not_scalar", "returned (4,), not a scalar"),
    ("my_rules.py:not_finite", "returned inf on the test batch it is called on before training, not a finite"),
    ("my_rules.py:calls_the_course_wrongly", "failed at my_rules.py:33 on the test batch it is called on before training"),
    ("my_rules.py:no_gradient", "has no gradient in per_token_loss"),
])
def test_a_bad_rule_is_refused_in_one_line_with_exit_2_and_nothing_written(rules, capsys, spec, says):
    code = grpo_ba.main(["--aggregator", spec, "--group-size", "2", *SHORT, "--output-dir", "out"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and says.format(cwd=os.getcwd()) in err, err
    assert not re.search(r"grpo_ba\.py:\d", err)                 # never a line of the course's answer
    assert sorted(os.listdir(rules)) == ["my_rules.py"]        # no run directory, no runs/, no ~


def test_a_rule_file_that_imports_a_missing_module_says_where_python_looked(rules, capsys):
    (rules / "helpers_rule.py").write_text("import torch\nimport my_helpers\n\n\ndef rule(l, m, a, g):\n"
                                          "    return l.sum()\n")
    code = grpo_ba.main(["--aggregator", "helpers_rule.py:rule", *SHORT, "--output-dir", "out"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "importing helpers_rule.py failed at helpers_rule.py:2: ModuleNotFoundError" in err
    assert f"looked for in the working directory {os.getcwd()} and the installed packages" in err


def test_a_nonlinear_rule_with_micro_batches_that_split_groups_is_refused_before_anything_is_written(rules, capsys):
    code = grpo_ba.main(["--aggregator", "my_rules.py:softplus_token", "--group-size", "4", "--micro-batch-size",
                         "2", *SHORT, "--output-dir", "out"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "splits groups of 4" in err and "use a multiple of 4" in err
    assert sorted(os.listdir(rules)) == ["my_rules.py"]


def test_aggregator_all_stays_the_three_rules_and_a_bare_unknown_name_is_refused(capsys):
    assert grpo_ba.parse_args([]).aggregator == "all" and list(grpo_ba.AGGREGATORS) == ["token", "sequence", "balanced"]
    with pytest.raises(grpo_ba.UsageError, match="FILE.py:FUNCTION"):
        grpo_ba.parse_args(["--aggregator", "capped"])


def load(path, name):
    spec = importlib.util.spec_from_file_location("student_rules", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def test_a_rule_named_on_the_command_line_trains_on_the_gradient_of_J_exactly_as_called(rules):
    """As tests/course/test_rule_meets_the_loss.py's softplus test, through the parsed command line."""
    import test_rule_meets_the_loss as meets
    rule = load(rules / "my_rules.py", "softplus_token")
    J, expected = meets.gradient_of_J_as_called(rule)
    policy, batch = meets.batch_and_policy()
    args = grpo_ba.parse_args(["--aggregator", "my_rules.py:softplus_token", "--group-size", str(meets.G),
                               "--prompts-per-step", str(meets.P), "--inner-updates", "1", "--max-grad-norm", "1e9"])
    assert args.aggregator == "my_rules.py:softplus_token"
    before = [p.detach().clone() for p in policy.parameters()]
    stats = grpo_ba.grpo_update(policy, None, torch.optim.SGD(policy.parameters(), lr=1.0), batch, meets.REWARDS, args)
    moved = [b - p.detach() for b, p in zip(before, policy.parameters())]
    meets.assert_one_step_is_the_gradient_of_J(moved, stats, J, expected)


def test_the_diagnostics_measure_your_rule_by_autograd_as_they_do_the_three():
    G = 4
    rewards = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0])
    mask = grpo_ba.mask_from_lengths(torch.tensor([3, 9, 12, 20, 5, 7, 8, 9]))
    args = grpo_ba.parse_args(["--group-size", str(G), "--prompts-per-step", "2"])

    def twice_sequence(per_token_loss, mask, advantages, group_size):
        return 2 * grpo_ba.aggregate_sequence(per_token_loss, mask, advantages, group_size)

    sequence = grpo_ba.step_diagnostics(rewards, mask, dataclasses.replace(args, aggregator="sequence"))
    twice = grpo_ba.step_diagnostics(rewards, mask, dataclasses.replace(args, aggregator=twice_sequence))
    assert twice["pos_share"] == pytest.approx(sequence["pos_share"]) == pytest.approx(0.5)
    assert twice["long_right_weight"] == pytest.approx(sequence["long_right_weight"]) == pytest.approx(3 / 9)


def test_the_story_and_the_figure_name_one_rule_and_explain_the_long_short_gaps():
    line = {"reward_mean": 0.5, "len_right": 5.0, "len_wrong": 20.0, "wrong_over_right": 4.0, "forced_frac": 0.5,
            "accuracy": 0.5, "pg_loss": 0.1, "entropy": 1.0, "pos_share": 0.3}
    metrics = [{**line, "step": s, "long_right_weight": None if s == 1 else 0.5} for s in range(3)]
    runs = {"my_rules.py:capped_token_mean": metrics}
    args = grpo_ba.parse_args(["--aggregator", "my_rules.py:capped_token_mean", "--steps", "3"])
    lines = grpo_ba_plots.story(runs, args, ["m.png"])
    assert lines[1].startswith("What capped_token_mean did (design demo, seed 22, 3 steps")
    assert lines[2].split() == ["capped_token_mean"] and lines[-1] == "Figure: m.png (this run over its steps)"
    assert not any("What each rule did" in text for text in lines)
    figure = grpo_ba_plots.mechanism_figure(runs, None, "design demo, seed 22")
    assert figure._suptitle.get_text().startswith("What capped_token_mean did, one seed")
    panel = next(ax for ax in figure.axes if ax.get_title().startswith("long/short"))
    (drawn,) = [line for line in panel.get_lines() if line.get_label() == "capped_token_mean"]
    assert list(drawn.get_xdata()) == [0, 1, 2] and torch.isnan(torch.tensor(drawn.get_ydata()[1]))  # a gap
    note = " ".join(panel.get_xlabel().split())
    assert "a gap: a step where no group had two right answers of different lengths" in note
    assert "(steps without one: 1 of 3)" in note                      # one run: no rule's name in it
    titles = " ".join(ax.get_title() for ax in figure.axes)
    # what holds for the rule drawn: a balance's 0 is the three linear rules', not a function's
    assert "token:" not in titles and "0 where the two signs' weights balance" not in titles
    assert "each rule's loss, as it returned it" in titles
    text = " ".join(" ".join(lines).split())      # the story, too, says nothing of rules not run
    assert "Token's share" not in text and "weights balance" not in text and "0.5 is unbiased." in text
    assert "each rule's loss as it returned it" in text and "minutes" not in text
    sequence = grpo_ba_plots.mechanism_figure({"sequence": metrics}, None, "design demo, seed 22")
    assert "0 where the two signs' weights balance" in " ".join(ax.get_title() for ax in sequence.axes)


@pytest.mark.slow
def test_your_rule_trains_from_the_command_line_as_the_function_itself_and_resumes_only_from_its_file(rules):
    """The command line's run equals train(args) given the function itself, line for line; the
    name shows in the log, the story and the figure; args.json and run.json keep the spec and the
    file's sha256; --resume runs the same rule, and refuses the file once it changed."""
    command = [sys.executable, os.path.join(ROOT, "grpo_ba.py"), "--aggregator", "my_rules.py:capped_token_mean", *SHORT]
    env = {**os.environ, "PYTHONPATH": ROOT}
    result = subprocess.run([*command, "--output-dir", "cli"], cwd=rules, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "[capped_token_mean] step    0" in result.stderr + result.stdout
    assert "What capped_token_mean did (design demo, seed 22, 2 steps" in result.stdout
    assert os.path.exists(rules / "cli" / "mechanism.png")
    saved = json.loads((rules / "cli" / "args.json").read_text())
    sha256 = own_rule.file_sha256(rules / "my_rules.py")
    assert saved["aggregator"] == "my_rules.py:capped_token_mean" and saved["rule_sha256"] == sha256
    started = json.loads((rules / "cli" / "run.json").read_text())["starts"][0]["rule"]
    assert started == {"spec": "my_rules.py:capped_token_mean", "name": "capped_token_mean", "sha256": sha256}
    # the same run in this process, with the function itself in args.aggregator
    rule = load(rules / "my_rules.py", "capped_token_mean")
    args = dataclasses.replace(grpo_ba.parse_args([*SHORT, "--output-dir", str(rules / "api")]), aggregator=rule)
    grpo_ba.train(args, log=lambda *a: None)
    def lines(out):
        return [{k: v for k, v in m.items() if k != "step_time"}
                for m in grpo_ba_run.read_metrics(str(rules / out / "metrics.jsonl"))]
    cli, api = lines("cli"), lines("api")
    assert cli == api and any(m.get("pos_share") is not None for m in cli)
    # --resume: the same rule from its file; a changed file is refused in one line
    resumed = subprocess.run([sys.executable, os.path.join(ROOT, "grpo_ba.py"), "--resume", "cli", "--steps", "3"],
                             cwd=rules, env=env, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert len(grpo_ba_run.read_metrics(str(rules / "cli" / "metrics.jsonl"))) == 4      # 3 steps, the final line
    with open(rules / "my_rules.py", "a") as f:
        f.write("# changed\n")
    changed = subprocess.run([sys.executable, os.path.join(ROOT, "grpo_ba.py"), "--resume", "cli", "--steps", "4"],
                             cwd=rules, env=env, capture_output=True, text=True, timeout=600)
    assert changed.returncode == 2 and changed.stderr.count("\n") == 1
    assert "the file changed since the run started" in changed.stderr
    assert "put the file back as it was to resume, or train the new rule as a new run" in changed.stderr


def test_a_function_with_the_wrong_signature_is_refused_by_name_wherever_the_course_is_given_it():
    """As the exercises' claims pass a student's function to grpo_ba.sign_weights: one line that
    names the signature, raised before the course calls it (no TypeError from inside grpo_ba.py)."""
    def aggregate_token(per_token_loss, mask):
        return per_token_loss.sum()
    mask = grpo_ba.mask_from_lengths(torch.tensor([2, 3, 1, 4]))
    adv = grpo_ba.group_advantages(torch.tensor([1.0, 0.0, 1.0, 0.0]), 4)
    with pytest.raises(own_rule.RuleError) as refused:
        grpo_ba.sign_weights(mask, adv, 4, aggregate_token)
    assert str(refused.value) == ("--aggregator aggregate_token: aggregate_token must take "
                                  "(per_token_loss, mask, advantages, group_size)")
