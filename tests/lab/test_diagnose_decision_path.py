"""diagnose's decision path read as a practitioner reads it (issue 76's last defects): a masked run whose
bootstrap leaves resamples out, groups without a signal counted as the decision counts them, counts in
agreeing plurals, the identity note only under the numbers it names, and the trainer's advantage scale
recorded as it was."""
import json
import re

import pytest

from grpo_ba_lab.analysis import diagnose


def write_lines(path, lines):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


def run_diagnose(capsys, *argv):
    code = diagnose.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def report(tmp_path, capsys, lines, name="r.jsonl"):
    code, out, err = run_diagnose(capsys, write_lines(tmp_path / name, lines))
    assert code == 0, err
    return out, json.loads(out.strip().splitlines()[-1])


def wrong_masked_rollouts(groups, unmasked_wrong, ratio=3.0, right=1000):
    """Binary groups of G = 4, two right and two wrong answers, right lengths varying from group to group,
    wrong ones round(ratio * right): inside only the gap-30 world's designs. The wrong answers of all but
    the first `unmasked_wrong` groups are masked to length 0, as mask_truncated_completions leaves the
    longest ones, so only those groups carry a wrong answer in the loss."""
    lines = []
    for g in range(groups):
        for reward, length in ((1, right - 20 * (g % 5)), (0, round(ratio * right)),
                               (1, right + 20 * (g % 5)), (0, round(ratio * right))):
            masked = reward == 0 and g >= unmasked_wrong
            lines.append({"group": g, "reward": reward, "length": 0 if masked else length})
    return lines


# ---- 1. resamples left out of the interval, and groups on each side


def test_a_heavily_masked_run_whose_resamples_are_left_out_gets_no_recommendation(tmp_path, capsys):
    """One group keeps its wrong answers in the loss, 15 lose them: a resample that misses that group has
    no ratio, about (1 - 1/16)^16 = 36% of them. Before, the interval was taken over the rest, silently,
    and the run got "try balanced" from that one group's two wrong answers."""
    out, summary = report(tmp_path, capsys, wrong_masked_rollouts(16, 1))
    decision = summary["decision"]
    assert decision["groups_with_signal"] == 16 >= diagnose.MIN_SIGNAL_GROUPS          # not caught by the minimum
    assert (decision["groups_with_right"], decision["groups_with_wrong"]) == (16, 1)
    assert decision["resamples_left_out"] == pytest.approx((1 - 1 / 16) ** 16, abs=0.04)
    assert decision["resamples_left_out"] > decision["max_left_out"] == diagnose.MAX_LEFT_OUT
    assert decision["recommendation"] == "too many resamples left out"
    assert decision["recommendation_line"].startswith(
        f"recommendation: none: {decision['resamples_left_out']:.1%} of the bootstrap's resamples")
    assert f"resamples left out of the interval (no right or no wrong answer in the loss): " \
           f"{decision['resamples_left_out']:.1%} of {diagnose.BOOTSTRAP_RESAMPLES}" in out
    # the control: the same run unmasked leaves none out and is placed
    _, plain = report(tmp_path, capsys, wrong_masked_rollouts(16, 16), "plain.jsonl")
    assert plain["decision"]["resamples_left_out"] == 0.0
    assert plain["decision"]["recommendation"] == "try balanced"


def test_the_threshold_is_what_keeps_the_printed_interval_at_the_simulations_coverage():
    """Up to MAX_LEFT_OUT left out, the 95% interval of the rest holds at least 90% of all resamples,
    the coverage the simulation's 0.85 floor was set from (0.90 less three standard errors)."""
    assert diagnose.MAX_LEFT_OUT == pytest.approx(1 - diagnose.BOOTSTRAP_LEVEL)
    assert diagnose.BOOTSTRAP_LEVEL * (1 - diagnose.MAX_LEFT_OUT) >= 0.90
    assert diagnose.BOOTSTRAP_LEVEL * (1 - 2 * diagnose.MAX_LEFT_OUT) < 0.90


def test_the_simulations_runs_leave_no_resample_out():
    """The simulation's groups (binary, unmasked) each have both signs: its coverage is at 0 left out."""
    import torch
    from grpo_ba_lab.analysis import diagnose_min_groups as simulation
    pool = simulation.population(4, 1.9, 0.8, torch.Generator().manual_seed(3))
    assert bool(((pool[:, 1] > 0) & (pool[:, 3] > 0)).all())
    bounds = diagnose.bootstrap(pool[:diagnose.MIN_SIGNAL_GROUPS].unsqueeze(0), resamples=200)
    assert bounds["left_out"].tolist() == [0.0]


