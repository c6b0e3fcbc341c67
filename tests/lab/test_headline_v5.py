"""The paper's headline tested blind (registrations/headline-v5.md, its data file
registrations/headline-v5.json): its worlds are picked by a rule that reads step-0 quantities
only, its seeds are fresh, n comes from the committed sds, and its four primaries are judged
with Holm in the registered direction by the machinery every registered design runs on."""
import json
import os
import random

import pytest
from fake_runs import regime_metrics

from grpo_ba_lab import designs
from grpo_ba_lab.analysis import registered_design as rd
from grpo_ba_lab.analysis import world_choice as wc

DESIGN_FILE = "registrations/headline-v5.json"
DESIGN = rd.load(DESIGN_FILE)
DATA = wc.read_design(os.path.join(designs.REPO, DESIGN_FILE))


def _draws(seeds):
    """A seed and its warm-up redraws (seed + 1000 k, k < 5: the band rule's)."""
    return {s + 1000 * k for s in seeds for k in range(5)}


def test_its_seeds_selection_seeds_and_their_redraws_are_fresh():
    """No earlier design's seed, no exploratory probe's, nor any of their redraws is one of this
    design's seeds, its selection seeds or their redraws; the two sets are disjoint too."""
    from grpo_ba_lab.analysis import coupling_pilot, long_horizon, regime_pilot, stability_probe
    mine, selection = _draws(DESIGN.seeds), _draws(DATA["selection"]["seeds"].values())
    assert not mine & selection
    theirs = set(coupling_pilot.PILOT_SEEDS) | set(regime_pilot.PILOT_SEEDS) | set(regime_pilot.ROUND2_SEEDS)
    theirs |= set(long_horizon.SEEDS) | set(stability_probe.PROBE_SEEDS)
    for name, design in designs.DESIGNS.items():
        if name not in DESIGN.levels.values():
            theirs |= {s for seeds in design.get("seeds", {}).values() for s in seeds}
    assert not (mine | selection) & _draws(theirs)


def test_the_data_file_is_the_registration_four_primaries_all_three_rules_both_paths():
    primaries = [r for r in DATA["rows"] if r["label"] == "primary"]
    assert {(tuple(r["pair"]), r["level"], r["metric"]) for r in primaries} == {
        (("balanced", other), level, "last") for other in ("token", "sequence") for level in ("weak", "strong")}
    assert DESIGN.rules == ("token", "sequence", "balanced") and DESIGN.variants == ("avx2-1t", "default-1t")
    assert DESIGN.direction == 1                          # balanced ahead, as registered
    with open(os.path.join(designs.REPO, DESIGN.registration)) as f:
        registration = f.read()
    assert f"**n = {len(DESIGN.seeds)}.**" in registration
    assert f"{DESIGN.seeds[0]}-{DESIGN.seeds[-1]}" in registration


@pytest.mark.slow                   # unpacks regime-v3's and regime-v4's archives
def test_n_is_what_the_power_rule_gives_from_the_committed_sds(tmp_path):
    """assets/headline-v5/power.txt is what `world_choice ... power` prints from the committed
    archives, and its n is the design's."""
    text = wc.power_text(DATA, wc.archive_sds(designs.REPO, str(tmp_path)))
    with open(os.path.join(designs.REPO, "assets", "headline-v5", "power.txt")) as f:
        assert f.read() == text
    assert text.rstrip().endswith(f"n = {len(DESIGN.seeds)}")


def test_the_seeds_needed_detect_the_target_and_one_fewer_does_not():
    from grpo_ba_lab.analysis import paired_stats as ps
    n = wc.seeds_needed(0.04, [0.05, 0.045], 0.02, 4)
    seen = lambda k: max([ps.detectable_difference(0.04, k, ps.ALPHA / 4)] +
                         [ps.detectable_difference(s, k, ps.ALPHA / 4, ps.POWER ** 0.5) for s in (0.05, 0.045)])
    assert seen(n) <= 0.02 < seen(n - 1)


# ------------------------------------------------------------------ the rule that picks the worlds

