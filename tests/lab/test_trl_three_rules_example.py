"""grpo_ba_lab/examples/trl_three_rules.py runs as a user runs it, from a directory outside the clone: three
runs (token, sequence, balanced) from one start and seed, each run's rollouts written, and
the side-by-side numbers it prints are diagnose's on those files."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from grpo_ba_lab.analysis import diagnose

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "grpo_ba_lab", "examples", "trl_three_rules.py")
RULES = ("token", "sequence", "balanced")

pytestmark = [pytest.mark.slow,                   # builds a model and trains it three times
              pytest.mark.skipif(importlib.util.find_spec("trl") is None,
                                 reason="TRL is optional: pip install .[trl]")]


def test_the_three_rules_example_trains_each_rule_from_one_start_and_prints_diagnoses_numbers(tmp_path):
    env = {**os.environ, "PYTHONPATH": ROOT, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    done = subprocess.run([sys.executable, EXAMPLE, "--steps", "2", "--out", "cmp"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    printed = json.loads(done.stdout.strip().splitlines()[-1])             # the last line: one JSON object
    assert list(printed) == list(RULES)
    rows = {}
    for rule in RULES:
        path = tmp_path / "cmp" / f"rollouts-{rule}.jsonl"
        assert f"wrote {os.path.join('cmp', f'rollouts-{rule}.jsonl')}" in done.stdout
        rows[rule] = [json.loads(line) for line in open(path)]
        assert [row["step"] for row in rows[rule]] == [0] * 32 + [1] * 32    # 2 steps x P = 4 x G = 8
        assert len({row["run"] for row in rows[rule]}) == 1
        report = diagnose.diagnose(str(path))                               # the numbers it printed
        for key, value in printed[rule].items():
            if key == "mean_reward":
                assert value == pytest.approx(sum(r["reward"] for r in rows[rule]) / 64)
            elif value is None:
                assert report[key] is None or report[key] != report[key]    # n/a: no signal
            else:
                assert value == pytest.approx(report[key], rel=1e-9), (rule, key)
        assert printed[rule]["pos_share_sequence"] == pytest.approx(0.5, abs=1e-5)   # binary rewards
    first = {rule: [(r["length"], r["reward"]) for r in rows[rule] if r["step"] == 0] for rule in RULES}
    assert first["token"] == first["sequence"] == first["balanced"]         # the same start and seed
    assert "step 0's rollouts are the same in the three runs (same start and seed): yes" in done.stdout
    later = {rule: [(r["length"], r["reward"]) for r in rows[rule] if r["step"] == 1] for rule in RULES}
    assert len({tuple(v) for v in later.values()}) > 1                      # the rules trained differently
    assert sum(r["reward"] for r in rows["token"]) > 0                      # the reward gives a signal
