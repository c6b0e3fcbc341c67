"""Paired comparison of rules over seeds (grpo_ba_lab/analysis/paired_stats.py) on hand-made numbers."""
import math

import pytest

from grpo_ba_lab.analysis import paired_stats as ps
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


# ------------------------------------------------------------------ exact t, power, seeds by power

def test_the_t_distribution_is_exact_where_it_has_a_closed_form():
    # df = 2: P(|T| <= x) = x / sqrt(2 + x^2); df = 1 (Cauchy): 2 atan(x) / pi
    for x in (0.1, 1.0, 4.3027, 50.0, 1e6):
        assert ps.t_abs_cdf(x, 2) == pytest.approx(x / math.sqrt(2 + x * x), rel=1e-12)
        assert ps.t_abs_cdf(x, 1) == pytest.approx(2 * math.atan(x) / math.pi, rel=1e-12)
    assert ps.t_quantile(0.80, 5) == pytest.approx(0.9195, abs=1e-4)        # printed tables
    assert ps.t_quantile(0.20, 5) == pytest.approx(-0.9195, abs=1e-4)
    assert ps.t_test_p(2.5706, 1.0 * math.sqrt(6), 6) == pytest.approx(0.05, abs=1e-4)


def test_the_detectable_difference_is_the_t_formula_of_the_docstring():
    # (t_{0.975,5} + t_{0.80,5}) * sd / sqrt(6) = (2.5706 + 0.9195) / sqrt(6) per unit of sd
    per_sd = (2.570582 + 0.919544) / math.sqrt(6)
    assert ps.detectable_difference(1.0, 6) == pytest.approx(per_sd, abs=1e-5)
    assert ps.detectable_difference(0.5, 6) == pytest.approx(ps.detectable_difference(1.0, 6) / 2)
    assert ps.detectable_difference(1.0, 1) == math.inf


@pytest.mark.parametrize("low, high, seen", [(-0.007, 0.055, 0.042), (-0.028, 0.043, 0.048),
                                             (-0.003, 0.040, 0.029)])
def test_a_printed_six_seed_interval_gives_the_difference_it_could_have_seen(low, high, seen):
    """The version-2 rows docs/toy-designs.md quotes (demo balanced - sequence, spread-room
    balanced - sequence, tilde-gap balanced - token): the sd behind the interval, then delta_80."""
    sd = ps.sd_from_interval(low, high, 6)
    diffs = [(low + high) / 2 + sd * z for z in (1, -1, 1, -1, 1, -1)]   # values with that sd ...
    row = paired_difference(diffs, [0] * 6)
    assert row["sd"] == pytest.approx(sd * math.sqrt(6 / 5))          # ... (their n - 1 sd)
    assert round(ps.detectable_difference(sd, 6), 3) == seen
    assert ps.detectable_difference(row["sd"], 6) == pytest.approx(row["detectable"])


def test_seeds_by_power_is_the_smallest_n_that_detects_delta():
    assert ps.seeds_for(1.0, 1.0) == 10                 # effect size 1: the standard tables' n = 10
    for delta, sd in ((0.02, 0.0295), (0.02, 0.011), (0.05, 0.03)):
        n = ps.seeds_for(delta, sd)
        assert ps.detectable_difference(sd, n) <= delta < ps.detectable_difference(sd, n - 1)
    with pytest.raises(ValueError):
        ps.seeds_for(0.0, 0.03)


# ------------------------------------------------------------------ the claim rule

def _nested(first: list[float], second: list[float]) -> dict:
    """{variant: {seed: difference}}: the variants' seeds are disjoint, as in version 2."""
    return {"native-2t": dict(enumerate(first)),
            "default-1t": dict(enumerate(second, start=len(first)))}


def _holds_by_the_version_2_rule(test: dict) -> bool:
    """Version 2: the pooled interval excludes 0 and every variant's mean has its sign."""
    agree = all(v["mean"] * test["mean"] > 0 for v in test["variants"].values())
    return test["excludes_zero"] and agree


def test_at_three_plus_three_seeds_the_version_2_sign_clause_could_never_refuse_a_claim():
    """If a variant's mean has the other sign, pooled t <= sqrt(5) = 2.236 < t_{0.975,5} = 2.571:
    the pooled interval alone already contains 0, so the clause never changed a verdict."""
    import random
    rng = random.Random(0)
    assert math.sqrt(5) < t_critical(5)
    extreme = ps.claim_test(_nested([0.02, 0.02, 0.02], [0.0, 0.0, 0.0]))  # the bound's case
    assert extreme["mean"] / (extreme["sd"] / math.sqrt(6)) == pytest.approx(math.sqrt(5))
    for _ in range(2000):
        first = [rng.gauss(0.05, 0.03) for _ in range(3)]
        second = [rng.gauss(-0.01, 0.03) for _ in range(3)]
        test = ps.claim_test(_nested(first, second))
        if min(v["mean"] for v in test["variants"].values()) * test["mean"] < 0:
            assert not test["excludes_zero"]


