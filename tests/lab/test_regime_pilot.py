"""The regime pilot's worlds and criteria (grpo_ba_lab/analysis/regime_pilot.py), on hand-made
metrics, and the sweep's subprocesses finding the repository from anywhere."""
import os
import subprocess
import sys

import pytest

from grpo_ba_lab import designs
from grpo_ba_lab.analysis import regime_pilot as rp
from grpo_ba_lab.analysis import sweep
from grpo_ba_lab.lab_args import check_args, parse_args
from fake_runs import write_units


def test_the_pilot_worlds_differ_in_the_gap_alone_and_share_strong_bands_run():
    parsed = {w: parse_args(rp.command(w, 1300, "/tmp/p", 1)) for w in rp.WORLDS}
    for args in parsed.values():
        check_args(args)
    base = vars(parsed["gap-30"])
    for world, args in parsed.items():
        differing = {k for k, v in vars(args).items() if v != base[k]}
        allowed = {"gap_size", "output_dir"} | ({"spread_size"} if world == rp.VARIANCE_WORLD else set())
        assert differing <= allowed, (world, differing)
    strong = designs.DESIGNS["strong-band"]["flags"]
    for key in ("regime", "slip_style", "force_frac", "max_new_tokens", "warmup_steps", "lr", "steps",
                "warmup_band_low", "warmup_band_high", "eval_prompts"):
        assert base[key] == strong[key], key
    assert base["gap_size"] == 30 and base["aggregator"] == "all" and base["eval_every"] == 10


def test_the_pilot_seeds_are_no_design_seeds():
    used = {seed for name in designs.DESIGNS for seed, _ in designs.registered_seeds(name)}
    assert not set(rp.PILOT_SEEDS) & used


def _metrics(accuracies, share, right, wrong):
    steps = [{"step": s, "pos_share_token": share, "len_right": right, "len_wrong": wrong,
              "wrong_over_right": wrong / right} for s in range(30)]
    for s, a in zip((0, 10, 20), accuracies[:-1]):
        steps[s]["accuracy"] = a
    return steps + [{"step": 30, "final_evaluation": True, "accuracy": accuracies[-1]}]


def _found(worlds, acc=(0.5, 0.6, 0.65, 0.7)):
    """{(world, seed): {rule: metrics}} for worlds {name: (share, wrong/right)}, two seeds."""
    return {(w, seed): {rule: _metrics(acc, share, 7.0, 7.0 * ratio) for rule in ("token", "sequence", "balanced")}
            for w, (share, ratio) in worlds.items() for seed in rp.PILOT_SEEDS}


def test_levels_are_picked_by_ratio_share_and_stability_never_by_which_rule_is_ahead():
    found = _found({"gap-0": (0.49, 1.0), "gap-6": (0.45, 1.6), "gap-12": (0.42, 2.2),
                    "gap-30": (0.31, 3.5), "spread-30": (0.49, 1.0)})
    assert rp.choose_levels(found) == {"none": "gap-0", "weak": "gap-6", "strong": "gap-30"}
    # which rule ends ahead changes nothing
    for (w, seed), runs in found.items():
        runs["token"] = _metrics((0.5, 0.6, 0.65, 0.9), *[runs["token"][0][k] for k in ("pos_share_token",)],
                                 7.0, runs["token"][0]["len_wrong"])
    assert rp.choose_levels(found) == {"none": "gap-0", "weak": "gap-6", "strong": "gap-30"}


def test_a_falling_rule_or_a_missing_seed_removes_a_candidate():
    found = _found({"gap-0": (0.49, 1.0), "gap-30": (0.31, 3.5)})
    found[("gap-30", 1301)]["balanced"] = _metrics((0.5, 0.8, 0.7, 0.6), 0.31, 7.0, 24.5)
    assert rp.choose_levels(found) == {"none": "gap-0"}
    del found[("gap-0", 1301)]
    assert rp.choose_levels(found) == {}


def test_the_report_names_each_worlds_level_from_the_runs_on_disk(tmp_path):
    write_units(tmp_path, _found({"gap-0": (0.49, 1.0), "spread-30": (0.48, 1.1)}))
    text = rp.report(str(tmp_path), log=lambda *a: None)
    assert "| gap-0 | 2 | 1.00 | 0.490 | none | none |" in text
    assert "| spread-30 | 2 | 1.10 | 0.480 | none | (variance axis, not a level) |" in text
    assert "Levels chosen by choose_levels: none = gap-0" in text


