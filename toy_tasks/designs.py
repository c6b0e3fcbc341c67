"""The toy designs of docs/toy-designs.md: each a world, a warm-up, settings and seeds, written
down before its runs (registrations/), then run on its seeds under all three rules. `--design
NAME` makes its settings the defaults (a flag typed on the command line still wins):

    python grpo_ba.py                                   # the demo: design `demo`, one seed
    python grpo_ba.py --design loop-gap                 # three rules, 300 steps, one seed
    python -m grpo_ba_lab.analysis.sweep --design loop-gap     # its seeds x three rules, paired

Version 2 (this file): every seed draws its own warm-up (`warmup_seed=-1`); the seeds are
split over two machine VARIANTS that change the floating-point path (below); the demo's first
seed starts from a warm-up shipped in toy_tasks/warmups/ (checked by hash), so its step 0 is
the same on the CPUs and variants checked (docs/toy-designs.md lists them, and version 1).
"""
from __future__ import annotations

import dataclasses
import os

from toy_tasks.arithmetic import ToyWorld

VERSION = 2

# The machine variants of a design's seeds. cpu_capability is ATEN_CPU_CAPABILITY ('' =
# unset: the CPU's best kernels, AVX2 or AVX-512); it must be set before torch loads, so
# `python -m grpo_ba_lab.analysis.sweep --design NAME` runs each seed in a process of its own.
VARIANTS = {"native-2t": dict(cpu_capability="", threads=2),
            "default-1t": dict(cpu_capability="default", threads=1),
            # version 3's pair: one thread each, so a 2-core CPU runs both variants side by side
            "native-1t": dict(cpu_capability="", threads=1)}

# Shared by the 300-step designs: lr, length and the evaluation schedule (all 729
# held-out prompts at step 0, every 2 steps to 20, every 10 after, and after the last update).
LONG_RUN = dict(lr=1e-4, steps=300, eval_every=10, eval_dense_until=20, eval_dense_every=2,
                eval_prompts=729)
SPREAD_ROOM = dict(regime="gap", slip_style="ramble", gap_size=18, spread_size=8, force_frac=0.3,
                   warmup_steps=1000)
OWN_WARMUP = dict(warmup_seed=-1)          # each seed its own warm-up
BAND = (0.45, 0.60)                        # demo-band's step-0 greedy accuracy
BAND_SEEDS = tuple(range(60, 76))         # 16 seeds, each on both BAND_VARIANTS
BAND_VARIANTS = ("native-1t", "default-1t")
# strong-band (registrations/strong-band-v3.md): wrong answers several times as long as right
# ones: a slip rambles 30 tokens (23-37) and the environment forces half of the responses into
# one (chosen by the exploratory pilot of docs/strong-coupling.md, seeds 1100-1101); its own
# seeds, never reused.
STRONG_WORLD = dict(regime="gap", slip_style="ramble", gap_size=30, spread_size=0, force_frac=0.5,
                    max_new_tokens=48, warmup_steps=1000)
STRONG_SEEDS = tuple(range(1200, 1224))   # 24 seeds, each on both BAND_VARIANTS, run in this order


def _seeds(first: int) -> dict:
    """Six seeds from `first`: three per machine variant."""
    return {"native-2t": (first, first + 1, first + 2),
            "default-1t": (first + 3, first + 4, first + 5)}


