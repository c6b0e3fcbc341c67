"""The regime design's rows, stopping rule and figure (grpo_ba_lab/analysis/regime_design.py),
on hand-made runs: each number recomputed here from the per-run accuracies."""
import random

import pytest
from fake_runs import regime_metrics

from grpo_ba_lab import designs
from grpo_ba_lab.analysis import paired_stats
from grpo_ba_lab.analysis import regime_design as rd

VARIANTS = designs.REGIME_VARIANTS
SHARE = {"none": 0.52, "weak": 0.44, "strong": 0.31}


def _runs(seeds=range(1400, 1408), effect=None, shares=SHARE):
    """{level: (by_rule, records)}: last accuracy = 0.7 + effect[level][rule] + seed noise."""
    effect = effect or {"none": {}, "weak": {"token": 0.03}, "strong": {"balanced": 0.08, "sequence": 0.06}}
    rng = random.Random(0)
    runs = {}
    for level in rd.LEVELS:
        by_rule = {rule: {} for rule in ("token", "sequence", "balanced")}
        for seed in seeds:
            for v in VARIANTS:
                for rule in by_rule:
                    last = 0.7 + effect[level].get(rule, 0.0) + rng.gauss(0, 0.01)
                    share = shares[level] if rule == "token" else 0.5
                    by_rule[rule][(seed, v)] = regime_metrics(last, share)
        runs[level] = (by_rule, {u: {} for u in by_rule["token"]})
    return runs


def _last(runs, level, rule, seed, v):
    return runs[level][0][rule][(seed, v)][-1]["accuracy"]


def test_the_interaction_is_token_minus_sequence_at_strong_minus_at_weak_seed_by_seed():
    runs = _runs()
    got = rd.interaction(runs)
    for v in VARIANTS:
        for seed in range(1400, 1408):
            want = ((_last(runs, "strong", "token", seed, v) - _last(runs, "strong", "sequence", seed, v))
                    - (_last(runs, "weak", "token", seed, v) - _last(runs, "weak", "sequence", seed, v)))
            assert got[v][seed] == pytest.approx(want, abs=1e-12)


def test_three_primaries_are_judged_after_holm_over_the_three():
    rows = rd.rows(_runs())
    primaries = [r for r in rows if r["label"] == "primary"]
    assert [r["key"] for r in primaries] == list(rd.PRIMARIES)
    raw = {r["key"]: r["test"]["p_claim"] for r in primaries}
    assert {r["key"]: r["p"] for r in primaries} == paired_stats.holm(raw)
    verdicts = {r["key"]: r["verdict"] for r in primaries}
    # token - sequence: -0.06 at strong, +0.03 at weak; balanced - token +0.08 at strong;
    # balanced - sequence at weak: 0 - 0 = 0 (not detected)
    assert verdicts == {"interaction": "holds", "strong": "holds", "weak": "not detected"}
    assert primaries[0]["test"]["mean"] == pytest.approx(-0.09, abs=0.01)


def test_a_level_whose_manipulation_check_fails_gives_no_verdict_on_any_row_that_reads_it():
    runs = _runs(shares={**SHARE, "strong": 0.45})          # the strong level's coupling is weak
    rows = {r["key"]: r for r in rd.rows(runs)}
    assert rows["interaction"]["verdict"] == rows["strong"]["verdict"] == "no verdict"
    assert "strong" in rows["strong"]["why"]
    assert rows["weak"]["verdict"] != "no verdict"
    assert all(r["verdict"] == "no verdict" for k, r in rows.items() if k.startswith("strong/"))
    assert "failed" in rd.report_text(runs, list(range(1400, 1408)))


def test_the_time_limit_keeps_the_first_seeds_finished_at_every_level_and_variant():
    runs = _runs(seeds=range(1400, 1406))
    assert rd.kept_seeds(runs) == list(range(1400, 1406))
    del runs["weak"][0]["token"][(1402, VARIANTS[1])]     # seed 1402 unfinished on one variant, one level
    assert rd.kept_seeds(runs) == [1400, 1401]             # 1403-1405 finished, but after the gap


def test_balanced_is_compared_with_the_better_of_the_other_two_at_each_level():
    rows = {b["level"]: b for b in rd.better_of_the_others(_runs())}
    assert rows["weak"]["better"] == "token" and rows["strong"]["better"] == "sequence"
    assert rows["weak"]["test"]["mean"] == pytest.approx(-0.03, abs=0.01)
    assert not rows["weak"]["level_or_best"]                  # -0.03 is below the margin
    assert rows["strong"]["level_or_best"]


def test_the_figure_draws_each_pairs_pooled_mean_and_interval_at_each_level(tmp_path):
    runs = _runs()
    fig = rd.regime_figure(runs, str(tmp_path / "regime.png"), list(range(1400, 1408)))
    assert (tmp_path / "regime.png").stat().st_size > 0
    points = rd.figure_points(runs)
    ax = fig.axes[0]
    drawn = {c.get_label(): c for c in ax.containers}
    assert set(drawn) == set(points)
    for pair, pts in points.items():
        line, caps, bars = drawn[pair].lines
        ys = list(line.get_ydata())
        assert ys == pytest.approx([p[1] for p in pts])
        segments = bars[0].get_segments()
        assert [y for s in segments for y in (s[0][1], s[1][1])] == pytest.approx([y for p in pts for y in p[2:]])
        assert [round(x) for x in line.get_xdata()] == list(range(len(rd.LEVELS)))
        assert line.get_linestyle() == "None"             # categorical levels: no joining line
    labels = [t.get_text() for t in ax.get_xticklabels()]
    # each level named by its gap, as the pages name it, then the level's word
    assert [lab.split("\n")[0] for lab in labels] == [f"gap {designs.REGIME_GAPS[lv]} ({lv})" for lv in rd.LEVELS]


@pytest.mark.slow                   # draws or redraws figures: the full suite runs it
def test_the_committed_regime_report_and_figure_redraw_from_the_runs_archive(tmp_path):
    """assets/regime-v3: regime.md redrawn byte for byte from runs.tar.gz (every run checked
    against its level's registered settings, machine and provenance by design_runs), and the
    figure's drawn points are the report's pooled rows."""
    import os
    import tarfile
    assets = os.path.join(designs.REPO, "assets", "regime-v3")
    with tarfile.open(os.path.join(assets, "runs.tar.gz")) as tar:
        tar.extractall(tmp_path, filter="data")
    with open(os.path.join(assets, "regime.md")) as f:
        committed = f.read()
    assert rd.report(str(tmp_path), str(tmp_path / "out"), log=lambda *a: None) == committed
    runs, kept = rd.load_design(str(tmp_path))
    assert kept == list(designs.REGIME_SEEDS[:len(kept)]) and f"{len(kept)} of its 24 registered seeds" in committed
    for pair, pts in rd.figure_points(runs).items():
        a, b = pair.split(" - ")
        for level, mean, low, high in pts:
            row = f"| {a} - {b} at {level}, last held-out acc | secondary | {len(kept)} | {mean:+.3f} [{low:+.3f}, {high:+.3f}] |"
            other = f"| {pair} at {level}, last held-out acc | primary | {len(kept)} | {mean:+.3f} [{low:+.3f}, {high:+.3f}] |"
            assert row in committed or other in committed, (pair, level)
