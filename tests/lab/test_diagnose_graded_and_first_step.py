"""diagnose's decision path, a fourth practitioner's defects (issue 76): a batch with graded rewards is not
placed against the designs, whose rewards are all 0 or 1, and a verl dump, whose first training step is
global_steps = 1, is placed by that step rather than refused as resumed."""
import json

import pytest

from grpo_ba_lab.analysis import diagnose


def write_lines(path, lines):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


def report(tmp_path, capsys, lines, name="r.jsonl"):
    code = diagnose.main([write_lines(tmp_path / name, lines)])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out, json.loads(out.strip().splitlines()[-1])


def gap_rollouts(groups=32, rewards=(1, 0, 1, 0), ratio=2.76, right=1000, **extra):
    """Groups of G = 4 whose right answers (reward > 0.5) vary in length from group to group and whose
    wrong ones are round(ratio * right) long: inside the gap-30 world's designs when the rewards are 0/1."""
    lines = []
    for g in range(groups):
        for at, reward in enumerate(rewards):
            length = right + (-1) ** at * 20 * (g % 5) if reward > 0.5 else round(ratio * right)
            lines.append({"group": g, "reward": reward, "length": length, **extra})
    return lines


# ---- A. graded rewards


def test_a_batch_with_graded_rewards_is_not_placed_and_its_numbers_are_still_printed(tmp_path, capsys):
    """The practitioner's case: rewards (1, 0, 0.49, 0.49) in 32 groups. The 0.49s carry small negative
    advantages, so token's share sits near 0.49 at a ratio of 2.76, above every gap-30 design's share range:
    before, it was placed inside them by its ratio and read "try balanced"."""
    out, summary = report(tmp_path, capsys, gap_rollouts(rewards=(1, 0, 0.49, 0.49)))
    decision = summary["decision"]
    assert decision["graded_rewards"] == 64
    assert decision["recommendation"] == "graded rewards"
    assert decision["recommendation_line"].startswith(
        "recommendation: none: 64 responses with a reward other than 0 or 1, and every registered design")
    assert "binary rewards" in decision["recommendation_line"]
    assert set(decision["designs"].values()) == {"not placed"} and decision["worlds"] == []
    assert decision["ratio"] is not None and decision["share"] is not None       # its numbers, still printed
    assert decision["ratio_interval"] is not None and "this run (" in out
    assert out.strip().splitlines()[-2] == decision["recommendation_line"]
    # the control: the same lengths with 0/1 rewards are placed
    _, binary = report(tmp_path, capsys, gap_rollouts(rewards=(1, 0, 1, 0)), "binary.jsonl")
    assert binary["decision"]["graded_rewards"] == 0
    assert binary["decision"]["recommendation"] not in diagnose.NOT_PLACED


@pytest.mark.parametrize("reward", [0.5, 2.0, -1.0])
def test_one_graded_reward_is_enough_to_refuse_and_rewards_of_exactly_0_and_1_are_not(tmp_path, capsys, reward):
    lines = gap_rollouts(rewards=(1, 0, 1, 0))
    lines[2]["reward"] = reward
    _, summary = report(tmp_path, capsys, lines)
    assert summary["decision"]["graded_rewards"] == 1
    assert summary["decision"]["recommendation"] == "graded rewards"


def test_graded_rewards_are_refused_before_the_sample_checks(tmp_path, capsys):
    """Whatever the sample, the designs do not speak to a graded batch: a 2-group one says that, not
    "too few groups" (a fix of the sample would not let it be placed)."""
    _, summary = report(tmp_path, capsys, gap_rollouts(groups=2, rewards=(1, 0, 0.3, 0)))
    assert summary["decision"]["recommendation"] == "graded rewards"


# ---- B. the trainer's first step


def test_a_verl_dump_from_its_first_step_is_placed_when_its_lines_say_verl(tmp_path, capsys):
    """verl's ray_trainer counts global_steps from 1; a dump of its first batch has step 1."""
    lines = gap_rollouts(step=1, std="unbiased")
    _, unnamed = report(tmp_path, capsys, lines, "unnamed.jsonl")
    assert unnamed["decision"]["recommendation"] == "not step 0"               # read as TRL's: step 0 first
    assert '"trainer": "verl"' in unnamed["decision"]["recommendation_line"]   # and it names the way out
    _, named = report(tmp_path, capsys, [{**line, "trainer": "verl"} for line in lines], "verl.jsonl")
    assert (named["decision"]["step"], named["decision"]["first_step"]) == (1, 1)
    assert named["decision"]["recommendation"] not in diagnose.NOT_PLACED
    assert named["decision"]["recommendation"] == (
        report(tmp_path, capsys, gap_rollouts(step=0, std="unbiased"), "trl.jsonl")[1]["decision"]["recommendation"])


