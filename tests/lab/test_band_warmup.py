"""The band warm-up (grpo_ba_lab/plumbing/band_warmup.py): a design's regime is a band of
step-0 greedy accuracy; a warm-up stops inside it, or is redrawn by the registered rule."""
from types import SimpleNamespace

import pytest

from grpo_ba_lab.lab_args import parse_args
from grpo_ba_lab.plumbing import band_warmup as bw
from grpo_ba_lab.plumbing import lm_setup
from grpo_ba_support.run import SetupError
from toy_tasks import ToyWorld

BAND = (0.45, 0.60)


@pytest.mark.parametrize("checks, outcome", [
    ([(10, 0.1), (20, 0.47)], "in band"),
    ([(10, 0.1), (20, 0.6)], "in band"),               # both ends belong to the band
    ([(10, 0.1), (20, 0.72)], "jumped over"),
    ([(10, 0.1), (20, 0.3)], "ended below"),
    ([], "ended below")])
def test_a_draws_checks_say_in_band_jumped_over_or_ended_below(checks, outcome):
    assert bw.band_outcome(checks, BAND) == outcome


def _scripted(*draws):
    """accuracy_of returning each draw's accuracies in turn (one per check), then 0."""
    values = [a for draw in draws for a in draw]
    calls = []

    def accuracy_of(model):
        calls.append(model.training)
        return values[len(calls) - 1] if len(calls) <= len(values) else 0.0
    return accuracy_of, calls


def _args(tmp_path):
    return SimpleNamespace(warmup_band_low=BAND[0], warmup_band_high=BAND[1],
                           cache_dir=str(tmp_path), eval_prompts=729)


@pytest.mark.slow                  # trains two small warm-ups
def test_a_warmup_that_jumps_over_the_band_is_redrawn_and_the_next_stops_inside(tmp_path):
    accuracy_of, calls = _scripted([0.1, 0.3, 0.7], [0.2, 0.5])
    _, _, record = bw.band_warmup(_args(tmp_path), ToyWorld("gap"), 60, 7, accuracy_of, lambda *a: None)
    assert [(d["seed"], d["outcome"], d["steps"], d["accuracy"]) for d in record["draws"]] == [
        (7, "jumped over", 30, 0.7), (1007, "in band", 20, 0.5)]
    assert record["source"] == "trained" and record["band"] == list(BAND)
    assert calls == [False] * 5                              # checked in eval mode, every 10 steps
    # the next run of the same unit loads it: no warm-up, no check
    again, calls = _scripted([0.99])
    _, _, cached = bw.band_warmup(_args(tmp_path), ToyWorld("gap"), 60, 7, again, lambda *a: None)
    assert cached["source"] == "cache" and cached["sha256"] == record["sha256"] and calls == []


@pytest.mark.slow                  # trains five
def test_a_warmup_that_never_reaches_the_band_is_redrawn_then_refused(tmp_path):
    accuracy_of, calls = _scripted()                          # always 0.0: ends below, 5 times
    with pytest.raises(SetupError, match=r"no warm-up of seed 3 entered the band \[0.45, 0.6\] in 5 draws"):
        bw.band_warmup(_args(tmp_path), ToyWorld("gap"), 20, 3, accuracy_of, lambda *a: None)
    assert len(calls) == 5 * 2                                # 20 steps: 2 checks a draw


def test_the_band_is_part_of_the_warmup_cache_key():
    world = ToyWorld("gap")
    key = bw.band_cache_dir("/c", world, 1000, 60, BAND, 729)
    assert key != bw.band_cache_dir("/c", world, 1000, 60, (0.5, 0.6), 729)
    assert key != bw.band_cache_dir("/c", world, 1000, 61, BAND, 729)
    assert key != bw.band_cache_dir("/c", world, 1000, 60, BAND, 243)


def test_a_band_design_needs_a_score_and_sane_bounds():
    args = parse_args(["--design", "demo-band", "--aggregator", "token"])
    assert (args.warmup_band_low, args.warmup_band_high, args.warmup_seed) == (0.45, 0.60, -1)
    with pytest.raises(SetupError, match="a band warm-up needs a score"):
        lm_setup.toy_warmup(args, lambda *a: None)
    from grpo_ba_support.args import UsageError
    from grpo_ba_lab.lab_args import check_args
    with pytest.raises(UsageError, match="band needs 0 <= --warmup-band-low <= --warmup-band-high"):
        check_args(parse_args(["--warmup-band-low", "0.7", "--warmup-band-high", "0.6"]))


def test_the_course_does_not_offer_the_lab_only_band_design():
    from grpo_ba_support.args import CHOICES
    assert "demo-band" not in CHOICES["design"] and "demo" in CHOICES["design"]
