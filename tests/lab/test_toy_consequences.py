"""The loop slip style, the early-dense evaluation schedule and the peak-to-last drop
(toy_consequences.py, docs/toy-designs.md). The designs' registration, shipped warm-up and
report checks are in test_designs.py."""
import os
import random

import pytest

from toy_tasks import model as toy_model
import torch

from grpo_ba_lab.analysis import toy_consequences as tc
from grpo_ba_support.run import evaluates
from grpo_ba_lab.lab_args import parse_args
from grpo_ba_lab import designs
from toy_tasks import ToyWorld, make_problems, warmup_corpus

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _split_slips(pairs):
    slips, plain = [], []
    for prompt, response in pairs:
        a = int(prompt.split("+")[0])
        (slips if int(response.split()[0]) == a else plain).append(response)
    return slips, plain


def test_loop_slip_style_writes_long_wrong_answers_in_digits_as_the_docstring_says():
    train, _ = make_problems()
    pairs = warmup_corpus(ToyWorld("gap", slip_style="loop", corpus_error=0.0), train["prompt"], 4000, seed=0)
    slips, plain = _split_slips(pairs)
    assert set("".join(r for _, r in pairs)) <= set("0123456789 ")          # no `~` anywhere
    assert all(20 <= len(r) <= 27 for r in slips)                             # 21-28 tokens with EOS
    assert sum(map(len, slips)) / len(slips) == pytest.approx(23.0, abs=0.5)
    assert all(5 <= len(r) <= 7 for r in plain)
    assert sum(map(len, plain)) / len(plain) == pytest.approx(5.2, abs=0.2)
    for response in slips:                                                   # the wrong first sum, repeated
        numbers = response.split()
        assert len(set(numbers[:-1])) == 1 and len(numbers) >= 6


def test_loop_slip_style_worked_example():
    world = ToyWorld("gap", slip_style="loop", corpus_error=0.0)
    seen = {world.response("23+8+2=", random.Random(s)) for s in range(200)}
    assert "31 33" in seen and "23 23 23 23 23 23 23 25" in seen
    assert all(r == "31 33" or (r.startswith("23 23") and r.endswith(" 25")) for r in seen)


def test_default_slip_style_keeps_the_tilde_corpus():
    train, _ = make_problems()
    world = ToyWorld("gap")
    assert world.slip_style == "ramble"
    assert any("~" in r for _, r in warmup_corpus(world, train["prompt"], 200, seed=0))


def test_warmup_cache_key_holds_the_settings_and_the_floating_point_path():
    world, threads = ToyWorld("gap"), torch.get_num_threads()
    key = toy_model.warmup_cache_dir("/c", world, 600, 0)
    assert key != toy_model.warmup_cache_dir("/c", ToyWorld("gap", slip_style="loop"), 600, 0)
    assert key != toy_model.warmup_cache_dir("/c", world, 600, 1) != toy_model.warmup_cache_dir("/c", world, 601, 0)
    assert key == toy_model.warmup_cache_dir("/c", ToyWorld("gap", force_frac=0.5), 600, 0)   # an RL-only knob
    try:                        # a warm-up trained on other threads is another policy: never served in its place
        torch.set_num_threads(threads % 2 + 1)
        assert toy_model.warmup_cache_dir("/c", world, 600, 0) != key
    finally:
        torch.set_num_threads(threads)


def test_unknown_slip_style_is_refused():
    with pytest.raises(ValueError, match="slip style"):
        ToyWorld("gap", slip_style="tilde")


def test_slip_style_flag_reaches_the_world():
    from grpo_ba_lab.plumbing import lm_setup
    assert lm_setup.toy_world(parse_args(["--slip-style", "loop"])).slip_style == "loop"
    assert lm_setup.toy_world(parse_args([])).slip_style == "ramble"


def _schedule(steps, every, design="plain"):
    """The evaluated steps of a run, before each step's update; the final evaluation,
    after the last update, is logged as step `steps`."""
    return [s for s in range(steps) if evaluates(s, every, *designs.dense_eval(design))] + [steps]


