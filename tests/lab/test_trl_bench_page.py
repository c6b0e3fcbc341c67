"""The speed bench prints what docs/trl.md shows ("Speed against TRL"): the same lines, numbers aside."""
import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("trl", reason="TRL is optional: pip install -r requirements/trl.txt")
pytestmark = pytest.mark.slow                      # trains TRL and grpo_ba.py a few steps, times the aggregators

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def shape(line):
    """A line with its numbers (and the spaces that align them) replaced: what the page and a run share."""
    return re.sub(r"\s+", " ", re.sub(r"\d[\d,.]*", "#", line)).strip()


def test_the_bench_prints_the_lines_the_page_shows_and_nothing_else():
    with open(os.path.join(ROOT, "docs", "trl.md")) as f:
        page = f.read().split("## Speed against TRL")[1]
    shown = [line[4:] for line in page.split("\n") if line.startswith("    ")][:7]
    assert shown[0].startswith("one GRPO step:") and shown[-1].startswith("ratio_vs_trl=")
    done = subprocess.run([sys.executable, os.path.join(ROOT, "grpo_ba_lab", "bench", "vs_trl.py"), "--prompts", "2",
                           "--group-size", "2", "--steps", "1", "--new-tokens", "4", "--threads", "1"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    printed = done.stdout.rstrip("\n").split("\n")
    assert [shape(line) for line in printed] == [shape(line) for line in shown]
