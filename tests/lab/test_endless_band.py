"""The long-horizon design `endless-band` (registrations/endless-band-v3.md): its settings are the
probe's strong-endless setting, its seeds no other study's, its registration entry what the file
registers, and the sweep's --until time limit starts no seed after it."""
import json
import os
import re
import tarfile

import pytest

from grpo_ba_lab import designs
from grpo_ba_lab.analysis import long_horizon as lh
from grpo_ba_lab.analysis import regime_pilot, sweep
from grpo_ba_lab.analysis import toy_consequences as tc
from grpo_ba_lab.lab_args import parse_command
from registration_commits import registration_commit

NAME = "endless-band"


def test_the_design_runs_the_probes_strong_endless_setting_on_every_seed():
    """Every setting of the design's runs is the one the probe's strong-endless runs recorded
    (their args.json in assets/long-horizon/runs.tar.gz), but the design's name, the seed and
    the machine keys."""
    with tarfile.open(f"{designs.REPO}/assets/long-horizon/runs.tar.gz") as tar:
        member = tar.extractfile("strong-endless-s1600/token/args.json")
        probe = json.load(member)
    for seed, variant in designs.registered_seeds(NAME):
        expected = tc.expected_settings(NAME, "token", seed)
        assert set(expected) == set(probe)
        differing = {k for k in expected if expected[k] != probe[k] and k not in tc.MACHINE_KEYS}
        assert differing == {"design", "seed"}, differing
        assert (expected["steps"], expected["eval_every"], expected["endless_slips"]) == (200, 10, 0.5)


def test_every_seed_runs_on_both_variants_and_no_other_study_uses_them():
    seeds = designs.registered_seeds(NAME)
    assert seeds == [(s, v) for v in designs.BAND_VARIANTS for s in range(1700, 1724)]
    others = {s for name in designs.DESIGNS if name != NAME for s, _ in designs.registered_seeds(name)}
    probes = set(lh.SEEDS) | set(regime_pilot.PILOT_SEEDS) | set(regime_pilot.ROUND2_SEEDS)
    assert not {s for s, _ in seeds} & (others | probes)


def test_the_registration_entry_is_the_files_two_primaries_check_and_time_limit():
    entry = tc.REGISTRATIONS[NAME]
    assert entry["primaries"] == (("balanced - token", "drop"), ("balanced - token", "last_acc"))
    assert entry["manipulation"] == dict(rule="token", key="pos_share", most=0.40)
    assert entry["time_limited"] and entry["earlier"] == {}
    with open(f"{designs.REPO}/{tc.registration_file(NAME)}") as f:
        text = f.read()
    assert "1. `balanced - token`, **peak-to-last drop**" in text
    assert "2. `balanced - token`, **last held-out accuracy**" in text
    assert "above 0.40, the manipulation failed" in text


def _sweep(monkeypatch, tmp_path, until_after: float, seconds_per_run: float = 100.0):
    """The rules' commands a variant sweep of the design starts, on a clock that moves
    `seconds_per_run` per run, with the time limit `until_after` seconds after its start."""
    clock = [1_000_000.0]
    started = []

    class Done:
        returncode = 0

    def fake_run(command, env=None):
        started.append((command[command.index("--seed") + 1], command[command.index("--aggregator") + 1]))
        clock[0] += seconds_per_run
        return Done()

    monkeypatch.setattr(sweep.subprocess, "run", fake_run)
    monkeypatch.setattr(sweep.time, "time", lambda: clock[0])
    args = parse_command(["--design", NAME, "--output-dir", str(tmp_path)], sweep.SweepOptions, prog="")[0]
    sweep.run_design(args, log=lambda *a: None, variant="native-1t", until=clock[0] + until_after)
    return started


