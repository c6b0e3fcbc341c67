"""`python grpo_ba.py`, the demo: three rules from the same weights and seed, its story in at
most 30 lines with this run's numbers, and two figures; any --seed works. From the shipped
warm-up, seed 20 gives the accuracies it has always given (on every kernel/thread variant the
suite runs under)."""
import glob
import json
import os

import pytest

import grpo_ba
import grpo_ba_setup
from toy_tasks import model as toy_model

STORY_MAX_LINES = 30
# After the 30th update, on 729 held-out prompts (662/729, 629/729, 663/729): what the demo
# printed before the course and the lab were separated, on an Intel Xeon and an AMD EPYC.
SEED_20_ACCURACY = {"token": 0.9080932784636488, "sequence": 0.8628257887517147,
                    "balanced": 0.9094650205761317}


def demo_outputs(out, capsys):
    captured = capsys.readouterr()
    return captured.out.splitlines(), captured.err, sorted(glob.glob(os.path.join(out, "**", "*.png"),
                                                                    recursive=True))


def test_any_seed_runs_the_demo_and_draws_its_two_figures_in_at_most_30_lines(tmp_path, monkeypatch, capsys):
    tokenizer = toy_model.char_tokenizer()                  # a random policy stands in for the warm-up
    monkeypatch.setattr(toy_model, "warmup_toy_model",
                        lambda world, steps, seed, log: (toy_model.tiny_qwen3(tokenizer, seed=seed), tokenizer, 0.0))
    monkeypatch.setattr(grpo_ba_setup, "CACHE_DIR", str(tmp_path / "cache"))
    out = str(tmp_path / "demo")
    assert grpo_ba.main(["--seed", "7", "--steps", "2", "--group-size", "4", "--prompts-per-step", "2",
                         "--eval-prompts", "8", "--max-new-tokens", "12", "--output-dir", out]) == 0
    lines, err, figures = demo_outputs(out, capsys)
    assert 0 < len(lines) <= STORY_MAX_LINES, lines
    assert [os.path.basename(f) for f in figures] == ["bias_curves.png", "mechanism.png"]
    story = "\n".join(lines)
    assert "seed 7" in story and "One seed ranks no rule" in story and "analysis.sweep" in story
    assert "weight share on right answers" in story and "wrong-answer length" in story
    assert "it/s]" not in err + story and "Writing model shards" not in err + story    # no third-party bars


@pytest.mark.slow
def test_the_demo_from_the_shipped_warmup_gives_seed_20s_accuracies(tmp_path, capsys):
    out = str(tmp_path / "demo")
    assert grpo_ba.main(["--output-dir", out]) == 0
    lines, _, figures = demo_outputs(out, capsys)
    assert len(lines) <= STORY_MAX_LINES and len(figures) == 2
    final = {}
    for rule in SEED_20_ACCURACY:
        with open(os.path.join(out, rule, "metrics.jsonl")) as f:
            final[rule] = [json.loads(line) for line in f][-1]["accuracy"]
    assert final == pytest.approx(SEED_20_ACCURACY, abs=1e-12)
    assert any(f"{SEED_20_ACCURACY['sequence']:.3f}" in line for line in lines)     # the story prints them


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
    assert len(err) == 1 and "row 11" in err[0] and "verifier can read" in err[0], err