DESIGNS = {
    "loop-gap": dict(flags=dict(regime="gap", slip_style="loop", gap_size=18, force_frac=0.3,
                                warmup_steps=600, **LONG_RUN, **OWN_WARMUP),
                     seeds=_seeds(30)),
    "spread-room": dict(flags=dict(**SPREAD_ROOM, **LONG_RUN, **OWN_WARMUP), seeds=_seeds(40)),
    "tilde-gap": dict(flags=dict(regime="gap", slip_style="ramble", gap_size=18, force_frac=0.3,
                                 warmup_steps=600, **LONG_RUN, **OWN_WARMUP),
                      seeds=_seeds(50)),      # loop-gap's control: the same with `~` rambles
    # The demo: one seed of strong-band's world, 30 steps and band, from a warm-up shipped in
    # the repository, so that `python grpo_ba.py` starts from the same policy on every machine.
    # A teaching design: it claims nothing; its rules are compared paired by strong-band.
    # Held-out accuracy every 10 steps, not 5: the same final numbers (each step reseeds from
    # (seed, step)) in under a minute on a 2-core CPU.
    "demo": dict(flags=dict(**STRONG_WORLD, lr=1e-4, steps=30, eval_every=10, eval_prompts=729,
                            **OWN_WARMUP, warmup_band_low=BAND[0], warmup_band_high=BAND[1]),
                 seeds={"native-2t": (20,)}, teaching=True, compare="strong-band",
                 # seed -> sha256 of warmup_path(design, seed), made by `python -m
                 # grpo_ba_lab.shipped_warmups demo 20` (the band warm-up: 2-core AMD EPYC,
                 # AVX-512, torch 2.13.0+cpu)
                 shipped={20: "dada759947ca26ef44734f6a64250a8ae278a3f2f716de178de9b733bf35bf6c"},
                 # its step-0 statistics (toy_consequences.step0_statistics: 4 batches of P * G
                 # samples, greedy accuracy on all 729 held-out prompts), the same on every
                 # machine variant (tests/lab/test_designs.py)
                 step0=dict(accuracy=0.45267489711934156, wrong_over_right=3.394633461583782,
                            std_over_mean=0.6689729994165161, len_right=7.445945739746094,
                            len_wrong=25.276256561279297, reward=0.14453125)),
    # The demo as version 2 registered it (registrations/demo-v2.md, where it is named `demo`):
    # the weak-coupling world, its shipped warm-up for seed 20. Lab only since the demo moved to
    # the strong world (docs/toy-designs.md).
    "demo-v2": dict(flags=dict(**SPREAD_ROOM, lr=1e-4, steps=30, eval_every=5, eval_dense_until=10,
                            eval_dense_every=2, eval_prompts=729, **OWN_WARMUP),
                 seeds=_seeds(20),
                 # seed -> sha256 of warmup_path(design, seed), made on a 2-core Intel Xeon
                 # (AVX-512, torch 2.13.0+cpu) by the plain warm-up (grpo_ba_lab/shipped_warmups.py)
                 shipped={20: "f6b247e1a3fd800eea5b4bd2fa25f2b6474dfb04b009d1305e83c599f3b5fda2"},
                 # its step-0 statistics (toy_consequences.step0_statistics: 4 batches of P * G
                 # samples, greedy accuracy on all 729 held-out prompts), the same on every
                 # machine variant (tests/lab/test_designs.py)
                 step0=dict(accuracy=0.6241426611796982, wrong_over_right=1.5030026936399343,
                            std_over_mean=0.5008176512866948, len_right=11.3125,
                            len_wrong=17.002717971801758, reward=0.28125),
                 lab=True),
    # Version 3 (registrations/demo-band-v3.md): the demo's world and 30 steps from warm-ups
    # stopped inside a band of step-0 greedy accuracy (the lab's band warm-up), every seed on
    # both machine variants (crossed). Lab only: the course trains no band warm-up.
    "demo-band": dict(flags=dict(**SPREAD_ROOM, lr=1e-4, steps=30, eval_every=5,
                                 eval_dense_until=10, eval_dense_every=2, eval_prompts=729,
                                 **OWN_WARMUP, warmup_band_low=BAND[0], warmup_band_high=BAND[1]),
                      seeds={variant: BAND_SEEDS for variant in BAND_VARIANTS}, version=3,
                      lab=True),
    # Strong sign-length coupling (registrations/strong-band-v3.md): the same band, variants and
    # 30 steps as demo-band in a world whose wrong answers stay long. Lab only.
    "strong-band": dict(flags=dict(**STRONG_WORLD, lr=1e-4, steps=30, eval_every=5,
                                   eval_prompts=729, **OWN_WARMUP,
                                   warmup_band_low=BAND[0], warmup_band_high=BAND[1]),
                        seeds={variant: STRONG_SEEDS for variant in BAND_VARIANTS}, version=3,
                        lab=True),
    # A teaching design, not an experiment (no registration, no claim): the sign-length
    # coupling flipped. The environment forces a right answer and a re-check mark (`63 66?`),
    # after which the policy rambles, so right answers are the long ones and token's weight
    # share on right answers rises above 1/2 (docs/lab-session.md, the predict-then-run step).
    "long-right": dict(flags=dict(regime="gap", gap_sign="right-long", gap_size=18, force_frac=0.3,
                                  warmup_steps=600, lr=1e-4, steps=30, eval_every=10,
                                  eval_prompts=200, **OWN_WARMUP),
                       seeds={"native-2t": (80,)}, teaching=True),
}
for _d in DESIGNS.values():                # one seed runs by default: the design's first
    _d["flags"]["seed"] = next(iter(_d["seeds"].values()))[0]
