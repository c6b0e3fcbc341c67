"""The demo's story and figure say what this run's world did, not what the demo's world does:
under `--design long-right` the world forces a re-check start and right answers are the long
ones; a run with no forced start claims no rambles; the lengths sentence is computed on the
world's long side, whichever way its numbers went. The warm-up's progress reaches the demo's
log, a warm-up trained here says it has no accuracy band, and the closing hint names the lab's
sweep only where the lab is there (a student copy has none). All from synthetic metrics."""
import importlib.util
import json
import os

import pytest

import grpo_ba
import grpo_ba_plots
from toy_tasks import designs
from toy_tasks import model as toy_model

RULES = ("token", "sequence", "balanced")


def runs_of(right=None, wrong=None, forced=0.3, steps=3):
    """{rule: metrics lines}: right/wrong = {rule: (step 0, later steps)} mean lengths."""
    right = right or {rule: (10.0, 9.0) for rule in RULES}
    wrong = wrong or {rule: (30.0, 25.0) for rule in RULES}
    return {rule: [{"step": s, "len_right": right[rule][s > 0], "len_wrong": wrong[rule][s > 0],
                    "wrong_over_right": 3.0, "forced_frac": forced, "accuracy": 0.5, "pg_loss": 0.0,
                    "entropy": 1.0, "pos_share": 0.5, "long_right_weight": 1.0} for s in range(steps)]
            for rule in RULES}


def told(runs, *flags) -> str:
    args = grpo_ba.parse_args([*flags, "--steps", "3"])
    return " ".join(" ".join(grpo_ba_plots.story(runs, args, ["m.png", "b.png"])).split())


def forced_panel_title(runs, args) -> str:
    figure = grpo_ba_plots.mechanism_figure(runs, None, "test", args)
    return " ".join(next(ax.get_title() for ax in figure.axes if "the world started" in ax.get_title()).split())


def test_under_long_right_the_story_says_right_answers_are_the_long_ones():
    text = told(runs_of(), "--design", "long-right")
    assert "right answers are the world's rambles" in text and "wrong answers are the world's" not in text
    assert "0.5 is unbiased. Token's share is expected above it here: sign-length coupling" in text and "below" not in text
    assert "responses the world started with a re-check (every rule alike)" in text
    assert "slip" not in text and "so right answers run long: this seed's" in text


def test_in_the_demos_world_the_story_still_says_wrong_answers_are_the_long_ones_started_with_a_slip():
    text = told(runs_of(), "--design", "demo")
    assert "wrong answers are the world's rambles" in text and "0.5 is unbiased. Token's share is expected below it here: sign-length" in text
    assert "responses the world started with a slip (every rule alike)" in text
    assert "re-check" not in text


def test_plain_forces_slips_too_so_its_story_tells_them():
    world = designs.world(designs.NO_DESIGN)      # the toy's own defaults: not a world without forced starts
    assert world.force_frac > 0 and world.gap_sign == "wrong-long"
    text = told(runs_of(), "--design", "plain")
    assert "starts 0.30 of the responses with a slip" in text and "wrong answers are the world's rambles" in text


def test_a_run_the_world_forced_nothing_in_claims_no_rambles_and_no_side_for_token():
    text = told(runs_of(forced=0.0), "--design", "plain")
    assert "ramble" not in text and "The world:" not in text and "slip" not in text
    assert "Token's share is expected off it where right and wrong answers differ in length: sign-length coupling" in text and "above" not in text and "below" not in text
    assert "started with a forced start (none in this run)" in text
    assert "last 3 steps. - accuracy" in text                       # the lengths line says only what it shows


