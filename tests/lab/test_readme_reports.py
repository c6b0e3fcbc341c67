"""What the README states about a version-3 design is read from that design's committed report
(assets/<design>-v3/consequences.md) at its own row and column, by the checker of
tests/lab/page_numbers.py; docs/toy-designs.md and the other pages are checked by
tests/lab/test_page_numbers.py."""
import os
import re

import pytest

import page_numbers as pn

PRIMARIES = ("balanced - token", "balanced - sequence")
TOY_SECTION = "## What the toy shows"


def _read(path):
    with open(os.path.join(pn.REPO, path)) as f:
        return f.read()


def stated_rows(text: str, marker: str) -> list[list[str]]:
    """The table rows of `text` that follow `marker` (until the end of the table)."""
    start = text.index(marker)
    rows, seen_table = [], False
    for line in text[start:].splitlines()[1:]:
        if line.startswith("|"):
            seen_table = True
            if not set(line) <= set("|-: "):
                rows.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif seen_table:
            break
        elif line.strip() and not line.startswith("<!--"):
            break
    return rows[1:]                               # the header row names the columns


def test_the_report_parser_reads_every_row_of_a_report():
    rows = pn.report("band")
    verdict_rows = [key for key, row in rows.items() if "verdict" in row]
    assert len(verdict_rows) == 3 * 8                     # three pairs x eight metrics
    assert {rows[f"{p} / last held-out acc"]["label"] for p in PRIMARIES} == {"primary"}


def test_the_readme_toy_section_states_what_its_report_says_at_each_row_and_column():
    text = _read("README.md")
    start, end = pn.section(text, TOY_SECTION)
    if "<!-- check" in text[start:end]:                  # anchored: every token, at its row and column
        problems, _ = pn.check_text(text, "README.md", start, end)
        assert problems == []
        return
    # Not yet anchored: the primaries' table row by row, the verdict cell whole.
    stated = stated_rows(text, "<!-- demo-band-v3 primaries -->")
    assert [row[0] for row in stated] == list(PRIMARIES)
    for pair, pooled, native, default, verdict in stated:
        row = pn.report("band")[f"{pair} / last held-out acc"]
        assert (pooled, native, default, verdict) == (row["pooled"], row["native-1t"], row["default-1t"],
                                                      row["verdict"]), pair


def test_the_readme_states_no_accuracy_number_of_a_design_whose_report_is_not_committed():
    # version 2's reports were never committed: its numbers stay in docs/toy-designs.md's history
    text = _read("README.md")
    start, end = pn.section(text, TOY_SECTION)
    for name in ("loop-gap", "spread-room", "tilde-gap"):
        for line in text[start:end].splitlines():
            if name in line:
                assert not re.search(r"[+-]0\.\d{3}", line), line


def documented_report_command(page_text: str, design: str) -> list[str]:
    """The arguments of the report command a page documents for a design (continuation lines
    joined), after `python -m grpo_ba_lab.analysis.toy_consequences`."""
    import shlex
    joined = page_text.replace("\\\n", " ")
    line = next(line for line in joined.splitlines()
                if "grpo_ba_lab.analysis.toy_consequences" in line and f"--out assets/{design}-v3" in line)
    return shlex.split(line.split("grpo_ba_lab.analysis.toy_consequences", 1)[1])


@pytest.mark.slow
def test_the_documented_report_command_redraws_the_committed_mechanism_figure(tmp_path):
    import tarfile

    from grpo_ba_lab.analysis import toy_consequences
    argv = documented_report_command(_read("docs/toy-designs.md"), "demo-band")
    assert argv[:3] == ["RUNS", "--out", "assets/demo-band-v3"] and "--title" in argv
    with tarfile.open(os.path.join(pn.REPO, "assets", "demo-band-v3", "runs.tar.gz")) as archive:
        archive.extractall(tmp_path, filter="data")
    out = tmp_path / "report"
    toy_consequences.report(str(tmp_path / "demo-band"), str(out), title=argv[argv.index("--title") + 1],
                            log=lambda *a: None)
    with open(os.path.join(pn.REPO, "assets", "demo-band-v3", "mechanism.png"), "rb") as committed:
        assert (out / "mechanism.png").read_bytes() == committed.read()     # the title is part of the drawing