def test_a_run_with_wrong_answers_in_the_loss_in_few_groups_gets_no_recommendation(tmp_path, capsys):
    """20 groups, 4 with a wrong answer in the loss: few resamples miss all 4 ((1 - 4/20)^20, about 1%),
    but the ratio's wrong side rests on 4 groups, where the simulation saw the interval cover 78-83%."""
    _, summary = report(tmp_path, capsys, wrong_masked_rollouts(20, 4))
    decision = summary["decision"]
    assert decision["resamples_left_out"] <= diagnose.MAX_LEFT_OUT
    assert decision["recommendation"] == "too few groups on one side"
    assert "a wrong answer in the loss in only 4 groups, fewer than the 12" in decision["recommendation_line"]


def test_a_run_with_exactly_the_minimum_on_each_side_passes_the_sample_checks(tmp_path, capsys):
    """The sample checks pass at the minimum; a masked response with an advantage is then what refuses it
    (test_a_masked_run_that_passes_every_sample_check_is_not_placed), and without it the run is placed."""
    lines = wrong_masked_rollouts(diagnose.MIN_SIGNAL_GROUPS, diagnose.MIN_SIGNAL_GROUPS)
    _, summary = report(tmp_path, capsys, lines)
    decision = summary["decision"]
    assert decision["groups_with_right"] == decision["groups_with_wrong"] == diagnose.MIN_SIGNAL_GROUPS
    assert decision["resamples_left_out"] == 0.0 and decision["recommendation"] == "try balanced"
    lines[1]["length"] = 0                                  # one wrong answer masked; its group keeps the other
    _, summary = report(tmp_path, capsys, lines, "masked.jsonl")
    decision = summary["decision"]
    assert decision["groups_with_right"] == decision["groups_with_wrong"] == diagnose.MIN_SIGNAL_GROUPS
    assert decision["resamples_left_out"] == 0.0 and decision["recommendation"] == "masked responses"


# ---- 3. groups without a signal: every kind, as the decision counts them


def test_groups_without_signal_count_tied_and_masked_groups_as_the_decision_does(tmp_path, capsys):
    lines = [{"group": "ok", "reward": r, "length": n} for r, n in ((1, 5), (0, 9), (1, 6), (0, 11))]
    lines += [{"group": "tied", "reward": 1, "length": n} for n in (4, 7, 5, 6)]
    lines += [{"group": "masked", "reward": r, "length": 0} for r in (1, 0, 0, 0)]           # every response cut
    lines += [{"group": "half", "reward": r, "length": n} for r, n in ((1, 0), (0, 0), (0, 0), (0, 0))]
    out, summary = report(tmp_path, capsys, lines)
    assert summary["groups_without_signal"] == 3 and summary["groups_tied"] == 1
    assert summary["n_groups"] - summary["groups_without_signal"] == summary["decision"]["groups_with_signal"] == 1
    assert ("groups without a signal in the loss (no gradient under any rule): 3 of 4 (1 with all rewards "
            "equal, 2 with every response that has an advantage at length 0)") in out


def test_a_masked_response_in_a_tied_group_takes_no_signal_away(tmp_path, capsys):
    lines = [{"group": "ok", "reward": r, "length": n} for r, n in ((1, 5), (0, 9), (1, 6), (0, 11))]
    lines += [{"group": "tied", "reward": 0, "length": n} for n in (0, 7, 5, 6)]
    out, summary = report(tmp_path, capsys, lines)
    assert (summary["groups_without_signal"], summary["groups_tied"]) == (1, 1)
    assert "no gradient under any rule): 1 of 2 (all rewards equal)" in out
    assert summary["shares_are_identities"] is True and "identities here" in out    # the masked one had no advantage


# ---- 4. counts and their nouns agree


ONE_WORD = re.compile(r"(?<![\d.])1 (groups|responses|lines|designs|worlds)\b")