NO_DESIGN = "plain"          # the flags' own defaults (the toy before the designs)
AUTO = "auto"                # the demo runs `demo`; everything else runs `plain`
DEMO = "demo"
# The shipped warm-ups (README.md), and the directory that holds grpo_ba_lab/.
WARMUPS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "warmups")
REPO = os.path.dirname(os.path.dirname(WARMUPS))


# Supervised warm-up steps by regime, for a world whose design does not set them: greedy
# held-out accuracy 0.5-0.6 at step 0.
WARMUP_STEPS = {"gap": 600, "variance": 1000}


def design_flags(name: str) -> dict:
    """The flags a design sets ({} for `plain`, and for `auto` outside a command line)."""
    if name in (NO_DESIGN, AUTO):
        return {}
    if name not in DESIGNS:
        raise ValueError(f"unknown design {name!r}; "
                         f"choose from {', '.join((NO_DESIGN, *DESIGNS))}")
    return dict(DESIGNS[name]["flags"])


def world(name: str) -> ToyWorld:
    """The toy world a design trains in (`plain`: ToyWorld's own defaults)."""
    knobs = {f.name for f in dataclasses.fields(ToyWorld)}
    return ToyWorld(**{k: v for k, v in design_flags(name).items() if k in knobs})


def warmup_steps(name: str) -> int:
    """The supervised warm-up's length: the design's, or its regime's default."""
    return design_flags(name).get("warmup_steps") or WARMUP_STEPS[world(name).regime]


def warmup_seed(name: str, seed: int) -> int:
    """The warm-up's seed for RL seed `seed`: each seed its own (version 2's designs), or 0
    (one shared warm-up, `plain`)."""
    chosen = design_flags(name).get("warmup_seed", 0)
    return seed if chosen < 0 else chosen


def dense_eval(name: str) -> tuple[int, int]:
    """(until, every): the design's early evaluations, every `every` steps up to step `until`
    ((0, 1): none), so that rules which separate early are seen."""
    flags = design_flags(name)
    return flags.get("eval_dense_until", 0), flags.get("eval_dense_every", 1)


def course_designs() -> tuple:
    """The designs `python grpo_ba.py --design` offers: those the course alone can train."""
    return tuple(name for name, d in DESIGNS.items() if not d.get("lab"))


def registered_seeds(name: str) -> list[tuple[int, str]]:
    """[(seed, variant)] of a design, in the order the lab's sweep runs them."""
    return [(seed, variant) for variant, seeds in DESIGNS[name]["seeds"].items() for seed in seeds]


def variant_of(name: str, seed: int) -> str:
    """The machine variant a design registered `seed` under ('' if not registered)."""
    return next((v for s, v in registered_seeds(name) if s == seed), "")


def warmup_path(name: str, seed: int) -> str:
    """Where the warm-up shipped for (design, seed) lies, or is written when made."""
    return os.path.join(WARMUPS, f"{name}-s{seed}.safetensors")


def shipped_warmup(name: str, seed: int) -> tuple[str, str] | None:
    """(absolute path, sha256) of the warm-up shipped for (design, seed), or None."""
    sha256 = DESIGNS.get(name, {}).get("shipped", {}).get(seed)
    return (warmup_path(name, seed), sha256) if sha256 else None
