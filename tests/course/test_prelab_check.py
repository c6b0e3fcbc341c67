"""The pre-lab check says READY on a working install and names what is broken otherwise:
a changed shipped warm-up, a wrong rule, a missing package, a verifier that misjudges."""
import os
import shutil
import subprocess
import sys

import pytest

from exercises import prelab_check

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_in_process():
    lines = []
    code = prelab_check.main(out=lines.append)
    return code, {line.split(":")[0]: line for line in lines}, lines


@pytest.mark.slow
def test_prelab_check_says_ready_on_this_install():
    result = subprocess.run([sys.executable, "-m", "exercises.prelab_check"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    for name, _ in prelab_check.CHECKS:
        assert f"ok    {name}: " in result.stdout, name
    assert lines[-1].startswith("READY for the lab")


def test_prelab_check_refuses_a_changed_shipped_warmup(tmp_path, monkeypatch):
    from toy_tasks import designs
    (name, seed), *_ = prelab_check.shipped_warmups()
    path, sha256 = designs.shipped_warmup(name, seed)
    changed = tmp_path / os.path.basename(path)
    shutil.copy(path, changed)
    with open(changed, "r+b") as f:                  # one byte of the weights, flipped
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 0xFF]))
    monkeypatch.setattr(designs, "shipped_warmup", lambda n, s: (str(changed), sha256))
    code, by_check, lines = run_in_process()
    assert code == 1
    assert by_check["FAIL  shipped warm-up"].count("sha256") == 1
    assert lines[-1].startswith("NOT READY: 1 check(s) failed (shipped warm-up)")


def test_prelab_check_catches_a_rule_that_gives_the_wrong_numbers(monkeypatch):
    import grpo_ba
    monkeypatch.setitem(grpo_ba.AGGREGATORS, "token", grpo_ba.aggregate_sequence)
    code, by_check, _ = run_in_process()
    assert code == 1
    assert "token: J +0.000 (by hand +0.400)" in by_check["FAIL  the three rules"]


def test_prelab_check_names_a_missing_package_and_the_install_command(monkeypatch):
    monkeypatch.setattr(prelab_check, "PACKAGES", prelab_check.PACKAGES + ("no_such_package_x",))
    code, by_check, _ = run_in_process()
    assert code == 1
    line = by_check["FAIL  packages"]
    assert "missing no_such_package_x" in line and "pip install -r requirements.txt" in line


def test_prelab_check_catches_a_verifier_that_misjudges(monkeypatch):
    monkeypatch.setattr(prelab_check, "VERIFIER_CASES", [("57 60", "66", 1.0)])
    code, by_check, _ = run_in_process()
    assert code == 1
    assert "verify('57 60', '66') gave 0.0, not 1.0" in by_check["FAIL  the verifier"]


def test_prelab_check_covers_every_warm_up_the_session_loads_shipped_cached_or_to_train(tmp_path, monkeypatch):
    import torch
    from grpo_ba_support import task
    from toy_tasks import designs
    from toy_tasks.model import warmup_cache_dir
    monkeypatch.setattr(task, "CACHE_DIR", str(tmp_path))
    lines = prelab_check.caches_note()
    assert len(lines) == len(prelab_check.SESSION_WARMUPS)
    assert "demo, seed 22: shipped" in lines[0] and "long-right, seed 80: not cached yet" in lines[1]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)                                  # the session's --threads 1
    path = warmup_cache_dir(str(tmp_path), designs.world("long-right"), designs.warmup_steps("long-right"), 80)
    torch.set_num_threads(threads)
    os.makedirs(path)
    open(os.path.join(path, "warmup.json"), "w").close()
    assert "long-right, seed 80: cached in" in prelab_check.caches_note()[1]
