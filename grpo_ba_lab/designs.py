"""grpo_ba_lab/designs.py -- the registered toy designs (docs/toy-designs.md): each a world, a
warm-up, settings and seeds, written down before its runs (registrations/), then run on its
seeds under all three rules, every seed on its machine variants. Importing the lab adds them to
the course's toy_tasks.designs.DESIGNS (grpo_ba_lab/__init__.py does), so that

    python -m grpo_ba_lab.train --design loop-gap            # three rules, 300 steps, one seed
    python -m grpo_ba_lab.analysis.sweep --design loop-gap   # its seeds x three rules, paired

Version 2: every seed draws its own warm-up (`warmup_seed=-1`); the seeds are split over two
machine VARIANTS that change the floating-point path. Version 3: warm-ups stopped inside a
band, every seed on both variants (crossed).
"""
from __future__ import annotations

from toy_tasks.designs import (AUTO, BAND, DEMO, DESIGNS, NO_DESIGN, OWN_WARMUP, REPO,  # noqa: F401
                               STRONG_WORLD, WARMUP_STEPS, WARMUPS, course_designs, dense_eval,
                               design_flags, shipped_warmup, warmup_path, warmup_seed, warmup_steps,
                               world)

VERSION = 2

# The machine variants of a design's seeds. cpu_capability is ATEN_CPU_CAPABILITY ('' =
# unset: the CPU's best kernels, AVX2 or AVX-512); it must be set before torch loads, so
# `python -m grpo_ba_lab.analysis.sweep --design NAME` runs each seed in a process of its own.
VARIANTS = {"native-2t": dict(cpu_capability="", threads=2),
            "default-1t": dict(cpu_capability="default", threads=1),
            # version 3's pair: one thread each, so a 2-core CPU runs both variants side by side
            "native-1t": dict(cpu_capability="", threads=1),
            # regime-v4's pinned path: AVX2 kernels on any x86 CPU that has them, so a design run
            # over several sessions on machines with AVX2 or AVX-512 keeps one path
            "avx2-1t": dict(cpu_capability="avx2", threads=1)}

# Shared by the 300-step designs: lr, length and the evaluation schedule (all 729
# held-out prompts at step 0, every 2 steps to 20, every 10 after, and after the last update).
LONG_RUN = dict(lr=1e-4, steps=300, eval_every=10, eval_dense_until=20, eval_dense_every=2,
                eval_prompts=729)
SPREAD_ROOM = dict(regime="gap", slip_style="ramble", gap_size=18, spread_size=8, force_frac=0.3,
                   warmup_steps=1000)
BAND_SEEDS = tuple(range(60, 76))         # 16 seeds, each on both BAND_VARIANTS
BAND_VARIANTS = ("native-1t", "default-1t")
STRONG_SEEDS = tuple(range(1200, 1224))   # 24 seeds, each on both BAND_VARIANTS, run in this order
# The regime design (planned): its levels (name -> design), the gap of each, its seeds in run order
REGIME_LEVELS = {"none": "regime-none", "weak": "regime-weak", "strong": "regime-strong"}
REGIME_GAPS = {"none": 0, "weak": 6, "strong": 30}
REGIME_SEEDS = tuple(range(1400, 1424))
REGIME_VARIANTS = BAND_VARIANTS
# The long-horizon design (registrations/endless-band-v3.md): chosen by the exploratory
# long-horizon probe (grpo_ba_lab/analysis/long_horizon.py), its seeds in run order
ENDLESS_SEEDS = tuple(range(1700, 1724))


def _seeds(first: int) -> dict:
    """Six seeds from `first`: three per machine variant."""
    return {"native-2t": (first, first + 1, first + 2),
            "default-1t": (first + 3, first + 4, first + 5)}