@pytest.mark.parametrize("step, resumed", [(2, True), (0, False)])
def test_a_verl_dump_that_starts_after_or_before_its_first_step_is_not_placed(tmp_path, capsys, step, resumed):
    """Step 2 is a resumed run's; verl's step 0 is its validation before training, not a training batch."""
    _, summary = report(tmp_path, capsys, gap_rollouts(step=step, trainer="verl"))
    line = summary["decision"]["recommendation_line"]
    assert summary["decision"]["recommendation"] == "not step 0"
    if resumed:
        assert f"this batch is step {step}'s" in line and "first training step is 1 (verl's)" in line
        assert "a resumed run?" in line
    else:                        # step 0 in a verl dump is its validation: the line says to drop those lines
        assert "verl's step 0 is its validation" in line and "drop the step-0 lines" in line


def test_a_trl_dump_still_starts_at_step_0(tmp_path, capsys):
    _, summary = report(tmp_path, capsys, gap_rollouts(step=1, trainer="trl"))
    assert summary["decision"]["recommendation"] == "not step 0"
    assert report(tmp_path, capsys, gap_rollouts(step=0, trainer="trl"), "zero.jsonl")[1]["decision"][
        "recommendation"] not in diagnose.NOT_PLACED


@pytest.mark.parametrize("change, words", [
    ({"trainer": "openrlhf"}, "'trainer' must be one of"),
    ({"trainer": 1}, "'trainer' must be one of"),
])
def test_an_unknown_trainer_or_two_trainers_in_one_run_is_one_line_and_exit_2(tmp_path, capsys, change, words):
    lines = gap_rollouts(step=0)
    lines[5].update(change)
    assert diagnose.main([write_lines(tmp_path / "r.jsonl", lines)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err and "line 6" in err
    mixed = gap_rollouts(step=1, trainer="verl")
    mixed[7]["trainer"] = "trl"
    assert diagnose.main([write_lines(tmp_path / "mixed.jsonl", mixed)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "one run has one trainer" in err and "line 8" in err


# ---- C. a spread outside a design's, inside its ratio range


def test_a_run_inside_by_its_ratio_with_a_spread_outside_is_borderline_and_says_why(tmp_path, capsys):
    """One right answer and three wrong ones 2.76 times as long per group: inside every gap-30 design's
    ratio range, with a length std/mean near 0.33, below each one's step-0 spreads. It read plain "inside"."""
    designs = {d.name: d for d in diagnose.registered_designs(diagnose.REPO)}
    _, summary = report(tmp_path, capsys, gap_rollouts(rewards=(1, 0, 0, 0)))
    decision, spread = summary["decision"], summary["std_over_mean"]
    low, high = decision["ratio_interval"]
    ratio_inside = [n for n, d in designs.items() if d.ratios and min(d.ratios) <= low and high <= max(d.ratios)]
    assert {"strong-band-v3", "endless-band-v3"} <= set(ratio_inside)                     # a real case
    for name in ratio_inside:
        off = not min(designs[name].spreads) <= spread <= max(designs[name].spreads)
        assert decision["designs"][name] == ("borderline" if off else "inside"), name
    assert decision["designs"]["strong-band-v3"] == "borderline"
    line = decision["recommendation_line"]
    strong = designs["strong-band-v3"].spreads
    assert (f"strong-band-v3 (your length std/mean {spread:.2f} outside its units' {min(strong):.2f}-"
            f"{max(strong):.2f})") in line and "each counts as covering" in line
    # the control: two right and two wrong answers 4.5 times as long, a spread inside every gap-30 design's
    _, summary = report(tmp_path, capsys, gap_rollouts(ratio=4.5), "wide.jsonl")
    spread = summary["std_over_mean"]
    for name, d in designs.items():
        if summary["decision"]["designs"][name] != "outside":
            assert min(d.spreads) <= spread <= max(d.spreads), name
            assert summary["decision"]["designs"][name] == "inside", name
    assert "std/mean" not in summary["decision"]["recommendation_line"]


def test_the_share_does_not_place_the_run():
    """The designs' shares are run means over steps, not step 0's: a share outside them changes nothing."""
    design = diagnose.Design._make([None] * len(diagnose.Design._fields))._replace(
        name="d", ratios=[1.0, 3.0], shares=[0.2, 0.3], spreads=[0.4, 0.8])
    assert diagnose.place(design, (1.5, 2.5), 0.6) == "inside"
    assert diagnose.place(design, (1.5, 2.5), 0.3) == "borderline"
    assert diagnose.place(design, (1.5, 2.5)) == "inside"
    assert diagnose.place(design, (0.5, 2.5), 0.6) == "borderline"
    assert diagnose.place(design, (3.5, 4.0), 0.3) == "outside"
