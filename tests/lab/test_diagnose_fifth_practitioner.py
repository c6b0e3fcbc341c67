"""diagnose's decision path, a fifth practitioner's defects (issue 76): a run only at the edge of the designs it
rests on gets a distinct, weaker "borderline" recommendation; the recommendation names the rule the run trains
with and speaks of token only where that rule is a token rule; the JSON carries the decision batch's spread;
a verl dump's step-0 validation lines are named; two-valued rewards other than 0/1 are said to be refused.
diagnose_fifth_practitioner/*.jsonl are the practitioner's two borderline files, copied as they were."""
import json
import os
import re

import pytest

from grpo_ba_lab.analysis import diagnose

HERE = os.path.join(os.path.dirname(__file__), "diagnose_fifth_practitioner")


def write_lines(path, lines):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


def report(capsys, path):
    code = diagnose.main([path])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out, json.loads(out.strip().splitlines()[-1])


from test_diagnose_graded_and_first_step import gap_rollouts  # noqa: E402  (inside the gap-30 world, 0/1 rewards)


# ---- (a) borderline is a recommendation of its own


@pytest.mark.parametrize("name", ["top_edge.jsonl", "low_spread.jsonl"])
def test_a_run_only_at_the_designs_edges_gets_a_borderline_recommendation(capsys, name):
    """top_edge: ratio 6.15 [4.95, 7.76] above every design's top; low_spread: std/mean 0.37 below every gap-30
    design's units'. Both read "try balanced" exactly like a run inside."""
    out, summary = report(capsys, os.path.join(HERE, name))
    decision = summary["decision"]
    assert decision["recommendation"] == "borderline: try balanced"
    assert decision["coverage"]["overall"] == "borderline"
    assert decision["coverage"]["designs"] and set(decision["coverage"]["designs"].values()) == {"borderline"}
    printed = [line for line in out.splitlines() if line.startswith("recommendation:")]
    assert printed == [decision["recommendation_line"]] and printed[0].startswith("recommendation: borderline (")


def test_a_run_inside_a_design_keeps_its_plain_recommendation(tmp_path, capsys):
    _, summary = report(capsys, write_lines(tmp_path / "r.jsonl", gap_rollouts()))
    decision = summary["decision"]
    assert decision["recommendation"] == "try balanced" and decision["coverage"]["overall"] == "inside"
    assert "inside" in decision["coverage"]["designs"].values()
    assert not decision["recommendation_line"].startswith("recommendation: borderline")


def test_coverage_rests_on_the_designs_that_vote():
    """Inside a design without the balanced - token row, borderline for the one with it: borderline."""
    voting = diagnose.Design("A", "a.md", [1.0, 2.0], [0.3], [0.4, 0.6],
                             [diagnose.Finding("balanced - token, last held-out acc", 0.05, "+0.05", "holds", "holds")], "")
    silent = voting._replace(name="B", ratios=[1.0, 3.0], findings=[])
    assert diagnose.coverage([voting, silent], (1.5, 2.5), 0.5) == "borderline"
    assert diagnose.coverage([voting, silent], (1.5, 1.8), 0.5) == "inside"
    assert diagnose.coverage([silent], (1.5, 2.5), 0.5) == "inside"          # no vote: the covering designs
    assert diagnose.coverage([voting], (5.0, 6.0), 0.5) == "outside"


# ---- (b) the rule the run trains with


def test_a_sequence_run_is_not_told_to_replace_token_and_every_number_is_its_reports(tmp_path, capsys):
    _, summary = report(capsys, write_lines(tmp_path / "r.jsonl", gap_rollouts(loss_type="grpo")))
    decision = summary["decision"]
    line = decision["recommendation_line"]
    assert decision["recommendation"] == "trains with sequence" and decision["trained_with"]["family"] == "sequence"
    assert "loss_type='grpo'" in line and "in place of token" not in line and "balanced - sequence" in line
    cited = re.findall(r"\(assets/([^,)]+)", line)
    assert cited, line
    reports = "".join(open(os.path.join(diagnose.REPO, "assets", path)).read() for path in cited)
    for number in re.findall(r"[+-]\d\.\d{3}", line):                    # every pooled number is in a cited report
        assert number in reports, number