LAB_DESIGNS = {
    "loop-gap": dict(flags=dict(regime="gap", slip_style="loop", gap_size=18, force_frac=0.3,
                                warmup_steps=600, **LONG_RUN, **OWN_WARMUP),
                     seeds=_seeds(30)),
    "spread-room": dict(flags=dict(**SPREAD_ROOM, **LONG_RUN, **OWN_WARMUP), seeds=_seeds(40)),
    "tilde-gap": dict(flags=dict(regime="gap", slip_style="ramble", gap_size=18, force_frac=0.3,
                                 warmup_steps=600, **LONG_RUN, **OWN_WARMUP),
                      seeds=_seeds(50)),      # loop-gap's control: the same with `~` rambles
    # The demo as version 2 registered it (registrations/demo-v2.md, where it is named `demo`):
    # the weak-coupling world, its shipped warm-up for seed 20; renamed when the demo moved to
    # the strong world (docs/toy-designs.md).
    "demo-v2": dict(flags=dict(**SPREAD_ROOM, lr=1e-4, steps=30, eval_every=5, eval_dense_until=10,
                               eval_dense_every=2, eval_prompts=729, **OWN_WARMUP),
                    seeds=_seeds(20),
                    # seed -> sha256 of warmup_path(design, seed): the plain warm-up, made on a
                    # 2-core Intel Xeon (AVX-512, torch 2.13.0+cpu)
                    shipped={20: "f6b247e1a3fd800eea5b4bd2fa25f2b6474dfb04b009d1305e83c599f3b5fda2"},
                    # its step-0 statistics (toy_consequences.step0_statistics: 4 batches of P * G
                    # samples, greedy accuracy on all 729 held-out prompts), the same on every
                    # machine variant (tests/lab/test_designs.py)
                    step0=dict(accuracy=0.6241426611796982, wrong_over_right=1.5030026936399343,
                               std_over_mean=0.5008176512866948, len_right=11.3125,
                               len_wrong=17.002717971801758, reward=0.28125)),
    # Version 3 (registrations/demo-band-v3.md): version 2's demo world and 30 steps from warm-ups
    # stopped inside a band of step-0 greedy accuracy (the lab's band warm-up), every seed on
    # both machine variants (crossed).
    "demo-band": dict(flags=dict(**SPREAD_ROOM, lr=1e-4, steps=30, eval_every=5,
                                 eval_dense_until=10, eval_dense_every=2, eval_prompts=729,
                                 **OWN_WARMUP, warmup_band_low=BAND[0], warmup_band_high=BAND[1]),
                      seeds={variant: BAND_SEEDS for variant in BAND_VARIANTS}, version=3),
    # Strong sign-length coupling (registrations/strong-band-v3.md): the same band, variants and
    # 30 steps as demo-band in a world whose wrong answers stay long.
    "strong-band": dict(flags=dict(**STRONG_WORLD, lr=1e-4, steps=30, eval_every=5,
                                   eval_prompts=729, **OWN_WARMUP,
                                   warmup_band_low=BAND[0], warmup_band_high=BAND[1]),
                        seeds={variant: STRONG_SEEDS for variant in BAND_VARIANTS}, version=3),
    # The stability claim at a long horizon (registrations/endless-band-v3.md): strong-band's
    # world, band and lr for 200 steps, evaluated every 10, and half of the warm-up corpus's
    # slips never end (the probe's strong-endless setting, where its move-on rule was met).
    "endless-band": dict(flags=dict(**STRONG_WORLD, lr=1e-4, steps=200, eval_every=10,
                                    eval_prompts=729, endless_slips=0.5, **OWN_WARMUP,
                                    warmup_band_low=BAND[0], warmup_band_high=BAND[1]),
                         seeds={variant: ENDLESS_SEEDS for variant in BAND_VARIANTS}, version=3),
}
for _d in LAB_DESIGNS.values():            # the course offers none of them
    _d["lab"] = True
DESIGNS.update(LAB_DESIGNS)