def test_with_more_seeds_a_pooled_interval_can_exclude_0_while_a_variant_disagrees_and_is_refused():
    # six seeds per variant: one variant +0.06, the other -0.005; pooled t > t_{0.975,11}
    test = ps.claim_test(_nested([0.06, 0.062, 0.058, 0.061, 0.059, 0.06],
                                 [-0.005, -0.004, -0.006, -0.005, -0.004, -0.006]))
    assert test["excludes_zero"] and test["variants"]["default-1t"]["mean"] < 0
    assert ps.verdict(test) == ps.NOT_DETECTED
    assert any("default-1t" in why for why in test["why"])


def test_a_claim_is_refused_when_the_pooled_interval_excludes_0_but_a_variants_own_does_not():
    agree = [0.05, 0.052, 0.048, 0.051, 0.049, 0.05]
    noisy = [0.03, -0.02, 0.05, -0.01, 0.04, -0.03]               # mean +0.01, interval contains 0
    test = ps.claim_test(_nested(agree, noisy))
    assert test["excludes_zero"] and _holds_by_the_version_2_rule(test)   # version 2 said: holds
    assert not test["variants"]["default-1t"]["excludes_zero"]
    assert ps.verdict(test) == ps.NOT_DETECTED and test["p_claim"] >= ps.ALPHA


def test_a_claim_holds_only_when_every_part_excludes_0_on_the_same_side():
    test = ps.claim_test(_nested([0.05, 0.052, 0.048, 0.051, 0.049, 0.05],
                                 [0.03, 0.035, 0.025, 0.032, 0.028, 0.03]))
    assert ps.verdict(test) == ps.HOLDS
    assert test["p_claim"] == max([test["p"]] + [v["p"] for v in test["variants"].values()])


def test_three_seeds_per_variant_are_too_few_for_the_variant_check_whatever_the_pooled_interval():
    test = ps.claim_test(_nested([0.05, 0.051, 0.049], [0.05, 0.052, 0.048]))
    assert test["excludes_zero"] and test["p"] < 1e-6
    assert ps.verdict(test) == ps.NOT_DETECTED and test["claim_detectable"] == math.inf
    assert "variant native-2t has 3 seeds" in ps.verdict_text(test, ps.verdict(test))


def test_a_seed_run_on_both_variants_counts_once_in_the_pooled_interval():
    crossed = {"native-2t": {s: 0.05 + 0.001 * s for s in range(6)},
               "default-1t": {s: 0.03 + 0.002 * s for s in range(6)}}
    test = ps.claim_test(crossed)
    assert test["n"] == 6                                        # seeds, not (seed, variant) runs
    assert test["mean"] == pytest.approx(sum((0.08 + 0.003 * s) / 2 for s in range(6)) / 6)


def test_an_excluded_earlier_value_is_a_second_statement_never_the_verdict():
    # version 1's demo: balanced - sequence +0.155; a version with a small, noisy difference
    small = _nested([0.03, -0.01, 0.05], [0.04, 0.0, 0.03])
    test = ps.claim_test(small, earlier=0.155)
    assert test["high"] < 0.155 and ps.earlier_excluded(test)
    assert ps.verdict(test) == ps.NOT_DETECTED                   # against 0 it shows nothing
    text = ps.verdict_text(test, ps.verdict(test), earlier_name="this project's version-1 toy value")
    assert text.startswith("not detected; ")
    assert text.endswith(". Not a verdict: the pooled interval excludes this project's version-1 toy "
                         "value +0.155")
    assert "contradict" not in text                              # two statements, one verdict
    inside = ps.claim_test(small, earlier=0.035)         # the earlier value inside: unconfirmed
    assert inside["low"] < 0.035 < inside["high"] and not ps.earlier_excluded(inside)
    assert "excludes" not in ps.verdict_text(inside, ps.verdict(inside))
    flipped = ps.claim_test(_nested([-0.05, -0.052, -0.048, -0.051, -0.049, -0.05],
                                    [-0.03, -0.035, -0.025, -0.032, -0.028, -0.03]), earlier=0.01)
    assert ps.verdict(flipped) == ps.CONTRADICTED                # holds, with the other sign
    same_way = ps.claim_test(_nested([0.05, 0.052, 0.048, 0.051, 0.049, 0.05],
                                     [0.03, 0.035, 0.025, 0.032, 0.028, 0.03]), earlier=0.155)
    assert ps.verdict(same_way) == ps.HOLDS                      # smaller than claimed, same sign


