"""The diagnosis of a rollouts file (grpo_ba_lab/analysis/diagnose.py) against a computation in plain Python."""
import json
import re
import random
import statistics

import pytest

from grpo_ba_lab.analysis import diagnose

# Long wrong answers: three prompts of G = 4 with 2, 1 and 3 right answers (reward 1).
LONG_WRONG = [("a", 1, 6), ("a", 0, 19), ("a", 1, 5), ("a", 0, 23),
              ("b", 1, 7), ("b", 0, 15), ("b", 0, 21), ("b", 0, 8),
              ("c", 1, 4), ("c", 1, 9), ("c", 0, 30), ("c", 1, 6)]
REQUIRED = {"pos_share_token", "pos_share_sequence", "pos_share_balanced", "token_loss_at_ratio_one",
            "len_pos", "len_neg", "std_over_mean", "n_groups", "group_size"}


def write_rollouts(path, rows):
    path.write_text("".join(json.dumps({"group": g, "reward": r, "length": n}) + "\n" for g, r, n in rows))
    return str(path)


def run_diagnose(capsys, *argv):
    code = diagnose.main(list(argv))                  # python -m grpo_ba_lab.analysis.diagnose ARGV
    out, err = capsys.readouterr()
    return code, out, err


def by_hand(rows, adv_scale="std"):
    """The expected numbers from docs/method.md §1 and §3, written out in plain floats."""
    groups = {}
    for g, r, n in rows:
        groups.setdefault(g, []).append((float(r), float(n)))
    w_pos = w_neg = 0.0
    token_losses, signed = [], []
    for members in groups.values():
        rewards = [r for r, _ in members]
        mean = statistics.fmean(rewards)
        scale = statistics.pstdev(rewards) + 1e-6 if adv_scale == "std" else 1.0
        total_len = sum(n for _, n in members)
        for r, n in members:
            a = (r - mean) / scale
            weight = a * n / total_len            # token rule: every token weighs A_i / sum_j L_j
            w_pos += weight if a > 0 else 0.0
            w_neg += weight if a < 0 else 0.0
            signed.append((a, n))
        token_losses.append(-sum((r - mean) / scale * n for r, n in members) / total_len)
    lengths = [n for _, _, n in rows]
    return {"pos_share_token": abs(w_pos) / (abs(w_pos) + abs(w_neg)),
            "token_loss_at_ratio_one": statistics.fmean(token_losses),
            "len_pos": statistics.fmean(n for a, n in signed if a > 0),
            "len_neg": statistics.fmean(n for a, n in signed if a < 0),
            "std_over_mean": statistics.pstdev(lengths) / statistics.fmean(lengths),
            "n_groups": len(groups), "group_size": len(rows) // len(groups)}


def test_diagnose_with_long_wrong_answers_matches_a_hand_computation(tmp_path, capsys):
    code, out, err = run_diagnose(capsys, write_rollouts(tmp_path / "r.jsonl", LONG_WRONG))
    assert code == 0 and err == ""
    summary = json.loads(out.strip().splitlines()[-1])               # the last line is one JSON object
    assert REQUIRED <= summary.keys()
    expected = by_hand(LONG_WRONG)
    for key, value in expected.items():
        assert summary[key] == pytest.approx(value, rel=1e-5), key
    assert summary["pos_share_token"] < 0.35                         # the long side takes the weight
    assert summary["pos_share_sequence"] == pytest.approx(0.5, abs=1e-6)
    assert summary["pos_share_balanced"] == pytest.approx(0.5, abs=1e-6)
    assert summary["token_loss_at_ratio_one"] > 0.1                  # the drift: a net push down
    assert "reading:" in out and "Qwen3-1.7B" in out and "Lbar-/Lbar+" in out


def test_diagnose_applies_adv_scale_none_with_non_binary_rewards(tmp_path, capsys):
    rows = [("p", 0.9, 12), ("p", 0.1, 3), ("p", 0.4, 20), ("q", 2.0, 5), ("q", -1.0, 40), ("q", 0.5, 9)]
    path = write_rollouts(tmp_path / "r.jsonl", rows)
    summaries = {}
    for scale in ("std", "none"):
        code, out, _ = run_diagnose(capsys, path, "--adv-scale", scale)
        assert code == 0
        summaries[scale] = json.loads(out.strip().splitlines()[-1])
        for key, value in by_hand(rows, scale).items():
            assert summaries[scale][key] == pytest.approx(value, rel=1e-5), (scale, key)
        # sum_i A_i = 0 in a group, so sequence splits the weight evenly for any rewards (balanced too
        # where its signs weigh by advantage mass, not by counts: graded rewards tell the two forms apart)
        assert summaries[scale]["pos_share_sequence"] == pytest.approx(0.5, abs=1e-6)
        assert "identities here" not in out                     # graded rewards: no identity is claimed
    assert summaries["none"]["token_loss_at_ratio_one"] != pytest.approx(summaries["std"]["token_loss_at_ratio_one"])


def test_diagnose_groups_responses_by_id_not_by_position(tmp_path, capsys):
    shuffled = LONG_WRONG[:]
    random.Random(0).shuffle(shuffled)
    assert [g for g, _, _ in shuffled] != sorted(g for g, _, _ in shuffled)   # really interleaved
    _, ordered, _ = run_diagnose(capsys, write_rollouts(tmp_path / "a.jsonl", LONG_WRONG))
    _, interleaved, _ = run_diagnose(capsys, write_rollouts(tmp_path / "b.jsonl", shuffled))
    ordered, interleaved = (json.loads(text.splitlines()[-1]) for text in (ordered, interleaved))
    assert ordered.keys() == interleaved.keys()
    for key, value in ordered.items():                 # numbers equal up to the order of float sums
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            assert interleaved[key] == pytest.approx(value, rel=1e-6), key
        else:                                          # strings (adv_scale), None, lists: exactly
            assert interleaved[key] == value, key


GOOD = '{"group": 1, "reward": 1, "length": 3}\n{"group": 1, "reward": 0, "length": 5}\n'


@pytest.mark.parametrize("text, line, words", [
    (GOOD + '{"group": 2, "reward": 1, "length": 3\n', 3, "not JSON"),
    (GOOD + '{"group": 2, "length": 3}\n', 3, "'reward'"),
    (GOOD + '[2, 1, 3]\n', 3, "'group'"),
    (GOOD + '{"group": 2, "reward": "yes", "length": 3}\n', 3, "finite number"),
    (GOOD + '{"group": 2, "reward": 1, "length": 2.5}\n', 3, "whole number"),
    (GOOD + '{"group": 2, "reward": 1, "length": -1}\n', 3, "whole number"),
    (GOOD + '\n{"group": 2, "reward": 1, "length": 4}\n', 4, "equal size"),       # one response, G = 2
    (GOOD + '{"group": 2, "reward": 1, "length": 4}\n' * 3, 3, "equal size"),
    (GOOD + '{"group": 2, "reward": 1, "length": 3, "run": ""}\n', 3, "'run'"),
    (GOOD + '{"group": 2, "reward": 1, "length": 3, "run": true}\n', 3, "'run'"),
    (GOOD + '{"group": 2, "reward": 1, "length": 3, "run": ["a"]}\n', 3, "'run'"),
])
def test_diagnose_refuses_a_malformed_line_or_unequal_groups_naming_the_line(tmp_path, capsys, text, line, words):
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    code, out, err = run_diagnose(capsys, str(path))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and f"line {line}:" in err and words in err


def test_diagnose_refuses_a_missing_file_or_groups_of_one(tmp_path, capsys):
    assert run_diagnose(capsys, str(tmp_path / "missing.jsonl"))[0] == 2
    path = tmp_path / "ones.jsonl"
    path.write_text('{"group": 1, "reward": 1, "length": 3}\n{"group": 2, "reward": 0, "length": 5}\n')
    code, _, err = run_diagnose(capsys, str(path))
    assert code == 2 and "at least 2" in err and err.count("\n") == 1


# Two runs appended to one file, as dump_rollouts leaves them: each restarts its group ids at
# "0-0", so read as one batch they would merge into 2 groups of 8.
FIRST_RUN = [("0-0", 1, 6), ("0-0", 0, 19), ("0-0", 1, 5), ("0-0", 0, 23),
             ("0-1", 1, 7), ("0-1", 0, 15), ("0-1", 0, 21), ("0-1", 0, 8)]
SECOND_RUN = [("0-0", 1, 4), ("0-0", 1, 9), ("0-0", 0, 30), ("0-0", 1, 6),
              ("0-1", 0, 12), ("0-1", 1, 3), ("0-1", 0, 9), ("0-1", 1, 11)]


def write_runs(path, runs: dict):
    lines = [{"group": g, "reward": r, "length": n, "step": 0, "run": run}
             for run, rows in runs.items() for g, r, n in rows]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


def test_two_runs_in_one_dump_are_diagnosed_as_two_runs_never_merged(tmp_path, capsys):
    path = write_runs(tmp_path / "rollouts.jsonl", {"run-a": FIRST_RUN, "run-b": SECOND_RUN})
    code, out, err = run_diagnose(capsys, path)
    assert code == 2 and out == "" and err.count("\n") == 1           # refused, in one line
    assert "2 runs" in err and "run-a" in err and "run-b" in err and "--run" in err
    for run, rows in (("run-a", FIRST_RUN), ("run-b", SECOND_RUN)):
        code, out, _ = run_diagnose(capsys, path, "--run", run)
        assert code == 0 and f"run {run}" in out.splitlines()[0]
        picked = json.loads(out.strip().splitlines()[-1])
        assert picked["run"] == run and picked["n_groups"] == 2 and picked["group_size"] == 4
        for key, value in by_hand(rows).items():                      # that run's lines alone
            assert picked[key] == pytest.approx(value, rel=1e-5), (run, key)
    for function in (diagnose.diagnose, diagnose.diagnose_steps):     # the Python API refuses too
        with pytest.raises(diagnose.RolloutsError, match="2 runs"):
            function(path)
    assert diagnose.diagnose(path, run_id="run-b")["n_groups"] == 2


def test_a_file_of_one_run_needs_no_run_flag_and_lines_without_run_read_as_before(tmp_path, capsys):
    one_run = write_runs(tmp_path / "one.jsonl", {"run-a": FIRST_RUN})
    code, out, _ = run_diagnose(capsys, one_run, "--figure", str(tmp_path / "bias.png"))
    assert code == 0 and json.loads(out.splitlines()[-1])["run"] == "run-a"
    assert (tmp_path / "bias.png").stat().st_size > 0
    code, out, _ = run_diagnose(capsys, write_rollouts(tmp_path / "plain.jsonl", FIRST_RUN))
    assert code == 0 and "run" not in json.loads(out.splitlines()[-1])


@pytest.mark.parametrize("runs, argv, words", [
    ({"run-a": FIRST_RUN}, ["--run", "run-z"], "no run 'run-z'; the file holds run run-a (8 resp"),
    ({"run-a": FIRST_RUN, None: SECOND_RUN}, [], "8 lines without a 'run' (from line 9)"),
])
def test_a_run_the_file_lacks_or_lines_of_no_run_beside_a_run_are_one_line_naming_the_runs(
        tmp_path, capsys, runs, argv, words):
    path = tmp_path / "r.jsonl"
    write_runs(path, runs)
    path.write_text(path.read_text().replace(', "run": null', ""))    # lines without the key
    code, out, err = run_diagnose(capsys, str(path), *argv)
    assert code == 2 and out == "" and err.count("\n") == 1 and words in err


def test_a_binary_file_or_a_figure_format_matplotlib_lacks_is_one_line(tmp_path, capsys):
    binary = tmp_path / "r.jsonl"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    code, _, err = run_diagnose(capsys, str(binary))
    assert code == 2 and err.count("\n") == 1 and "not UTF-8" in err
    path = write_runs(tmp_path / "one.jsonl", {"run-a": FIRST_RUN})
    code, out, err = run_diagnose(capsys, path, "--figure", str(tmp_path / "bias.xyz"))
    assert code == 2 and out == "" and err.count("\n") == 1 and ".xyz" in err


# =====================================================================================
# Issue 67: the trainer's advantages, the loss's lengths, an empty file, the decision
# =====================================================================================


def write_lines(path, lines):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


@pytest.mark.parametrize("group_size", [4, 8])
def test_diagnose_uses_the_unbiased_std_a_trl_dump_records(tmp_path, group_size):
    """TRL and verl divide by the unbiased std: read as grpo_ba's population std, a TRL dump's drift
    comes out sqrt(G/(G-1)) too large (issue 67: 1.1549 at G = 4, 1.0692 at G = 8)."""
    half = group_size // 2
    rows = [{"group": g, "reward": float(i < half), "length": 3 if i < half else 7 + g}
            for g in range(3) for i in range(group_size)]
    population = diagnose.diagnose(write_lines(tmp_path / "course.jsonl", rows))
    trl = diagnose.diagnose(write_lines(tmp_path / "trl.jsonl",
                                        [{**row, "adv_scale": "std", "std": "unbiased", "eps": 1e-4} for row in rows]))
    assert (trl["std"], trl["eps"], population["std"]) == ("unbiased", 1e-4, "population")
    ratio = population["token_loss_at_ratio_one"] / trl["token_loss_at_ratio_one"]
    assert ratio == pytest.approx((group_size / (group_size - 1)) ** 0.5, rel=1e-3)
    assert ratio == pytest.approx({4: 1.1549, 8: 1.0692}[group_size], abs=2e-4)       # the numbers
    assert trl["pos_share_token"] == pytest.approx(population["pos_share_token"], rel=1e-6)   # shares: scale-free


def test_the_files_adv_scale_is_used_and_the_flag_overrides_it(tmp_path):
    rows = [{"group": "a", "reward": r, "length": n, "adv_scale": "none"} for r, n in ((1, 4), (0, 9), (1, 3), (0, 8))]
    path = write_lines(tmp_path / "r.jsonl", rows)
    assert diagnose.diagnose(path)["adv_scale"] == "none"
    assert diagnose.diagnose(path, adv_scale="std")["adv_scale"] == "std"


def test_a_batch_scaled_trl_dump_is_read_with_adv_scale_none_and_refused_without_a_flag(tmp_path, capsys):
    """TRL's scale_rewards='batch' divides by one std of the whole batch: the shares and the ratio
    are those of unscaled advantages, so --adv-scale none reads it; without a flag, one line says so."""
    rows = [{"group": g, "reward": r, "length": n} for g, r, n in (("a", 1, 4), ("a", 0, 9), ("b", 1, 3), ("b", 0, 8))]
    batch = write_lines(tmp_path / "batch.jsonl", [{**row, "adv_scale": "batch"} for row in rows])
    code, out, err = run_diagnose(capsys, batch)
    assert code == 2 and out == "" and err.count("\n") == 1 and "--adv-scale none" in err
    plain = write_lines(tmp_path / "plain.jsonl", rows)
    read = diagnose.diagnose(batch, adv_scale="none")
    assert read["pos_share_token"] == pytest.approx(diagnose.diagnose(plain)["pos_share_token"])
    assert read["neg_over_pos"] == pytest.approx(diagnose.diagnose(plain)["neg_over_pos"])


@pytest.mark.parametrize("second, words", [
    ({"std": "unbiased"}, "line 2: its adv_scale/std/eps"),
    ({"adv_scale": "carrot"}, "line 2: 'adv_scale' \"carrot\""),
    ({"std": "sample"}, "line 2: 'std' must be"),
])
def test_a_run_with_two_advantage_conventions_or_one_diagnose_cannot_compute_is_one_line(tmp_path, capsys, second,
                                                                                           words):
    rows = [{"group": "a", "reward": 1, "length": 3}, {"group": "a", "reward": 0, "length": 5, **second}]
    code, out, err = run_diagnose(capsys, write_lines(tmp_path / "r.jsonl", rows))
    assert code == 2 and out == "" and err.count("\n") == 1 and words in err


def test_a_file_whose_responses_are_all_empty_is_one_line_and_exit_2(tmp_path, capsys):
    path = write_rollouts(tmp_path / "empty.jsonl", [(g, r, 0) for g, r, _ in LONG_WRONG])
    code, out, err = run_diagnose(capsys, path)
    assert code == 2 and out == "" and err.count("\n") == 1 and "all 12 responses have length 0" in err


def test_no_message_names_a_diagnose_flag_that_does_not_exist(tmp_path, capsys):
    import inspect
    assert "--diagnose" not in inspect.getsource(diagnose)
    code, _, err = run_diagnose(capsys, write_rollouts(tmp_path / "r.jsonl", LONG_WRONG[:7]))
    assert code == 2 and "diagnose needs groups of equal size" in err


def test_lengths_of_responses_without_tokens_are_not_in_the_mean_lengths(tmp_path):
    rows = [("a", 1, 4), ("a", 0, 10), ("a", 1, 0), ("a", 0, 6)]
    report = diagnose.diagnose(write_rollouts(tmp_path / "r.jsonl", rows))
    assert (report["len_pos"], report["len_neg"]) == (4.0, 8.0)


# ---- the registered designs, read from their reports


@pytest.mark.parametrize("regime, units", [(diagnose.REGIMES[0], 18),      # 9 seeds x 2 variants
                                            (diagnose.REGIMES[1], 98)])     # 49 seeds x 2 variants
def test_the_regime_levels_read_from_the_archive_give_the_reports_level_row(regime, units):
    """A regime design's per-unit step-0 values come from its runs archive (the seeds its report kept):
    their means are the report's level row, computed here from the report's own table."""
    import os
    designs = {d.name: d for d in diagnose.registered_designs()}
    with open(os.path.join(diagnose.REPO, regime.report)) as f:
        lines = f.read().splitlines()
    _, rows = diagnose._table(lines, "| level | design |")
    assert [row[0] for row in rows] == list(regime.levels)
    for row in rows:
        design = designs[f"{regime.name} {row[0]} ({row[1]})"]
        assert len(design.ratios) == len(design.shares) == len(design.spreads) == units
        assert f"{statistics.fmean(design.ratios):.2f}" == row[4].split()[0]
        assert f"{statistics.fmean(design.shares):.3f}" == row[5]
        assert design.manipulation == f"manipulation check: {row[-1]}"


def regime_v4_token_runs():
    """{design: sorted step-0 wrong_over_right of every token run} in regime-v4's archive parts, read here
    with tarfile, and the (seed, variant) units found."""
    import glob
    import tarfile
    ratios, units = {}, set()
    for part in sorted(glob.glob(f"{diagnose.REPO}/assets/regime-v4/archive/part-*.tar.gz")):
        with tarfile.open(part) as tar:
            for member in tar.getmembers():
                design, unit, rule, name = member.name.split("/")
                if rule == "token" and name == "metrics.jsonl":
                    first = json.loads(tar.extractfile(member).readline())
                    ratios.setdefault(design, []).append(first["wrong_over_right"])
                    units.add((design, unit))
    return {design: sorted(values) for design, values in ratios.items()}, units


def test_regime_v4s_two_levels_are_read_with_every_seed_on_both_variants_from_the_token_runs():
    designs = {d.name: d for d in diagnose.registered_designs()}
    v4 = [name for name in designs if name.startswith("regime-v4")]
    assert sorted(v4) == ["regime-v4 strong (regime-v4-strong)", "regime-v4 weak (regime-v4-weak)"]
    ratios, units = regime_v4_token_runs()
    seeds = {int(unit.split("-")[0][1:]) for _, unit in units}
    variants = {unit.split("-", 1)[1] for _, unit in units}
    assert seeds == set(range(1800, 1849)) and variants == {"avx2-1t", "default-1t"}
    for level in ("weak", "strong"):
        design = designs[f"regime-v4 {level} (regime-v4-{level})"]
        assert len(design.ratios) == 98 == 49 * len(variants)
        assert sorted(design.ratios) == ratios[f"regime-v4-{level}"]       # the archive's token runs, each once
        assert "(seeds 1800-1848)" in design.source
        assert diagnose.headline(design) == "no such primary row"           # no balanced runs


def test_a_run_inside_regime_v4_strongs_range_lists_the_interaction_with_the_reports_verdict_and_interval(
        tmp_path, capsys):
    import os
    with open(os.path.join(diagnose.REPO, diagnose.REGIMES[1].report)) as f:
        _, rows = diagnose._table(f.read().splitlines(), "| row | label |")
    primaries = [row for row in rows if row[1] == "primary"]
    assert len(primaries) == 1 and " at strong" in primaries[0][0] and " at weak" in primaries[0][0]
    row = primaries[0]
    strong = next(d for d in diagnose.registered_designs() if d.name == "regime-v4 strong (regime-v4-strong)")
    weak = next(d for d in diagnose.registered_designs() if d.name == "regime-v4 weak (regime-v4-weak)")
    ratio = max(strong.ratios) - 0.05                                      # inside strong's range, above weak's
    assert min(strong.ratios) < ratio and ratio > max(weak.ratios)
    block = decision_of(tmp_path, capsys, rollouts_at(ratio))
    # the interaction compares the two gaps: the line says it is no result at the run's ratio
    assert (f"    {strong.name}: {row[0]}: {row[-1]}; pooled {row[3]} (a change between the design's two gaps, "
            "not a result at your ratio)") in block.splitlines()
    assert f"{weak.name}:" not in block                                     # weak does not cover it
    table_row = next(line for line in block.splitlines() if line.strip().startswith(strong.name))
    assert table_row.split()[3] == "98" and diagnose.headline(strong) in table_row and table_row.endswith(" inside")


def test_each_band_design_has_one_step0_ratio_and_one_token_share_per_run():
    import re
    for design in [d for d in diagnose.registered_designs() if d.source.endswith("consequences.md")]:
        header = open(f"{diagnose.REPO}/{design.source}").readline()
        seeds = int(re.search(r"(\d+) (?:of its \d+ registered )?seeds", header).group(1))
        assert len(design.ratios) == len(design.shares) == len(design.spreads) == 2 * seeds, design.name
        assert design.findings and all(f.word in ("holds", "contradicted", "not detected") for f in design.findings)


def rollouts_at(ratio, groups=diagnose.MIN_SIGNAL_GROUPS, right=100):
    """Binary-reward groups of G = 4, two right answers of `right` tokens and two wrong ones of
    round(ratio * right): Lbar-/Lbar+ = that ratio to within 0.01. The groups are identical, so the
    interval is the ratio itself: a run placed exactly."""
    wrong = round(ratio * right)
    return [{"group": g, "reward": r, "length": right if r else wrong} for g in range(groups) for r in (1, 0, 1, 0)]


def decision_of(tmp_path, capsys, lines):
    code, out, err = run_diagnose(capsys, write_lines(tmp_path / "r.jsonl", lines))
    assert code == 0, err
    block = out.split("decision:")[1].rsplit("\n", 2)[0]
    return block


@pytest.mark.parametrize("index", range(8))      # 3 bands, regime-v3's 3 levels, regime-v4's 2
def test_a_run_inside_a_designs_range_is_placed_there_with_the_designs_verdicts(tmp_path, capsys, index):
    designs = diagnose.registered_designs()
    assert len(designs) == 8
    design = designs[index]
    middle = (min(design.ratios) + max(design.ratios)) / 2
    block = decision_of(tmp_path, capsys, rollouts_at(middle))
    table_row = next(line for line in block.splitlines() if line.strip().startswith(design.name))
    # inside by its ratio; borderline where its length std/mean is outside the design's units' spreads
    spread = float(re.search(r"length std/mean (\d+\.\d+)", block).group(1))
    spread_inside = round(min(design.spreads), 2) <= spread <= round(max(design.spreads), 2)
    assert table_row.endswith("inside" if spread_inside else "borderline") and diagnose.headline(design) in table_row
    assert diagnose.headline(design).split(" (")[0] in ("holds", "contradicted", "not detected", "no such primary row")
    for finding in design.findings:
        assert f"{design.name}: {finding.row}: {finding.verdict}" in block
    recommendation = block.splitlines()[-1]
    assert recommendation.startswith("recommendation: ") and "scope: the toy's worlds" in recommendation
    assert "no registered design covers" not in recommendation


@pytest.mark.parametrize("side", ["below", "above"])
def test_a_run_outside_every_designs_range_gets_no_registered_design_covers_this_range(tmp_path, capsys, side):
    designs = diagnose.registered_designs()
    low, high = min(min(d.ratios) for d in designs), max(max(d.ratios) for d in designs)
    block = decision_of(tmp_path, capsys, rollouts_at(low * 0.8 if side == "below" else high * 1.2))
    table = [line for line in block.splitlines() if line.strip().startswith(tuple(d.name for d in designs))]
    assert len(table) == len(designs) and all(line.endswith(" outside") for line in table)
    assert block.splitlines()[-1].startswith("recommendation: no registered design covers this range")


def test_the_decision_uses_only_the_three_verdict_words_and_cites_every_design_it_reads(tmp_path, capsys):
    block = decision_of(tmp_path, capsys, rollouts_at(2.0))
    assert "not cited" not in block and "does not read" not in block
    for design in diagnose.registered_designs():
        assert any(line.strip().startswith(design.name) for line in block.splitlines()), design.name
    verdicts = [line.split(": ")[2].split(";")[0] for line in block.splitlines() if line.startswith("    ")]
    assert verdicts and all(v.split(" (")[0] in ("holds", "contradicted", "not detected") for v in verdicts)


def test_a_run_with_steps_is_placed_by_its_first_step(tmp_path, capsys):
    lines = [{**line, "step": 0} for line in rollouts_at(0.5)] + \
            [{**line, "group": f"s1-{line['group']}", "step": 1} for line in rollouts_at(3.0)]
    block = decision_of(tmp_path, capsys, lines)
    assert "this run (step 0's batch): wrong/right (by reward, as the designs' step 0) 0.50" in block
    assert block.splitlines()[-1].startswith("recommendation: no registered design covers this range")


def test_without_the_registered_reports_the_decision_says_so_in_one_line(tmp_path):
    """An installed package has no assets/: the run is not placed, and nothing is invented."""
    path = write_lines(tmp_path / "r.jsonl", rollouts_at(2.0))
    block, numbers = diagnose.format_decision(diagnose.placement_batch(path, diagnose.read_lines(path)[0]),
                                              repo=str(tmp_path))
    assert "\n" not in block and "are not here" in block and numbers == {"recommendation": "not placed"}


def test_regime_reports_first_lines_give_their_seeds_and_a_line_without_them_is_refused(tmp_path):
    import shutil
    for regime, seeds in zip(diagnose.REGIMES, ("(seeds 1400-1408)", "(seeds 1800-1848)")):
        assert all(seeds in d.source for d in diagnose.regime_designs(regime))
    v4 = diagnose.REGIMES[1]
    shutil.copytree(f"{diagnose.REPO}/assets/regime-v4", tmp_path / "assets" / "regime-v4")
    report = tmp_path / v4.report
    report.write_text("Regime design, version 4: all its seeds\n" + report.read_text().split("\n", 1)[1])
    with pytest.raises(diagnose.RolloutsError, match="names no seeds"):
        diagnose.regime_designs(v4, str(tmp_path))


def _design(name, word, mean):
    verdict = word if word != "not detected" else "not detected (differences of 0.05 or more would have been seen)"
    finding = diagnose.Finding("balanced - token, last held-out acc", mean, f"{mean:+.3f} [..]", verdict, word)
    return diagnose.Design(name, "", [1.0, 3.0], [0.3], [0.5], [finding], "")


def test_a_design_without_a_balanced_token_row_adds_no_vote_to_the_recommendation():
    v4 = [d for d in diagnose.registered_designs() if d.name.startswith("regime-v4")]
    assert v4 and all(not d.findings[0].row.startswith("balanced - token") for d in v4)
    for others in ([_design("A", "holds", 0.05)], [_design("A", "holds", 0.05), _design("B", "not detected", 0.01)],
                   [_design("B", "not detected", 0.01)], [_design("C", "holds", -0.03)]):
        for ratio in (1.5, 2.0):                      # inside both v4 levels' ranges, or v4 strong's, and A's
            assert sum(diagnose.covers(d, ratio) for d in v4) == (2 if ratio == 1.5 else 1)
            assert diagnose.recommendation(others + v4, ratio) == diagnose.recommendation(others, ratio)
    kind, alone = diagnose.recommendation(v4, max(v4[1].ratios) - 0.05)
    assert kind == "none from the toy" and alone.startswith("recommendation: none from the toy") and v4[1].name in alone


def test_a_not_detected_design_is_neither_a_disagreement_nor_a_reason_to_keep_a_rule():
    kind, mixed = diagnose.recommendation([_design("A", "holds", 0.05), _design("B", "not detected", 0.01)], 2.0)
    assert kind == "test balanced" and "never compared with each other" in mixed and "A (A: holds)" in mixed
    kind, silent = diagnose.recommendation([_design("B", "not detected", 0.01)], 2.0)
    assert kind == "compare the rules"
    assert "no reason" not in silent and "not evidence that the rules are equal" in silent
    assert all("scope: the toy's worlds" in r for r in (mixed, silent))


# =====================================================================================
# Issue 76: an interval, a minimum number of groups, worlds counted once, masked runs read right
# =====================================================================================


def spread_rollouts(ratio, groups=diagnose.MIN_SIGNAL_GROUPS, right=1000):
    """Binary groups of G = 4 (two right, two wrong) whose lengths vary from group to group while
    Lbar-/Lbar+ stays exactly round(ratio * right) / right: a run with a real interval."""
    wrong = round(ratio * right)
    lines = []
    for g in range(groups):
        step = 2 * g - (groups - 1)                                   # sums to 0 over the groups
        for reward, length in ((1, right - 6 * step), (0, wrong + 25 * step)) * 2:
            lines.append({"group": g, "reward": reward, "length": length})
    return lines


def decision_json(tmp_path, capsys, lines, name="r.jsonl"):
    code, out, err = run_diagnose(capsys, write_lines(tmp_path / name, lines))
    assert code == 0, err
    return out, json.loads(out.strip().splitlines()[-1])


def test_the_interval_is_the_bootstrap_of_the_same_ratio_and_share_the_report_prints(tmp_path, capsys):
    out, summary = decision_json(tmp_path, capsys, spread_rollouts(2.5))
    decision = summary["decision"]
    assert decision["groups_with_signal"] == diagnose.MIN_SIGNAL_GROUPS
    assert decision["ratio"] == pytest.approx(summary["neg_over_pos"], rel=1e-5) == pytest.approx(2.5, rel=1e-5)
    assert decision["share"] == pytest.approx(summary["pos_share_token"], rel=1e-5)
    low, high = decision["ratio_interval"]
    assert low < 2.5 < high and high - low > 0.05                    # the groups differ: a real width
    low, high = decision["share_interval"]
    assert low < decision["share"] < high
    assert f"wrong/right [{decision['ratio_interval'][0]:.2f}, {decision['ratio_interval'][1]:.2f}]" in out
    _, again = decision_json(tmp_path, capsys, spread_rollouts(2.5), "again.jsonl")
    assert again["decision"] == decision                             # seeded: the same file, the same interval
    # identical groups: every resample is the run itself, so the interval is the point
    _, flat = decision_json(tmp_path, capsys, rollouts_at(2.5), "flat.jsonl")
    assert flat["decision"]["ratio_interval"][0] == pytest.approx(flat["decision"]["ratio_interval"][1])


def test_the_bootstrap_resamples_whole_groups_as_a_plain_python_resample_does():
    """One resample by hand (plain Python over the groups' own numbers) against ratio_and_share of the
    group sums with the same picks."""
    rows = spread_rollouts(2.0, groups=5)
    rewards = torch_tensor([r["reward"] for r in rows])
    lengths = torch_tensor([r["length"] for r in rows])
    from grpo_ba import group_advantages
    sums = diagnose.group_sums(group_advantages(rewards, 4), lengths, 4)
    picks = [0, 0, 3, 4, 4]
    groups = [rows[4 * g:4 * g + 4] for g in picks]
    right = [r["length"] for g in groups for r in g if r["reward"] == 1]
    wrong = [r["length"] for g in groups for r in g if r["reward"] == 0]
    ratio, share = diagnose.ratio_and_share(sums[picks].sum(dim=0))
    assert ratio.item() == pytest.approx(statistics.fmean(wrong) / statistics.fmean(right), rel=1e-9)
    # token: a group's weight on each side is |A| L / sum_j L_j, the side's |A| equal within a binary group of 2 + 2
    pos = sum(sum(r["length"] for r in g if r["reward"] == 1) / sum(r["length"] for r in g) for g in groups)
    neg = sum(sum(r["length"] for r in g if r["reward"] == 0) / sum(r["length"] for r in g) for g in groups)
    assert share.item() == pytest.approx(pos / (pos + neg), rel=1e-5)


def torch_tensor(values):
    import torch
    return torch.tensor(values, dtype=torch.float32)


def test_one_group_or_fewer_than_the_minimum_gets_no_recommendation_and_says_why(tmp_path, capsys):
    for groups in (1, diagnose.MIN_SIGNAL_GROUPS - 1):
        out, summary = decision_json(tmp_path, capsys, spread_rollouts(2.5, groups=groups), f"g{groups}.jsonl")
        line = out.split("decision:")[1].rstrip("\n").split("\n")[-2]
        assert line.startswith(f"recommendation: none: {groups} group") and "fewer than the" in line
        assert summary["decision"]["recommendation"] == "too few groups"
        assert summary["decision"]["recommendation_line"] == line
    _, summary = decision_json(tmp_path, capsys, spread_rollouts(2.5), "enough.jsonl")
    assert summary["decision"]["recommendation"] != "too few groups"


@pytest.mark.parametrize("near", [(1.88, 1.89), "top"])
def test_a_run_at_demo_bands_top_gets_the_same_decision_on_either_side_of_it(tmp_path, capsys, near):
    """Issue 76: 1.88 said "test balanced", 1.89 "try balanced". With the interval both are borderline
    for demo-band-v3 and the recommendation is one."""
    demo = next(d for d in diagnose.registered_designs() if d.name == "demo-band-v3")
    top = max(demo.ratios)
    below, above = (top - 0.005, top + 0.005) if near == "top" else near
    assert below <= top < above or near != "top"
    decisions = []
    for ratio in (below, above):
        _, summary = decision_json(tmp_path, capsys, spread_rollouts(ratio), f"r{ratio}.jsonl")
        decisions.append(summary["decision"])
    assert [d["designs"]["demo-band-v3"] for d in decisions] == ["borderline", "borderline"]
    assert decisions[0]["recommendation"] == decisions[1]["recommendation"] == "borderline: test balanced"
    assert all("borderline: your interval" in d["recommendation_line"] and "demo-band-v3 (its range" in
               d["recommendation_line"] for d in decisions)
    # the control: placed by the ratio alone (identical groups, no width), the two sides do differ
    exact = [decision_json(tmp_path, capsys, rollouts_at(r, right=1000), f"x{r}.jsonl")[1]["decision"]
             for r in (top - 0.005, top + 0.005)]
    # (inside by its ratio; borderline rather than inside where the spread of identical groups is outside demo's)
    assert exact[0]["designs"]["demo-band-v3"] in ("inside", "borderline")
    assert exact[1]["designs"]["demo-band-v3"] == "outside"


def test_designs_that_share_a_world_count_once_and_the_scope_says_how_it_was_chosen(tmp_path, capsys):
    designs = diagnose.registered_designs()
    named = [entry for world in diagnose.WORLDS for entry in world.designs]
    assert len(designs) == len(named) == len({d.name for d in designs})          # each design in one world
    gap30 = diagnose.WORLDS[0]
    assert {d.name for d in designs if d.world == gap30.name} >= {"strong-band-v3", "endless-band-v3",
                                                                  "regime-v3 strong (regime-strong)"}
    ratio = 3.0                                                     # inside the gap-30 world's designs only
    assert {d.world for d in designs if diagnose.covers(d, ratio)} == {gap30.name}
    kind, line = diagnose.recommendation(designs, ratio, diagnose.MIN_SIGNAL_GROUPS)
    assert kind == "try balanced" and "the one world covering your ratio that has this row:" in line and "3 designs of one world, counted once" in line
    assert line.count(gap30.name) == 2 and gap30.chosen in line.split("; scope: ")[1]
    assert "pilot's accuracies were seen" in line
    # two made-up designs of one world are one vote; in two worlds, two
    one = [_design("A", "holds", 0.05)._replace(world="W"), _design("B", "holds", 0.04)._replace(world="W")]
    assert len(diagnose.world_votes(one, 2.0)) == 1 and "the one world covering" in diagnose.recommendation(one, 2.0)[1]
    two = [one[0], one[1]._replace(world="V")]
    assert len(diagnose.world_votes(two, 2.0)) == 2 and "2 worlds:" in diagnose.recommendation(two, 2.0)[1]


def test_a_new_world_is_one_entry_and_is_read_as_its_own_world(monkeypatch):
    """A design with a report in a world of its own (the blind design, once it has one) is one WORLDS entry."""
    band = diagnose.WORLDS[1].designs[0]                              # any band report, as a stand-in
    monkeypatch.setattr(diagnose, "WORLDS", diagnose.WORLDS + (
        diagnose.World("a new world", "registered before any run", (band._replace(name="new-design"),)),))
    designs = {d.name: d for d in diagnose.registered_designs()}
    assert designs["new-design"].world == "a new world"
    votes = dict(diagnose.world_votes(list(designs.values()), designs["new-design"].ratios[0]))
    assert [d.name for d, _ in votes["a new world"]] == ["new-design"]


def test_a_masked_run_reads_its_lengths_ratio_spread_and_shares_over_the_responses_in_the_loss(tmp_path, capsys):
    """The longest wrong answers masked to length 0 (as mask_truncated_completions leaves them): the ratio,
    the spread and the shares are over the other responses, the count of length 0 is printed, and no
    identity is claimed, since the masked ones take their advantage out of the loss."""
    rows = [("a", 1, 6), ("a", 0, 0), ("a", 1, 5), ("a", 0, 23), ("b", 1, 7), ("b", 0, 15), ("b", 0, 0),
            ("b", 0, 8), ("c", 1, 4), ("c", 1, 9), ("c", 0, 30), ("c", 1, 6)]
    code, out, _ = run_diagnose(capsys, write_rollouts(tmp_path / "masked.jsonl", rows))
    assert code == 0
    summary = json.loads(out.strip().splitlines()[-1])
    kept = [n for _, _, n in rows if n > 0]
    assert summary["n_length_zero"] == 2 and "responses of length 0 (no token in the loss" in out
    assert summary["std_over_mean"] == pytest.approx(statistics.pstdev(kept) / statistics.fmean(kept), rel=1e-5)
    assert summary["len_mean"] == pytest.approx(statistics.fmean(kept), rel=1e-6)
    expected = by_hand([row for row in rows if row[2] > 0])                # shares: the masked ones weigh nothing
    assert summary["len_neg"] / summary["len_pos"] == pytest.approx(summary["neg_over_pos"], rel=1e-6)
    assert summary["neg_over_pos"] == pytest.approx(
        statistics.fmean([15, 23, 8, 30]) / statistics.fmean([6, 5, 7, 4, 9, 6]), rel=1e-6)
    assert summary["shares_are_identities"] is False and "identities here" not in out
    assert "no identity here: 2 responses of length 0" in out
    assert summary["pos_share_sequence"] != pytest.approx(0.5, abs=1e-3)   # measured, not 1/2
    assert summary["decision"]["share"] == pytest.approx(summary["pos_share_token"], rel=1e-5)
    assert expected["n_groups"] == 3
    unmasked = json.loads(run_diagnose(capsys, write_rollouts(tmp_path / "plain.jsonl", LONG_WRONG))[1]
                          .strip().splitlines()[-1])
    assert unmasked["shares_are_identities"] is True and unmasked["n_length_zero"] == 0


def test_the_figures_title_names_the_advantages_used_when_no_flag_is_given(tmp_path, capsys, monkeypatch):
    titles = []
    monkeypatch.setattr(diagnose, "plot_steps", lambda steps, png, title="": titles.append(title) or png)
    path = write_runs(tmp_path / "one.jsonl", {"run-a": FIRST_RUN})
    assert run_diagnose(capsys, path, "--figure", str(tmp_path / "b.png"))[0] == 0
    assert run_diagnose(capsys, path, "--figure", str(tmp_path / "b.png"), "--adv-scale", "none")[0] == 0
    assert titles == ["one.jsonl, run run-a (std scaling, population std + 1e-06 advantages)",
                      "one.jsonl, run run-a (none scaling advantages)"]


def test_the_minimum_is_the_committed_simulations_and_the_page_shows_its_table():
    import os
    import re
    with open(os.path.join(diagnose.REPO, "assets/diagnose-min-groups/table.txt")) as f:
        table = f.read()
    assert int(re.search(r"^minimum: (\d+) groups", table, re.M).group(1)) == diagnose.MIN_SIGNAL_GROUPS
    with open(os.path.join(diagnose.REPO, "docs/diagnose.md")) as f:
        page = f.read()
    shown = "\n".join("    " + line if line else "" for line in table.rstrip("\n").split("\n"))
    assert shown in page                                              # the page shows the committed output


def test_the_simulations_cells_come_from_diagnoses_own_bootstrap():
    """A cheap cell of the simulation: one group never covers (its interval has no width)."""
    import torch
    from grpo_ba_lab.analysis import diagnose_min_groups as simulation
    generator = torch.Generator().manual_seed(1)
    pool = simulation.population(4, 1.9, 0.4, generator)
    assert pool.shape == (simulation.POOL, 6)
    found = simulation.coverage(pool, 1, generator)
    assert found["ratio"] == (0.0, 0.0) and found["share"] == (0.0, 0.0)
