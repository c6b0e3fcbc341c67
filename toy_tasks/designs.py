"""The toy designs of docs/toy-designs.md: named sets of grpo_ba.py flags.

Each design was written down (knobs, steps, seeds, evaluation schedule, metrics) before
its runs, then run on its seeds under all three rules. `--design NAME` makes its flags
the defaults of grpo_ba.py (a flag typed on the command line still wins):

    python grpo_ba.py                                     # the demo: design `demo`, three rules, seed 0
    python grpo_ba.py --design loop-gap                   # token's failure: 300 steps, three rules
    python -m analysis.sweep --design loop-gap           # the whole design: its seeds x three rules
    python grpo_ba.py --design plain --regime variance    # none: the flags' own defaults

What each one shows (5 paired seeds, last held-out accuracy, docs/toy-designs.md):

- `loop-gap`: a slip loops in digits, so long wrong answers (2.3x the right ones) use the
  tokens right answers need; token aggregation ends below balanced.
- `spread-room`: half of all answers ramble, right or wrong (lengths spread); sequence
  aggregation ends below balanced.
- `tilde-gap`: loop-gap's control, the same gap rambling in `~`.
- `demo`: spread-room's first 30 steps, what fits in 3 minutes on a 2-core CPU.
"""
from __future__ import annotations

import dataclasses

from toy_tasks.arithmetic import ToyWorld

# Shared by the 300-step designs: lr, length and the evaluation schedule (all 729
# held-out prompts at step 0, every 2 steps to 20, every 10 after, and the last step).
LONG_RUN = dict(lr=1e-4, steps=300, eval_every=10, eval_dense_until=20, eval_dense_every=2, eval_prompts=729)
SPREAD_ROOM = dict(regime="gap", slip_style="ramble", gap_size=18, spread_size=8, force_frac=0.3, warmup_steps=1000)

DESIGNS = {
    "loop-gap": dict(flags=dict(regime="gap", slip_style="loop", gap_size=18, force_frac=0.3, warmup_steps=600,
                                **LONG_RUN),
                     seeds=(0, 1, 2, 3, 4)),
    "spread-room": dict(flags=dict(**SPREAD_ROOM, **LONG_RUN), seeds=(5, 6, 7, 8, 9)),
    "tilde-gap": dict(flags=dict(regime="gap", slip_style="ramble", gap_size=18, force_frac=0.3, warmup_steps=600,
                                 **LONG_RUN),
                      seeds=(0, 1, 2, 3, 4)),      # loop-gap's control: the same with `~` rambles
    # 30 steps: the 1000-step warm-up (83 s) and three rules fit in 3 minutes on a 2-core CPU.
    "demo": dict(flags=dict(**SPREAD_ROOM, lr=1e-4, steps=30, eval_every=5, eval_dense_until=10, eval_dense_every=2,
                            eval_prompts=729),
                 seeds=(0, 1, 2, 3, 4)),
}
NO_DESIGN = "plain"          # the flags' own defaults (the toy before the designs)
AUTO = "auto"                # the demo runs `demo`; everything else runs `plain`
DEMO = "demo"


def design_flags(name: str) -> dict:
    """The flags a design sets ({} for `plain`)."""
    if name == NO_DESIGN:
        return {}
    if name not in DESIGNS:
        raise ValueError(f"unknown design {name!r}; choose from {', '.join((NO_DESIGN, *DESIGNS))}")
    return dict(DESIGNS[name]["flags"])



def knobs_at_fault(name: str, args, build_world) -> str:
    """When `build_world(args)` refuses a toy setting: the toy-world flags design `name`
    set, as typed ('--spread-size 8'), if the world builds once they are back at the
    plain toy's values; '' if the design is not what makes the setting bad."""
    plain = ToyWorld()
    changed = {f.name: design_flags(name)[f.name] for f in dataclasses.fields(ToyWorld)
               if f.name in design_flags(name) and design_flags(name)[f.name] != getattr(plain, f.name)}
    try:
        build_world(dataclasses.replace(args, **{k: getattr(plain, k) for k in changed}))
    except ValueError:
        return ""
    return ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in changed.items())
