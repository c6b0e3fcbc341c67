"""The confirmatory regime design (registrations/regime-v4.md, grpo_ba_lab/analysis/regime_v4.py):
its worlds are regime-v3's, its seeds fresh, its primary the interaction recomputed here from
hand-made runs, and its archive only grows."""
import json
import os
import random
import tarfile

import pytest
from fake_runs import regime_metrics

from grpo_ba_lab import designs
from grpo_ba_lab.analysis import regime_v4 as r4

VARIANTS = designs.REGIME_V4_VARIANTS
SHARE = {"weak": 0.44, "strong": 0.31}


def _runs(seeds=range(1800, 1808), effect=None, shares=SHARE):
    """{level: (by_rule, records)}: last accuracy = 0.7 + effect[level][rule] + seed noise."""
    effect = effect or {"weak": {"token": 0.03}, "strong": {"sequence": 0.06}}
    rng = random.Random(0)
    runs = {}
    for level in r4.LEVELS:
        by_rule = {rule: {} for rule in r4.RULES}
        for seed in seeds:
            for v in VARIANTS:
                for rule in by_rule:
                    share = shares[level] if rule == "token" else 0.5
                    by_rule[rule][(seed, v)] = regime_metrics(0.7 + effect[level].get(rule, 0.0) + rng.gauss(0, 0.01), share)
        runs[level] = (by_rule, {u: {} for u in by_rule["token"]})
    return runs


def test_its_worlds_are_regime_v3s_weak_and_strong_levels_unchanged():
    for level, name in r4.LEVELS.items():
        assert designs.DESIGNS[name]["flags"] == designs.DESIGNS[designs.REGIME_LEVELS[level]]["flags"]
    assert r4.RULES == ("token", "sequence") and len(r4.SEEDS) == 49


def test_its_seeds_and_their_redraws_are_fresh():
    """No other design's seed (or warm-up redraw seed + 1000 k) is one of regime-v4's."""
    def draws(seeds):
        return {s + 1000 * k for s in seeds for k in range(5)}
    mine = draws(r4.SEEDS)
    for name, design in designs.DESIGNS.items():
        if name in r4.LEVELS.values():
            continue
        theirs = {s for seeds in design.get("seeds", {}).values() for s in seeds}
        assert not mine & draws(theirs), name


def test_the_interaction_is_token_minus_sequence_at_strong_minus_at_weak_seed_by_seed():
    runs = _runs()
    got = r4.interaction(runs)
    last = lambda level, rule, seed, v: runs[level][0][rule][(seed, v)][-1]["accuracy"]
    for v in VARIANTS:
        for seed in range(1800, 1808):
            want = ((last("strong", "token", seed, v) - last("strong", "sequence", seed, v))
                    - (last("weak", "token", seed, v) - last("weak", "sequence", seed, v)))
            assert got[v][seed] == pytest.approx(want, abs=1e-12)


def test_one_primary_judged_without_holm_and_a_null_interaction_is_not_detected():
    rows = r4.rows(_runs())
    assert [r["label"] for r in rows].count("primary") == 1
    assert rows[0]["verdict"] == "holds" and rows[0]["test"]["mean"] == pytest.approx(-0.09, abs=0.01)
    null = r4.rows(_runs(effect={"weak": {"token": 0.03}, "strong": {"token": 0.03}}))
    assert null[0]["verdict"] == "not detected"


def test_a_level_whose_manipulation_check_fails_gives_no_verdict_on_any_row_that_reads_it():
    rows = r4.rows(_runs(shares={**SHARE, "strong": 0.45}))
    assert rows[0]["verdict"] == "no verdict" and "strong" in rows[0]["why"]
    assert all(r["verdict"] == "no verdict" for r in rows if "strong" in r["levels"])
    assert any(r["verdict"] != "no verdict" for r in rows if r["levels"] == ("weak",))


def test_the_figure_draws_each_paths_and_the_pooled_interval_at_two_unjoined_levels(tmp_path):
    runs = _runs()
    fig = r4.regime_figure(runs, str(tmp_path / "regime.png"))
    points = r4.figure_points(runs)
    drawn = {c.get_label(): c for c in fig.axes[0].containers}
    assert set(drawn) == set(points) == {*VARIANTS, "pooled"}
    for name, pts in points.items():
        line, caps, bars = drawn[name].lines
        assert list(line.get_ydata()) == pytest.approx([p[1] for p in pts])
        assert line.get_linestyle() == "None"                   # categorical levels: no joining line
        segments = bars[0].get_segments()
        assert [y for s in segments for y in (s[0][1], s[1][1])] == pytest.approx([y for p in pts for y in p[2:]])
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["gap 6 (weak)", "gap 30 (strong)"]
    assert ax.get_ylabel().endswith("(below 0: sequence ahead)")
    primary = r4.rows(runs)[0]
    # the primary is the change between the points: the title gives its pooled interval and verdict
    assert ax.get_title().splitlines()[1] == (f"primary, the change from gap 6 to gap 30: "
                                              f"{primary['test']['mean']:+.3f} [{primary['test']['low']:+.3f}, "
                                              f"{primary['test']['high']:+.3f}] pooled, {primary['verdict']}")


def _finished_unit(runs_dir, level, seed, variant):
    for rule in r4.RULES:
        run = os.path.join(r4.unit_dir(runs_dir, level, seed, variant), rule)
        os.makedirs(run)
        with open(os.path.join(run, "args.json"), "w") as f:
            json.dump({"aggregator": rule, "seed": seed, "steps": 30}, f)
        with open(os.path.join(run, "metrics.jsonl"), "w") as f:
            f.write("".join(json.dumps(m) + "\n" for m in regime_metrics(0.7, 0.4)))
        with open(os.path.join(run, "run.json"), "w") as f:
            json.dump({"starts": []}, f)


