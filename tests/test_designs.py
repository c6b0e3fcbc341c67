"""--design: a toy design's flags become grpo_ba.py's defaults (toy_tasks/designs.py);
the demo runs design `demo`, everything else the plain toy unless told otherwise."""
import json

import pytest

import grpo_ba
from analysis import report, sweep
from grpo_ba import main, parse_args
from grpo_ba_args import parse_command
from toy_tasks import designs


def test_the_demo_runs_design_demo_and_typed_flags_win():
    args = parse_args([])
    assert args.design == "demo" and args.aggregator == "all"
    assert (args.spread_size, args.gap_size, args.warmup_steps, args.steps, args.eval_prompts) == (8, 18, 1000, 30, 729)
    typed = parse_args(["--steps", "60", "--spread-size", "4"])
    assert (typed.design, typed.steps, typed.spread_size, typed.warmup_steps) == ("demo", 60, 4, 1000)


@pytest.mark.parametrize("argv, study", [(["--aggregator", "token"], None), ([], sweep.SweepOptions),
                                         (["--design", "plain"], None), (["--resume", "runs/x"], None)])
def test_everything_but_the_demo_keeps_the_plain_toy(argv, study):
    args = parse_command(argv, study)[0] if study else parse_args(argv)
    plain = grpo_ba.Args()
    assert args.design == "plain"
    assert (args.spread_size, args.warmup_steps, args.steps, args.eval_prompts) == (
        plain.spread_size, plain.warmup_steps, plain.steps, plain.eval_prompts)


def test_demo_design_is_spread_room_cut_to_30_steps():
    demo, spread = designs.design_flags("demo"), designs.design_flags("spread-room")
    toy_knobs = ("regime", "slip_style", "gap_size", "spread_size", "force_frac", "warmup_steps", "lr", "eval_prompts")
    assert {k: demo[k] for k in toy_knobs} == {k: spread[k] for k in toy_knobs}
    assert (demo["steps"], spread["steps"]) == (30, 300)
    schedule = [s for s in range(demo["steps"]) if grpo_ba.is_eval_step(s, parse_args([]))]
    assert schedule == [0, 2, 4, 5, 6, 8, 10, 15, 20, 25, 29]       # the pre-registered flags' schedule


def test_a_named_design_sets_its_knobs_for_a_single_rule_too():
    args = parse_args(["--design", "loop-gap", "--aggregator", "token", "--seed", "3"])
    assert (args.slip_style, args.gap_size, args.warmup_steps, args.steps, args.seed) == ("loop", 18, 600, 300, 3)


@pytest.mark.parametrize("argv, words", [
    (["--regime", "variance"], "design demo sets --spread-size 8: add --design plain"),
    (["--design", "loop-gap", "--model", "some/model"], "cannot run with --model"),
    (["--design", "no-such-design"], "invalid choice"),
])
def test_a_design_that_cannot_apply_is_refused_in_one_line(argv, words, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1


def test_design_sweep_trains_the_design_seeds_under_three_rules(tmp_path, monkeypatch):
    trained = []
    monkeypatch.setattr(grpo_ba, "train", lambda args, log=print: trained.append(args) or args.output_dir)
    args, _ = parse_command(["--design", "loop-gap", "--output-dir", str(tmp_path)], sweep.SweepOptions)
    assert sweep.run_sweep(args, log=lambda *a: None) == str(tmp_path)
    assert [(a.seed, a.aggregator) for a in trained] == [(s, r) for s in (0, 1, 2, 3, 4)
                                                         for r in ("token", "sequence", "balanced")]
    assert {a.output_dir for a in trained} == {str(tmp_path / f"gap-{r}-s{s}") for s in range(5)
                                                for r in ("token", "sequence", "balanced")}
    assert {(a.slip_style, a.steps, a.design) for a in trained} == {("loop", 300, "loop-gap")}


def test_a_design_demo_goes_where_its_sweep_puts_seed_0(monkeypatch):
    trained = []
    monkeypatch.setattr(grpo_ba, "train", lambda args, log=print: trained.append(args.output_dir))
    assert sweep.run_demo(parse_args(["--design", "tilde-gap"]), log=lambda *a: None) == "runs/tilde-gap"
    assert trained == [f"runs/tilde-gap/gap-{r}-s0" for r in ("token", "sequence", "balanced")]
    trained.clear()
    assert sweep.run_demo(parse_args([]), log=lambda *a: None) == "runs/demo"



def _saved_run(root, design, rule, seed, accuracies):
    run = root / f"gap-{rule}-s{seed}"
    run.mkdir(parents=True)
    (run / "args.json").write_text(json.dumps({"regime": "gap", "aggregator": rule, "seed": seed, "design": design,
                                               "steps": len(accuracies)}))
    with open(run / "metrics.jsonl", "w") as f:
        for step, acc in enumerate(accuracies):
            f.write(json.dumps({"step": step, "accuracy": acc, "pg_loss": 0.0, "len_pos": 6, "len_neg": 12,
                                "len_right": 6, "len_wrong": 12, "wrong_over_right": 2.0, "std_over_mean": 0.5,
                                "reward_mean": 0.5, "pos_share": 0.5, "len_mean": 9, "entropy": 0.3}) + "\n")


@pytest.mark.parametrize("design, reported", [("loop-gap", True), ("plain", False)])
def test_plot_only_redraws_a_designs_paired_report_and_only_a_designs(design, reported, tmp_path):
    for seed, base in ((0, 0.4), (1, 0.5)):
        for rule, gain in (("token", 0.1), ("sequence", 0.0), ("balanced", 0.2)):
            _saved_run(tmp_path, design, rule, seed, [base, base + gain / 2, base + gain])
    assert report.main([str(tmp_path)]) == 0
    assert (tmp_path / "table.md").exists()
    assert (tmp_path / "consequences.md").exists() == reported
    assert (tmp_path / "mechanism.png").exists() == reported
    if reported:
        text = (tmp_path / "consequences.md").read_text()
        assert "| balanced - token | last held-out acc | 2 | +0.100" in text
