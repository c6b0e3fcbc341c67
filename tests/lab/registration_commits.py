"""The commit that registered a design: the one that added its registration file."""
import subprocess

import pytest

from grpo_ba_lab import designs


def registration_commit(path: str) -> str:
    """The commit that added `path` (relative to the repository); skips the calling test
    where the clone has no history to find it in."""
    try:
        added = subprocess.run(["git", "log", "--diff-filter=A", "--format=%H", "--", path], cwd=designs.REPO,
                               capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("no git history to find the registration's commit in")
    if not added:
        pytest.skip("a shallow clone without the registration's commit")
    return added[-1]


def commits_touching(path: str) -> list[str]:
    """Every commit that changed `path`, newest first ([] without history)."""
    try:
        return subprocess.run(["git", "log", "--format=%H", "--", path], cwd=designs.REPO,
                              capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return []


def committed_parts(parts_dir: str, name: str) -> list[str]:
    """The archive parts committed under parts_dir, in order; skips the calling test when none is."""
    import os
    found = sorted(p for p in os.listdir(parts_dir) if p.endswith(".tar.gz")) if os.path.isdir(parts_dir) else []
    if not found:
        pytest.skip(f"no part of {name}'s runs is committed yet")
    return found


def assert_archived_runs_from(parts_dir: str, name: str, commit: str, rules, tmp_path) -> set:
    """The run rules as a design's parts record them: every run from a clean checkout of `commit`,
    in one start (an unfinished unit is trained again from scratch, never resumed), on the CPU,
    one thread, its variant's kernels; no unit in two parts. Returns the units seen."""
    import json
    import os
    import tarfile
    seen = set()
    for part in committed_parts(parts_dir, name):
        with tarfile.open(os.path.join(parts_dir, part)) as tar:
            units = {os.path.dirname(os.path.dirname(m.name)) for m in tar.getmembers()}
            assert not units & seen, part
            seen |= units
            tar.extractall(tmp_path, filter="data")
    for unit in sorted(seen):
        variant = "-".join(unit.rsplit("-", 2)[-2:])
        for rule in rules:
            starts = json.loads((tmp_path / unit / rule / "run.json").read_text())["starts"]
            assert len(starts) == 1, (unit, rule)
            assert starts[0]["provenance"]["git"] == {"commit": commit, "dirty": False}, (unit, rule)
            assert starts[0]["provenance"]["device"] == "cpu"
            machine = starts[0]["machine"]
            assert (machine["threads"], machine["aten_cpu_capability"].lower()) == (
                1, designs.VARIANTS[variant]["cpu_capability"]), (unit, rule)
    return seen
