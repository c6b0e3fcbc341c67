"""The regime map: grid, paired verdict per cell, figure, resumable end-to-end run."""
import json
import os

import pytest

import grpo_ba
from grpo_ba_lab.analysis import regime_map, report
from grpo_ba_lab.analysis.regime_map import Cell, build_grid, cell_summary, run_plan, winner


def test_grid_builder_makes_every_gap_spread_pair_once():
    cells = build_grid(["0", "9", "18"], ["0", "8", "16"])
    assert len(cells) == 9 == len(set(cells))
    assert {c.gap_size for c in cells} == {0, 9, 18} and {c.spread_size for c in cells} == {0, 8, 16}
    assert Cell(0, 0) in cells and Cell(18, 16).name == "gap18-spread16"


@pytest.mark.parametrize("gaps, spreads, message", [(["0", "0"], ["8"], "distinct"), (["-1"], ["8"], ">= 0"),
                                                    (["0"], ["x"], "whole numbers"), ([], ["8"], "distinct")])
def test_grid_builder_refuses_a_grid_that_cannot_make_a_map(gaps, spreads, message):
    with pytest.raises(ValueError, match=message):
        build_grid(gaps, spreads)


def test_run_plan_is_seed_major_so_a_stop_leaves_whole_seeds():
    plan = run_plan("base", build_grid([0, 9], [0, 8]), seeds=2, rules=("token", "sequence", "balanced"))
    assert len(plan) == 2 * 2 * 2 * 3
    assert [seed for _, _, seed, _ in plan] == [0] * 12 + [1] * 12
    assert plan[0][3] == os.path.join("base", "gap0-spread0", "token-s0")


def test_longest_response_leaves_room_for_the_longest_corpus_answer():
    assert regime_map.longest_response(build_grid([0, 9, 18], [0, 8, 16])) == 18 + 4 + 10
    assert regime_map.longest_response(build_grid([0, 9], [0, 30])) == 30 + 7 + 10


def _metrics(accuracies, wrong_over_right=2.0, std_over_mean=0.6, every=10):
    """A run's metrics.jsonl: held-out accuracy every `every` steps, step-0 regime statistics."""
    rows = []
    for i, acc in enumerate(accuracies):
        for step in range(i * every, (i + 1) * every if i < len(accuracies) - 1 else i * every + 1):
            row = {"step": step, "reward_mean": acc, "step_time": 0.5}
            if step == i * every:
                row["accuracy"] = acc
            if step == 0:
                row.update(wrong_over_right=wrong_over_right, std_over_mean=std_over_mean)
            rows.append(row)
    return rows


def _cell(offsets_by_rule):
    """{rule: {seed: metrics}}: each rule's accuracy curve is a shared per-seed curve plus its offset."""
    base = {0: [0.5, 0.6, 0.7], 1: [0.4, 0.7, 0.8], 2: [0.55, 0.65, 0.9]}
    return {rule: {seed: _metrics([min(1.0, a + offsets[seed]) for a in curve]) for seed, curve in base.items()}
            for rule, offsets in offsets_by_rule.items()}


def test_cell_summary_names_the_rule_whose_interval_excludes_zero():
    summary = cell_summary(_cell({"balanced": [0.05, 0.06, 0.05], "token": [0.0, 0.0, 0.0],
                                  "sequence": [0.04, -0.05, 0.01]}))
    assert summary["seeds"] == 3
    assert summary["pairs"]["balanced - token"]["last_acc"]["winner"] == "balanced"
    assert summary["pairs"]["balanced - token"]["acc_area"]["mean"] == pytest.approx(0.16 / 3, abs=1e-9)
    assert summary["pairs"]["token - sequence"]["last_acc"]["winner"] == "tie"      # +-0.05 around 0
    assert summary["step0_wrong_over_right"] == pytest.approx(2.0)