def test_no_seed_starts_after_the_time_limit_and_the_seed_in_progress_finishes(monkeypatch, tmp_path):
    assert _sweep(monkeypatch, tmp_path, until_after=-1) == []
    started = _sweep(monkeypatch, tmp_path, until_after=150)       # seed 1700's last two runs pass it
    assert started == [("1700", "token"), ("1700", "sequence"), ("1700", "balanced")]
    started = _sweep(monkeypatch, tmp_path, until_after=301)       # 1701 starts at 300, before it
    assert [s for s, _ in started] == ["1700"] * 3 + ["1701"] * 3


def test_until_needs_a_design_and_a_utc_time(capsys):
    assert sweep.main(["--until", "2026-12-03T18:00"]) == 2
    assert "--until is a design's time limit" in capsys.readouterr().err
    assert sweep.main(["--design", NAME, "--variant", "native-1t", "--until", "6pm"]) == 2
    assert "YYYY-MM-DDTHH:MM" in capsys.readouterr().err


@pytest.mark.parametrize("variant", designs.BAND_VARIANTS)
def test_a_variant_sweep_without_until_plans_all_24_seeds(monkeypatch, tmp_path, variant):
    started = []

    class Done:
        returncode = 0

    monkeypatch.setattr(sweep.subprocess, "run", lambda command, env=None: started.append(env) or Done())
    args = parse_command(["--design", NAME, "--output-dir", str(tmp_path)], sweep.SweepOptions, prog="")[0]
    sweep.run_design(args, log=lambda *a: None, variant=variant)
    assert len(started) == 24 * 3
    assert all(env.get("ATEN_CPU_CAPABILITY", "") == designs.VARIANTS[variant]["cpu_capability"] for env in started)


# ------------------------------------------------------------------ the committed runs
ASSETS = f"{designs.REPO}/assets/endless-band-v3"


def _committed_runs(tmp_path):
    """assets/endless-band-v3/runs.tar.gz unpacked: endless-band/<run>/ and streams/*.log."""
    if not os.path.exists(f"{ASSETS}/runs.tar.gz"):
        pytest.skip("endless-band's runs are not committed yet")
    with tarfile.open(f"{ASSETS}/runs.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path


def test_every_run_is_from_the_registration_commit_and_both_streams_logged_one_time_limit(tmp_path):
    """The registration's time-limit rule as the archive records it: every run from a clean
    checkout of the commit that added registrations/endless-band-v3.md, in one start; both
    streams' logs give the same launch minute and T = that minute + 150 min, written before
    the launch, and each stream's command passed that T as --until."""
    root = _committed_runs(tmp_path)
    registered = registration_commit("registrations/endless-band-v3.md")
    runs = sorted((root / NAME).iterdir())
    assert runs
    for run in runs:
        starts = json.loads((run / "run.json").read_text())["starts"]
        assert len(starts) == 1, run.name
        assert starts[0]["provenance"]["git"] == {"commit": registered, "dirty": False}, run.name
    limits = set()
    for variant in designs.BAND_VARIANTS:
        log = (root / "streams" / f"stream-{variant}.log").read_text()
        head, launch = re.split(r"^\S+ launch$", log, maxsplit=1, flags=re.M)   # before, after the launch
        found = re.search(r"launch minute \(UTC\) (\S+); T = (\S+) \(launch minute \+ 150 min\)", head)
        minute, limit = found.groups()
        assert sweep.until_time(limit) - sweep.until_time(minute) == 150 * 60       # the one parser
        assert f"--variant {variant} " in head and f"--until {limit} " in head
        assert f"design {NAME}, seed 1700 ({variant}), token" in launch
        limits.add((minute, limit))
    assert len(limits) == 1                                   # launched in the same minute
    kept = tc.time_limited_seeds(str(root / NAME), NAME)
    report = open(f"{ASSETS}/consequences.md").read()
    assert kept == list(range(1700, 1700 + len(kept)))
    assert f"{len(kept)} of its 24 registered seeds" in report
    assert os.path.getsize(f"{ASSETS}/runs.tar.gz") < 20 * 2 ** 20
