"""Paired comparison of rules over seeds (grpo_ba_lab/analysis/paired_stats.py) on hand-made numbers."""
import math

import pytest

from grpo_ba_lab.analysis.paired_stats import (accuracy_area, accuracy_gain, late_reward, paired_difference, paired_rows,
                          paired_table, regime_stats, t_critical)


@pytest.mark.parametrize("df, expected", [(1, 12.7062), (4, 2.7764), (9, 2.2622), (29, 2.0452)])
def test_t_critical_matches_the_printed_tables(df, expected):
    assert t_critical(df) == pytest.approx(expected, abs=2e-4)


def test_paired_difference_has_the_known_mean_and_interval():
    # differences 1, 2, 3, 4, 5: mean 3, sd sqrt(2.5), half width t_4 * sd / sqrt(5)
    d = paired_difference([2, 4, 6, 8, 10], [1, 2, 3, 4, 5])
    half = 2.776445 * math.sqrt(2.5) / math.sqrt(5)
    assert d["n"] == 5 and d["mean"] == pytest.approx(3)
    assert d["low"] == pytest.approx(3 - half, abs=1e-4) and d["high"] == pytest.approx(3 + half, abs=1e-4)
    assert d["excludes_zero"]


def test_an_interval_around_zero_is_a_tie_and_pairing_removes_the_seed_spread():
    noisy = paired_difference([0.1, -0.2, 0.15, -0.05, 0.0], [0, 0, 0, 0, 0])
    assert noisy["low"] < 0 < noisy["high"] and not noisy["excludes_zero"]
    # Seeds differ by a lot, the rules by a steady 0.02: paired, the interval excludes 0.
    base = [0.3, 0.9, 0.5, 0.7, 0.1]
    steady = paired_difference([b + 0.02 + 0.001 * i for i, b in enumerate(base)], base)
    assert steady["excludes_zero"] and steady["low"] > 0


def test_one_seed_gives_no_interval_and_unequal_counts_are_refused():
    single = paired_difference([0.5], [0.4])
    assert single["low"] is None and not single["excludes_zero"]
    with pytest.raises(ValueError):
        paired_difference([1, 2], [1])


def _run(accs, rewards, wrong_over_right=None):
    """metrics.jsonl rows: an evaluation every 10 steps, as grpo_ba writes them."""
    rows = [{"step": s, "reward_mean": r, "wrong_over_right": wrong_over_right, "std_over_mean": 0.6}
            for s, r in enumerate(rewards)]
    for i, a in enumerate(accs):
        rows[min(10 * i, len(rows) - 1)]["accuracy"] = a
    return rows


def test_accuracy_gain_area_and_late_reward_on_known_metrics():
    run = _run([0.4, 0.5, 0.6, 0.7, 0.8], [0.0] * 35 + [1.0] * 5, wrong_over_right=3.0)
    # evaluations at steps 0, 10, 20, 30, 39: the last three 0.6, 0.7, 0.8
    assert accuracy_gain(run) == pytest.approx(0.3)
    area = (10 * 0.45 + 10 * 0.55 + 10 * 0.65 + 9 * 0.75) / 39
    assert accuracy_area(run) == pytest.approx(area)
    assert late_reward(run) == pytest.approx(1.0)            # the last 10% (4 steps) all 1
    stats = regime_stats(run)
    assert stats["step0_wrong_over_right"] == 3.0 and stats["late_wrong_over_right"] == pytest.approx(3.0)


def test_paired_table_names_the_seed_count_and_marks_intervals():
    runs = {("gap", "balanced"): {s: _run([0.4, 0.8 + 0.01 * s], [0.5] * 11) for s in range(5)},
            ("gap", "token"): {s: _run([0.4, 0.5 + 0.02 * s], [0.5] * 11) for s in range(5)}}
    rows = [r for r in paired_rows(runs) if r["metric"].startswith("last")]
    assert [r["pair"] for r in rows] == ["balanced - token"]
    assert rows[0]["mean"] == pytest.approx(0.3 - 0.01 * 2) and rows[0]["excludes_zero"]
    table = paired_table(runs)
    assert "5 seeds" in table and "| yes |" in table


def test_float_noise_around_an_identity_is_a_tie_in_every_table():
    """Sequence's and balanced's weight shares are both 1/2 by formula; float32 leaves
    differences of ~1e-8 with a tiny interval, which must not read as a difference."""
    a = [0.5] * 6
    b = [0.5 + 1e-8 * (1 + i % 2) for i in range(6)]
    noise = paired_difference(a, b)
    assert noise["high"] < 0 and not noise["excludes_zero"]
    real = paired_difference([0.6, 0.61, 0.62], [0.5, 0.5, 0.51])
    assert real["excludes_zero"]