def test_the_archive_only_grows_and_unpacks_into_a_folder_the_streams_skip(tmp_path):
    runs, parts = str(tmp_path / "runs"), str(tmp_path / "parts")
    _finished_unit(runs, "weak", 1800, VARIANTS[0])
    _finished_unit(runs, "strong", 1800, VARIANTS[0])
    first = r4.archive(runs, parts, log=lambda *a: None)
    first_bytes = open(first, "rb").read()
    assert r4.archive(runs, parts, log=lambda *a: None) == ""          # nothing new: no part
    _finished_unit(runs, "weak", 1800, VARIANTS[1])
    second = r4.archive(runs, parts, log=lambda *a: None)
    assert open(first, "rb").read() == first_bytes                    # the first part is untouched
    with tarfile.open(second) as tar:
        assert {os.path.dirname(os.path.dirname(m.name)) for m in tar.getmembers()} == {
            os.path.join(r4.LEVELS["weak"], f"s1800-{VARIANTS[1]}")}
    fresh = str(tmp_path / "fresh")
    assert r4.extract(parts, fresh) == 3
    assert set(r4.finished_units(fresh)) == {(1800, "weak", VARIANTS[0]), (1800, "strong", VARIANTS[0]),
                                             (1800, "weak", VARIANTS[1])}


def test_progress_counts_units_and_prints_no_accuracy(tmp_path):
    runs = str(tmp_path / "runs")
    for level in r4.LEVELS:
        for v in VARIANTS:
            _finished_unit(runs, level, 1800, v)
    _finished_unit(runs, "weak", 1801, VARIANTS[0])
    text = r4.progress_text(runs)
    assert "1 of 49 registered seeds" in text and "weak 2, strong 1" in text
    assert "0.7" not in text and "acc" not in text


def test_the_report_refuses_until_every_registered_seed_is_in(tmp_path):
    runs = str(tmp_path / "runs")
    _finished_unit(runs, "weak", 1800, VARIANTS[0])
    with pytest.raises(ValueError, match="missing"):
        r4.report(runs, str(tmp_path / "out"), log=lambda *a: None)


# ------------------------------------------------------------------ the committed parts
PARTS = os.path.join(designs.REPO, "assets", "regime-v4", "archive")


def _parts():
    from registration_commits import committed_parts
    return committed_parts(PARTS, "regime-v4")


def test_every_archived_run_is_from_the_registration_commit_on_its_variant_in_one_start(tmp_path):
    """The registration's run rules as the parts record them: every run from a clean checkout of
    the commit that added registrations/regime-v4.md, in one start (an unfinished unit is
    trained again from scratch, never resumed), on the CPU, one thread, its variant's kernels;
    no unit is in two parts."""
    from registration_commits import assert_archived_runs_from, registration_commit
    seen = assert_archived_runs_from(PARTS, "regime-v4", registration_commit(r4.REGISTRATION), r4.RULES, tmp_path)
    assert r4.archived_units(PARTS) == seen


def test_a_committed_part_is_never_changed_after_the_commit_that_added_it():
    from registration_commits import commits_touching
    for part in _parts():
        touching = commits_touching(os.path.join("assets", "regime-v4", "archive", part))
        assert len(touching) <= 1, f"{part} was changed after it was added: {touching}"


def test_the_report_prints_what_its_seeds_could_detect_on_the_primary_from_their_own_sds():
    runs = _runs(effect={"weak": {}, "strong": {}})
    primary = r4.rows(runs)[0]["test"]
    line = r4.power_line(primary)
    assert f"detects {primary['claim_detectable']:.3f} or more at 80% power" in line
    assert f"pooled {primary['sd']:.4f}" in line and line in r4.report_text(runs)
    with open(os.path.join(designs.REPO, r4.REGISTRATION)) as f:
        assert "detects about 0.034" in f.read()                  # the planning value the line quotes


@pytest.mark.slow                   # unpacks every part and redraws the figure: the full suite runs it
def test_the_committed_report_and_figure_redraw_byte_for_byte_from_the_archive(tmp_path):
    """assets/regime-v4/regime.md is what `report` prints from the committed parts (every run
    checked against its level's registered settings and machine by design_runs), and the
    figure draws the report's rows: each path's own interval and the pooled one at each gap."""
    _parts()
    assert r4.extract(PARTS, str(tmp_path / "runs")) == len(r4.SEEDS) * len(r4.LEVELS) * len(VARIANTS)
    with open(os.path.join(designs.REPO, "assets", "regime-v4", "regime.md")) as f:
        committed = f.read()
    assert r4.report(str(tmp_path / "runs"), str(tmp_path / "out"), log=lambda *a: None) == committed
    assert (tmp_path / "out" / "regime.png").stat().st_size > 0
    runs = r4.load_design(str(tmp_path / "runs"))
    for name, pts in r4.figure_points(runs).items():
        for level, mean, low, high in pts:
            row = next(line for line in committed.splitlines()
                       if line.startswith(f"| token - sequence at {level}, last held-out acc |"))
            cells = [c.strip() for c in row.strip("|").split("|")]
            column = 3 if name == "pooled" else 4 + VARIANTS.index(name)
            assert cells[column] == f"{mean:+.3f} [{low:+.3f}, {high:+.3f}]", (name, level, cells[column])
