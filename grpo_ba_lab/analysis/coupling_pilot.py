"""grpo_ba_lab/analysis/coupling_pilot.py -- an exploratory pilot: a toy world whose wrong
answers are much longer than its right ones (strong sign-length coupling).

    python -m grpo_ba_lab.analysis.coupling_pilot --out runs/pilot                 # every world
    python -m grpo_ba_lab.analysis.coupling_pilot --out runs/pilot --worlds endless-30
    python -m grpo_ba_lab.analysis.coupling_pilot --out runs/pilot --report-only

Each world is a set of toy knobs trained from its own warm-up, stopped inside the band of
step-0 greedy accuracy [0.45, 0.60] (the lab's band warm-up), then 30 GRPO steps of each rule
from it (`--aggregator all`). The pilot's seeds (PILOT_SEEDS) are exploratory: no design uses
them, and nothing here confirms anything. What it looks for (docs/strong-coupling.md): at
step 0 wrong answers at least MIN_RATIO times as long as right ones and token's weight share
on right answers at most MAX_SHARE; token's share over the run at most RUN_SHARE (the
registered manipulation check); no rule's accuracy falling more than MAX_DROP.
"""
from __future__ import annotations

import os

from grpo_ba_support import run as grpo_ba_run
from grpo_ba_support.args import RULES
from grpo_ba_lab.analysis import paired_stats
from grpo_ba_lab.analysis.toy_consequences import peak_to_last_drop
from grpo_ba_lab.plumbing import run_dirs

PILOT_SEEDS = (1100, 1101)      # exploratory: no design uses them
MIN_RATIO, MAX_SHARE, RUN_SHARE, MAX_DROP = 2.5, 0.35, 0.40, 0.1
BASE = ["--design", "plain", "--regime", "gap", "--slip-style", "ramble", "--spread-size", "0",
        "--warmup-steps", "1000", "--warmup-seed", "-1", "--warmup-band-low", "0.45",
        "--warmup-band-high", "0.60", "--steps", "30", "--eval-every", "5", "--eval-prompts", "243",
        "--lr", "1e-4", "--aggregator", "all"]
WORLDS = {
    "endless-30": ("gap 18, 30% of slips endless, cap 32, force 0.3",
                   ["--gap-size", "18", "--force-frac", "0.3", "--endless-slips", "0.3",
                    "--max-new-tokens", "32"]),
    "gap30-force50": ("gap 30, no endless slips, cap 48, force 0.5",
                      ["--gap-size", "30", "--force-frac", "0.5", "--max-new-tokens", "48"]),
    "endless-60": ("gap 18, 60% of slips endless, cap 32, force 0.3",
                   ["--gap-size", "18", "--force-frac", "0.3", "--endless-slips", "0.6",
                    "--max-new-tokens", "32"]),
    "gap24-force50-endless-30": ("gap 24, 30% of slips endless, cap 40, force 0.5",
                                 ["--gap-size", "24", "--force-frac", "0.5", "--endless-slips",
                                  "0.3", "--max-new-tokens", "40"]),
}


def run_folder(out: str, world: str, seed: int) -> str:
    return os.path.join(out, f"{world}-s{seed}")


def command(world: str, seed: int, out: str, threads: int) -> list[str]:
    """The lab trainer's command line of one (world, seed): the three rules from one warm-up."""
    return [*BASE, *WORLDS[world][1], "--seed", str(seed), "--threads", str(threads),
            "--output-dir", run_folder(out, world, seed)]


def run_pilot(out: str, worlds, seeds, threads: int = 1, cache_dir: str = "", log=print):
    """Trains every (world, seed) whose three runs are not all finished."""
    from grpo_ba_lab.train import main as train_main
    for world in worlds:
        for seed in seeds:
            argv = command(world, seed, out, threads) + (["--cache-dir", cache_dir] if cache_dir else [])
            log(f"{world}, seed {seed}: python -m grpo_ba_lab.train {' '.join(argv)}")
            train_main(argv)


def _steps(metrics: list[dict]) -> list[dict]:
    return run_dirs.step_lines(metrics)[0]


