"""`python grpo_ba.py --help` is one small command line: at most 30 flags, each a field of the
Args dataclass under its section, no hidden ones; each source of defaults (preset, design,
config file, typed flags) applied once, in that order. The lab's commands add their own."""
import argparse
import contextlib
import dataclasses
import glob
import io
import json
import os
import re
import subprocess
import sys

import pytest

import grpo_ba
from grpo_ba_support import args as grpo_ba_args
from grpo_ba_lab import lab_args

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SECTIONS = ["the run", "GRPO (docs/method.md §1)", "evaluation and checkpoints",
            "a real model (docs/real-models-gpu.md)", "the machine"]
FLAGS_MAX = 30


def in_process_help():
    """What `grpo_ba.main(["--help"])` prints in an 80-column terminal, and its exit code."""
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out):
        patch.setenv("COLUMNS", "80")
        with pytest.raises(SystemExit) as exited:
            grpo_ba.main(["--help"])
    return out.getvalue(), exited.value.code


@pytest.fixture(scope="module")
def help_text():
    """--help as a student sees it in an 80-column terminal (printed in this process: the
    test below checks that `python grpo_ba.py --help` prints the same)."""
    text, code = in_process_help()
    assert code in (0, None) and text
    return text


@pytest.mark.slow
def test_the_script_prints_the_help_the_tests_read(help_text):
    result = subprocess.run([sys.executable, os.path.join(REPO, "grpo_ba.py"), "--help"], capture_output=True,
                            text=True, env={**os.environ, "COLUMNS": "80"}, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout == help_text


def sections_of(help_text):
    """{section title: [flags listed under it]} in the order of the help text."""
    sections, current = {}, None
    for line in help_text.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            current = sections.setdefault(line[:-1], [])
        elif current is not None:
            current += re.findall(r"^\s{2}(?:-h, )?(--[\w-]+)", line)
    return sections


def test_help_lists_at_most_30_flags_and_hides_none(help_text):
    listed = [flag for flags in sections_of(help_text).values() for flag in flags]
    assert len(listed) <= FLAGS_MAX, listed
    parser = grpo_ba_args.build_parser()
    every = {s for action in parser._actions for s in action.option_strings
             if s.startswith("--") and not s.startswith("--no-")}   # --no-X: the same flag, off
    assert every == set(listed)                                   # nothing parsed that --help hides
    assert all(action.help != argparse.SUPPRESS for action in parser._actions)


def test_help_shows_the_sections_of_the_flags_in_order(help_text):
    assert [t for t in sections_of(help_text) if t in SECTIONS] == SECTIONS


def test_each_flag_is_listed_under_the_section_opened_above_its_field(help_text):
    listed = sections_of(help_text)
    expected, section = {}, None
    for f in dataclasses.fields(grpo_ba.Args):
        section = f.metadata.get("section") or section
        expected.setdefault(section, []).append("--" + f.name.replace("_", "-"))
    assert None not in expected, "the first field of Args must open a section"
    assert {title: listed[title] for title in expected} == expected


def test_help_shows_defaults_without_glitches(help_text):
    flat = " ".join(help_text.split())
    assert re.search(r"--group-size N G: responses per prompt \(default: 8\)", flat)
    assert "(default: all)" in flat
    assert "(default: )" not in flat and "(default: ())" not in flat and "SUPPRESS" not in flat
    assert "{," not in flat and "('" not in flat                        # no empty choice, no tuple repr


def flag_help(help_text):
    """{flag: its help text, on one line} of the options listed."""
    blocks, current = {}, None
    for line in help_text.splitlines():
        found = re.match(r"^\s{2}(--[\w-]+)", line)
        if found:
            current = blocks.setdefault(found.group(1), [])
        if current is not None and line.startswith(" "):
            current.append(line.strip())
        elif not line.startswith(" "):
            current = None
    return {flag: " ".join(lines) for flag, lines in blocks.items()}


def test_help_shows_the_defaults_the_default_run_uses(help_text):
    flat = " ".join(help_text.split())
    run = grpo_ba_args.parse_args([])                       # `python grpo_ba.py`, the demo
    shown = {flag: re.search(r"\(default: ([^)]*)\)$", text).group(1)
             for flag, text in flag_help(help_text).items() if "(default: " in text}
    assert {"--steps", "--seed", "--max-new-tokens", "--eval-prompts"} <= set(shown)
    assert shown.pop("--design") == "auto" and run.design == "demo"       # auto: the demo on the toy
    for flag, value in shown.items():
        default = getattr(run, flag[2:].replace("-", "_"))
        if default != "":                                           # "(default: the toy model)"
            assert value == str(default), flag
    assert (run.steps, run.max_new_tokens, run.eval_prompts) == (30, 48, 729)
    plain = grpo_ba_args.parse_args(["--design", "plain"])    # and says where the others start
    assert f"--steps {plain.steps}, --seed {plain.seed}, --max-new-tokens {plain.max_new_tokens}" in flat


def test_help_of_preset_names_presets_that_exist_where_they_are(help_text):
    text = flag_help(help_text)["--preset"]
    assert all(name in text for name in grpo_ba_args.PRESETS) and "grpo_ba_support/args.py" in text
    assert os.path.exists(os.path.join(REPO, "grpo_ba_support", "args.py")) and "grpo_ba_args." not in text


def test_help_of_preset_says_what_it_sets_and_where_its_memory_was_measured(help_text):
    text = flag_help(help_text)["--preset"]
    for name, flags in grpo_ba_args.PRESETS.items():
        for key, value in flags.items():
            flag = "--" + key.replace("_", "-")
            assert (flag if value is True else f"{flag} {value}") in text, (name, flag)
        memory = grpo_ba_args.PRESET_MEMORY[name]
        assert " ".join(memory.split()) in text
        peak = re.search(r"peak (\d+\.\d GiB)", memory).group(1)       # a number its cited log printed
        log = re.search(r"\((assets/[\w./-]+/)\)", memory).group(1)
        logged = "".join(open(p).read() for p in sorted(glob.glob(os.path.join(REPO, log, "*.log"))))
        assert f"peak memory {peak}" in logged and "batch 8x8" in logged and "NVIDIA H200" in logged
        assert "80 GB cards: unmeasured" in memory                   # nothing ran on one (issue 74)


def test_defaults_of_zero_are_shown(help_text):
    text = flag_help(help_text)
    for flag, shown in (("--beta", "0.0"), ("--clip-ratio-c", "0.0"), ("--micro-batch-size", "0"),
                        ("--threads", "0")):
        assert text[flag].endswith(f"(default: {shown})"), text[flag]


def test_seed_help_says_a_seed_without_a_shipped_warm_up_trains_one_first(help_text):
    from toy_tasks import designs
    text = flag_help(help_text)["--seed"]
    shipped = list(designs.DESIGNS["demo"]["shipped"])
    assert f"ships {shipped[0]}'s" in text and "trains one first" in text
    assert f"{designs.warmup_steps('demo')} supervised steps" in text and "longer than the GRPO steps" in text


@pytest.mark.parametrize("argv, said", [(["--preset", "qwen3-7b"], "unknown --preset 'qwen3-7b'; the presets: "
                                         + ", ".join(grpo_ba_args.PRESETS)),
                                        (["--threads", "-2"], "--threads must be 0 (auto) or more (got -2)"),
                                        (["--temperature", "0"], "--temperature must be above 0 (got 0.0)"),
                                        (["--lr", "-1"], "--lr must be above 0 (got -1.0)"),
                                        (["--eps-low", "-1"], "--eps-low and --eps-high are clip ranges, 0 or more "
                                                              "(got -1.0, 0.28)")])
def test_an_unknown_preset_and_values_that_would_fail_late_are_refused_in_one_line(argv, said, capsys, tmp_path,
                                                                                   monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert grpo_ba.main(argv) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"grpo_ba.py: error: {said}"]
    assert os.listdir(tmp_path) == []                                       # refused before anything is written
    config = tmp_path / "c.json"                                            # from a --config file too
    value = argv[1] if argv[0] == "--preset" else int(argv[1]) if argv[0] == "--threads" else float(argv[1])
    config.write_text(json.dumps({argv[0][2:].replace("-", "_"): value}))
    assert grpo_ba.main(["--config", str(config)]) == 2 and said in capsys.readouterr().err


RULE_NEEDED = ("trains one rule: add --aggregator token, sequence or balanced "
               "(--aggregator all runs the demo's three, each --steps long)")


@pytest.mark.parametrize("argv, said", [
    (["--max-grad-norm", "-1"], "--max-grad-norm must be above 0 (got -1.0)"),     # clipping would flip
    (["--max-grad-norm", "0"], "--max-grad-norm must be above 0 (got 0.0)"),       # ... or zero every gradient
    (["--beta", "-1"], "--beta must be 0 (no KL) or more (got -1.0)"),
    (["--micro-batch-size", "-4"], "--micro-batch-size must be 0 (the whole batch) or more (got -4)"),
    (["--preset", "qwen3-1.7b"], f"--preset qwen3-1.7b {RULE_NEEDED}"),
    (["--preset", "qwen3-1.7b", "--dataset", "d.jsonl"], f"--preset qwen3-1.7b {RULE_NEEDED}"),
    (["--model", "m", "--dataset", "d.jsonl"], f"--model {RULE_NEEDED}"),
    (["--preset", "qwen3-1.7b", "--aggregator", "balanced"], "--model needs --dataset (a hub id or a local "
                                                             ".json/.jsonl/.parquet file)"),
    (["--preset", "qwen3-1.7b", "--aggregator", "all"], "--model needs --dataset (a hub id or a local "
                                                        ".json/.jsonl/.parquet file)")])
def test_wrong_values_and_a_model_without_its_rule_or_data_are_refused_before_anything(argv, said, capsys,
                                                                                       tmp_path, monkeypatch):
    """Before the demo's "[1/3] token" line, a download or a file: one line, exit 2."""
    monkeypatch.chdir(tmp_path)
    assert grpo_ba.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines() == [f"grpo_ba.py: error: {said}"] and captured.out == ""
    assert os.listdir(tmp_path) == []


def test_a_rule_in_a_config_file_is_a_rule_given(tmp_path, capsys):
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"aggregator": "balanced"}))
    assert grpo_ba.main(["--config", str(config), "--preset", "qwen3-1.7b"]) == 2      # refused for its data
    assert "--model needs --dataset" in capsys.readouterr().err
    assert grpo_ba_args.parse_args(["--preset", "qwen3-1.7b"]).aggregator == "all"    # the lab's default stays