# The regime design's levels (docs/regime-design.md): strong-band's world and run with held-out
# evaluations every 10 steps, at three levels of the length gap chosen by the exploratory pilot
# (grpo_ba_lab/analysis/regime_pilot.py, round 2), the same seeds at every level on both
# variants. Registered (registrations/regime-v3.md) by the commit that adds them to DESIGNS,
# before any of their runs.
REGIME_DESIGNS = {REGIME_LEVELS[level]: dict(flags=dict(**{**STRONG_WORLD, "gap_size": gap}, lr=1e-4,
                                                        steps=30, eval_every=10, eval_prompts=729,
                                                        **OWN_WARMUP, warmup_band_low=BAND[0],
                                                        warmup_band_high=BAND[1]),
                                             seeds={variant: REGIME_SEEDS for variant in REGIME_VARIANTS},
                                             version=3, lab=True)
                  for level, gap in REGIME_GAPS.items()}
DESIGNS.update(REGIME_DESIGNS)                # registered: registrations/regime-v3.md

# The confirmatory regime design (registrations/regime-v4.md): regime-v3's weak and strong
# levels unchanged (the same flags, band and warm-up rule), fresh seeds, token and sequence
# only (the primary's four units), n from the power for an interaction of 0.03 on each path.
# Registered by the commit that adds them to DESIGNS, before any of their runs.
REGIME_V4_LEVELS = {"weak": "regime-v4-weak", "strong": "regime-v4-strong"}
REGIME_V4_SEEDS = tuple(range(1800, 1849))    # 49 seeds, in run order
REGIME_V4_RULES = ("token", "sequence")
REGIME_V4_VARIANTS = ("avx2-1t", "default-1t")
# any_cpu_model: its runs span sessions whose machines may differ; each run records its CPU
REGIME_V4_DESIGNS = {name: dict(flags=dict(REGIME_DESIGNS[REGIME_LEVELS[level]]["flags"]),
                                seeds={variant: REGIME_V4_SEEDS for variant in REGIME_V4_VARIANTS},
                                rules=REGIME_V4_RULES, version=4, lab=True, any_cpu_model=True)
                     for level, name in REGIME_V4_LEVELS.items()}
DESIGNS.update(REGIME_V4_DESIGNS)             # registered: registrations/regime-v4.md


# Designs described by a data file (registrations/NAME.json) whose worlds a registered rule
# chose from step-0 quantities alone (grpo_ba_lab/analysis/world_choice.py): each level's flags
# are the file's fixed flags and its chosen grid point, read from the committed worlds file, so
# its levels exist once that file is committed (before the design's first GRPO run).
DATA_DESIGNS = ("registrations/headline-v5.json",)


def data_file_designs(path: str) -> dict:
    """{level design: its DESIGNS entry} of a data-file design ({} before its worlds are chosen)."""
    import json
    import os
    if not os.path.exists(os.path.join(REPO, path)):    # an installed lab without the repository's files
        return {}
    with open(os.path.join(REPO, path)) as f:
        data = json.load(f)
    worlds_file = os.path.join(REPO, data["worlds_file"])
    if not os.path.exists(worlds_file):
        return {}
    with open(worlds_file) as f:
        chosen = json.load(f)["levels"]
    seeds = tuple(range(data["seeds"]["first"], data["seeds"]["first"] + data["seeds"]["count"]))
    # any_cpu_model: its runs span sessions whose machines may differ; each run records its CPU
    return {name: dict(flags={**data["flags"], **chosen[level]}, seeds={v: seeds for v in data["variants"]},
                       rules=tuple(data["rules"]), version=int(data["name"].rsplit("-v", 1)[1]), lab=True,
                       any_cpu_model=True, data_file=path)
            for level, name in data["levels"].items() if level in chosen}


for _path in DATA_DESIGNS:
    DESIGNS.update(data_file_designs(_path))


def registered_seeds(name: str) -> list[tuple[int, str]]:
    """[(seed, variant)] of a design, in the order the lab's sweep runs them."""
    return [(seed, variant) for variant, seeds in DESIGNS[name]["seeds"].items() for seed in seeds]


def variant_of(name: str, seed: int) -> str:
    """The machine variant a design registered `seed` under ('' if not registered)."""
    return next((v for s, v in registered_seeds(name) if s == seed), "")