@pytest.mark.slow                   # runs the sweep's subprocesses: the full suite runs it
def test_a_sweep_started_outside_the_repository_gives_its_runs_the_repository_root(tmp_path):
    assert os.path.isfile(os.path.join(sweep.REPO, "grpo_ba.py"))
    assert os.path.isdir(os.path.join(sweep.REPO, "grpo_ba_lab"))
    # the path a sweep's subprocess gets imports the lab from another folder
    env = {**os.environ, "PYTHONPATH": sweep.REPO}
    done = subprocess.run([sys.executable, "-c", "import grpo_ba_lab.train, grpo_ba; print(grpo_ba.__file__)"],
                          cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert os.path.dirname(done.stdout.strip()) == sweep.REPO


def _committed(tmp_path, folder: str, report: str) -> str:
    """The committed report assets/FOLDER/REPORT, its runs archive unpacked into tmp_path."""
    import tarfile
    with tarfile.open(os.path.join(designs.REPO, "assets", folder, "runs.tar.gz")) as tar:
        tar.extractall(tmp_path, filter="data")
    with open(os.path.join(designs.REPO, "assets", folder, report)) as f:
        return f.read()


def test_the_committed_pilot_report_redraws_from_its_runs_archive(tmp_path):
    committed = _committed(tmp_path, "regime-pilot", "pilot.md")
    assert rp.report(str(tmp_path), log=lambda *a: None) == committed
    assert "Levels chosen by choose_levels: none = gap-0, weak = gap-6\n" in committed


# ------------------------------------------------------------------ round 2

def test_round_two_trains_token_alone_in_round_ones_world_family():
    for world in rp.ROUND2_WORLDS:
        one, two = (vars(parse_args(f(world, 1302, "/tmp/p", 1))) for f in (rp.command, rp.round2_command))
        differing = {k for k in one if one[k] != two[k]}
        assert differing == {"aggregator", "output_dir"}
        assert two["aggregator"] == "token" and two["output_dir"] == f"/tmp/p/{world}-s1302/token"
    used = {seed for name in designs.DESIGNS for seed, _ in designs.registered_seeds(name)}
    assert not set(rp.ROUND2_SEEDS) & (used | set(rp.PILOT_SEEDS))


def _unit(share, right, wrong, n_right, n_wrong, accuracies=(0.5, 0.6, 0.65, 0.7)):
    step0 = {"batches": 4, "lengths": [right] * n_right + [wrong] * n_wrong,
             "rewards": [1.0] * n_right + [0.0] * n_wrong}
    return _metrics(accuracies, share, 7.0, 7.0), step0


def test_round_two_pools_the_step0_lengths_over_seeds_and_batches_before_dividing():
    # seed 1302: 10 right of length 6, 10 wrong of 30; seed 1303: 30 right of 14, 10 wrong of 20
    found = {("gap-30", 1302): _unit(0.3, 6, 30, 10, 10), ("gap-30", 1303): _unit(0.3, 14, 20, 30, 10)}
    s = rp.round2_summary(found, "gap-30")
    assert s["len_right"] == (60 + 420) / 40 and s["len_wrong"] == (300 + 200) / 20
    assert abs(s["ratio0"] - 25.0 / 12.0) < 1e-12          # a mean of per-seed ratios would be 3.21
    assert s["responses"] == 60 and s["seeds"] == 2


def test_round_two_picks_levels_by_the_same_thresholds_and_token_falling_removes_a_candidate():
    seeds = rp.ROUND2_SEEDS
    found = {}
    for world, (share, right, wrong) in {"gap-0": (0.52, 6, 5), "gap-6": (0.43, 6, 10),
                                         "gap-12": (0.38, 6, 13), "gap-30": (0.31, 6, 20)}.items():
        for seed in seeds:
            found[(world, seed)] = _unit(share, right, wrong, 20, 20)
    assert rp.choose_levels_round2(found) == {"none": "gap-0", "weak": "gap-6", "strong": "gap-30"}
    found[("gap-30", seeds[0])] = _unit(0.31, 6, 20, 20, 20, accuracies=(0.5, 0.8, 0.7, 0.6))
    assert rp.choose_levels_round2(found) == {"none": "gap-0", "weak": "gap-6"}
    del found[("gap-0", seeds[1])]
    assert rp.choose_levels_round2(found) == {"weak": "gap-6"}
    text = rp.round2_report_text(found)
    assert "| gap-30 | 4 | 160 | 6.0 / 20.0 | 3.33 | 0.310 | token fell 0.200 | none met |" in text
    assert "| gap-0 | 3 | 120 | 6.0 / 5.0 | 0.83 | 0.520 | none | none met |" in text


def test_the_committed_round_two_report_redraws_from_its_runs_archive(tmp_path):
    committed = _committed(tmp_path, "regime-pilot-2", "pilot-round2.md")
    assert rp.report_round2(str(tmp_path), log=lambda *a: None) == committed
    assert committed.endswith("Levels chosen by choose_levels_round2: none = gap-0, weak = gap-6, strong = gap-30\n")
    # the levels registered are the ones round 2 chose
    assert {level: f"gap-{gap}" for level, gap in designs.REGIME_GAPS.items()} == rp.choose_levels_round2(
        rp.collect_round2(str(tmp_path)))
