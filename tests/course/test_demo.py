"""`python grpo_ba.py`, the demo: three rules from the same weights and seed, its story in at
most 40 lines (one screen; every row read, issue 66) with this run's numbers and the paper's names of the two biases, two figures, and
on a terminal (only there) one line per rule that shows its steps as they run; any --seed
works. From the shipped warm-up, seed 22 gives the accuracies it gave when it was shipped (on every
kernel/thread variant the suite runs under)."""
import glob
import io
import json
import os
import re

import numpy as np
import pytest

import grpo_ba
import grpo_ba_plots
from grpo_ba_support import run as grpo_ba_run
from grpo_ba_support import task as grpo_ba_setup
from toy_tasks import model as toy_model

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

STORY_MAX_LINES = 40          # 30 before issue 66: the story now says how to read every row
DEMO_MAX_LINES = 45           # issue 75: everything `python grpo_ba.py` prints, progress lines too
# After the 30th update, on 729 held-out prompts (489/729, 509/729, 489/729): what the demo
# printed when its warm-up was shipped (2-core AMD EPYC; the same under native kernels on 1 and 2
# threads, ATEN_CPU_CAPABILITY=avx2 on 2 and default on 1 and 2: docs/toy-designs.md).
SEED_22_ACCURACY = {"token": 0.6707818930041153, "sequence": 0.6982167352537723,
                    "balanced": 0.6707818930041153}


PROGRESS = re.compile(r"^step \d+/\d+, \d+ s")        # not a terminal: every 10 steps and the last


def demo_outputs(out, capsys, captured=None):
    """The demo's lines but its progress lines (counted apart), its stderr and its figures."""
    captured = captured or capsys.readouterr()
    lines = [line for line in captured.out.splitlines() if not PROGRESS.match(line)]
    return lines, captured.err, sorted(glob.glob(os.path.join(out, "**", "*.png"), recursive=True))


TINY = ["--seed", "7", "--steps", "2", "--group-size", "4", "--prompts-per-step", "2", "--eval-prompts", "8",
        "--max-new-tokens", "12"]


@pytest.fixture
def random_policy(tmp_path, monkeypatch):
    """A random policy stands in for the warm-up, so that the demo's plumbing runs in seconds."""
    tokenizer = toy_model.char_tokenizer()
    monkeypatch.setattr(toy_model, "warmup_toy_model",
                        lambda world, steps, seed, log: (toy_model.tiny_qwen3(tokenizer, seed=seed), tokenizer, 0.0))
    monkeypatch.setattr(grpo_ba_setup, "CACHE_DIR", str(tmp_path / "cache"))


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_any_seed_runs_the_demo_and_draws_its_two_figures_in_at_most_30_lines(tmp_path, random_policy, capsys):
    out = str(tmp_path / "demo")
    assert grpo_ba.main([*TINY, "--output-dir", out]) == 0
    captured = capsys.readouterr()
    progress = [line.split(",")[0] for line in captured.out.splitlines() if PROGRESS.match(line)]
    assert progress == ["step 2/2"] * 3                  # per rule: the final evaluation's
    lines, err, figures = demo_outputs(out, capsys, captured)
    # on a terminal each rule adds one progress line: the story leaves room for them
    assert 0 < len(lines) + 3 <= STORY_MAX_LINES, lines
    # the whole demo, in a log: 30 steps give each rule three progress lines (10, 20, 30)
    assert len(lines) + 3 * 3 <= DEMO_MAX_LINES, lines
    assert [os.path.basename(f) for f in figures] == ["bias_curves.png", "mechanism.png"]
    story = "\n".join(lines)
    assert "seed 7" in story and "One seed ranks no rule" in story and "analysis.sweep" in story
    assert "weight share on right answers" in story and "wrong-answer length" in story
    assert "sign-length coupling" in story.lower() and "sequence equal-weighting" in story.lower()
    assert "0.5 is unbiased" in story and "pg-loss at ratio 1" in story and "long/short right answer" in story
    assert "The world: the environment starts" in story and "with a slip" in story     # the forced slips, told
    assert "it/s]" not in err + story and "Writing model shards" not in err + story    # no third-party bars
    assert "\r" not in err + story and "step 1/2" not in err + story     # captured output is no terminal


def test_on_a_terminal_each_rule_shows_its_steps_on_one_line_rewritten_in_place_and_the_log_gets_none(
        tmp_path, random_policy):
    terminal, logged = Terminal(), []
    grpo_ba.demo(grpo_ba.parse_args([*TINY, "--output-dir", str(tmp_path / "demo")]), log=logged.append,
                 terminal=terminal)
    rules = terminal.getvalue().split("\n")
    assert len(rules) == 4 and rules[-1] == ""                    # one finished line per rule
    for line in rules[:3]:
        updates = [u.strip() for u in line.split("\r") if u.strip()]
        assert [u.split(",")[0] for u in updates] == ["step 1/2", "step 2/2", "step 2/2"], updates
        assert all(" s" in u.split(",")[1] for u in updates)               # the time since the run began
        assert "accuracy" in updates[0] and "accuracy" in updates[-1]      # step 0's evaluation, the final one
    assert not any("step 1/2" in line or "\r" in line for line in logged)
    assert logged[0].startswith("[1/3] token") and any("sign-length coupling" in line.lower() for line in logged)