def test_a_not_detected_row_prints_the_difference_it_could_have_seen():
    diffs = [0.02, -0.01, 0.03, 0.0, 0.01, -0.02]
    test = ps.claim_test(_nested(diffs, [d + 0.005 for d in diffs]))
    text = ps.verdict_text(test, ps.verdict(test))
    seen = test["claim_detectable"]
    assert ps.verdict(test) == ps.NOT_DETECTED and math.isfinite(seen)
    assert text == f"not detected; differences of {seen:.3f} or more would have been seen at 80% power"
    # the whole rule needs more than the pooled test alone: each variant has half the seeds
    assert seen > test["detectable"]


# ------------------------------------------------------------------ Holm within a design

def test_holm_adjusts_step_down():
    assert ps.holm({"a": 0.01, "b": 0.04}) == pytest.approx({"a": 0.02, "b": 0.04})
    assert ps.holm({"a": 0.03, "b": 0.04}) == pytest.approx({"a": 0.06, "b": 0.06})
    assert ps.holm({"a": 0.5}) == {"a": 0.5} and ps.holm({}) == {}


def _with_p(p_claim: float) -> dict:
    return {"mean": 0.02, "p_claim": p_claim, "earlier": None, "p_earlier": None}


def test_primaries_are_judged_after_holm_and_no_design_has_more_than_two():
    tests = {"first": _with_p(0.03), "second": _with_p(0.04), "other": _with_p(0.03)}
    assert ps.design_verdicts(tests) == {k: (ps.HOLDS, False) for k in tests}      # no primaries
    held = ps.design_verdicts(tests, primaries=["first", "second"])
    assert held == {"first": (ps.NOT_DETECTED, False), "second": (ps.NOT_DETECTED, False),
                    "other": (ps.HOLDS, False)}
    first_small = ps.design_verdicts({**tests, "first": _with_p(0.01)}, ["first", "second"])
    assert first_small["first"] == (ps.HOLDS, False)
    with pytest.raises(ValueError, match="at most 2"):
        ps.design_verdicts(tests, primaries=["first", "second", "other"])
    with pytest.raises(ValueError, match="without a row"):
        ps.design_verdicts(tests, primaries=["nowhere"])


def test_the_command_prints_what_a_printed_interval_could_see(capsys):
    assert ps.main(["--interval", "-0.007", "0.055", "--seeds", "6"]) == 0
    printed = capsys.readouterr().out
    assert "detectable at 80% power with 6 seeds: 0.0421; seeds to detect 0.02: 20" in printed


def test_a_row_that_sees_no_difference_from_0_leads_with_not_detected_then_names_the_earlier_value():
    # demo-band's balanced - token: version 1's +0.080 lies outside, and 0 lies inside
    noisy = {"native-1t": {s: 0.01 + (-1) ** s * 0.02 for s in range(8)},
             "default-1t": {s: 0.005 + (-1) ** s * 0.015 for s in range(8)}}
    test = ps.claim_test(noisy, earlier=0.080)
    assert test["low"] < 0 < test["high"] < 0.080 and ps.verdict(test) == ps.NOT_DETECTED
    text = ps.verdict_text(test, ps.verdict(test), earlier_name="this project's version-1 toy value")
    assert text == (f"not detected; differences of {test['claim_detectable']:.3f} or more would have "
                    "been seen at 80% power. Not a verdict: the pooled interval excludes this project's "
                    "version-1 toy value +0.080")
    # a primary's "(Holm over 2 primaries)" follows the verdict, before the second statement
    assert ps.verdict_text(test, ps.verdict(test), after_verdict=" (Holm)", earlier_note=" (note)").endswith(
        "at 80% power (Holm). Not a verdict: the pooled interval excludes the earlier value +0.080 (note)")
    flipped = ps.claim_test(_nested([-0.05, -0.052, -0.048, -0.051, -0.049, -0.05],
                                    [-0.03, -0.035, -0.025, -0.032, -0.028, -0.03]), earlier=0.01)
    assert ps.verdict_text(flipped, ps.CONTRADICTED) == ("contradicted (holds with the other sign than "
                                                         "the earlier value +0.010)")


def test_a_row_that_holds_below_an_earlier_claim_leads_with_holds():
    # demo-band's balanced - sequence: holds at about +0.04, version 1 claimed +0.155
    steady = {"native-1t": {s: 0.044 + (-1) ** s * 0.01 for s in range(8)},
              "default-1t": {s: 0.034 + (-1) ** s * 0.012 for s in range(8)}}
    test = ps.claim_test(steady, earlier=0.155)
    assert ps.verdict(test) == ps.HOLDS
    assert ps.verdict_text(test, ps.HOLDS) == ("holds. Not a verdict: the pooled interval excludes the "
                                               "earlier value +0.155")
    assert ps.verdict_text(ps.claim_test(steady), ps.HOLDS) == "holds"
