"""`python grpo_ba.py --help` shows the training flags, grouped under the sections of the
Args dataclass, with their defaults and without argparse's glitches, on one page; the
studies' flags left for their own commands, and each answers with its command."""
import dataclasses
import os
import re
import subprocess
import sys

import pytest

import grpo_ba
import grpo_ba_args

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECTIONS = ["the run", "GRPO (docs/method.md §1)", "the toy task (toy_tasks/)", "evaluation, logging and checkpoints",
            "a real model (docs/real-models-gpu.md)", "the machine"]
HELP_MAX_LINES = 150


@pytest.fixture(scope="module")
def help_text():
    """--help as a student sees it in an 80-column terminal."""
    result = subprocess.run([sys.executable, os.path.join(REPO, "grpo_ba.py"), "--help"], capture_output=True,
                            text=True, env={**os.environ, "COLUMNS": "80"}, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def sections_of(help_text):
    """{section title: [flags listed under it]} in the order of the help text."""
    sections, current = {}, None
    for line in help_text.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            current = sections.setdefault(line[:-1], [])
        elif current is not None:
            current += re.findall(r"^\s{2}(--[\w-]+)", line)
    return sections


def test_help_fits_on_one_page_of_at_most_150_lines(help_text):
    assert len(help_text.splitlines()) <= HELP_MAX_LINES


def test_help_shows_the_six_sections_of_training_flags_in_order(help_text):
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


def test_help_shows_defaults_without_glitches(help_text):
    flat = " ".join(help_text.split())
    assert re.search(r"--group-size N G: responses per prompt \(default: 8\)", flat)
    assert "(default: all)" in flat and "(default: ~/.cache/grpo_ba)" in flat and "(default: 0)" in flat
    assert "(default: )" not in flat and "(default: ())" not in flat and "SUPPRESS" not in flat
    assert "{," not in flat and "('" not in flat                        # no empty choice, no tuple repr
    assert "--preset {qwen3-1.7b,qwen2.5-math-7b}" in flat and "wrong-long" in flat


def test_help_names_the_study_commands_and_hides_their_old_flags(help_text):
    assert "python -m grpo_ba_lab.analysis.sweep" in help_text and "grpo_ba_lab.analysis.regime_map" in help_text
    assert "--sweep" not in help_text and "--plot-only" not in help_text and "--regime-map" not in help_text


def test_the_rules_of_the_command_line_are_the_rules_of_the_algorithm():
    assert grpo_ba_args.RULES == tuple(grpo_ba.AGGREGATORS)


@pytest.mark.parametrize("name", sorted(grpo_ba_args.MOVED))
def test_each_old_study_flag_answers_in_one_line_with_its_new_command(name, capsys):
    flag = "--" + name.replace("_", "-")
    assert grpo_ba.main([flag, "x"] if name not in ("sweep", "regime_map") else [flag]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and flag in err and "python -m grpo_ba_lab.analysis." in err, err
    assert grpo_ba_args.MOVED[name] in err


@pytest.mark.parametrize("module", ["grpo_ba_lab.analysis.sweep", "grpo_ba_lab.analysis.regime_map", "grpo_ba_lab.analysis.report", "grpo_ba_lab.analysis.diagnose"])
def test_each_study_command_runs_as_python_m_and_lists_its_own_flags(module):
    result = subprocess.run([sys.executable, "-m", module, "--help"], cwd=REPO, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    own = {"grpo_ba_lab.analysis.sweep": "--seeds", "grpo_ba_lab.analysis.regime_map": "--map-gap-sizes", "grpo_ba_lab.analysis.report": "--figures-dir",
           "grpo_ba_lab.analysis.diagnose": "--adv-scale"}
    assert own[module] in result.stdout