def _records(shares: dict, ratio=2.0, missed=()):
    """Measured records of every grid world on both selection seeds: token's share by world
    name (default 0.5), and an accuracy-like key the rule must never read."""
    out = []
    for world in wc.grid_worlds(DATA["selection"]):
        name = wc.world_name(world)
        for variant, seed in DATA["selection"]["seeds"].items():
            ok = name not in missed
            out.append({"world": name, "seed": seed, "variant": variant, "in_band": ok,
                        "token_share": shares.get(name, 0.5), "wrong_over_right": ratio,
                        "accuracy": random.random()})
    return out


def _choose(records):
    return wc.choose_worlds(DATA, wc.world_summaries(DATA, records))


def test_the_rule_takes_the_family_nearest_both_aims():
    shares = {"ramble-f0.3-g6": 0.46, "ramble-f0.3-g30": 0.34,      # distance 0.01 + 0.04
              "loop-f0.5-g6": 0.44, "loop-f0.5-g18": 0.31}          # distance 0.01 + 0.01
    chosen = _choose(_records(shares))
    assert chosen["family"] == {"slip_style": "loop", "force_frac": 0.5}
    assert chosen["levels"] == {"weak": "loop-f0.5-g6", "strong": "loop-f0.5-g18"}


def test_the_rule_reads_no_accuracy():
    shares = {"ramble-f0.5-g6": 0.45, "ramble-f0.5-g30": 0.30}
    records = _records(shares)
    again = [{**r, "accuracy": 1 - r["accuracy"]} for r in records]
    assert _choose(records) == _choose(again)
    assert _choose([{k: v for k, v in r.items() if k != "accuracy"} for r in records]) == _choose(records)


def test_a_world_outside_the_band_or_without_longer_wrong_answers_is_no_candidate():
    shares = {"ramble-f0.3-g6": 0.45, "ramble-f0.3-g30": 0.30}
    assert _choose(_records(shares))["levels"] == {"weak": "ramble-f0.3-g6", "strong": "ramble-f0.3-g30"}
    assert _choose(_records(shares, missed={"ramble-f0.3-g30"}))["family"] is None
    assert _choose(_records(shares, ratio=0.9))["family"] is None


def test_a_family_needs_both_levels_with_the_weak_gap_below_the_strong_gap():
    assert _choose(_records({"ramble-f0.3-g6": 0.45}))["family"] is None
    assert _choose(_records({"ramble-f0.3-g6": 0.30, "ramble-f0.3-g30": 0.45}))["family"] is None


def test_ties_go_to_the_grids_order():
    shares = {"ramble-f0.5-g6": 0.45, "ramble-f0.5-g30": 0.30, "loop-f0.3-g6": 0.45, "loop-f0.3-g30": 0.30}
    assert _choose(_records(shares))["family"] == {"slip_style": "ramble", "force_frac": 0.5}


def test_the_worlds_page_marks_the_chosen_levels_and_shows_every_world():
    shares = {"ramble-f0.3-g6": 0.45, "ramble-f0.3-g30": 0.30}
    summaries = wc.world_summaries(DATA, _records(shares))
    text = wc.worlds_text(DATA, summaries, wc.choose_worlds(DATA, summaries))
    rows = [line for line in text.splitlines() if line.startswith("| ") and "-g" in line]
    assert len(rows) == len(wc.grid_worlds(DATA["selection"])) == 12
    assert [r.split("|")[-2].strip() for r in rows if r.split("|")[-2].strip()] == ["weak", "strong"]


# ------------------------------------------------------------------ the rows

def _runs(effect, seeds=range(2450, 2458), share={"weak": 0.45, "strong": 0.31}):
    """{level: (by_rule, records)}: last accuracy = 0.7 + effect[level][rule] + seed noise."""
    rng = random.Random(1)
    runs = {}
    for level in DESIGN.levels:
        by_rule = {rule: {} for rule in DESIGN.rules}
        for seed in seeds:
            base = rng.gauss(0, 0.02)
            for v in DESIGN.variants:
                for rule in DESIGN.rules:
                    by_rule[rule][(seed, v)] = regime_metrics(
                        0.7 + base + effect[level].get(rule, 0.0) + rng.gauss(0, 0.005),
                        share[level] if rule == "token" else 0.5)
        runs[level] = (by_rule, {u: {} for u in by_rule["token"]})
    return runs


