"""The repository stands alone: no tracked file points outside it, and every citation
of the math (`docs/method.md §N`) names a section that exists."""
import os
import re
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Built from pieces so that this file does not match its own pattern.
OUTSIDE_PATH = re.compile(r"(?<![\w.-])(?:\.\./)*" + "shar" + r"ed/")
BARE_METHOD_CITATION = re.compile(r"(?<![\w/.])meth" + "od §")
METHOD_CITATION = re.compile(r"docs/method\.md`?\s*§(\d+)")


def tracked_text_files():
    try:
        names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    for name in names.decode().split("\0"):
        path = os.path.join(ROOT, name)
        if not name or not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            data = f.read()
        if b"\0" in data:                     # binary (PNG, checkpoints)
            continue
        yield name, data.decode("utf-8", errors="replace")


def offending_lines(pattern):
    return [f"{name}:{number}: {line.strip()}"
            for name, text in tracked_text_files()
            for number, line in enumerate(text.splitlines(), 1) if pattern.search(line)]


def test_no_tracked_file_refers_to_the_private_workspace():
    assert offending_lines(OUTSIDE_PATH) == []


def test_the_math_is_cited_as_docs_method_md():
    assert offending_lines(BARE_METHOD_CITATION) == []


def test_every_cited_section_of_docs_method_md_exists():
    with open(os.path.join(ROOT, "docs", "method.md")) as f:
        sections = set(re.findall(r"^## §(\d+) ", f.read(), flags=re.M))
    assert sections >= {"1", "2", "3", "4", "5", "6", "7"}
    dangling = [f"{name}: §{n}" for name, text in tracked_text_files()
                for n in METHOD_CITATION.findall(text) if n not in sections]
    assert dangling == []


def test_the_patterns_catch_what_they_are_for():
    assert OUTSIDE_PATH.search("see " + "shar" + "ed/method.md") and OUTSIDE_PATH.search("../" + "shar" + "ed/x")
    assert not OUTSIDE_PATH.search("torch.multiprocessing.share_memory_")
    assert BARE_METHOD_CITATION.search("(meth" + "od §3)") and not BARE_METHOD_CITATION.search("docs/method.md §3")
    assert METHOD_CITATION.findall("`docs/method.md` §6 and docs/method.md §2") == ["6", "2"]