def test_the_progress_line_writes_a_plain_line_every_ten_steps_and_the_last_where_it_is_not_a_terminal():
    log_file, terminal = io.StringIO(), Terminal()
    for stream in (log_file, terminal):
        progress = grpo_ba_plots.Progress(3, stream)
        for step in range(4):                                 # 3 steps, then the final evaluation
            progress.log({"step": step, "accuracy": 0.5} if step == 0 else {"step": step})
        progress.close()
    assert [line.split(",")[0] for line in log_file.getvalue().splitlines()] == ["step 3/3"]   # the final evaluation's
    assert "\r" not in log_file.getvalue()
    long_run = io.StringIO()
    progress = grpo_ba_plots.Progress(25, long_run)
    for step in range(26):                                    # 25 steps, then the final evaluation
        progress.log({"step": step})
    assert [line.split(",")[0] for line in long_run.getvalue().splitlines()] == [
        "step 10/25", "step 20/25", "step 25/25"]
    thirty = io.StringIO()
    progress = grpo_ba_plots.Progress(30, thirty)
    for step in range(31):                                    # the 30th step's line is the final one's
        progress.log({"step": step, "accuracy": step / 100} if step % 10 == 0 else {"step": step})
    lines = thirty.getvalue().splitlines()
    assert [line.split(",")[0] for line in lines] == ["step 10/30", "step 20/30", "step 30/30"]
    # each line names the evaluation its accuracy comes from: step 10's is only measured after line 1
    assert [line.split(", ", 2)[2] for line in lines] == [
        "accuracy at step 0: 0.000", "accuracy at step 10: 0.100", "accuracy at step 30: 0.300"]
    assert terminal.getvalue().count("\r") == 4 and terminal.getvalue().endswith("accuracy at step 0: 0.500\n")
    assert isinstance(progress, grpo_ba_run.RunLogger) and progress("a log line") is None


@pytest.mark.slow
def test_the_demo_from_the_shipped_warmup_gives_seed_22s_accuracies(tmp_path, capsys):
    out = str(tmp_path / "demo")
    assert grpo_ba.main(["--output-dir", out]) == 0
    lines, _, figures = demo_outputs(out, capsys)
    assert len(lines) + 3 <= STORY_MAX_LINES and len(figures) == 2
    final = {}
    for rule in SEED_22_ACCURACY:
        with open(os.path.join(out, rule, "metrics.jsonl")) as f:
            final[rule] = [json.loads(line) for line in f][-1]["accuracy"]
    assert final == pytest.approx(SEED_22_ACCURACY, abs=1e-12)
    assert any(f"{SEED_22_ACCURACY['sequence']:.3f}" in line for line in lines)     # the story prints them
    with open(os.path.join(REPO, "README.md")) as f:   # the README's table is this story's, line by line
        table = [line.strip() for line in f.read().split("## What the demo shows")[1].split("\n\n")[3].splitlines()]
    assert table and all(any(line.strip() == row for line in lines) for row in table), table
    story, readme = " ".join(" ".join(lines).split()), " ".join(open(os.path.join(REPO, "README.md")).read().split())
    forced = re.search(r"starts (\d\.\d\d) of the responses", story).group(1)
    ratio = re.search(r"wrong/right length at step 0 is (\d\.\d\d)", story).group(1)
    assert f"{forced} of this run's responses were forced" in readme           # the world, as printed
    assert f"{ratio} times as long as right ones" in readme
    drift = next(line for line in lines if line.startswith("pg-loss at ratio 1")).split()[-3:]
    assert float(drift[0]) > 0.05 and drift[1:] == ["+0.000", "+0.000"]            # token's drift, the others' 0
    runs = {rule: grpo_ba_run.read_metrics(os.path.join(out, rule, "metrics.jsonl")) for rule in SEED_22_ACCURACY}
    figure = grpo_ba_plots.mechanism_figure(runs, None, "seed 22")
    for ax in figure.axes:                      # no panel where every rule's line is flat
        ys = [line.get_ydata() for line in ax.get_lines() if line.get_label() in SEED_22_ACCURACY]
        if "started with a slip" in ax.get_title():                # the world's, not a rule's
            assert not ys and max(ax.get_lines()[0].get_ydata()) > min(ax.get_lines()[0].get_ydata())
            continue
        # the long/short panel has gaps (nan: steps with no two right answers of different lengths)
        assert len(ys) == 3 and any(np.nanmax(y) - np.nanmin(y) > 1e-6 for y in ys), ax.get_title()


def test_the_course_trains_a_real_model_on_a_prompt_answer_file_and_refuses_an_unreadable_gold(
        tmp_path, tiny_model_dir, capsys):
    data = tmp_path / "data.jsonl"
    rows = [{"prompt": f"What is {i}+{i}?", "answer": str(2 * i)} for i in range(10)]
    data.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    out = tmp_path / "run"
    flags = ["--model", tiny_model_dir, "--aggregator", "balanced", "--steps", "1", "--group-size", "2",
             "--prompts-per-step", "2", "--max-new-tokens", "4", "--eval-prompts", "2", "--threads", "1"]
    assert grpo_ba.main([*flags, "--dataset", str(data), "--output-dir", str(out)]) == 0
    with open(out / "metrics.jsonl") as f:
        assert [json.loads(line)["step"] for line in f] == [0, 1]        # the step, then after the update
    data.write_text(data.read_text() + json.dumps({"prompt": "Name a colour.", "answer": "\\begin{x}"}) + "\n")
    capsys.readouterr()
    assert grpo_ba.main([*flags, "--dataset", str(data), "--output-dir", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "line 11" in err[0] and "verifier cannot read" in err[0], err