def test_every_count_of_one_is_printed_in_the_singular(tmp_path, capsys):
    lines = [{"group": "q", "reward": r, "length": n} for r, n in ((1, 5), (0, 0), (1, 6), (0, 11))]
    out, _ = report(tmp_path, capsys, lines)
    assert "4 responses in 1 group of 4" in out and not ONE_WORD.search(out), ONE_WORD.search(out)
    assert "(no identity here: 1 response of length 0 with an advantage takes its advantage out" in out
    two = write_lines(tmp_path / "two.jsonl", [{"group": "q", "reward": 1, "length": 3, "run": "a"},
                                               {"group": "q", "reward": 0, "length": 4, "run": "a"},
                                               {"group": "q", "reward": 1, "length": 3, "run": "b"}])
    code, _, err = run_diagnose(capsys, two)
    assert code == 2 and "run b (1 response, from line 3)" in err and not ONE_WORD.search(err)
    unequal = write_lines(tmp_path / "unequal.jsonl", [{"group": "a", "reward": 1, "length": 3},
                                                       {"group": "a", "reward": 0, "length": 4},
                                                       {"group": "b", "reward": 1, "length": 3}])
    code, _, err = run_diagnose(capsys, unequal)
    assert code == 2 and "group \"b\" has 1 response," in err


# ---- 5. the identity note only where the table shows it


def test_when_every_group_is_tied_no_identity_is_claimed_under_n_a(tmp_path, capsys):
    lines = [{"group": g, "reward": g, "length": n} for g in (0, 1) for n in (4, 9, 5, 7)]
    out, summary = report(tmp_path, capsys, lines)
    table = out.split("rule       share of gradient weight")[1].split("\n\n")[0]
    assert "sequence   n/a" in table and "balanced   n/a" in table
    assert "identities here" not in out and "no identity here" not in out
    assert summary["shares_are_identities"] is False
    assert summary["groups_without_signal"] == summary["groups_tied"] == 2


def test_the_identity_note_stands_under_0500_and_zero_loss_only():
    base = {"shares_are_identities": True, "pos_share_sequence": 0.5, "pos_share_balanced": 0.5,
            "loss_at_ratio_one_sequence": -1e-9, "loss_at_ratio_one_balanced": 0.0}
    assert diagnose._identity_notes(base) and "identities here" in diagnose._identity_notes(base)[0]
    assert diagnose._identity_notes({**base, "pos_share_balanced": 0.4}) == []
    assert diagnose._identity_notes({**base, "loss_at_ratio_one_sequence": -0.2419}) == []
    assert diagnose._identity_notes({**base, "pos_share_sequence": None}) == []


# ---- 6. the trainer's advantage scale, recorded as it was


def test_a_normalize_then_sum_dump_is_refused_without_a_flag_and_read_with_adv_scale_std(tmp_path, capsys):
    """TRL's normalize_then_sum standardises each group (unbiased std + 1e-4), then divides by one std of
    the whole batch: the shares and the ratio are std's; the JSON says which scale the trainer used."""
    rows = [{"group": g, "reward": r, "length": n, "std": "unbiased", "eps": 1e-4}
            for g, r, n in (("a", 1, 4), ("a", 0, 9), ("a", 0, 12), ("a", 1, 3), ("b", 1, 3), ("b", 0, 8),
                            ("b", 1, 5), ("b", 1, 6))]
    nts = write_lines(tmp_path / "nts.jsonl", [{**row, "adv_scale": "normalize_then_sum"} for row in rows])
    code, out, err = run_diagnose(capsys, nts)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "normalize_then_sum" in err and "--adv-scale std" in err
    std = diagnose.diagnose(write_lines(tmp_path / "std.jsonl", [{**row, "adv_scale": "std"} for row in rows]))
    read = diagnose.diagnose(nts, adv_scale="std")
    for key in ("pos_share_token", "pos_share_sequence", "pos_share_balanced", "neg_over_pos"):
        assert read[key] == pytest.approx(std[key], rel=1e-6), key
    assert (read["adv_scale"], read["trainer_adv_scale"], std["trainer_adv_scale"]) == ("std", "normalize_then_sum",
                                                                                         "std")
    code, out, _ = run_diagnose(capsys, nts, "--adv-scale", "std")
    assert code == 0 and "read for the trainer's normalize_then_sum" in out.split("\n")[0]
    assert json.loads(out.strip().splitlines()[-1])["trainer_adv_scale"] == "normalize_then_sum"


# ---- a run too small to recommend from is not placed either