@pytest.mark.parametrize("fields, kind, said", [
    ({"loss_type": "dapo"}, "try balanced", "TRL's loss_type='dapo', a token rule"),
    ({"loss_type": "dapo", "aggregation_rule": "balanced"}, "trains with balanced", "aggregation_rule='balanced'"),
    ({"loss_type": "luspo"}, "rule not in the designs", "loss_type='luspo'"),
    ({}, "try balanced", "not recorded in the dump: read as token aggregation")])
def test_the_recommendation_names_the_rule_the_run_trains_with(tmp_path, capsys, fields, kind, said):
    _, summary = report(capsys, write_lines(tmp_path / "r.jsonl", gap_rollouts(**fields)))
    assert summary["decision"]["recommendation"] == kind and said in summary["decision"]["recommendation_line"]
    assert ("in place of token" in summary["decision"]["recommendation_line"]) == (kind == "try balanced")


def test_a_run_whose_lines_record_two_rules_is_one_line_and_exit_2(tmp_path, capsys):
    lines = gap_rollouts(loss_type="grpo")
    lines[5]["loss_type"] = "dapo"
    assert diagnose.main([write_lines(tmp_path / "r.jsonl", lines)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "one run trains with one rule" in err


# ---- (c) the decision's spread


def test_the_json_carries_the_decision_batchs_spread_not_the_files(tmp_path, capsys):
    first = gap_rollouts(groups=16, step=0)
    later = [{**line, "group": f"s1-{line['group']}", "step": 1, "length": line["length"] * (1 + i % 3)}
             for i, line in enumerate(gap_rollouts(groups=16))]
    out, summary = report(capsys, write_lines(tmp_path / "r.jsonl", first + later))
    rewards, lengths, size = diagnose.read_steps(str(tmp_path / "r.jsonl"))[0]
    step0 = diagnose.regime_stats(diagnose.group_advantages(rewards, size), lengths)["std_over_mean"]
    assert summary["decision"]["length_std_over_mean"] == pytest.approx(step0, rel=1e-5)
    assert abs(summary["std_over_mean"] - step0) > 0.05                    # the whole file's differs
    assert f"length std/mean {step0:.2f}" in out


# ---- (e) verl's step 0, (d) two-valued rewards


def test_a_verl_dump_with_validation_lines_is_told_to_drop_them_and_is_placed_without_them(tmp_path, capsys):
    validation = gap_rollouts(groups=4, step=0, trainer="verl")
    training = [{**line, "group": f"t{line['group']}"} for line in gap_rollouts(step=1, trainer="verl")]
    _, summary = report(capsys, write_lines(tmp_path / "with.jsonl", validation + training))
    assert summary["decision"]["recommendation"] == "not step 0"
    assert "drop the step-0 lines" in summary["decision"]["recommendation_line"]
    _, dropped = report(capsys, write_lines(tmp_path / "without.jsonl", training))
    assert dropped["decision"]["recommendation"] == "try balanced"


def test_two_valued_rewards_other_than_0_1_are_refused_with_how_to_rescale(tmp_path, capsys):
    _, pm1 = report(capsys, write_lines(tmp_path / "pm1.jsonl", gap_rollouts(rewards=(1, -1, 1, -1))))
    assert pm1["decision"]["recommendation"] == "graded rewards"
    assert "Two-valued rewards other than 0 and 1" in pm1["decision"]["recommendation_line"]
    _, rescaled = report(capsys, write_lines(tmp_path / "01.jsonl", gap_rollouts()))   # (r + 1) / 2
    assert rescaled["decision"]["recommendation"] == "try balanced"
    for key in ("pos_share_token", "neg_over_pos"):                     # what the line says the rescaling keeps
        assert pm1[key] == pytest.approx(rescaled[key], rel=1e-5)