def test_help_names_the_lab_commands(help_text):
    flat = " ".join(help_text.split())
    assert "python -m grpo_ba_lab.train" in flat and "grpo_ba_lab.analysis.sweep" in flat


def test_the_rules_of_the_command_line_are_the_rules_of_the_algorithm():
    assert grpo_ba_args.RULES == tuple(grpo_ba.AGGREGATORS)


def test_each_source_of_defaults_wins_over_the_one_before(tmp_path):
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"lr": 3e-5, "eval_every": 7}))
    assert grpo_ba_args.parse_args([]).steps == 30                               # the demo design's
    assert grpo_ba_args.parse_args(["--design", "plain"]).steps == 100           # the field's
    assert grpo_ba_args.parse_args(["--preset", "qwen3-1.7b"]).lr == 1e-6        # the preset's
    from_config = grpo_ba_args.parse_args(["--config", str(config), "--eval-every", "3"])
    assert (from_config.lr, from_config.eval_every, from_config.steps) == (3e-5, 3, 30)
    assert grpo_ba_args.parse_args(["--preset", "qwen3-1.7b", "--lr", "2e-6"]).lr == 2e-6


def test_a_bad_config_or_flag_is_one_line_and_exit_code_2(tmp_path, capsys):
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"zzz": 1}))
    for argv in (["--config", str(config)], ["--group-size", "x"], ["--lora-rank", "4"]):
        assert grpo_ba.main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("grpo_ba.py: error:"), err


