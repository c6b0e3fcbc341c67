"""grpo_ba_lab/analysis/regime_pilot.py -- an exploratory pilot for the regime design: one world
family in which only the length gap changes (docs/regime-design.md).

    python -m grpo_ba_lab.analysis.regime_pilot --out runs/regime-pilot              # every world
    python -m grpo_ba_lab.analysis.regime_pilot --out runs/regime-pilot --worlds gap-0 gap-30
    python -m grpo_ba_lab.analysis.regime_pilot --out runs/regime-pilot --report-only
    python -m grpo_ba_lab.analysis.regime_pilot round2 --out runs/regime-pilot-2   # round 2

Every world is strong-band's (a `~` ramble after a slip, the environment forcing half of the
responses to start with a slip, responses capped at 48 tokens, a band warm-up, 30 GRPO steps at
lr 1e-4, G = 8, P = 16) with held-out evaluations every 10 steps; the worlds differ in the
slip's ramble length (`--gap-size`) alone. One more world, `spread-30`, is the paper's other
axis, length variance with little gap: no ramble after a slip, half of all answers (right or
wrong) ramble 30 tokens. The pilot's seeds (PILOT_SEEDS) are exploratory: no design uses them.

The criteria that pick the design's levels (LEVELS, choose_levels) were committed before any
pilot run; they read the step-0 length ratio, token's weight share on right answers and the
stability of every rule, never which rule is ahead.
"""
from __future__ import annotations

import json
import os
import sys

from grpo_ba_support.args import RULES
from grpo_ba_lab.analysis import coupling_pilot, paired_stats
from grpo_ba_support import run as grpo_ba_run
from grpo_ba_lab.analysis.stability_probe import study_main

PILOT_SEEDS = (1300, 1301)      # exploratory: no design uses them
# strong-band's world and run with evaluations every 10 steps; --gap-size is the world's own
FAMILY = ["--design", "plain", "--regime", "gap", "--slip-style", "ramble", "--force-frac", "0.5",
          "--max-new-tokens", "48", "--warmup-steps", "1000", "--warmup-seed", "-1",
          "--warmup-band-low", "0.45", "--warmup-band-high", "0.60", "--steps", "30",
          "--eval-every", "10", "--eval-prompts", "729", "--lr", "1e-4", "--aggregator", "all"]
GAPS = (0, 6, 12, 30)           # the candidate levels: a slip rambles this many tokens (+- 1/4)
WORLDS = {f"gap-{g}": (f"a slip rambles {g} tokens, no spread",
                       ["--gap-size", str(g), "--spread-size", "0"]) for g in GAPS}
WORLDS["spread-30"] = ("the paper's variance axis: no ramble after a slip; half of all answers "
                       "ramble 30 tokens", ["--gap-size", "0", "--spread-size", "30"])
VARIANCE_WORLD = "spread-30"    # reported, never a level

# A level's criteria, on the mean over the pilot's seeds of (step-0 wrong/right length ratio of
# the step-0 batch, token's weight share on right answers averaged over token's run). Fixed
# before any pilot run. Every seed of a candidate must also finish its band warm-up and have no
# rule falling more than coupling_pilot.MAX_DROP from its peak.
LEVELS = {"none": dict(ratio=(0.0, 1.25), share=(0.47, 1.0)),
          "weak": dict(ratio=(1.4, 2.4), share=(0.40, 0.47)),
          "strong": dict(ratio=(3.0, float("inf")), share=(0.0, 0.35))}
WEAK_TARGET = 0.435             # among weak candidates, the run-mean share nearest this


def command(world: str, seed: int, out: str, threads: int) -> list[str]:
    """The lab trainer's command line of one (world, seed): the three rules from one warm-up."""
    return [*FAMILY, *WORLDS[world][1], "--seed", str(seed), "--threads", str(threads),
            "--output-dir", coupling_pilot.run_folder(out, world, seed)]