def test_evaluation_schedule_is_dense_early_then_every_n_then_after_the_last_update():
    steps = _schedule(300, 10, design="loop-gap")              # dense every 2 steps up to 20
    assert steps == [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20] + list(range(30, 301, 10))
    assert len(steps) == 39


def test_evaluation_schedule_without_a_dense_start():
    assert _schedule(25, 10) == [0, 10, 20, 25]
    assert _schedule(20, 10, design="plain") == [0, 10, 20]


def _metrics(accuracies, every=10):
    return [{"step": i * every, "accuracy": a, "reward_mean": 0.5} for i, a in enumerate(accuracies)]


def test_peak_to_last_drop_on_hand_made_curves():
    rise_then_fall = _metrics([0.40, 0.55, 0.70, 0.62, 0.50])
    assert tc.peak_accuracy(rise_then_fall) == pytest.approx(0.70)
    assert tc.last_accuracy(rise_then_fall) == pytest.approx(0.50)
    assert tc.peak_to_last_drop(rise_then_fall) == pytest.approx(0.20)
    assert tc.peak_to_last_drop(_metrics([0.4, 0.5, 0.6])) == 0.0          # ends at its best
    assert tc.peak_to_last_drop(_metrics([0.9, 0.5, 0.6])) == pytest.approx(0.3)   # step 0 can be the peak
    assert tc.tail_accuracy(_metrics([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]), last=5) == pytest.approx(0.5)


def test_steps_without_evaluation_are_ignored_by_the_drop():
    metrics = _metrics([0.5, 0.8, 0.6])
    metrics.insert(1, {"step": 5, "reward_mean": 0.9})                       # a step that did not evaluate
    assert tc.peak_to_last_drop(metrics) == pytest.approx(0.2)


def test_paired_drop_table_pairs_rules_by_seed():
    by_rule = {"token": {0: _metrics([0.4, 0.7, 0.5]), 1: _metrics([0.4, 0.6, 0.5])},
               "balanced": {0: _metrics([0.4, 0.7, 0.7]), 1: _metrics([0.4, 0.6, 0.6])},
               "sequence": {0: _metrics([0.4, 0.5, 0.5]), 1: _metrics([0.4, 0.5, 0.45])}}
    rows = {(r["pair"], r["key"]): r for r in tc.paired_rows(by_rule)}
    assert rows[("balanced - token", "drop")]["mean"] == pytest.approx(-0.15)
    assert rows[("balanced - token", "last_acc")]["mean"] == pytest.approx(0.15)
    assert rows[("balanced - sequence", "last_acc")]["mean"] == pytest.approx(0.175)
    assert "peak-to-last drop" in tc.paired_table(by_rule)


def test_named_designs_are_the_pre_registered_version_2_settings():
    loop = tc.design_args("loop-gap")
    assert (loop.slip_style, loop.gap_size, loop.warmup_steps, loop.lr, loop.steps) == ("loop", 18, 600, 1e-4, 300)
    assert (loop.warmup_seed, loop.seed) == (-1, 30)                      # each seed its own warm-up
    assert tc.DESIGNS["loop-gap"]["seeds"] == {"native-2t": (30, 31, 32), "default-1t": (33, 34, 35)}
    assert tc.DESIGNS["demo-v2"]["seeds"] == {"native-2t": (20, 21, 22), "default-1t": (23, 24, 25)}
    assert _schedule(loop.steps, loop.eval_every, "loop-gap")[:3] == [0, 2, 4]
    spread = tc.design_args("spread-room")
    assert (spread.slip_style, spread.gap_size, spread.spread_size, spread.warmup_steps) == ("ramble", 18, 8, 1000)
    assert tc.DESIGNS["spread-room"]["seeds"] == {"native-2t": (40, 41, 42), "default-1t": (43, 44, 45)}
    assert tc.designs.VARIANTS == {"native-2t": {"cpu_capability": "", "threads": 2},
                                   "default-1t": {"cpu_capability": "default", "threads": 1},
                                   "native-1t": {"cpu_capability": "", "threads": 1},
                                   "avx2-1t": {"cpu_capability": "avx2", "threads": 1}}   # regime-v4's
    # version 3 (registrations/demo-band-v3.md): 16 seeds, each on both one-thread variants
    assert tc.DESIGNS["demo-band"]["seeds"] == {"native-1t": tuple(range(60, 76)),
                                                "default-1t": tuple(range(60, 76))}
    flags = tc.DESIGNS["demo-band"]["flags"]
    assert (flags["warmup_band_low"], flags["warmup_band_high"], flags["steps"]) == (0.45, 0.60, 30)


