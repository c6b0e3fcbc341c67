"""Issue 24: the loop slip style, the named designs' step-0 statistics, the early-dense
evaluation schedule and the peak-to-last drop (toy_consequences.py, docs/toy-designs.md)."""
import os
import random
import shlex
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from analysis import toy_consequences as tc
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


def test_default_slip_style_keeps_the_tilde_corpus_and_its_warmup_cache_key():
    from plumbing import lm_setup
    train, _ = make_problems()
    world = ToyWorld("gap")
    assert world.slip_style == "ramble"
    assert any("~" in r for _, r in warmup_corpus(world, train["prompt"], 200, seed=0))
    # the keys the code had before slip styles existed (computed with it): old caches stay valid
    assert lm_setup.warmup_cache_dir("/c", world, 600, 0) == "/c/warmup-8a548ce8f9aa"
    assert lm_setup.warmup_cache_dir("/c", ToyWorld("gap", gap_size=18, spread_size=8), 1000, 0) == "/c/warmup-8871db07bf10"
    assert lm_setup.warmup_cache_dir("/c", world, 600, 0) != lm_setup.warmup_cache_dir(
        "/c", ToyWorld("gap", slip_style="loop"), 600, 0)


def test_unknown_slip_style_is_refused():
    with pytest.raises(ValueError, match="slip style"):
        ToyWorld("gap", slip_style="tilde")


def test_slip_style_flag_reaches_the_world():
    from plumbing import lm_setup
    assert lm_setup.toy_world(parse_args(["--slip-style", "loop"])).slip_style == "loop"
    assert lm_setup.toy_world(parse_args([])).slip_style == "ramble"


def _schedule(steps, every, dense_until=0, dense_every=2):
    args = SimpleNamespace(steps=steps, eval_every=every, eval_dense_until=dense_until, eval_dense_every=dense_every)
    return [s for s in range(steps) if is_eval_step(s, args)]


def test_evaluation_schedule_is_dense_early_then_every_n_and_the_last_step():
    steps = _schedule(300, 10, dense_until=20, dense_every=2)
    assert steps == [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20] + list(range(30, 300, 10)) + [299]
    assert len(steps) == 39


def test_evaluation_schedule_without_a_dense_start_is_the_old_one():
    assert _schedule(25, 10) == [0, 10, 20, 24]
    assert _schedule(20, 10, dense_until=0) == [0, 10, 19]


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


# Each named design, warmed up as its runs were (600 or 1000 supervised steps: about 1.5
# and 2.5 minutes on 1-2 CPU threads), measured on seed 0's first step-0 batches.
STEP0_BOUNDS = {
    # loop-gap: measured 0.415 greedy (200 prompts), wrong/right 2.33, std/mean 0.63, right 6.6, wrong 15.4
    "loop-gap": dict(accuracy=(0.30, 0.55), wrong_over_right=(2.0, 3.0), std_over_mean=(0.45, 0.80),
                     len_right=(5.5, 8.0), len_wrong=(12.0, 20.0)),
    # spread-room: measured 0.435 greedy, wrong/right 1.48, std/mean 0.51, right 11.7, wrong 17.3
    "spread-room": dict(accuracy=(0.33, 0.55), wrong_over_right=(1.2, 1.8), std_over_mean=(0.42, 0.62),
                        len_right=(9.0, 14.0), len_wrong=(14.0, 21.0)),
    # tilde-gap (design 1's control): measured 0.530 greedy, wrong/right 2.87, std/mean 0.61, right 6.4, wrong 18.5
    "tilde-gap": dict(accuracy=(0.42, 0.65), wrong_over_right=(2.3, 3.5), std_over_mean=(0.45, 0.80),
                      len_right=(5.5, 8.0), len_wrong=(15.0, 22.0)),
}


# One warm-up per process, one thread each, two processes at a time: on two cores that
# trains the three warm-ups (2,200 steps) about 1.7x faster than one after another.
WARM_UP = ("import sys, torch; torch.set_num_threads(1); from analysis import toy_consequences as tc; "
           "from plumbing import lm_setup; a = tc.design_args(sys.argv[1]); "
           "lm_setup.load_or_warmup_toy(sys.argv[2], lm_setup.toy_world(a), a.warmup_steps, a.warmup_seed, log=print)")


@pytest.fixture(scope="module")
def designs_warmed_up(cache_dir):
    def chain(names):                                                # one process after another
        return " && ".join(f"{sys.executable} -c {shlex.quote(WARM_UP)} {name} {shlex.quote(cache_dir)}" for name in names)
    streams = [subprocess.Popen(["bash", "-c", chain(names)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True) for names in (["spread-room"], ["loop-gap", "tilde-gap"])]   # 1000 | 600 + 600
    for stream in streams:
        output, _ = stream.communicate(timeout=900)
        assert stream.returncode == 0, output
    return cache_dir


@pytest.mark.parametrize("name", sorted(STEP0_BOUNDS))
def test_named_design_step0_statistics_on_seed_0_lie_within_bounds(name, designs_warmed_up):
    cache_dir = designs_warmed_up
    torch.set_num_threads(2)
    stats = tc.step0_statistics(name, cache_dir, seed=0, batches=4, eval_prompts=200)
    for key, (low, high) in STEP0_BOUNDS[name].items():
        assert low <= stats[key] <= high, f"{name}: step-0 {key} = {stats[key]:.3f} outside [{low}, {high}]"


def test_named_designs_are_the_pre_registered_settings():
    loop = tc.design_args("loop-gap")
    assert (loop.slip_style, loop.gap_size, loop.warmup_steps, loop.lr, loop.steps) == ("loop", 18, 600, 1e-4, 300)
    assert tc.DESIGNS["loop-gap"]["seeds"] == (0, 1, 2, 3, 4)
    assert _schedule(loop.steps, loop.eval_every, loop.eval_dense_until, loop.eval_dense_every)[:3] == [0, 2, 4]
    spread = tc.design_args("spread-room")
    assert (spread.slip_style, spread.gap_size, spread.spread_size, spread.warmup_steps) == ("ramble", 18, 8, 1000)
    assert tc.DESIGNS["spread-room"]["seeds"] == (5, 6, 7, 8, 9)