def test_a_two_group_run_is_not_placed_where_its_recommendation_says_it_is_not(tmp_path, capsys):
    """Before, a 2-group run's table said "inside" four designs, listed their verdicts and its JSON named
    three worlds, while its last line said "these numbers ... do not place the run"."""
    lines = wrong_masked_rollouts(2, 2)
    out, summary = report(tmp_path, capsys, lines)
    decision = summary["decision"]
    assert decision["recommendation"] == "too few groups"
    assert set(decision["designs"].values()) == {"not placed"} and decision["worlds"] == []
    block = out.split("decision:")[1]
    assert "inside" not in block and "borderline" not in block and "what the designs covering" not in block
    assert "  not placed against the designs: the last line says why" in block
    # the control: the same run with the minimum number of groups is placed
    _, enough = report(tmp_path, capsys, wrong_masked_rollouts(diagnose.MIN_SIGNAL_GROUPS,
                                                                diagnose.MIN_SIGNAL_GROUPS), "enough.jsonl")
    assert "inside" in enough["decision"]["designs"].values() and enough["decision"]["worlds"]


def test_a_run_whose_wrong_answers_are_all_masked_is_not_said_to_lack_groups_with_both_signs(tmp_path, capsys):
    """Every group has right and wrong answers, all the wrong ones masked: the reading once said "no group
    has both signs of advantage", which these groups have; what they lack is both signs in the loss."""
    out, summary = report(tmp_path, capsys, wrong_masked_rollouts(3, 0))
    assert summary["neg_over_pos"] is None and summary["groups_without_signal"] == 0
    reading = " ".join(out.split("reading: ")[1].split("\n\n")[0].split())
    assert "no group has both signs" not in reading
    assert "the responses in the loss do not have both signs of advantage" in reading


# ---- 7. the practitioner's third trial: masked runs, the token rule named, resumed dumps, a contradicting flag


def test_a_masked_run_that_passes_every_sample_check_is_not_placed(tmp_path, capsys):
    """No registered design masks any response, and masking moves what places a run: with the longest wrong
    answers masked, balanced's share leaves 0.5 and token's can pass it (the trial's masked_share.jsonl: token
    0.534, above every gap-30 design's range, balanced 0.750). Before, such a run was placed by its ratio
    alone and told "try balanced"; now it gets no recommendation and its numbers are still printed."""
    lines = wrong_masked_rollouts(16, 16, ratio=2.6)
    for g in range(16):                                 # in every group one of the two wrong answers is masked
        lines[4 * g + 3]["length"] = 0
    out, summary = report(tmp_path, capsys, lines)
    decision = summary["decision"]
    assert summary["pos_share_balanced"] != pytest.approx(0.5)                   # measured, not the identity
    assert (decision["groups_with_signal"], decision["resamples_left_out"]) == (16, 0.0)   # the sample checks pass
    assert decision["masked_with_advantage"] == 16 and decision["recommendation"] == "masked responses"
    line = decision["recommendation_line"]
    assert line.startswith("recommendation: none: 16 responses at length 0 (16 with an advantage)")
    assert "no registered design masks any" in line and "a dump of the run without masking" in line
    assert line in out.splitlines() and "\n" not in line                        # one line, as printed
    assert set(decision["designs"].values()) == {"not placed"} and decision["worlds"] == []
    assert decision["ratio"] == pytest.approx(2.6, rel=0.02) and decision["ratio_interval"] is not None
    assert "  this run (the whole file as one batch): wrong/right (by reward, as the designs' step 0) 2.6" in out   # its numbers stay
    # a length-0 response without an advantage (a tied group, e.g. an all-wrong group truncated and masked)
    # takes its length out of the by-reward means the designs' ratio counts it in: not placed either
    plain = wrong_masked_rollouts(16, 16, ratio=2.6)
    plain += [{"group": "tied", "reward": 0, "length": n} for n in (0, 900, 1000, 1100)]
    _, summary = report(tmp_path, capsys, plain, "tied.jsonl")
    decision = summary["decision"]
    assert summary["n_length_zero"] == 1 and decision["masked_with_advantage"] == 0 and decision["length_zero"] == 1
    assert decision["recommendation"] == "masked responses"
    assert decision["recommendation_line"].startswith("recommendation: none: 1 response at length 0 (0 with an")
    _, unmasked = report(tmp_path, capsys, [dict(line, length=line["length"] or 1000) for line in plain], "u.jsonl")
    assert unmasked["decision"]["recommendation"] == "try balanced"          # the same run without masking


