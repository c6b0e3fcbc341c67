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


# ------------------------------------------------------------------ the demo's table, from its committed run

DEMO_SECTION = "## What the demo shows"
DEMO_RUN = os.path.join("assets", "demo-seed22")          # `python grpo_ba.py --output-dir assets/demo-seed22`
RULES = ("token", "sequence", "balanced")


def demo_region(text: str) -> tuple[int, int]:
    """(start, end) of the README's demo table and what follows it up to the figure's reading:
    the world's paragraph and the table read row by row, every number of it anchored."""
    start, end = pn.section(text, DEMO_SECTION)
    table = re.search(r"^ {4}\s+token\s+sequence\s+balanced$", text[start:end], re.M)
    return start + table.start(), text.index("**Reading the figure**", start)


def test_the_readme_demo_table_and_its_reading_state_what_the_committed_demo_printed():
    text = _read("README.md")
    problems, _ = pn.check_text(text, "README.md", *demo_region(text))
    assert problems == []


@pytest.mark.parametrize("change", [("0.334 is its mean", "0.335 is its mean"),
                                    ("0.334          1.000\n", "0.333          1.000\n"),
                                    ("(0.51 of this run's", "(0.52 of this run's"),
                                    ("0.698 under sequence", "0.671 under sequence"),
                                    ("secondary rows that hold", "secondary rows that are not detected"),
                                    ("0.5 is unbiased. Token", "0.5 is unbiased, 0.25 too. Token")])
def test_the_demo_check_fails_a_changed_number_or_verdict_word(change):
    text = _read("README.md")
    changed = text.replace(*change, 1)
    assert changed != text, change
    assert pn.check_text(changed, "README.md", *demo_region(changed))[0], change


def test_the_committed_demo_log_prints_what_grpo_ba_plots_computes_from_its_committed_metrics():
    """The log is the demo's own output, not typed: its table is what grpo_ba_plots.story prints
    today from the committed runs' metrics.jsonl and args.json (long/short: the mean over steps
    of grpo_ba.long_right_weight, each step's mean over its groups of the longest right answer's
    per-token weight over the shortest's; under sequence L_short / L_long)."""
    import argparse
    import json

    import grpo_ba_plots
    import grpo_ba_support.run
    runs = {rule: grpo_ba_support.run.read_metrics(os.path.join(pn.REPO, DEMO_RUN, rule, "metrics.jsonl"))
            for rule in RULES}
    with open(os.path.join(pn.REPO, DEMO_RUN, "token", "args.json")) as f:
        args = argparse.Namespace(**json.load(f))
    printed = grpo_ba_plots.story(runs, args, ("mechanism.png", "bias_curves.png"))
    first = next(k for k, line in enumerate(printed) if line.startswith("What each rule did"))
    table = printed[first:next(k for k in range(first, len(printed)) if not printed[k].strip())]
    assert len(table) == 8, table                          # the title, the rules, six rows
    log = _read(os.path.join(DEMO_RUN, "demo.log")).splitlines()
    at = log.index(table[0])
    assert log[at:at + len(table)] == table
    # the world's lines carry numbers too (forced share, step-0 ratio): compared whole. The log's
    # other prose is what commit 549bec8 printed (assets/demo-seed22/README.md); the story's words
    # have changed since (issue 75), its numbers not, so only the numbers' lines are compared
    told = next(k for k, line in enumerate(printed) if line.startswith("The world:"))
    world = printed[told:printed.index("", told)]
    assert len(world) >= 2 and log[log.index(world[0]):log.index(world[0]) + len(world)] == world
    assert set(pn.report("demo")) >= {"long/short right answer's token weight", "world"}


def test_the_long_short_weight_under_sequence_is_the_groups_mean_shortest_over_longest_right_length():
    """What the README's row 2 says 0.334 is, on a batch small enough to count by hand."""
    import torch

    import grpo_ba
    lengths = [3, 6, 9, 2, 4, 4, 7, 1, 5, 8, 2, 2]                 # G = 4, three groups
    rewards = [1, 1, 0, 1, 1, 1, 0, 0, 1, 0, 1, 0]
    mask = grpo_ba.mask_from_lengths(torch.tensor(lengths)).float()
    advantages = grpo_ba.group_advantages(torch.tensor(rewards, dtype=torch.float32), 4)
    # right answers: 3, 6, 2 (2/6); 4, 4 (equal: no ratio); 5, 2 (2/5)
    assert grpo_ba.long_right_weight(mask, advantages, 4, "sequence") == pytest.approx((2 / 6 + 2 / 5) / 2)
    for rule in ("token", "balanced"):
        assert grpo_ba.long_right_weight(mask, advantages, 4, rule) == pytest.approx(1)