SEQUENCE_ENDS = [  # (sequence's long side: step 0 -> later, the others' later) -> what the story says
    ((30.0, 31.0), (25.0, 20.0), "did not shrink under sequence, ending longest of the rules run"),
    ((30.0, 28.0), (25.0, 20.0), "shrank under sequence, ending longest of the rules run"),
    ((30.0, 15.0), (25.0, 20.0), "shrank under sequence, ending shortest of the rules run"),
    ((30.0, 32.0), (25.0, 40.0), "did not shrink under sequence, ending between others"),
    # no rule's shrank (issue 75: "did not shrink under sequence" read as if the others' had)
    ((30.0, 32.0), (35.0, 40.0), "shrank under no rule, sequence's ending shortest of the rules run"),
    ((30.0, 30.0), (30.0, 30.0), "shrank under no rule, sequence's ending level with another rule"),
    ((30.0, 22.0), (25.0, 20.0), "shrank under sequence, ending between others"),
    ((30.0, 25.0), (25.0, 20.0), "shrank under sequence, ending level with another rule"),
    ((30.0, 20.0), (25.0, 20.0), "shrank under sequence, ending level with another rule"),
]


@pytest.mark.parametrize("design, long, short", [("demo", "wrong", "right"), ("long-right", "right", "wrong")])
@pytest.mark.parametrize("sequence, others, says", SEQUENCE_ENDS)
def test_the_sequence_clause_reads_the_worlds_long_side_and_says_what_its_numbers_did(design, long, short, sequence,
                                                                                       others, says):
    lengths = {"sequence": sequence, "token": (sequence[0], others[0]), "balanced": (sequence[0], others[1])}
    other_side = {rule: (8.0, 100.0 if rule == "sequence" else 1.0) for rule in RULES}    # the other way round
    text = told(runs_of(**{long: lengths, short: other_side}), "--design", design)
    assert f"{long} answers are the world's rambles" in text
    assert f"; on this seed they {says}." in text and "1/L of its push" not in text     # an outcome, no reason


def test_a_long_side_without_answers_late_in_the_run_gets_no_sequence_clause():
    runs = runs_of(wrong={rule: (float("nan"), float("nan")) for rule in RULES})      # all right, every step
    text = told(runs, "--design", "demo")
    assert "wrong answers are the world's rambles. - accuracy" in text and "on this seed they" not in text


def test_the_forced_panel_is_titled_by_the_worlds_start_a_course_runs_design_or_a_lab_runs_gap_sign():
    runs = runs_of()
    assert forced_panel_title(runs, None) == "responses the world started with a slip"           # the demo's
    assert forced_panel_title(runs, grpo_ba.parse_args(["--design", "demo"])) == \
        "responses the world started with a slip"
    assert forced_panel_title(runs, grpo_ba.parse_args(["--design", "long-right"])) == \
        "responses the world started with a re-check"
    lab = type("LabArgs", (), {"design": "plain", "gap_sign": "right-long"})()        # a lab run's own flag
    assert forced_panel_title(runs, lab) == "responses the world started with a re-check"
    assert "none in this run" in forced_panel_title(runs_of(forced=0.0), None)


def test_a_redrawn_run_reads_its_world_from_its_args_json(tmp_path, monkeypatch):
    (tmp_path / "args.json").write_text(json.dumps({"aggregator": "token", "design": "plain", "seed": 0,
                                                    "gap_sign": "right-long"}))
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in runs_of()["token"]))
    starts = []
    monkeypatch.setattr(grpo_ba_plots, "mechanism_figure", lambda runs, path, title, args=None:
                        starts.append(grpo_ba_plots.forced_start(args, runs["token"])[0]) or path)
    grpo_ba_plots.redraw(str(tmp_path))
    assert starts == ["a re-check"]                  # a lab run's gap_sign, not its design's (plain)


def test_the_demo_hands_its_world_to_the_figure(tmp_path, monkeypatch):
    def train_one(args, log):
        os.makedirs(args.output_dir)
        with open(os.path.join(args.output_dir, "metrics.jsonl"), "w") as f:
            f.writelines(json.dumps(m) + "\n" for m in runs_of()[args.aggregator])
    starts = []
    monkeypatch.setattr(grpo_ba_plots, "mechanism_figure", lambda runs, path, title, args=None:
                        starts.append(grpo_ba_plots.forced_start(args, runs["token"])[0]) or path)
    monkeypatch.setattr(grpo_ba_plots, "bias_curves", lambda curves, path: path)
    monkeypatch.setattr(grpo_ba, "bias_curves", lambda: {})
    lines = []
    args = grpo_ba.parse_args(["--design", "long-right", "--steps", "3", "--output-dir", str(tmp_path / "demo")])
    grpo_ba.demo(args, log=lines.append, train_one=train_one)
    assert starts == ["a re-check"]
    assert "right answers are the world's rambles" in " ".join(" ".join(lines).split())