def test_a_recommendation_that_names_token_says_which_token_rule(tmp_path, capsys):
    """The printed share is the toy's per-group token rule; TRL's default loss_type 'dapo' pools the batch.
    The recommendation line, where a practitioner acts, says so, and so does the run's line."""
    out, summary = report(tmp_path, capsys, wrong_masked_rollouts(16, 16))
    line = summary["decision"]["recommendation_line"]
    assert line.startswith("recommendation: try balanced in place of token aggregation (token: per group, the "
                           "designs' rule and the printed share's; TRL's default 'dapo' pools the batch; your run: "
                           "not recorded in the dump: read as token aggregation): ")
    assert "token's share (per group) on right answers" in out
    for kind in ("test balanced", "do not switch", "compare the rules"):   # every line that acts on token says it
        assert diagnose.TOKEN_RULE in _line_of_kind(kind)


def _line_of_kind(kind):
    """The recommendation of the given kind, from a made-up design covering the ratio 2."""
    finding = {"test balanced": [("a", 0.05, "holds"), ("b", 0.01, "not detected")],
               "do not switch": [("a", -0.05, "holds")], "compare the rules": [("a", 0.01, "not detected")]}[kind]
    designs = [diagnose.Design(name, "report", [1.0, 3.0], [0.3], [0.5],
                               [diagnose.Finding("balanced - token, last held-out acc", mean, f"{mean:+.3f}",
                                                 word if word != "not detected" else
                                                 "not detected (differences of 0.05 or more would have been seen "
                                                 "at 80% power)", word)], "", f"world {name}")
               for name, mean, word in finding]
    found, line = diagnose.recommendation(designs, (1.9, 2.1))
    assert found == kind
    return line


def test_a_resumed_dump_is_not_placed_against_the_designs_step_0_ranges(tmp_path, capsys):
    """A dump that starts at step 500 (a resumed run) was placed against the designs' step-0 ranges without
    a word. It is now not placed, says why in one line, and its numbers are still printed."""
    lines = wrong_masked_rollouts(16, 16)
    out, summary = report(tmp_path, capsys, [{**line, "step": 500} for line in lines])
    decision = summary["decision"]
    assert (decision["placed_on"], decision["step"]) == ("step 500's batch", 500)
    assert decision["recommendation"] == "not step 0"
    assert decision["recommendation_line"] == (
        "recommendation: none: this batch is step 500's, the dump's first, and the run's first training step is 0 "
        "(TRL's, and that of lines without \"trainer\"; a verl dump's lines need \"trainer\": \"verl\", whose "
        "first is 1) (a resumed run?); the designs' ranges are their runs' first step's, so it is not placed "
        "against them; to place the run, diagnose a dump that starts at its first step")
    assert set(decision["designs"].values()) == {"not placed"} and decision["ratio"] is not None
    # the control: the same batch at step 0 is placed
    _, summary = report(tmp_path, capsys, [{**line, "step": 0} for line in lines], "fresh.jsonl")
    assert (summary["decision"]["step"], summary["decision"]["recommendation"]) == (0, "try balanced")


@pytest.mark.parametrize("recorded, wrong, right", [("batch", "std", "none"), ("normalize_then_sum", "none", "std")])
def test_a_flag_that_contradicts_the_dumps_recorded_batch_scale_is_refused(tmp_path, capsys, recorded, wrong, right):
    """--adv-scale std on a dump whose trainer_adv_scale is "batch" was read silently as per-group std
    advantages, which TRL did not use. One line now refuses it and names the flag that reads the dump."""
    rows = [{"group": g, "reward": r, "length": n, "adv_scale": recorded, "std": "unbiased", "eps": 1e-4}
            for g, r, n in (("a", 1, 4), ("a", 0, 9), ("b", 1, 3), ("b", 0, 8))]
    path = write_lines(tmp_path / "dump.jsonl", rows)
    code, out, err = run_diagnose(capsys, path, "--adv-scale", wrong)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert f"--adv-scale {wrong} contradicts it" in err and f"pass --adv-scale {right}" in err
    assert run_diagnose(capsys, path, "--adv-scale", right)[0] == 0


def test_the_simulations_summary_counts_agree_with_their_nouns():
    """The committed table and the page once printed "1 groups"; the script now words its counts with
    diagnose.count_of, and the committed table (its numbers unchanged) and the page follow."""
    import os
    from grpo_ba_lab.analysis import diagnose_min_groups as simulation
    said = simulation.worst_line({count: 0.5 for count in simulation.GRID})
    assert "1 group 0.500" in said and not ONE_WORD.search(said)
    for page in ("assets/diagnose-min-groups/table.txt", "docs/diagnose.md"):
        with open(os.path.join(diagnose.REPO, page)) as f:
            text = f.read()
        assert "worst coverage over the settings and both intervals: 1 group 0.000, 2 groups" in text, page