def test_the_lab_trainer_takes_the_course_flags_and_its_own():
    course = {f.name for f in dataclasses.fields(grpo_ba.Args)}
    lab = {f.name for f in dataclasses.fields(lab_args.LabArgs)}
    assert course < lab and {"lora_rank", "report_to", "regime", "rollout_engine"} <= lab - course
    assert lab_args.parse_args(["--lora-rank", "4", "--steps", "5"]).lora_rank == 4


LAB_COMMANDS = {"grpo_ba_lab.train": "--lora-rank", "grpo_ba_lab.analysis.sweep": "--seeds",
                "grpo_ba_lab.analysis.regime_map": "--map-gap-sizes", "grpo_ba_lab.analysis.report": "--figures-dir",
                "grpo_ba_lab.analysis.diagnose": "--adv-scale"}


@pytest.mark.slow                # runs a `python -m` subprocess
def test_each_lab_command_runs_as_python_m_and_lists_its_own_flags():
    # one interpreter runs each `python -m MODULE --help` (runpy, as -m does): one torch import, not five
    code = ("import contextlib, io, runpy, sys\n"
            "for module in sys.argv[1:]:\n"
            "    sys.argv, out = [module, '--help'], io.StringIO()\n"
            "    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):\n"
            "        runpy.run_module(module, run_name='__main__')\n"
            "    print(module, '|', ' '.join(out.getvalue().split()))\n")
    result = subprocess.run([sys.executable, "-c", code, *LAB_COMMANDS], cwd=REPO, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    shown = dict(line.split(" | ", 1) for line in result.stdout.splitlines() if " | " in line)
    for module, flag in LAB_COMMANDS.items():
        assert flag in shown[module] and "usage:" in shown[module], module


def test_the_toys_default_is_one_thread_the_measured_choice(help_text):
    """--threads 0 gives the toy 1 thread: near 2 threads' speed idle, far faster beside a busy
    process (assets/demo-threads/results.txt). Read from the source: the suite's workers set it."""
    text = " ".join(flag_help(help_text)["--threads"].split())
    assert "0: 1 for the toy, measured in assets/demo-threads/" in text
    with open(os.path.join(REPO, "grpo_ba_support", "run.py")) as f:
        assert re.search(r"^TOY_THREADS = (\d+)$", f.read(), flags=re.M).group(1) == "1"
    with open(os.path.join(REPO, "assets", "demo-threads", "results.txt")) as f:
        wall = {tuple(re.findall(r"^(\w+) steps=(\d+) threads=(\d)", line)[0]): float(line.split("wall_s=")[1])
                for line in f if "wall_s=" in line}
    assert wall[("busy", "5", "1")] < wall[("busy", "5", "2")]                 # beside a busy process
    assert wall[("idle", "30", "1")] < 1.25 * wall[("idle", "30", "2")]        # idle: never much slower


def test_help_imports_neither_matplotlib_nor_sympy():
    """`python grpo_ba.py --help` answers without the plotting and answer-grammar libraries: they are
    imported where they are used (the demo's figures, a dataset's golds)."""
    code = ("import runpy, sys\nsys.argv = ['grpo_ba.py', '--help']\ntry:\n"
            "    runpy.run_path('grpo_ba.py', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "print('IMPORTED', sorted(m for m in ('matplotlib', 'sympy') if m in sys.modules))\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert "IMPORTED []" in result.stdout, result.stdout[-300:] + result.stderr[-300:]
