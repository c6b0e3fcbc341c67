"""The course's toy designs: a world, a warm-up, settings that `--design NAME` makes the defaults
(a typed flag wins). grpo_ba_lab/designs.py adds the lab's registered ones (docs/toy-designs.md)."""
from __future__ import annotations

import dataclasses
import os

from toy_tasks.arithmetic import ToyWorld

OWN_WARMUP = dict(warmup_seed=-1)          # each seed its own warm-up
BAND = (0.45, 0.60)                        # the band of step-0 greedy accuracy a warm-up stops in
# strong-band's world (registrations/strong-band-v3.md), the demo's: a slip rambles 30 tokens
# (23-37), forced on half of the responses (the pilot of docs/strong-coupling.md).
STRONG_WORLD = dict(regime="gap", slip_style="ramble", gap_size=30, spread_size=0, force_frac=0.5,
                    max_new_tokens=48, warmup_steps=1000)

DESIGNS = {
    # The demo: one seed of strong-band's world from a shipped warm-up (the same start on every
    # machine). Teaching only, it claims nothing: strong-band compares its rules, paired.
    "demo": dict(flags=dict(**STRONG_WORLD, lr=1e-4, steps=30, eval_every=10, eval_prompts=729,
                            **OWN_WARMUP, warmup_band_low=BAND[0], warmup_band_high=BAND[1]),
                 seeds={"native-2t": (22,)}, teaching=True, compare="strong-band",
                 # seed -> sha256 of warmup_path(design, seed), by `python -m grpo_ba_lab.
                 # shipped_warmups demo 22` (2-core AMD EPYC, AVX-512, torch 2.13.0+cpu); why 22,
                 # chosen after seed 21's runs: docs/toy-designs.md, "The demo since 2026-12-02"
                 shipped={22: "672e131dd2b4a852f13ecbc8ae703864b9a1d193658b144f9b838a409c48405c"},
                 shipped_steps={22: 470},      # trained: its band stopped it (warmups/README.md)
                 seed_choice=": token's mean share on right answers (row 1) at most 0.40 (seed 20 "
                             "failed to repeat; seed 21's was 0.484, token ahead; its step-0 wrong/"
                             "right length ratio 1.17, so this run's ratio is one warm-up's, not "
                             "the world's)",
                 # step 0 (toy_consequences.step0_statistics: 4 batches, all 729 held-out), on
                 # every machine variant; the pages quote the story's first batch (2.67) instead
                 step0=dict(accuracy=0.4554183813443073, wrong_over_right=2.4893524777881146,
                            std_over_mean=0.5347280293650207, len_right=11.357142448425293,
                            len_wrong=28.271930694580078, reward=0.109375)),
    # Teaching, no claim: the coupling flipped. A forced right answer and re-check (`63 66?`)
    # makes right answers the long ones: token's share rises above 1/2 (docs/lab-session.md).
    "long-right": dict(flags=dict(regime="gap", gap_sign="right-long", gap_size=18, force_frac=0.3,
                                  warmup_steps=600, lr=1e-4, steps=30, eval_every=10,
                                  eval_prompts=200, **OWN_WARMUP),
                       seeds={"native-2t": (80,)}, teaching=True),
}
NO_DESIGN = "plain"          # the flags' own defaults (the toy before the designs)
AUTO = "auto"                # the demo runs `demo`; everything else runs `plain`
DEMO = "demo"
# The shipped warm-ups (README.md), and the directory that holds grpo_ba_lab/.
WARMUPS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "warmups")
REPO = os.path.dirname(os.path.dirname(WARMUPS))
# Warm-up steps by regime where a design sets none: greedy held-out accuracy 0.5-0.6 at step 0.
WARMUP_STEPS = {"gap": 600, "variance": 1000}


def design_flags(name: str) -> dict:
    """The flags a design sets ({} for `plain`, and for `auto` outside a command line)."""
    if name in (NO_DESIGN, AUTO):
        return {}
    if name not in DESIGNS:
        raise ValueError(f"unknown design {name!r}; "
                         f"choose from {', '.join((NO_DESIGN, *DESIGNS))}")
    first_seed = next(iter(DESIGNS[name]["seeds"].values()))[0]      # one seed runs by default
    return {**DESIGNS[name]["flags"], "seed": first_seed}


def world(name: str) -> ToyWorld:
    """The toy world a design trains in (`plain`: ToyWorld's own defaults)."""
    knobs = {f.name for f in dataclasses.fields(ToyWorld)}
    return ToyWorld(**{k: v for k, v in design_flags(name).items() if k in knobs})


def warmup_steps(name: str) -> int:
    """The supervised warm-up's length: the design's, or its regime's default."""
    return design_flags(name).get("warmup_steps") or WARMUP_STEPS[world(name).regime]


def warmup_seed(name: str, seed: int) -> int:
    """The warm-up's seed for RL seed `seed`: its own (OWN_WARMUP), or one shared (0: `plain`)."""
    chosen = design_flags(name).get("warmup_seed", 0)
    return seed if chosen < 0 else chosen


def dense_eval(name: str) -> tuple[int, int]:
    """(until, every): evaluate every `every` steps to step `until` ((0, 1): none): early splits."""
    flags = design_flags(name)
    return flags.get("eval_dense_until", 0), flags.get("eval_dense_every", 1)


def course_designs() -> tuple:
    """The designs `python grpo_ba.py --design` offers: those the course alone can train."""
    return tuple(name for name, d in DESIGNS.items() if not d.get("lab"))


def warmup_path(name: str, seed: int) -> str:
    """Where the warm-up shipped for (design, seed) lies, or is written when made."""
    return os.path.join(WARMUPS, f"{name}-s{seed}.safetensors")


def shipped_warmup(name: str, seed: int) -> tuple[str, str] | None:
    """(absolute path, sha256) of the warm-up shipped for (design, seed), or None."""
    sha256 = DESIGNS.get(name, {}).get("shipped", {}).get(seed)
    return (warmup_path(name, seed), sha256) if sha256 else None