def test_cell_summary_names_the_second_rule_when_the_first_is_worse():
    summary = cell_summary(_cell({"balanced": [-0.1, -0.12, -0.11], "token": [0, 0, 0], "sequence": [0, 0, 0]}))
    assert summary["pairs"]["balanced - token"]["acc_area"]["winner"] == "token"
    assert summary["pairs"]["balanced - sequence"]["last_acc"]["winner"] == "sequence"


def test_winner_with_one_seed_is_not_a_verdict():
    assert winner({"mean": 0.3, "low": None, "high": None}, "balanced", "token") == "n/a"
    assert winner({"mean": 0.3, "low": -0.01, "high": 0.6}, "balanced", "token") == "tie"


def _write_run(run_dir, gap, spread, rule, seed, metrics):
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "args.json"), "w") as f:
        json.dump({"regime": "gap", "gap_size": gap, "spread_size": spread, "aggregator": rule, "seed": seed}, f)
    with open(os.path.join(run_dir, "metrics.jsonl"), "w") as f:
        f.writelines(json.dumps(m) + "\n" for m in metrics)


@pytest.mark.slow                   # draws or redraws figures: the full suite runs it
def test_plot_only_redraws_the_map_from_saved_metrics(tmp_path):
    for gap, spread in [(0, 0), (0, 16), (18, 0), (18, 16)]:
        for rule, by_seed in _cell({"balanced": [0.05, 0.06, 0.05], "token": [0, 0, 0],
                                    "sequence": [0.04, -0.05, 0.01]}).items():
            for seed, metrics in by_seed.items():
                _write_run(tmp_path / f"gap{gap}-spread{spread}" / f"{rule}-s{seed}", gap, spread, rule, seed, metrics)
    (tmp_path / regime_map.INDEX_FILE).write_text(json.dumps({"sessions": []}))
    assert report.main([str(tmp_path)]) == 0
    table = (tmp_path / "regime_map.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert len(rows) == 4 and all("**BA**" in r and "**tie**" in r for r in rows)
    assert (tmp_path / "regime_map.png").stat().st_size > 10_000


def test_two_by_two_map_runs_end_to_end_and_resumes(tmp_path, cache_dir):
    out = tmp_path / "map"
    argv = ["--map-gap-sizes", "0", "9", "--map-spread-sizes", "0", "8", "--seeds", "1",
            "--steps", "2", "--warmup-steps", "20", "--group-size", "4", "--prompts-per-step", "4",
            "--eval-every", "1", "--eval-prompts", "8", "--workers", "2", "--cache-dir", cache_dir,
            "--output-dir", str(out)]
    assert regime_map.main(argv) == 0
    cells = regime_map.load_cells(str(out))
    assert set(cells) == set(build_grid([0, 9], [0, 8]))
    assert all(len(m) == 3 and m[-1]["final_evaluation"]                 # 2 steps, then the final evaluation
               for by_rule in cells.values() for by_seed in by_rule.values() for m in by_seed.values())
    assert all(set(by_rule) == {"token", "sequence", "balanced"} for by_rule in cells.values())
    assert (out / "regime_map.png").exists() and "1 seed" in (out / "regime_map.md").read_text()
    index = json.loads((out / regime_map.INDEX_FILE).read_text())
    assert len(index["sessions"]) == 1 and index["sessions"][0]["runs_trained"] == 12
    before = (out / "gap9-spread8" / "token-s0" / "metrics.jsonl").read_text()
    torn = out / "gap0-spread0" / "balanced-s0" / "metrics.jsonl"          # a power cut tore its last line
    whole = torn.read_text()
    torn.write_text(whole[:-40])
    assert regime_map.main(argv) == 0                                     # everything finished: nothing retrained
    assert (out / "gap9-spread8" / "token-s0" / "metrics.jsonl").read_text() == before
    assert torn.read_text() == whole                                      # repaired from its checkpoint
    assert len(json.loads((out / regime_map.INDEX_FILE).read_text())["sessions"]) == 1


def test_regime_map_refuses_a_real_model_and_a_design():
    assert regime_map.main(["--model", "some/model"]) == 2
    assert regime_map.main(["--design", "spread-room"]) == 2
