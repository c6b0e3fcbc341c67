"""The loop slip style, the early-dense evaluation schedule and the peak-to-last drop
(toy_consequences.py, docs/toy-designs.md). The designs' registration, shipped warm-up and
report checks are in test_designs.py."""
import os
import random
from types import SimpleNamespace

import pytest
import torch

from grpo_ba_lab.analysis import toy_consequences as tc
from grpo_ba import is_eval_step, parse_args
from toy_tasks import ToyWorld, make_problems, warmup_corpus

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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
    from grpo_ba_lab.plumbing import lm_setup
    world, threads = ToyWorld("gap"), torch.get_num_threads()
    key = lm_setup.warmup_cache_dir("/c", world, 600, 0)
    assert key != lm_setup.warmup_cache_dir("/c", ToyWorld("gap", slip_style="loop"), 600, 0)
    assert key != lm_setup.warmup_cache_dir("/c", world, 600, 1) != lm_setup.warmup_cache_dir("/c", world, 601, 0)
    assert key == lm_setup.warmup_cache_dir("/c", ToyWorld("gap", force_frac=0.5), 600, 0)   # an RL-only knob
    try:                        # a warm-up trained on other threads is another policy: never served in its place
        torch.set_num_threads(threads % 2 + 1)
        assert lm_setup.warmup_cache_dir("/c", world, 600, 0) != key
    finally:
        torch.set_num_threads(threads)


def test_unknown_slip_style_is_refused():
    with pytest.raises(ValueError, match="slip style"):
        ToyWorld("gap", slip_style="tilde")


def test_slip_style_flag_reaches_the_world():
    from grpo_ba_lab.plumbing import lm_setup
    assert lm_setup.toy_world(parse_args(["--slip-style", "loop"])).slip_style == "loop"
    assert lm_setup.toy_world(parse_args([])).slip_style == "ramble"


def _schedule(steps, every, dense_until=0, dense_every=2):
    """The evaluated steps of a run, before each step's update; the final evaluation,
    after the last update, is logged as step `steps`."""
    args = SimpleNamespace(steps=steps, eval_every=every, eval_dense_until=dense_until, eval_dense_every=dense_every)
    return [s for s in range(steps) if is_eval_step(s, args)] + [steps]


def test_evaluation_schedule_is_dense_early_then_every_n_then_after_the_last_update():
    steps = _schedule(300, 10, dense_until=20, dense_every=2)
    assert steps == [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20] + list(range(30, 301, 10))
    assert len(steps) == 39


def test_evaluation_schedule_without_a_dense_start():
    assert _schedule(25, 10) == [0, 10, 20, 25]
    assert _schedule(20, 10, dense_until=0) == [0, 10, 20]


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
    assert tc.DESIGNS["demo"]["seeds"] == {"native-2t": (20, 21, 22), "default-1t": (23, 24, 25)}
    assert _schedule(loop.steps, loop.eval_every, loop.eval_dense_until, loop.eval_dense_every)[:3] == [0, 2, 4]
    spread = tc.design_args("spread-room")
    assert (spread.slip_style, spread.gap_size, spread.spread_size, spread.warmup_steps) == ("ramble", 18, 8, 1000)
    assert tc.DESIGNS["spread-room"]["seeds"] == {"native-2t": (40, 41, 42), "default-1t": (43, 44, 45)}
    assert tc.designs.VARIANTS == {"native-2t": {"cpu_capability": "", "threads": 2},
                                   "default-1t": {"cpu_capability": "default", "threads": 1}}
