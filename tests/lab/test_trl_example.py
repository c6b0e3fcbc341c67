"""grpo_ba_lab/examples/trl_balanced.py runs as a user runs it: from a directory outside the clone, with
only the project on the path, and leaves the rollouts dump it says it wrote."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from grpo_ba_lab.analysis import diagnose

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "grpo_ba_lab", "examples", "trl_balanced.py")

pytestmark = [pytest.mark.slow,                   # builds a model and trains it two steps: ~15 s
              pytest.mark.skipif(importlib.util.find_spec("trl") is None,
                                 reason="TRL is optional: pip install .[trl]")]


def test_the_trl_example_trains_two_steps_outside_the_clone_and_writes_a_diagnosable_dump(tmp_path):
    env = {**os.environ, "PYTHONPATH": ROOT, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    done = subprocess.run([sys.executable, EXAMPLE], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert "wrote rollouts.jsonl" in done.stdout                     # what it says it wrote
    rows = [json.loads(line) for line in open(tmp_path / "rollouts.jsonl")]
    assert len(rows) == 2 * 8                                         # 2 steps x 2 prompts x G = 4
    assert [row["step"] for row in rows] == [0] * 8 + [1] * 8
    assert len({row["run"] for row in rows}) == 1
    assert {row["reward"] for row in rows} <= {0.0, 1.0}              # verifier.py's rewards
    png = tmp_path / "bias.png"                                       # the command it prints works
    assert diagnose.main([str(tmp_path / "rollouts.jsonl"), "--figure", str(png)]) == 0
    assert png.stat().st_size > 0