def run_pilot(out: str, worlds, seeds, threads: int = 1, cache_dir: str = "", log=print):
    """Trains every (world, seed), world by world; a (world, seed) whose three runs are
    finished is skipped by the trainer's own resume logic."""
    from grpo_ba_lab.train import main as train_main
    for world in worlds:
        for seed in seeds:
            argv = command(world, seed, out, threads) + (["--cache-dir", cache_dir] if cache_dir else [])
            log(f"{world}, seed {seed}: python -m grpo_ba_lab.train {' '.join(argv)}")
            train_main(argv)


def world_summary(found: dict, world: str) -> dict | None:
    """Mean over the seeds with all three rules finished of step-0 ratio and token's run-mean
    share, the seeds counted, and the stability misses; None when no seed finished."""
    per_seed = [{rule: coupling_pilot.run_summary(runs[rule]) for rule in RULES}
                for (w, _), runs in sorted(found.items()) if w == world and set(runs) >= set(RULES)]
    if not per_seed:
        return None
    drops = [f"{rule} fell {s['drop']:.3f}" for seed in per_seed for rule, s in seed.items()
             if s["drop"] > coupling_pilot.MAX_DROP]
    return {"seeds": len(per_seed), "drops": drops,
            "ratio0": paired_stats.mean_finite(s["token"]["ratio0"] for s in per_seed),
            "share_run": paired_stats.mean_finite(s["token"]["share_run"] for s in per_seed)}


def level_of(summary: dict, seeds: int) -> str | None:
    """The level whose criteria a world's pilot summary meets (None: no level)."""
    if summary is None or summary["seeds"] < seeds or summary["drops"]:
        return None
    for level, c in LEVELS.items():
        if c["ratio"][0] <= summary["ratio0"] <= c["ratio"][1] and c["share"][0] <= summary["share_run"] <= c["share"][1]:
            return level
    return None


def choose_levels(found: dict, seeds: int = len(PILOT_SEEDS)) -> dict:
    """{level: world}: `none` the smallest gap meeting its criteria, `strong` the largest,
    `weak` the one whose run-mean share is nearest WEAK_TARGET; a level none meets is absent."""
    meeting = {}
    for world in WORLDS:
        if world == VARIANCE_WORLD:
            continue
        level = level_of(world_summary(found, world), seeds)
        if level:
            meeting.setdefault(level, []).append(world)
    return pick(meeting, lambda w: world_summary(found, w)["share_run"])


def pick(meeting: dict, share_of) -> dict:
    """{level: world} from {level: [worlds meeting it]}: `none` the smallest gap, `strong`
    the largest, `weak` the world whose share_of(world) is nearest WEAK_TARGET."""
    gap = lambda w: int(w.split("-")[1])                       # noqa: E731
    chosen = {}
    if meeting.get("none"):
        chosen["none"] = min(meeting["none"], key=gap)
    if meeting.get("weak"):
        chosen["weak"] = min(meeting["weak"], key=lambda w: abs(share_of(w) - WEAK_TARGET))
    if meeting.get("strong"):
        chosen["strong"] = max(meeting["strong"], key=gap)
    return chosen


def report_text(found: dict) -> str:
    table = coupling_pilot.report_text(found).split("\n\nCriteria")[0]      # the per-run table
    lines = [table, "", "Per world, mean over its seeds (criteria: regime_pilot.LEVELS):", "",
             "| world | seeds | step-0 wrong/right | token's run-mean share | drops > 0.1 | level |",
             "|---|---|---|---|---|---|"]
    for world in WORLDS:
        s = world_summary(found, world)
        if s is None:
            continue
        level = "(variance axis, not a level)" if world == VARIANCE_WORLD else (level_of(s, len(PILOT_SEEDS)) or "none met")
        lines.append(f"| {world} | {s['seeds']} | {s['ratio0']:.2f} | {s['share_run']:.3f} | "
                     f"{'; '.join(s['drops']) or 'none'} | {level} |")
    return "\n".join(lines + ["", levels_line("choose_levels", choose_levels(found))]) + "\n"