# ------------------------------------------------------------------ a design's report, whole

import dataclasses
import json

RULES = ("token", "sequence", "balanced")


def _design_run(root, name, rule, seed, last, cpu="Test CPU 1", trained_on="cpu", on="", **changes):
    """A finished run of design `name` as the design sweep writes it: args.json with the
    design's settings (`changes` on top), metrics ending in the evaluation after the last
    update (`last`), run.json with its machine variant (`on`, default its seed's) on CPU
    `cpu`, device `trained_on`."""
    on = on or tc.designs.variant_of(name, seed)
    variant = tc.designs.VARIANTS[on]
    args = dataclasses.asdict(parse_args(["--design", name, "--aggregator", rule,
                                          "--seed", str(seed)]))
    run = root / tc.run_folder(name, "gap", rule, seed, on)
    args.update(output_dir=str(run), threads=variant["threads"], **changes)
    run.mkdir(parents=True)
    (run / "args.json").write_text(json.dumps(args))
    lines = [{"step": step, "accuracy": 0.4 + (last - 0.4) * step / args["steps"],
              "reward_mean": 0.5, "len_right": 6, "len_wrong": 12, "wrong_over_right": 2.0,
              "std_over_mean": 0.5, "pos_share": 0.5, "entropy": 0.3}
             for step in (0, args["steps"] // 2)]
    lines.append({"step": args["steps"], "final_evaluation": True, "accuracy": last})
    (run / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in lines))
    machine = {"cpu_model": cpu, "cpu_capability": "X", "torch": "2", "threads": variant["threads"],
               "aten_cpu_capability": variant["cpu_capability"]}
    start = {"step": 0, "machine": machine, "provenance": {"device": trained_on},
             "warmup": {"source": "trained", "sha256": "ab" * 32}}
    (run / "run.json").write_text(json.dumps({"starts": [start]}))
    return run


def _design(root, name="loop-gap", last=None, skip=()):
    """Every registered (rule, seed) of `name`; last(rule, seed) -> its last accuracy."""
    base = {"token": 0.5, "sequence": 0.45, "balanced": 0.55}
    last = last or (lambda rule, seed: base[rule] + seed / 1000)
    for seed, _ in tc.designs.registered_seeds(name):
        for rule in RULES:
            if (rule, seed) not in skip:
                _design_run(root, name, rule, seed, last(rule, seed))


def _refusal(root, name="loop-gap") -> str:
    with pytest.raises(ValueError, match="exactly its registered runs") as refused:
        tc.design_runs(str(root), name)
    return str(refused.value)


@pytest.mark.parametrize("key, value, words", [
    ("group_size", 4, "--group-size 4 where the design has 8"),
    ("prompts_per_step", 8, "--prompts-per-step 8 where the design has 16"),
    ("inner_updates", 1, "--inner-updates 1 where the design has 2"),
    ("eps_high", 0.2, "--eps-high 0.2 where the design has 0.28"),
    ("temperature", 0.7, "--temperature 0.7 where the design has 1.0"),
    ("max_new_tokens", 30, "--max-new-tokens 30 where the design has 40"),
    ("beta", 0.04, "--beta 0.04 where the design has 0.0"),
    ("adv_scale", "none", "--adv-scale none where the design has std"),
    ("eval_temperature", 0.6, "--eval-temperature 0.6 where the design has 0.0"),
    ("warmup_from_scratch", True, "--warmup-from-scratch True where the design has False"),
    ("dtype", "bfloat16", "--dtype bfloat16 where the design has float32"),
    ("micro_batch_size", 4, "--micro-batch-size 4 where the design has 0"),
    ("a_future_flag", 1, "--a-future-flag 1: not a setting of this grpo_ba.py")])
def test_a_run_differing_from_its_design_in_any_non_machine_key_is_refused_naming_run_and_key(
        key, value, words, tmp_path):
    _design(tmp_path, skip={("balanced", 31)})
    _design_run(tmp_path, "loop-gap", "balanced", 31, 0.6, **{key: value})
    refusal = _refusal(tmp_path)
    assert f"gap-balanced-s31: not this design's settings ({words}" in refusal
    assert refusal.count("not this design's settings") == 1


def test_a_key_missing_from_args_json_is_refused_by_name(tmp_path):
    _design(tmp_path)
    path = tmp_path / "gap-token-s33" / "args.json"
    args = json.loads(path.read_text())
    del args["eval_prompts"]
    path.write_text(json.dumps(args))
    refusal = _refusal(tmp_path)
    words = "gap-token-s33: not this design's settings (--eval-prompts missing from args.json"
    assert words in refusal


def test_machine_keys_may_differ_between_a_designs_runs(tmp_path):
    _design(tmp_path, skip={("token", 30), ("sequence", 34)})
    _design_run(tmp_path, "loop-gap", "token", 30, 0.5, cache_dir="/elsewhere", log_every=1,
                save_every=5, report_to="tensorboard", completions=True, resume="somewhere",
                device="cpu")
    _design_run(tmp_path, "loop-gap", "sequence", 34, 0.5, device="cuda")   # fell back to the CPU
    by_rule, records = tc.design_runs(str(tmp_path), "loop-gap")
    assert sorted(by_rule["token"]) == list(range(30, 36)) and len(records) == 6
    assert set(tc.MACHINE_KEYS) >= {"output_dir", "threads", "device", "cache_dir"}
    assert not {"dtype", "micro_batch_size", "group_size"} & set(tc.MACHINE_KEYS)


def test_runs_on_another_cpu_model_are_refused_by_name(tmp_path):
    _design(tmp_path, skip={("token", 33), ("balanced", 35)})
    _design_run(tmp_path, "loop-gap", "token", 33, 0.5, cpu="Test CPU 2")
    _design_run(tmp_path, "loop-gap", "balanced", 35, 0.6, cpu="Test CPU 2")
    refusal = _refusal(tmp_path)
    for run in ("gap-token-s33", "gap-balanced-s35"):
        assert (f"{run}: ran on CPU 'Test CPU 2' where the design's other runs ran on "
                "'Test CPU 1'") in refusal
    assert refusal.count("ran on CPU") == 2


def test_a_run_trained_on_a_gpu_is_refused(tmp_path):
    _design(tmp_path, skip={("sequence", 32)})
    _design_run(tmp_path, "loop-gap", "sequence", 32, 0.5, trained_on="cuda:0")
    refusal = _refusal(tmp_path)
    assert "gap-sequence-s32: trained on cuda:0: a design's runs train on the CPU" in refusal


def test_the_report_labels_every_row_and_gives_each_a_verdict(tmp_path):
    _design(tmp_path)
    by_rule, records = tc.design_runs(str(tmp_path), "loop-gap")
    rows = tc.claim_rows("loop-gap", by_rule)
    assert len(rows) == 3 * len(tc.METRICS)                          # every row, none chosen
    assert {r["label"] for r in rows} == {"secondary", "post hoc", "post hoc; manipulation check"}
    assert {r["verdict"] for r in rows} <= {"holds", "contradicted", "not detected", tc.IDENTICAL}
    text = tc.design_report_text("loop-gap", by_rule, records)
    assert "registered in registrations/loop-gap-v2.md" in text
    share = "| weight share on right answers, run mean | post hoc; manipulation check |"
    assert text.count(share) == 3


def _row(by_rule: dict, pair: str, key: str) -> dict:
    rows = tc.claim_rows("loop-gap", by_rule)
    return next(r for r in rows if (r["pair"], r["key"]) == (pair, key))


def _noisy(rule_gap: float):
    """last(rule, seed): balanced - token is rule_gap plus seed noise around it."""
    noise = {30: 0.01, 31: -0.012, 32: 0.004, 33: -0.006, 34: 0.011, 35: -0.007}
    return lambda rule, seed: 0.5 + (rule_gap + noise[seed] if rule == "balanced" else 0.0)


def test_a_row_whose_interval_excludes_the_earlier_claim_leads_with_its_verdict_against_0(tmp_path):
    # version 1 claimed loop-gap's balanced - token = +0.042 at the last step
    _design(tmp_path, last=_noisy(0.0))
    by_rule, _ = tc.design_runs(str(tmp_path), "loop-gap")
    row = _row(by_rule, "balanced - token", "last_acc")
    assert row["earlier"] == 0.042 and row["high"] < 0.042
    assert row["verdict"] == "not detected"
    assert row["verdict_text"].startswith("not detected; ")
    assert row["verdict_text"].endswith(". Not a verdict: the pooled interval excludes this project's "
                                        "version-1 toy value +0.042")


def test_a_not_detected_row_prints_the_difference_it_could_have_seen(tmp_path, monkeypatch):
    seeds = {"native-2t": tuple(range(30, 36)), "default-1t": tuple(range(36, 42))}
    monkeypatch.setitem(tc.DESIGNS["loop-gap"], "seeds", seeds)
    noise = [0.01, -0.012, 0.004, -0.006, 0.011, -0.007]
    _design(tmp_path, last=lambda rule, seed: 0.5 + (0.004 + noise[seed % 6]
                                                    if rule == "balanced" else 0.0))
    by_rule, _ = tc.design_runs(str(tmp_path), "loop-gap")
    row = _row(by_rule, "balanced - sequence", "last_acc")
    assert row["verdict"] == "not detected" and 0 < row["claim_detectable"] < 1
    seen = row["claim_detectable"]
    assert row["verdict_text"] == (f"not detected; differences of {seen:.3f} or more would have "
                                   "been seen at 80% power")


def test_with_six_seeds_per_variant_a_consistent_primary_holds_after_holm(tmp_path, monkeypatch):
    seeds = {"native-2t": tuple(range(30, 36)), "default-1t": tuple(range(36, 42))}
    monkeypatch.setitem(tc.DESIGNS["loop-gap"], "seeds", seeds)
    primaries = (("balanced - token", "last_acc"), ("balanced - sequence", "acc_area"))
    registration = {**tc.REGISTRATIONS["loop-gap"], "primaries": primaries, "earlier": {}}
    monkeypatch.setitem(tc.REGISTRATIONS, "loop-gap", registration)
    noise = [0.01, -0.012, 0.004, -0.006, 0.011, -0.007]
    _design(tmp_path, last=lambda rule, seed: 0.5 + (0.05 + noise[seed % 6]
                                                    if rule == "balanced" else 0.0))
    by_rule, _ = tc.design_runs(str(tmp_path), "loop-gap")
    rows = {(r["pair"], r["key"]): r for r in tc.claim_rows("loop-gap", by_rule)}
    held = rows[("balanced - token", "last_acc")]
    assert held["label"] == "primary" and held["verdict"] == "holds"
    assert held["verdict_text"] == "holds (Holm over 2 primaries)"
    # a primary's detectable difference is quoted at Holm's first step, alpha / 2
    at_holm = tc.paired_stats.claim_detectable(held, tc.paired_stats.ALPHA / 2)
    assert held["claim_detectable"] == pytest.approx(at_holm)
    assert at_holm > tc.paired_stats.claim_detectable(held)
    assert rows[("balanced - sequence", "acc_area")]["label"] == "primary"
    assert rows[("token - sequence", "last_acc")]["label"] == "secondary"
    assert rows[("token - sequence", "last_acc")]["verdict"] == "not detected"   # an exact tie


def test_every_design_has_a_registration_file_of_its_version_with_at_most_two_primaries():
    for name in tc.DESIGNS:
        if tc.DESIGNS[name].get("teaching"):      # a classroom world that claims nothing
            assert name not in tc.REGISTRATIONS
            continue
        registration = tc.REGISTRATIONS[name]
        assert registration["version"] == tc.version(name), name
        path = tc.registration_file(name)
        assert os.path.exists(os.path.join(REPO, path)), path
        assert len(registration["primaries"]) <= 2
        keys = {key for key, _, _ in tc.METRICS}
        assert all(key in keys for _, key in registration["primaries"])
        assert set(registration["post_hoc"]) <= keys


def test_every_detectable_difference_in_toy_designs_md_is_computed_from_its_rows_interval():
    """docs/toy-designs.md quotes, per version-2 row, the difference its pooled interval could
    have seen and the earlier values it contradicts: each is recomputed from the row's own
    printed interval (6 seeds), so no such number is typed by hand."""
    import re
    with open(os.path.join(REPO, "docs", "toy-designs.md")) as f:
        text = f.read()
    # version 3's rows are read from its committed report instead (tests/lab/test_readme_reports.py)
    v3 = text.index("## Version 3: design `demo-band`")
    text = text[:v3] + text[text.index("\n## ", v3 + 1):]
    rows = [line for line in text.splitlines() if line.startswith("| ") and "verdict" not in line]
    interval = re.compile(r"\| [+-][\d.]+ \[([+-][\d.]+), ([+-][\d.]+)\]")
    checked = 0
    for row in rows:
        if "would have been seen" not in row and "version 1's" not in row:
            continue
        low, high = map(float, interval.search(row).groups())
        for seen in re.findall(r"differences of ([\d.]+) or more would have been seen", row):
            sd = tc.paired_stats.sd_from_interval(low, high, 6)
            assert f"{tc.paired_stats.detectable_difference(sd, 6):.3f}" == seen, row
            checked += 1
        for earlier, where in re.findall(r"version 1's ([+-][\d.]+) lies (outside|inside)", row):
            assert (low <= float(earlier) <= high) == (where == "inside"), row
            checked += 1
    assert checked >= 12


def test_version_1s_drop_sentence_quotes_what_its_five_seed_intervals_could_have_seen():
    """The range of detectable drop differences in version 1's summary is recomputed from the
    nine paired intervals of its drop table (5 seeds each), and none of them excludes 0."""
    import re
    with open(os.path.join(REPO, "docs", "toy-designs.md")) as f:
        text = f.read()
    table = text[text.index("Peak-to-last drop (peak of the 39"):]
    table = table[:table.index("\n\n", table.index("| design |"))]
    intervals = [tuple(map(float, pair)) for pair in
                 re.findall(r"[+-][\d.]+ \[([+-][\d.]+), ([+-][\d.]+)\]", table)]
    assert len(intervals) == 9 and all(low < 0 < high for low, high in intervals)
    seen = [tc.paired_stats.detectable_difference(tc.paired_stats.sd_from_interval(low, high, 5), 5)
            for low, high in intervals]
    quoted = f"differences of {min(seen):.3f} to {max(seen):.3f} or more would have been seen"
    assert quoted in " ".join(text.split())


# ------------------------------------------------------------------ a crossed design (version 3)

def _crossed(root, last=None, skip=()):
    """Every registered (rule, seed, variant) of demo-band; last(rule, seed, variant)."""
    base = {"token": 0.5, "sequence": 0.45, "balanced": 0.55}
    last = last or (lambda rule, seed, variant: base[rule] + (seed % 7) / 1000)
    for _, seed, variant in tc.units("demo-band"):
        for rule in RULES:
            if (rule, seed, variant) not in skip:
                _design_run(root, "demo-band", rule, seed, last(rule, seed, variant), on=variant)


def test_a_crossed_design_runs_every_seed_on_every_variant_and_keys_runs_by_both(tmp_path):
    assert tc.crossed("demo-band") and not tc.crossed("loop-gap")
    assert tc.run_folder("demo-band", "gap", "token", 60, "native-1t") == "gap-token-s60-native-1t"
    assert tc.run_folder("loop-gap", "gap", "token", 30, "native-2t") == "gap-token-s30"
    _crossed(tmp_path)
    by_rule, records = tc.design_runs(str(tmp_path), "demo-band")
    seeds = tuple(range(60, 76))
    assert sorted(by_rule["balanced"]) == sorted((s, v) for s in seeds for v in ("default-1t", "native-1t"))
    assert len(records) == 32
    rows = {(r["pair"], r["key"]): r for r in tc.claim_rows("demo-band", by_rule)}
    row = rows[("balanced - token", "last_acc")]
    # the pooled interval is over 16 seeds (each the mean of its two variants), each variant's over 16
    assert row["n"] == 16 and {v: part["n"] for v, part in row["variants"].items()} == {
        "native-1t": 16, "default-1t": 16}
    assert row["label"] == "primary" and rows[("balanced - sequence", "last_acc")]["label"] == "primary"
    report = tc.design_report_text("demo-band", by_rule, records)
    assert "16 seeds, each on every variant" in report and "Holm over 2 primaries" in report


def test_a_crossed_design_refuses_a_seed_missing_on_one_variant_by_seed_and_variant(tmp_path):
    _crossed(tmp_path, skip={("sequence", 61, "default-1t")})
    refusal = _refusal(tmp_path, "demo-band")
    assert "missing under" in refusal and "sequence seed 61 on default-1t" in refusal


def test_a_crossed_designs_run_on_an_unregistered_variant_is_refused(tmp_path):
    _crossed(tmp_path, skip={("token", 60, "native-1t")})
    _design_run(tmp_path, "demo-band", "token", 60, 0.5, on="native-2t")
    refusal = _refusal(tmp_path, "demo-band")
    assert "extra: (rule token, seed 60 on native-2t) is not registered" in refusal
    assert "token seed 60 on native-1t" in refusal                      # and the one it lacks


def test_a_crossed_claim_fails_when_one_variant_alone_does_not_show_it(tmp_path):
    # balanced ahead by ~0.03 on native-1t; on default-1t the differences scatter around 0: the
    # pooled interval still excludes 0, but default-1t's own does not, so the claim is refused
    noise = [0.02, -0.02, 0.015, -0.015, 0.01, -0.01, 0.025, -0.025] * 2

    def last(rule, seed, variant):
        if rule != "balanced":
            return 0.5
        return 0.5 + (0.03 + (seed % 3) / 1000 if variant == "native-1t" else noise[seed - 60])
    _crossed(tmp_path, last)
    by_rule, _ = tc.design_runs(str(tmp_path), "demo-band")
    row = {(r["pair"], r["key"]): r for r in tc.claim_rows("demo-band", by_rule)}[
        ("balanced - token", "last_acc")]
    assert row["excludes_zero"]                                      # pooled: excludes 0
    assert not row["variants"]["default-1t"]["excludes_zero"]
    assert any("default-1t" in why for why in row["why"])
    # not "holds": not detected against 0; its pooled interval excludes version 1's +0.080,
    # which the row says after its verdict
    assert row["verdict"] == "not detected"
    assert row["verdict_text"].startswith("not detected; ")
    assert row["verdict_text"].endswith("Not a verdict: the pooled interval excludes this project's "
                                        "version-1 toy value +0.080")


def test_a_row_equal_by_formula_reads_identical_by_construction_not_a_detectable_difference(tmp_path):
    # balanced and sequence both give right answers one half of the weight: no test, no
    # "differences of 0.000 or more would have been seen"
    _crossed(tmp_path)
    by_rule, _ = tc.design_runs(str(tmp_path), "demo-band")
    rows = {(r["pair"], r["key"]): r for r in tc.claim_rows("demo-band", by_rule)}
    same = rows[("balanced - sequence", "pos_share")]
    assert same["verdict"] == tc.IDENTICAL
    assert same["verdict_text"].startswith("identical by construction (") and "would have" not in same["verdict_text"]
    assert rows[("token - sequence", "pos_share")]["verdict"] != tc.IDENTICAL
    from grpo_ba_lab.analysis import paired_stats
    noisy = paired_stats.claim_test({"a": {s: 0.01 * (-1) ** s for s in range(6)}})
    assert not tc._identical(noisy)                 # a real difference is tested as usual
