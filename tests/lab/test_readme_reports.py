"""Every number the README and docs/toy-designs.md state about a version-3 design is read
from that design's committed report (assets/<design>-v3/consequences.md)."""
import os
import re

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REPORT = os.path.join(REPO, "assets", "demo-band-v3", "consequences.md")
PRIMARIES = ("balanced - token", "balanced - sequence")


def _read(path):
    with open(os.path.join(REPO, path)) as f:
        return f.read()


def report_rows(text: str) -> dict:
    """{(pair, metric): {"pooled", "native-1t", "default-1t", "verdict", "label"}} of a report."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 8 and " - " in cells[0] and cells[3].isdigit():
            rows[(cells[0], cells[1])] = {"label": cells[2], "pooled": cells[4], "native-1t": cells[5],
                                          "default-1t": cells[6], "verdict": cells[7]}
    return rows


def stated_rows(text: str, marker: str) -> list[list[str]]:
    """The table rows of `text` that follow `marker` (until the next blank line after the table)."""
    start = text.index(marker)
    rows, seen_table = [], False
    for line in text[start:].splitlines()[1:]:
        if line.startswith("|"):
            seen_table = True
            if not set(line) <= set("|-: "):
                rows.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif seen_table:
            break
    return rows[1:]                               # the header row names the columns


def test_the_report_parser_reads_every_row_of_a_report():
    rows = report_rows(_read(REPORT))
    assert len(rows) == 3 * 8                     # three pairs x eight metrics
    assert {rows[(p, "last held-out acc")]["label"] for p in PRIMARIES} == {"primary"}


@pytest.mark.parametrize("page", ["README.md", "docs/toy-designs.md"])
def test_the_pages_demo_band_numbers_are_the_committed_reports(page):
    rows = report_rows(_read(REPORT))
    stated = stated_rows(_read(page), "<!-- demo-band-v3 primaries -->")
    assert [row[0] for row in stated] == list(PRIMARIES)
    for pair, pooled, native, default, verdict in stated:
        row = rows[(pair, "last held-out acc")]
        assert (pooled, native, default, verdict) == (row["pooled"], row["native-1t"],
                                                      row["default-1t"], row["verdict"]), pair


def test_every_number_the_readme_states_about_the_toys_designs_is_in_the_committed_report():
    section = _read("README.md").split("## What the toy shows")[1].split("\n## ")[0]
    report = _read(REPORT)
    numbers = re.findall(r"[+-]?\d\.\d{3}", section)
    assert len(numbers) >= 20                                   # the table and the secondary rows
    assert [n for n in numbers if n not in report] == []


def test_every_number_of_the_version_3_section_of_toy_designs_is_in_the_committed_report():
    section = _read("docs/toy-designs.md").split("## Version 3: design `demo-band`")[1].split("\n## ")[0]
    report = _read(REPORT)
    numbers = re.findall(r"[+-]?\d\.\d{3}", section)
    assert len(numbers) >= 30
    assert [n for n in numbers if n not in report] == []


def test_the_readme_states_no_accuracy_number_of_a_design_whose_report_is_not_committed():
    # version 2's reports were never committed: its numbers stay in docs/toy-designs.md's history
    section = _read("README.md").split("## What the toy shows")[1].split("\n## ")[0]
    for name in ("loop-gap", "spread-room", "tilde-gap"):
        for line in section.splitlines():
            if name in line:
                assert not re.search(r"[+-]0\.\d{3}", line), line
