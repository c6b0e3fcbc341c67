"""grpo_ba_lab/plumbing/band_warmup.py -- a warm-up that stops inside a registered band.

A design's regime is a band of step-0 greedy held-out accuracy, not a seed: the warm-up is
checked every CHECK_EVERY steps (greedy accuracy on the run's --eval-prompts held-out
prompts, the very number the run logs at step 0) and stops at the first check inside
[LOW, HIGH]. A warm-up that jumps over the band, or reaches its last step below it, is
redrawn with the next warm-up seed (seed + REDRAW_STRIDE * draw), at most MAX_DRAWS draws;
the RL seed (prompts, sampling) stays the run's own. The rule is registered with the design
(registrations/demo-band-v3.md) before any of its warm-ups is trained.

    python -m grpo_ba_lab.train --design demo-band --seed 60     # warm-up in the band, then RL
"""
from __future__ import annotations

import hashlib
import json
import os

from grpo_ba_support.run import SetupError
from toy_tasks.model import cached_warmup, store_warmup, warmup_cache_dir, warmup_toy_model

CHECK_EVERY = 10          # warm-up steps between two checks of greedy held-out accuracy
REDRAW_STRIDE = 1000      # draw k trains with warm-up seed `seed + 1000 k`
MAX_DRAWS = 5


def in_band(accuracy: float, band: tuple[float, float]) -> bool:
    return band[0] <= accuracy <= band[1]


def band_outcome(checks: list[tuple[int, float]], band: tuple[float, float]) -> str:
    """What a draw's checks [(step, accuracy)] say: 'in band' (its last check is inside),
    'jumped over' (it went from below LOW to above HIGH between two checks) or 'ended below'."""
    if not checks:
        return "ended below"
    accuracy = checks[-1][1]
    if in_band(accuracy, band):
        return "in band"
    return "jumped over" if accuracy > band[1] else "ended below"


def band_cache_dir(cache_dir: str, world, steps: int, seed: int, band, eval_prompts: int) -> str:
    """The cached band warm-up for (world, steps, seed, band): the plain warm-up's key (its
    floating-point path included) plus the band and the prompts that check it."""
    base = warmup_cache_dir(cache_dir, world, steps, seed)
    extra = json.dumps({"band": list(band), "check_every": CHECK_EVERY, "eval_prompts": eval_prompts,
                        "redraw": [REDRAW_STRIDE, MAX_DRAWS]}, sort_keys=True)
    return base + "-band" + hashlib.sha1(extra.encode()).hexdigest()[:8]


def band_warmup(args, world, steps: int, seed: int, accuracy_of, log=print):
    """(policy, tokenizer, record): the first draw whose warm-up stops inside the band
    (args.warmup_band_low, args.warmup_band_high), from the cache or trained now.
    `accuracy_of(model)` -> greedy held-out accuracy. A SetupError when MAX_DRAWS draws miss."""
    band = (args.warmup_band_low, args.warmup_band_high)
    path = band_cache_dir(args.cache_dir, world, steps, seed, band, args.eval_prompts)
    if os.path.exists(os.path.join(path, "warmup.json")):
        log(f"warm-up: loading the cached in-band policy from {path}")
        return cached_warmup(path, "cache")
    draws = []
    for draw in range(MAX_DRAWS):
        draw_seed = seed + REDRAW_STRIDE * draw
        checks = []

        def stop(step, model):
            if (step + 1) % CHECK_EVERY:
                return False
            model.eval()
            checks.append((step + 1, accuracy_of(model)))
            model.train()
            return checks[-1][1] >= band[0]          # in the band, or above it: stop and see

        log(f"warm-up: draw {draw + 1} (seed {draw_seed}) until greedy accuracy enters "
            f"[{band[0]}, {band[1]}], checked every {CHECK_EVERY} steps, at most {steps} steps")
        model, tokenizer, seconds = warmup_toy_model(world, steps, draw_seed, log=log, stop=stop)
        outcome = band_outcome(checks, band)
        draws.append({"seed": draw_seed, "outcome": outcome, "steps": checks[-1][0] if checks else 0,
                      "accuracy": checks[-1][1] if checks else None, "seconds": seconds})
        log(f"warm-up: draw {draw + 1} {outcome} at step {draws[-1]['steps']} "
            f"(greedy accuracy {draws[-1]['accuracy']})")
        if outcome == "in band":
            break
    else:
        raise SetupError(f"no warm-up of seed {seed} entered the band [{band[0]}, {band[1]}] in "
                         f"{MAX_DRAWS} draws: {draws}")
    return store_warmup(model, path, {"world": vars(world), "steps": steps, "seed": seed,
                                      "band": list(band), "draws": draws})
