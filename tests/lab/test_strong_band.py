"""Design strong-band's registered rules as its report applies them (registrations/strong-band-v3.md):
the time limit keeps the first seeds finished on every variant, the manipulation check withholds
every accuracy verdict when token's share on right answers is not low enough, and the report is
redrawn byte for byte from the committed runs."""
import dataclasses
import json
import os
import tarfile

import pytest

from grpo_ba_support.args import RULES
from grpo_ba_lab.analysis import toy_consequences as tc
from grpo_ba_lab.lab_args import parse_args
from grpo_ba_lab import designs

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEEDS = designs.STRONG_SEEDS


def _run(root, rule, seed, variant, last, share=0.3, finished=True):
    """A run of strong-band as the design sweep writes it (token's share `share`)."""
    v = designs.VARIANTS[variant]
    args = dataclasses.asdict(parse_args(["--design", "strong-band", "--aggregator", rule, "--seed", str(seed)]))
    run = root / tc.run_folder("strong-band", "gap", rule, seed, variant)
    args.update(output_dir=str(run), threads=v["threads"])
    run.mkdir(parents=True)
    (run / "args.json").write_text(json.dumps(args))
    lines = [{"step": step, "accuracy": 0.5 + (last - 0.5) * step / 30, "reward_mean": 0.3,
              "len_right": 7, "len_wrong": 22, "wrong_over_right": 22 / 7, "std_over_mean": 0.6,
              "pos_share": share if rule == "token" else 0.5, "entropy": 0.3} for step in (0, 15)]
    if finished:
        lines.append({"step": 30, "final_evaluation": True, "accuracy": last})
    (run / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in lines))
    machine = {"cpu_model": "Test CPU", "cpu_capability": "X", "torch": "2", "threads": v["threads"],
               "aten_cpu_capability": v["cpu_capability"]}
    (run / "run.json").write_text(json.dumps({"starts": [{"step": 0, "machine": machine,
                                                          "warmup": {"source": "trained"}}]}))


def _design(root, seeds, share=0.3, gap=0.04, unfinished=()):
    for k, seed in enumerate(seeds):
        for variant in designs.BAND_VARIANTS:
            for rule in RULES:
                last = 0.6 + (gap + (k % 3 - 1) / 200 if rule == "balanced" else 0.0)
                _run(root, rule, seed, variant, last, share, (rule, seed, variant) not in unfinished)


def test_the_time_limit_keeps_the_first_seeds_finished_on_every_variant_and_ignores_later_ones(tmp_path):
    _design(tmp_path, SEEDS[:9], unfinished={("balanced", SEEDS[7], "default-1t")})
    assert tc.time_limited_seeds(str(tmp_path), "strong-band") == list(SEEDS[:7])   # seed 8 finished, after a gap
    by_rule, records = tc.design_runs(str(tmp_path), "strong-band")
    assert sorted({seed for seed, _ in by_rule["token"]}) == list(SEEDS[:7]) and len(records) == 14
    report = tc.design_report_text("strong-band", by_rule, records)
    assert "7 of its 24 registered seeds (1200-1206: the first seeds finished on every variant" in report
    row = {(r["pair"], r["key"]): r for r in tc.claim_rows("strong-band", by_rule)}[("balanced - token", "last_acc")]
    assert row["n"] == 7 and {v["n"] for v in row["variants"].values()} == {7}


def test_a_failed_manipulation_check_withholds_every_accuracy_verdict_but_not_the_mechanism(tmp_path):
    _design(tmp_path, SEEDS[:8], share=0.45)
    by_rule, records = tc.design_runs(str(tmp_path), "strong-band")
    rows = {(r["pair"], r["key"]): r for r in tc.claim_rows("strong-band", by_rule)}
    for key in tc.ACCURACY_KEYS:
        assert rows[("balanced - token", key)]["verdict"] == tc.NO_VERDICT
    assert rows[("balanced - token", "last_acc")]["verdict_text"].startswith(
        "no verdict (the manipulation failed: token's pos_share averaged 0.450")
    assert rows[("balanced - token", "late_len_wrong")]["verdict"] != tc.NO_VERDICT
    assert "required: failed: the design claims no accuracy verdict" in tc.design_report_text("strong-band", by_rule, records)


def test_a_passed_manipulation_check_lets_a_consistent_primary_hold(tmp_path):
    _design(tmp_path, SEEDS[:8], share=0.30)
    by_rule, records = tc.design_runs(str(tmp_path), "strong-band")
    row = {(r["pair"], r["key"]): r for r in tc.claim_rows("strong-band", by_rule)}[("balanced - token", "last_acc")]
    assert row["label"] == "primary" and row["verdict"] == "holds"
    assert "averaged 0.300 over its runs; at most 0.40 required: passed" in tc.design_report_text(
        "strong-band", by_rule, records)


def test_the_registered_settings_are_the_ones_the_design_runs():
    args = parse_args(["--design", "strong-band", "--seed", "1200"])
    assert (args.gap_size, args.force_frac, args.spread_size, args.max_new_tokens) == (30, 0.5, 0, 48)
    assert (args.steps, args.lr, args.eval_prompts, args.eval_every) == (30, 1e-4, 729, 5)
    assert (args.warmup_band_low, args.warmup_band_high) == (0.45, 0.60)
    assert tc.REGISTRATIONS["strong-band"]["primaries"] == (("balanced - token", "last_acc"),
                                                            ("balanced - token", "acc_area"))
    assert not set(SEEDS) & {s for name in designs.DESIGNS if name != "strong-band"
                             for s, _ in designs.registered_seeds(name)}


@pytest.mark.slow                   # draws or redraws figures: the full suite runs it
@pytest.mark.parametrize("design", ["demo-band", "strong-band", "endless-band"])
def test_the_committed_report_is_redrawn_byte_for_byte_from_the_committed_runs(tmp_path, design):
    archive_path = os.path.join(REPO, f"assets/{design}-v3/runs.tar.gz")
    if not os.path.exists(archive_path):
        pytest.skip(f"{design}'s runs are not committed yet")
    with tarfile.open(archive_path) as archive:
        archive.extractall(tmp_path, filter="data")
    out = tmp_path / "report"
    tc.report(str(tmp_path / design), str(out), figure=str(tmp_path / "mechanism.png"), log=lambda *a: None)
    with open(os.path.join(REPO, f"assets/{design}-v3/consequences.md")) as committed:
        assert (out / "consequences.md").read_text() == committed.read()


def test_a_report_of_one_finished_seed_gives_no_spread_instead_of_failing(tmp_path):
    _design(tmp_path, SEEDS[:2], unfinished={("token", SEEDS[1], "native-1t")})
    by_rule, records = tc.design_runs(str(tmp_path), "strong-band")
    assert tc.spread_text("strong-band", by_rule) == ""                   # one seed: no sd
    assert "1 of its 24 registered seeds" in tc.design_report_text("strong-band", by_rule, records)
