"""`python grpo_ba.py --help` lists the options under the sections of the Args dataclass,
with their defaults; a field belongs to the section opened by the last marker above it."""
import dataclasses
import re

import pytest

import grpo_ba

SECTIONS = ["what to run", "GRPO (docs/method.md §1)", "evaluation, logging and checkpoints", "the toy model",
            "sweep and plots (analysis/plots.py)", "scale-up (one GPU)"]


@pytest.fixture(scope="module")
def help_text():
    with pytest.raises(SystemExit) as stop:
        import contextlib
        import io
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            grpo_ba.parse_args(["--help"])
    assert stop.value.code == 0
    return out.getvalue()


def sections_of(help_text):
    """{section title: [flags listed under it]} in the order of the help text."""
    sections, current = {}, None
    for line in help_text.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            current = sections.setdefault(line[:-1], [])
        elif current is not None:
            current += re.findall(r"^\s{2}(--[\w-]+)", line)
    return sections


def test_help_shows_the_six_sections_in_order(help_text):
    titles = [t for t in sections_of(help_text) if t in SECTIONS]
    assert titles == SECTIONS


def test_each_flag_is_listed_under_the_section_opened_above_its_field(help_text):
    listed = sections_of(help_text)
    expected, section = {}, None
    for f in dataclasses.fields(grpo_ba.Args):
        section = f.metadata.get("section", section)
        expected.setdefault(section, []).append("--" + f.name.replace("_", "-"))
    assert None not in expected, "the first field of Args must open a section"
    assert {title: listed[title] for title in expected} == expected


def test_known_flags_sit_in_their_sections(help_text):
    listed = sections_of(help_text)
    assert "--aggregator" in listed["what to run"] and "--lr" in listed["GRPO (docs/method.md §1)"]
    assert "--resume" in listed["evaluation, logging and checkpoints"] and "--cache-dir" in listed["the toy model"]
    assert "--plot-only" in listed["sweep and plots (analysis/plots.py)"] and "--model" in listed["scale-up (one GPU)"]


def test_help_shows_defaults(help_text):
    flat = " ".join(help_text.split())
    assert re.search(r"--group-size GROUP_SIZE G: responses per prompt \(default: 8\)", flat)
    assert "(default: all)" in flat and "(default: ~/.cache/grpo_ba)" in flat