def run_summary(metrics: list[dict]) -> dict:
    """The pilot's numbers of one run: step 0's lengths and token share (the same for the
    three rules of a seed: one warm-up, one seed), the run's mean token share (what token's
    rule would give this run's rollouts), accuracy at step 0 and last, and the drop."""
    steps = _steps(metrics)
    first = steps[0]
    _, accuracy = paired_stats.evaluations(metrics)
    return {"ratio0": first["wrong_over_right"], "len_right0": first["len_right"],
            "len_wrong0": first["len_wrong"], "share0": first["pos_share_token"],
            "share_run": paired_stats.mean_finite(m.get("pos_share_token") for m in steps),
            "late_right": paired_stats.mean_finite(m.get("len_right") for m in steps[-10:]),
            "late_wrong": paired_stats.mean_finite(m.get("len_wrong") for m in steps[-10:]),
            "acc0": accuracy[0], "last": accuracy[-1], "drop": peak_to_last_drop(metrics)}


def collect(out: str) -> dict:
    """{(world, seed): {rule: metrics}} of the finished pilot runs under `out`."""
    found = {}
    for run_dir, args, metrics in run_dirs.saved_runs(out):
        if run_dirs.is_finished(run_dir, metrics, args["steps"]):
            world, _, seed = os.path.basename(os.path.dirname(run_dir)).rpartition("-s")
            found.setdefault((world, int(seed)), {})[args["aggregator"]] = metrics
    return found


def meets(summaries: dict) -> list[str]:
    """Which of the pilot's criteria one (world, seed) misses ([] when it meets them all)."""
    token = summaries["token"]
    missed = []
    if not token["ratio0"] >= MIN_RATIO:
        missed.append(f"step-0 wrong/right {token['ratio0']:.2f} < {MIN_RATIO}")
    if not token["share0"] <= MAX_SHARE:
        missed.append(f"step-0 token share {token['share0']:.3f} > {MAX_SHARE}")
    if not token["share_run"] <= RUN_SHARE:
        missed.append(f"token's run-mean share {token['share_run']:.3f} > {RUN_SHARE}")
    missed += [f"{rule} fell {s['drop']:.3f}" for rule, s in summaries.items() if s["drop"] > MAX_DROP]
    return missed


def report_text(found: dict) -> str:
    lines = ["| world | seed | rule | step-0 acc | step-0 right / wrong length | step-0 token share | "
             "run-mean token share | last-10 right / wrong length | last acc | drop |",
             "|---" * 10 + "|"]
    verdicts = ["", f"Criteria: step-0 wrong/right >= {MIN_RATIO}, step-0 token share <= {MAX_SHARE}, "
                f"token's run-mean share <= {RUN_SHARE} (under token's own run), no drop > {MAX_DROP}.", ""]
    for (world, seed) in sorted(found, key=lambda k: (list(WORLDS).index(k[0]) if k[0] in WORLDS else 99, k[1])):
        runs = found[(world, seed)]
        summaries = {rule: run_summary(runs[rule]) for rule in RULES if rule in runs}
        for rule, s in summaries.items():
            lines.append(f"| {world} | {seed} | {rule} | {s['acc0']:.3f} | {s['len_right0']:.1f} / "
                         f"{s['len_wrong0']:.1f} | {s['share0']:.3f} | {s['share_run']:.3f} | "
                         f"{s['late_right']:.1f} / {s['late_wrong']:.1f} | {s['last']:.3f} | {s['drop']:.3f} |")
        if set(summaries) == set(RULES):
            missed = meets(summaries)
            verdicts.append(f"- {world}, seed {seed}: " + ("meets every criterion" if not missed
                                                           else "misses: " + "; ".join(missed)))
    return "\n".join(lines + verdicts) + "\n"


def report(out: str, log=print, text_of=None, name: str = "pilot.md") -> str:
    """OUT/name (pilot.md) from the finished runs under `out` (`text_of(found)`: another
    study's table)."""
    found = collect(out)
    if not found:
        raise ValueError(f"no finished pilot runs under {out!r}")
    text = (text_of or report_text)(found)
    grpo_ba_run.write_atomic(os.path.join(out, name), text)
    log(text + f"wrote {os.path.join(out, name)}")
    return text


def main(argv=None) -> int:
    from grpo_ba_lab.analysis.stability_probe import study_main
    return study_main(argv, "python -m grpo_ba_lab.analysis.coupling_pilot", __doc__, "worlds",
                      WORLDS, PILOT_SEEDS, run_pilot, report)


if __name__ == "__main__":
    raise SystemExit(main())
