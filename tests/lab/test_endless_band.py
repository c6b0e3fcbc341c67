"""The long-horizon design `endless-band` (registrations/endless-band-v3.md): its settings are the
probe's strong-endless setting, its seeds no other study's, its registration entry what the file
registers, and the sweep's --until time limit starts no seed after it."""
import pytest

from grpo_ba_lab import designs
from grpo_ba_lab.analysis import long_horizon as lh
from grpo_ba_lab.analysis import regime_pilot, sweep
from grpo_ba_lab.analysis import toy_consequences as tc
from grpo_ba_lab.lab_args import parse_command

NAME = "endless-band"


def test_the_design_runs_the_probes_strong_endless_setting_on_every_seed():
    """Every setting of the design's runs is the one the probe's strong-endless runs recorded
    (their args.json in assets/long-horizon/runs.tar.gz), but the design's name, the seed and
    the machine keys."""
    import json
    import tarfile
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
