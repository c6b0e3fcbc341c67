"""The strong-coupling pilot's worlds and criteria, on hand-made metrics
(grpo_ba_lab/analysis/coupling_pilot.py, docs/strong-coupling.md)."""
import json

import pytest

from grpo_ba_lab.analysis import coupling_pilot as cp
from grpo_ba_lab.lab_args import check_args, parse_args
from grpo_ba_lab import designs


def test_every_pilot_world_parses_to_a_valid_band_run_of_the_three_rules():
    for world in cp.WORLDS:
        args = parse_args(cp.command(world, 1100, "/tmp/pilot", 1))
        check_args(args)
        assert args.aggregator == "all" and args.steps == 30 and args.spread_size == 0
        assert (args.warmup_band_low, args.warmup_band_high) == (0.45, 0.60)
        assert args.output_dir == f"/tmp/pilot/{world}-s1100"


def test_the_pilot_seeds_are_no_design_seeds():
    used = {seed for name in designs.DESIGNS for seed, _ in designs.registered_seeds(name)}
    assert not set(cp.PILOT_SEEDS) & used


def _metrics(accuracies, share=0.3, right=6.0, wrong=18.0):
    steps = [{"step": s, "pos_share_token": share, "len_right": right, "len_wrong": wrong,
              "wrong_over_right": wrong / right} for s in range(10)]
    for s, a in zip((0, 5), accuracies[:-1]):
        steps[s]["accuracy"] = a
    return steps + [{"step": 10, "final_evaluation": True, "accuracy": accuracies[-1]}]


def test_a_world_meets_the_criteria_only_when_gap_share_and_stability_all_hold():
    good = {rule: cp.run_summary(_metrics([0.5, 0.6, 0.7])) for rule in ("token", "sequence", "balanced")}
    assert cp.meets(good) == []
    weak = dict(good, token=cp.run_summary(_metrics([0.5, 0.6, 0.7], share=0.45, wrong=9.0)))
    assert any("wrong/right 1.50" in m for m in cp.meets(weak))
    assert any("run-mean share 0.450" in m for m in cp.meets(weak))
    falls = dict(good, balanced=cp.run_summary(_metrics([0.5, 0.8, 0.6])))
    assert cp.meets(falls) == ["balanced fell 0.200"]


def test_the_report_reads_the_runs_on_disk(tmp_path):
    for rule in ("token", "sequence", "balanced"):
        run = tmp_path / "endless-30-s1100" / rule
        run.mkdir(parents=True)
        (run / "args.json").write_text(json.dumps({"aggregator": rule, "seed": 1100, "steps": 10}))
        (run / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in _metrics([0.5, 0.6, 0.7])))
    text = cp.report(str(tmp_path), log=lambda *a: None)
    assert "| endless-30 | 1100 | token | 0.500 | 6.0 / 18.0 | 0.300 | 0.300 | 6.0 / 18.0 | 0.700 | 0.000 |" in text
    assert "- endless-30, seed 1100: meets every criterion" in text