def test_four_primaries_with_holm_and_balanced_behind_reads_contradicted():
    runs = _runs({"weak": {"balanced": 0.05}, "strong": {"balanced": -0.05}})
    table = {r["what"]: r for r in rd.rows(DESIGN, runs)}
    primaries = [r for r in table.values() if r["label"] == "primary"]
    assert len(primaries) == 4
    ps = rd.paired_stats
    adjusted = ps.holm({r["what"]: r["test"]["p_claim"] for r in primaries})
    for r in primaries:
        assert r["p"] == pytest.approx(adjusted[r["what"]])
        assert r["test"]["claim_detectable"] == pytest.approx(ps.claim_detectable(r["test"], ps.ALPHA / 4))
    assert table["balanced - token at weak, last held-out acc"]["verdict"] == "holds"
    assert table["balanced - token at strong, last held-out acc"]["verdict"] == "contradicted"
    assert "registered direction" in rd.verdict_words(DESIGN, table["balanced - token at strong, last held-out acc"])


def test_no_difference_is_not_detected_with_the_size_the_whole_rule_could_see():
    runs = _runs({"weak": {}, "strong": {}})
    for r in rd.rows(DESIGN, runs):
        if r["label"] == "primary":
            assert r["verdict"] == "not detected"
            assert f"{r['test']['claim_detectable']:.3f} or more" in rd.verdict_words(DESIGN, r)


def test_a_level_outside_its_manipulation_check_gives_no_verdict_to_its_rows():
    runs = _runs({"weak": {"balanced": 0.05}, "strong": {}}, share={"weak": 0.30, "strong": 0.31})
    for r in rd.rows(DESIGN, runs):
        assert (r["verdict"] == "no verdict") == ("weak" in r["levels"]), r["what"]


def test_the_worlds_file_if_committed_was_committed_before_any_archive_part():
    """The timeline the registration fixes: the chosen worlds before the first GRPO run, whose
    first archived part can only come later."""
    from registration_commits import commits_touching
    worlds = os.path.join("assets", "headline-v5", "worlds.json")
    if not os.path.exists(os.path.join(designs.REPO, worlds)):
        pytest.skip("the worlds are not chosen yet")
    parts = os.path.join(designs.REPO, "assets", "headline-v5", "archive")
    with open(os.path.join(designs.REPO, worlds)) as f:
        chosen = json.load(f)
    assert set(chosen["levels"]) == set(DESIGN.levels)
    for part in sorted(os.listdir(parts)) if os.path.isdir(parts) else []:
        touching = commits_touching(os.path.join("assets", "headline-v5", "archive", part))
        assert len(touching) == 1, part
        assert touching[0] not in commits_touching(worlds), part


# ------------------------------------------------------------------ the committed parts

PARTS = DESIGN.archive_dir


def _parts():
    from registration_commits import committed_parts
    return committed_parts(PARTS, "headline-v5")


def test_every_archived_run_is_from_the_worlds_commit_on_its_variant_in_one_start(tmp_path):
    """The registration's run rules as the parts record them: every run from a clean checkout of
    the commit that added the chosen worlds, in one start, on the CPU, one thread, its
    variant's kernels; no unit is in two parts, and no part changed after it was added."""
    from registration_commits import assert_archived_runs_from, commits_touching, registration_commit
    for part in _parts():
        assert len(commits_touching(os.path.join(DATA["archive"], part))) <= 1, part
    assert_archived_runs_from(PARTS, "headline-v5", registration_commit(DATA["worlds_file"]), DESIGN.rules, tmp_path)


@pytest.mark.slow                   # unpacks every part
def test_the_committed_report_redraws_byte_for_byte_from_the_parts(tmp_path):
    """Once every registered seed is in and the report is committed, it is what `report`
    prints from the committed parts (computed once: the registration's stopping rule)."""
    committed = os.path.join(DESIGN.report_dir, DESIGN.texts["file"])
    if not os.path.exists(committed):
        pytest.skip("headline-v5's report is not computed yet: its seeds are still running")
    rd.extract(PARTS, str(tmp_path / "runs"))
    with open(committed) as f:
        assert rd.report(DESIGN, str(tmp_path / "runs"), str(tmp_path / "out"), log=lambda *a: None) == f.read()