def levels_line(rule: str, chosen: dict) -> str:
    return f"Levels chosen by {rule}: " + (", ".join(f"{k} = {v}" for k, v in chosen.items()) or "none")


def report(out: str, log=print) -> str:
    """pilot.md (the per-run table, each world's level) from the finished runs under `out`."""
    return coupling_pilot.report(out, log, report_text)


# ------------------------------------------------------------------ round 2
# Round 1's rule found no strong level: its ratio read one step-0 batch of 128 responses per
# seed, and one seed's batch had long right answers. Round 2 was written after round 1's report
# was seen and committed before any round-2 run (docs/regime-design.md). It changes how the
# ratio is measured, never the thresholds in LEVELS: on new seeds, every candidate world, token
# alone (its share and stability are what the criteria read; no other rule is trained), and the
# ratio pooled over STEP0_BATCHES step-0 batches per seed (what steps 0-3 sample before any
# update; toy_consequences.step0_batches): mean wrong length / mean right length over all of
# them. A candidate also needs token to fall no more than MAX_DROP on every seed.
ROUND2_SEEDS = (1302, 1303, 1304, 1305)     # exploratory: no design uses them
ROUND2_WORLDS = tuple(f"gap-{g}" for g in GAPS)
STEP0_BATCHES = 4
STEP0_FILE = "step0.json"                   # per (world, seed): the pooled batches' lengths and rewards


def round2_command(world: str, seed: int, out: str, threads: int) -> list[str]:
    """Round 2's command line of one (world, seed): token alone, in the folder `token` that
    round 1's three-rule command would give it, otherwise round 1's."""
    argv = command(world, seed, out, threads)
    argv[argv.index("--aggregator") + 1] = "token"
    argv[argv.index("--output-dir") + 1] = os.path.join(coupling_pilot.run_folder(out, world, seed), "token")
    return argv


def run_round2(out: str, worlds, seeds, threads: int = 1, cache_dir: str = "", log=print):
    """Trains token for every (world, seed), then samples its STEP0_BATCHES step-0 batches from
    the same (cached) warm-up into STEP0_FILE; what is finished is skipped."""

    from grpo_ba_lab import lab_args
    from grpo_ba_lab.analysis.toy_consequences import step0_batches
    from grpo_ba_lab.train import main as train_main
    for world in worlds:
        for seed in seeds:
            argv = round2_command(world, seed, out, threads) + (["--cache-dir", cache_dir] if cache_dir else [])
            path = os.path.join(coupling_pilot.run_folder(out, world, seed), STEP0_FILE)
            if os.path.exists(path):                # written last: the unit is finished
                continue
            log(f"{world}, seed {seed}: python -m grpo_ba_lab.train {' '.join(argv)}")
            if train_main(argv):
                raise SystemExit(f"{world}, seed {seed}: the token run failed")
            lengths, rewards = step0_batches(lab_args.parse_args(argv), STEP0_BATCHES)
            grpo_ba_run.write_atomic(path, json.dumps({"batches": STEP0_BATCHES, "lengths": lengths,
                                                       "rewards": rewards}))


def collect_round2(out: str) -> dict:
    """{(world, seed): (token's metrics, step0.json)} of round 2's finished units."""
    found = {}
    for (world, seed), runs in coupling_pilot.collect(out).items():
        path = os.path.join(coupling_pilot.run_folder(out, world, seed), STEP0_FILE)
        if "token" in runs and os.path.exists(path):
            with open(path) as f:
                found[(world, seed)] = (runs["token"], json.load(f))
    return found


