"""The stability probe's settings and its per-run numbers, on hand-made metrics
(grpo_ba_lab/analysis/stability_probe.py, docs/stability-probe.md)."""
import json

import pytest

from grpo_ba_lab.analysis import stability_probe as sp
from grpo_ba_lab.lab_args import check_args


def test_every_probe_setting_parses_to_a_valid_lab_run_with_a_binding_cap():
    for setting in sp.SETTINGS:
        args = sp.probe_args(setting, "token", 900, "/tmp/probe", 1)
        check_args(args)
        assert args.max_new_tokens == 32 and args.endless_slips == 0.3
        assert args.steps == (300 if setting.startswith("slow") else 150)
        assert args.truncated == ("mask" if setting.endswith("mask") else "keep")
        assert args.output_dir.endswith(f"{setting}/token-s900")
    assert not set(sp.PROBE_SEEDS) & {s for s in range(20, 76)}        # never a design's seeds


def _metrics(accuracies, truncated=0.2, pg=(0.0, 0.1)):
    """A finished 10-step run: an evaluation at every step, then one after the last update."""
    lines = [{"step": s, "accuracy": a, "truncated_frac": truncated, "entropy": 0.5, "len_wrong": 20.0,
              "pg_loss": pg[0] if s < 5 else pg[1]} for s, a in enumerate(accuracies[:-1])]
    return lines + [{"step": len(accuracies) - 1, "final_evaluation": True, "accuracy": accuracies[-1]}]


def test_a_run_summary_reads_peak_last_drop_and_the_late_fifth():
    s = sp.run_summary(_metrics([0.4, 0.6, 0.7, 0.5, 0.5, 0.4, 0.4, 0.4, 0.3, 0.3, 0.2]))
    assert (s["step0"], s["peak"], s["last"]) == (0.4, 0.7, 0.2)
    assert s["drop"] == pytest.approx(0.5)
    assert s["truncated"] == 0.2 and s["len_wrong"] == 20.0
    assert s["pg_drift"] == pytest.approx(0.1)                              # late 0.1, early 0.0


FALLS, HOLDS = [0.5, 0.7, 0.4], [0.5, 0.6, 0.62]


@pytest.mark.parametrize("token, balanced, found", [
    ((FALLS, FALLS), (HOLDS, HOLDS), True),
    ((FALLS, HOLDS), (HOLDS, HOLDS), True),            # half of token's seeds is enough
    ((HOLDS, HOLDS), (HOLDS, HOLDS), False),           # token never falls
    ((FALLS, FALLS), (FALLS, HOLDS), False)])          # balanced falls too
def test_the_pattern_needs_token_to_fall_in_half_its_seeds_and_balanced_in_none(token, balanced, found):
    runs = {"token": {900: _metrics(token[0]), 901: _metrics(token[1])},
            "balanced": {900: _metrics(balanced[0]), 901: _metrics(balanced[1])}}
    assert sp.pattern_found(runs) is found


def test_the_report_reads_the_runs_on_disk_and_counts_collapses(tmp_path):
    for rule, acc in (("token", FALLS), ("sequence", HOLDS), ("balanced", HOLDS)):
        run = tmp_path / "cap-keep" / f"{rule}-s900"
        run.mkdir(parents=True)
        (run / "args.json").write_text(json.dumps({"aggregator": rule, "seed": 900, "steps": 2,
                                                   "regime": "gap"}))
        (run / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in _metrics(acc)))
    text = sp.report(str(tmp_path), log=lambda *a: None)
    assert "| cap-keep | token | 900 | 0.500 | 0.700 | 0.400 | 0.300 |" in text
    assert "token 1/1, sequence 0/1, balanced 0/1" in text
    assert "token collapses in half its seeds or more while balanced never does" in text
    assert (tmp_path / "probe.png").stat().st_size > 10_000


def test_every_number_of_the_probes_page_is_its_report_at_its_row_and_column():
    import os
    import sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import page_numbers as pn
    with open(os.path.join(pn.REPO, "docs", "stability-probe.md")) as f:
        text = f.read()
    problems, exempt = pn.check_text(text, "docs/stability-probe.md")
    assert problems == []
    assert len(exempt) <= 14                          # thresholds and flags, each named in its anchor (+2: the long-horizon criteria)


def resumed_runs(archive: str) -> list[str]:
    """'setting, rule, seed N' of every run in the archive whose run.json records more than
    one start (a run continued from a checkpoint)."""
    import tarfile
    found = []
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            if member.name.endswith("/run.json"):
                starts = json.load(tar.extractfile(member))["starts"]
                if len(starts) > 1:
                    setting, run = member.name.split("/")[-3:-1]
                    rule, seed = run.rsplit("-s", 1)
                    found.append(f"`{setting}`, {rule}, seed {seed}")
    return found


def test_the_probes_page_names_every_resumed_run_of_its_archive():
    import os
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    resumed = resumed_runs(os.path.join(repo, "assets", "stability-probe", "runs.tar.gz"))
    assert resumed == ["`slow-mask`, sequence, seed 901"]
    with open(os.path.join(repo, "docs", "stability-probe.md")) as f:
        page = " ".join(f.read().split())
    assert all(run in page for run in resumed)


def test_the_pages_smallest_setting_is_the_probes_slow_mask_run():
    import dataclasses
    import os
    import re
    from grpo_ba_lab.lab_args import parse_args
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(repo, "docs", "stability-probe.md")) as f:
        command = re.search(r"python -m grpo_ba_lab\.train (.*?)(?:\n\n|\n?\Z)", f.read(), re.S).group(1)
    typed = dataclasses.asdict(parse_args(command.replace("\\", " ").split()))
    probe = dataclasses.asdict(sp.probe_args("slow-mask", "balanced", 900, "/x", 1))
    assert {k for k in typed if typed[k] != probe[k]} == {"output_dir", "threads"}
