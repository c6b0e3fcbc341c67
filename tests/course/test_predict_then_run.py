"""The lab session's predict-then-run experiment (docs/lab-session.md), on the course's own
command line: where wrong answers are the long ones (design `demo`) token aggregation gives
the right answers less than the unbiased half of the weight and its loss at ratio 1 sits above
0; where right answers are the long ones (design `long-right`) both flip: share above 1/2,
loss below 0. Sequence and balanced stay at exactly 1/2 in both worlds (docs/method.md §3)."""
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow              # trains (a few GRPO steps; long-right also warms up)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COURSE = [sys.executable, os.path.join(ROOT, "grpo_ba.py")]
SHORT = ["--aggregator", "token", "--steps", "3", "--prompts-per-step", "8", "--eval-every", "1000",
         "--eval-prompts", "10", "--threads", "1"]


def run_course(design_flags, out, cache_dir):
    """`python grpo_ba.py [--design NAME] --aggregator token --steps 3 ...`; its steps' metrics."""
    env = {**os.environ, "GRPO_BA_CACHE": cache_dir}
    result = subprocess.run([*COURSE, *design_flags, *SHORT, "--output-dir", str(out)], cwd=ROOT,
                            env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [m for m in map(json.loads, f) if not m.get("final_evaluation")]


def with_both_signs(metrics):
    steps = [m for m in metrics if m["pos_share_token"] is not None]
    assert steps, "no step had a group with both right and wrong answers"
    return steps


def assert_sequence_and_balanced_unbiased(steps):
    for m in steps:
        assert m["pos_share_sequence"] == pytest.approx(0.5, abs=1e-6)
        assert m["pos_share_balanced"] == pytest.approx(0.5, abs=1e-6)


def mean(steps, key):
    return sum(m[key] for m in steps) / len(steps)


def test_long_wrong_answers_hold_token_share_below_half_and_its_loss_above_zero(tmp_path, cache_dir):
    steps = with_both_signs(run_course([], tmp_path / "demo", cache_dir))   # design demo, shipped warm-up
    assert mean(steps, "len_pos") < mean(steps, "len_neg")
    assert all(m["pos_share_token"] < 0.5 for m in steps)
    assert mean(steps, "pg_loss") > 0
    assert_sequence_and_balanced_unbiased(steps)


def test_long_right_answers_lift_token_share_above_half_and_its_loss_below_zero(tmp_path, cache_dir):
    from toy_tasks import designs
    if "long-right" not in designs.DESIGNS:
        pytest.skip("design long-right (right answers long: gap_sign right-long) is not in "
                    "toy_tasks/designs.py DESIGNS yet; this test runs once it is")
    steps = with_both_signs(run_course(["--design", "long-right"], tmp_path / "long-right", cache_dir))
    assert mean(steps, "len_pos") > mean(steps, "len_neg")
    assert all(m["pos_share_token"] > 0.5 for m in steps)
    assert mean(steps, "pg_loss") < 0
    assert_sequence_and_balanced_unbiased(steps)