def round2_summary(found: dict, world: str) -> dict | None:
    """A world's round-2 numbers: seeds, the pooled step-0 ratio, the mean over seeds of
    token's run-mean share, token's falls above MAX_DROP; None when no seed finished."""
    units = [unit for (w, _), unit in sorted(found.items()) if w == world]
    if not units:
        return None
    lengths = [x for _, step0 in units for x in step0["lengths"]]
    rewards = [r for _, step0 in units for r in step0["rewards"]]
    right = [x for x, r in zip(lengths, rewards) if r > 0.5]
    wrong = [x for x, r in zip(lengths, rewards) if r <= 0.5]
    summaries = [coupling_pilot.run_summary(metrics) for metrics, _ in units]
    return {"seeds": len(units), "responses": len(lengths),
            "len_right": sum(right) / len(right), "len_wrong": sum(wrong) / len(wrong),
            "ratio0": (sum(wrong) / len(wrong)) / (sum(right) / len(right)),
            "share_run": paired_stats.mean_finite(s["share_run"] for s in summaries),
            "drops": [f"token fell {s['drop']:.3f}" for s in summaries if s["drop"] > coupling_pilot.MAX_DROP]}


def choose_levels_round2(found: dict, seeds: int = len(ROUND2_SEEDS)) -> dict:
    """{level: world} by LEVELS on round 2's summaries, chosen as choose_levels chooses."""
    meeting = {}
    for world in ROUND2_WORLDS:
        level = level_of(round2_summary(found, world), seeds)
        if level:
            meeting.setdefault(level, []).append(world)
    return pick(meeting, lambda w: round2_summary(found, w)["share_run"])


def round2_report_text(found: dict) -> str:
    lines = ["Round 2 (token alone; step-0 ratio pooled over "
             f"{STEP0_BATCHES} batches per seed; criteria: regime_pilot.LEVELS):", "",
             "| world | seed | step-0 acc | run-mean token share | last acc | drop |", "|---|---|---|---|---|---|"]
    for (world, seed), (metrics, _) in sorted(found.items()):
        s = coupling_pilot.run_summary(metrics)
        lines.append(f"| {world} | {seed} | {s['acc0']:.3f} | {s['share_run']:.3f} | {s['last']:.3f} | {s['drop']:.3f} |")
    lines += ["", "| world | seeds | responses | step-0 right / wrong length | step-0 wrong/right (pooled) "
              "| token's run-mean share | drops > 0.1 | level |", "|---|---|---|---|---|---|---|---|"]
    summaries = {world: round2_summary(found, world) for world in ROUND2_WORLDS}
    lines += [f"| {world} | {s['seeds']} | {s['responses']} | {s['len_right']:.1f} / {s['len_wrong']:.1f} "
              f"| {s['ratio0']:.2f} | {s['share_run']:.3f} | {'; '.join(s['drops']) or 'none'} "
              f"| {level_of(s, len(ROUND2_SEEDS)) or 'none met'} |" for world, s in summaries.items() if s]
    return "\n".join(lines + ["", levels_line("choose_levels_round2", choose_levels_round2(found))]) + "\n"


def report_round2(out: str, log=print) -> str:
    """pilot-round2.md from round 2's finished units under `out`."""
    found = collect_round2(out)
    if not found:
        raise ValueError(f"no finished round-2 units under {out!r}")
    text = round2_report_text(found)
    path = os.path.join(out, "pilot-round2.md")
    grpo_ba_run.write_atomic(path, text)
    log(text + f"wrote {path}")
    return text


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["round2"]:                   # python -m ...regime_pilot round2 --out DIR
        return study_main(argv[1:], "python -m grpo_ba_lab.analysis.regime_pilot round2", __doc__, "worlds",
                          {w: WORLDS[w] for w in ROUND2_WORLDS}, ROUND2_SEEDS, run_round2, report_round2)
    return study_main(argv, "python -m grpo_ba_lab.analysis.regime_pilot", __doc__, "worlds",
                      WORLDS, PILOT_SEEDS, run_pilot, report)


if __name__ == "__main__":
    raise SystemExit(main())
