"""Both biases are measured in every run, from the run's own batch (grpo_ba.step_diagnostics):
sign-length coupling as each rule's weight share on right answers (pos_share_<rule>), sequence
equal-weighting as the per-token weight of each group's longest right answer over its
shortest's (long_right_weight_<rule>): sequence L_short / L_long, token and balanced exactly 1
(docs/method.md §3). The story prints both in a row, the run's figure draws both in a panel."""
import pytest
import torch

import grpo_ba
import grpo_ba_plots

G = 4
#          group 1: right 3 and 9 tokens, wrong 12, 2     group 2: right 5, 5 (equal), 7; wrong 10
REWARDS = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0,
                        # group 3: one right answer (no pair);  group 4: all right (A = 0: no side)
                        1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])
LENGTHS = [3, 9, 12, 2, 5, 5, 7, 10, 4, 8, 8, 8, 2, 30, 6, 6]


def diagnostics(rewards=REWARDS, lengths=LENGTHS):
    args = grpo_ba.parse_args(["--aggregator", "sequence", "--group-size", str(G)])
    return grpo_ba.step_diagnostics(rewards, grpo_ba.mask_from_lengths(torch.tensor(lengths)), args)


def test_sequence_gives_a_groups_longest_right_answer_l_short_over_l_long_of_the_shortests_weight_per_token():
    out = diagnostics()
    # groups 1 and 2 have right answers of two lengths; 3 has one right answer, 4 has A = 0
    expected = ((3 / 9) + (5 / 7)) / 2
    assert out["long_right_weight_sequence"] == pytest.approx(expected, rel=1e-6)
    assert out["long_right_weight"] == out["long_right_weight_sequence"]     # the run's own rule


@pytest.mark.parametrize("rule", ["token", "balanced"])
def test_token_and_balanced_give_every_right_token_the_same_weight_whatever_its_answers_length(rule):
    assert diagnostics()[f"long_right_weight_{rule}"] == pytest.approx(1.0, abs=1e-6)


def test_a_batch_without_two_right_answers_of_different_lengths_in_a_group_measures_nothing():
    out = diagnostics(REWARDS[8:], LENGTHS[8:])
    assert all(out[f"long_right_weight_{rule}"] is None for rule in grpo_ba.AGGREGATORS)


def test_the_measure_follows_the_rule_a_student_writes():
    def sequence_squared(per_token_loss, mask, advantages, group_size):      # 1/L^2 per token
        lengths = mask.sum(1).view(-1, group_size).clamp(min=1)
        sums = (per_token_loss * mask).sum(1).view(-1, group_size)
        return (sums / lengths ** 2).mean(dim=1).mean()
    mask = grpo_ba.mask_from_lengths(torch.tensor(LENGTHS))
    advantages = grpo_ba.group_advantages(REWARDS, G)
    ratio = grpo_ba.long_right_weight(mask, advantages, G, sequence_squared)
    assert ratio == pytest.approx(((3 / 9) ** 2 + (5 / 7) ** 2) / 2, rel=1e-6)


def test_a_group_whose_short_right_answer_gets_no_weight_is_skipped_not_turned_into_nan():
    """A capped rule (the course's own example) can zero a right answer's gradient: that group
    has no ratio, and the other groups' ratios still count."""
    def short_ones_silenced(per_token_loss, mask, advantages, group_size):  # answers under 5 tokens: 0
        lengths = mask.sum(1)
        sums = (per_token_loss * mask).sum(1) * (lengths >= 5)
        return (sums / lengths.clamp(min=1)).view(-1, group_size).mean(dim=1).mean()
    mask = grpo_ba.mask_from_lengths(torch.tensor(LENGTHS))
    advantages = grpo_ba.group_advantages(REWARDS, G)
    ratio = grpo_ba.long_right_weight(mask, advantages, G, short_ones_silenced)
    assert ratio == pytest.approx(5 / 7, rel=1e-6)          # the group of lengths 3 and 9 has no ratio


def test_the_story_prints_each_bias_in_its_row_and_the_figure_draws_each_in_its_panel(tmp_path):
    line = {"step": 0, "reward_mean": 0.5, "len_right": 5.0, "len_wrong": 20.0, "wrong_over_right": 4.0,
            "forced_frac": 0.5, "accuracy": 0.5, "pg_loss": 0.0, "entropy": 1.0}
    runs = {}
    for rule, share, long in (("token", 0.3, 1.0), ("sequence", 0.5, 0.6), ("balanced", 0.5, 1.0)):
        runs[rule] = [{**line, "step": s, "pos_share": share, "long_right_weight": long - 0.01 * s * (rule == "sequence")}
                      for s in range(3)]
    args = grpo_ba.parse_args(["--steps", "3"])
    lines = grpo_ba_plots.story(runs, args, ["m.png", "b.png"])
    row = next(text for text in lines if text.startswith("long/short right answer"))
    assert row.split()[-3:] == ["1.000", "0.590", "1.000"]
    text = " ".join(" ".join(lines).split())
    assert "share: the update's weight on right answers; 0.5 is unbiased. Token's share is expected below it here: sign-length coupling" in text
    assert "A gap in its panel, n/a for a whole run: no two weighted right answers of unequal length" in text
    assert "1 is unbiased, under it sequence equal-weighting" in text
    assert "starts 0.50 of the responses with a slip" in text and "wrong/right length at step 0 is 4.00" in text
    # a 3-step run's "last" window is its 3 steps, and the rows say so (the demo's 30 steps: last 10)
    assert any(text.startswith("right-answer length, step 0 -> last 3 ") for text in lines)
    assert not any("last 10" in text for text in lines)
    figure = grpo_ba_plots.mechanism_figure(runs, None, "three steps")
    titles = [ax.get_title() for ax in figure.axes]
    assert any("sequence equal-weighting" in t for t in titles) and any("sign-length coupling" in t for t in titles)
    assert any("started with a slip" in t for t in titles)
