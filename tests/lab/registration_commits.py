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