def test_the_demos_log_gets_the_warmups_progress_but_not_the_runs_own_lines():
    passed = []
    progress = grpo_ba_plots.Progress(30, log=passed.append)
    warmup = ["warm-up: training the toy policy (1000 steps, with no accuracy band: step 0's accuracy is this "
              "seed's own), cached in /tmp/cache/warmup-abc (set GRPO_BA_CACHE to move it)",
              "warm-up step     0/1000  loss 2.345  (1s, about 600s left)",
              "warm-up step   200/1000  loss 0.456  (120s, about 480s left)",
              "warm-up step   999/1000  loss 0.123  (600s, about 0s left)"]
    runs_own = ["warm-up: loading cached policy from /tmp/cache/warmup-abc",
                "[token] step    0  reward 0.41  accuracy 0.455", "[token] done: accuracy 0.671; 0.8 min"]
    for line in [warmup[0], runs_own[0], warmup[1], runs_own[1], warmup[2], warmup[3], runs_own[2]]:
        progress(line)
    progress()                                    # a bare call passes nothing
    assert passed == warmup


def test_a_warmup_trained_here_says_it_has_no_accuracy_band(tmp_path, monkeypatch):
    tokenizer = toy_model.char_tokenizer()
    monkeypatch.setattr(toy_model, "warmup_toy_model",
                        lambda world, steps, seed, log: (toy_model.tiny_qwen3(tokenizer, seed=seed), tokenizer, 0.0))
    logged = []
    toy_model.load_or_warmup_toy(str(tmp_path), designs.world("demo"), 1000, 23, log=logged.append)
    assert logged[0].startswith("warm-up: training the toy policy (1000 steps, with no accuracy band")
    passed = []
    grpo_ba_plots.Progress(1, log=passed.append)(logged[0])
    assert passed == logged[:1]                                      # and the demo's log gets it


@pytest.mark.parametrize("lab", [True, False])
def test_the_closing_hint_names_the_labs_sweep_only_where_the_lab_is(monkeypatch, lab):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *rest: real(name, *rest) if lab or name != "grpo_ba_lab" else None)
    text = told(runs_of(), "--design", "demo")
    assert ("python -m grpo_ba_lab.analysis.sweep --design strong-band" in text) is lab
    assert ("several CPU-hours: the lab's sweep of strong-band, in the course repository" in text) is not lab
    assert ("grpo_ba_lab" in text) is lab                           # no module the copy lacks
    assert "several CPU-hours" in text


def test_a_one_seed_design_without_a_many_seed_design_points_to_no_sweep():
    text = told(runs_of(), "--design", "long-right")       # long-right registers seed 80 alone
    assert "python grpo_ba.py --seed 81 --design long-right" in text
    assert "sweep" not in text and "Over many seeds" not in text


def test_the_sequence_clause_compares_lengths_as_printed_so_it_never_says_shrank_beside_an_equal_pair():
    lengths = {"sequence": (25.61, 25.58), "token": (25.61, 20.9), "balanced": (25.61, 19.4)}   # 25.6 -> 25.6
    text = told(runs_of(wrong=lengths), "--design", "demo")
    assert "they did not shrink under sequence, ending longest" in text


def test_a_one_rule_runs_next_command_keeps_its_threads_so_it_finds_the_same_cached_warmup():
    runs = {"token": runs_of()["token"]}
    args = grpo_ba.parse_args(["--design", "long-right", "--aggregator", "token", "--steps", "5", "--threads", "1"])
    text = " ".join(" ".join(grpo_ba_plots.story(runs, args, ["m.png"])).split())
    assert "python grpo_ba.py --seed 80 --design long-right --steps 5 --threads 1" in text
    args = grpo_ba.parse_args(["--aggregator", "token", "--steps", "5"])
    assert "--threads" not in " ".join(grpo_ba_plots.story(runs, args, ["m.png"]))
