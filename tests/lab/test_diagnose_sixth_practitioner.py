"""diagnose's decision path, a sixth practitioner's defects (issue 76): a verl dump records its rule with verl's
own keys (adv_estimator, loss_agg_mode), and a run trained with sequence or balanced is not told to try balanced
"in place of token"; verl's mode names under TRL's loss_type are refused, not read as an unknown rule; a verl
dump whose step-0 validation has one response per prompt is told to drop those lines, as a placeable one is."""
import json

import pytest
import torch

from grpo_ba_lab.analysis import diagnose

from test_diagnose_graded_and_first_step import gap_rollouts  # noqa: E402  (inside the gap-30 world, 0/1 rewards)


def write_lines(path, lines):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


def decide(tmp_path, capsys, lines):
    code = diagnose.main([write_lines(tmp_path / "run.jsonl", lines)])
    out, err = capsys.readouterr()
    return code, out, err


def verl_run(**keys):
    return gap_rollouts(step=1, trainer="verl", **keys)


@pytest.mark.parametrize("keys, family", [
    ({}, "token"),                                                      # nothing recorded: read as token, and said
    ({"loss_agg_mode": "token-mean"}, "token"),
    ({"adv_estimator": "grpo"}, "token"),                               # verl's default mode, token-mean
    ({"loss_agg_mode": "seq-mean-token-mean"}, "sequence"),
    ({"loss_agg_mode": "seq-mean-token-sum-norm"}, "token"),
    ({"adv_estimator": "grpo_sequence", "loss_agg_mode": "token-mean"}, "sequence"),   # the plug-in's own rule
    ({"adv_estimator": "grpo_balanced", "loss_agg_mode": "seq-mean-token-sum"}, "balanced"),
    ({"loss_agg_mode": "some-new-mode"}, "other"),
])
def test_a_verl_run_is_read_by_the_rule_its_own_keys_name(tmp_path, keys, family):
    path = write_lines(tmp_path / "run.jsonl", verl_run(**keys))
    assert diagnose.trained_rule(path, diagnose.read_lines(path)[0]).family == family


@pytest.mark.parametrize("keys", [{"loss_agg_mode": "seq-mean-token-mean"}, {"adv_estimator": "grpo_balanced"}])
def test_a_verl_run_trained_without_token_is_not_told_to_replace_token(tmp_path, capsys, keys):
    code, out, err = decide(tmp_path, capsys, verl_run(**keys))
    decision = json.loads(out.strip().splitlines()[-1])["decision"]
    assert code == 0, err
    assert "in place of token" not in decision["recommendation_line"]
    assert ("loss_agg_mode" in decision["recommendation_line"]) or ("adv_estimator" in decision["recommendation_line"])


def test_a_token_trained_verl_run_is_still_told_to_try_balanced(tmp_path, capsys):
    code, out, _ = decide(tmp_path, capsys, verl_run(loss_agg_mode="token-mean"))
    decision = json.loads(out.strip().splitlines()[-1])["decision"]
    assert code == 0 and decision["recommendation"] == "try balanced"
    assert "loss_agg_mode='token-mean'" in decision["recommendation_line"]


def test_verls_mode_name_under_trls_loss_type_is_refused_naming_the_right_key(tmp_path, capsys):
    code, _, err = decide(tmp_path, capsys, verl_run(loss_type="token-mean"))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert '"loss_agg_mode"' in err and "verl" in err


def test_two_recorded_rules_in_one_verl_run_are_refused(tmp_path, capsys):
    lines = verl_run(loss_agg_mode="token-mean")
    lines[-1] = {**lines[-1], "loss_agg_mode": "seq-mean-token-mean"}
    code, _, err = decide(tmp_path, capsys, lines)
    assert code == 2 and "one run trains with one rule" in err


def test_a_verl_validation_with_one_response_per_prompt_is_told_to_drop_step_0(tmp_path, capsys):
    validation = [{"group": f"v{g}", "reward": g % 2, "length": 900, "step": 0, "trainer": "verl"} for g in range(8)]
    code, _, err = decide(tmp_path, capsys, validation + verl_run())
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "drop the step-0 lines" in err and "validation" in err
    assert decide(tmp_path, capsys, verl_run())[0] == 0                 # without them it is placed


# ---- a seventh practitioner's: estimators diagnose does not compute, verl keys without "trainer", and the
# placement ratio as the designs measure theirs (by reward, tied groups included)


@pytest.mark.parametrize("estimator", ["grpo_passk", "reinforce_plus_plus", "rloo"])
def test_a_verl_estimator_without_grpos_group_advantages_is_refused(tmp_path, capsys, estimator):
    code, _, err = decide(tmp_path, capsys, verl_run(adv_estimator=estimator))
    assert code == 2 and len(err.strip().splitlines()) == 1 and estimator in err and "group-normalised" in err


def test_verl_keys_without_trainer_verl_are_refused_naming_the_key_to_add(tmp_path, capsys):
    lines = [{k: v for k, v in line.items() if k != "trainer"} for line in verl_run(loss_agg_mode="token-mean")]
    code, _, err = decide(tmp_path, capsys, lines)
    assert code == 2 and '"trainer": "verl"' in err


def test_the_placement_ratio_is_wrong_over_right_by_reward_with_tied_groups_as_the_designs_step_0():
    """20 mixed groups and 12 all-wrong groups of 1024 tokens: the designs' step-0 wrong/right (toy_tasks'
    length_stats, every answer split by reward) counts the tied wrong answers; Lbar-/Lbar+ does not."""
    mixed = gap_rollouts(groups=20, ratio=1.5, right=300)
    tied = [{"group": f"t{g}", "reward": 0, "length": 1024} for g in range(12) for _ in range(4)]
    lines = mixed + tied
    rewards = torch.tensor([float(line["reward"]) for line in lines])
    lengths = torch.tensor([float(line["length"]) for line in lines])
    by_reward = (lengths[rewards == 0].mean() / lengths[rewards == 1].mean()).item()
    placement = diagnose.Placement("all", diagnose.trainer_advantages(rewards, 4, "std", "population", 1e-6),
                                   lengths, 4, rewards=rewards)
    found = diagnose.run_interval(placement)
    assert found["ratio"] == pytest.approx(by_reward, rel=1e-6)
    assert found["groups"] == 20                                  # the minimum still counts groups with a signal
    mixed_rewards, mixed_lengths = rewards[:len(mixed)], lengths[:len(mixed)]
    without_tied = (mixed_lengths[mixed_rewards == 0].mean() / mixed_lengths[mixed_rewards == 1].mean()).item()
    lbar = diagnose.run_interval(placement._replace(rewards=None))["ratio"]       # Lbar-/Lbar+: tied left out
    assert lbar == pytest.approx(without_tied, rel=1e-6) and by_reward > 1.5 * lbar
