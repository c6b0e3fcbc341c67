"""grpo_ba_lab/analysis/sweep.py -- the three rules compared over seeds, paired.

    python -m grpo_ba_lab.analysis.sweep                       # 2 regimes x 3 rules x --seeds seeds
    python -m grpo_ba_lab.analysis.sweep --design loop-gap     # a design's seeds x 3 rules, paired
    python -m grpo_ba_lab.analysis.sweep --seeds 3 --steps 200 # any flag of the lab trainer

Both train one run directory per (regime, rule, seed) with the lab trainer
(grpo_ba_lab/train.py, grpo_ba.train with the lab's seams), one run after another (the two
vCPUs behave like one core), then draw the figures and tables of
grpo_ba_lab/analysis/report.py (for a toy design also its paired report and mechanism
figure). A sweep run again skips its finished runs and resumes those with a checkpoint.
"""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from dataclasses import dataclass

from grpo_ba_lab.analysis import report, toy_consequences
from grpo_ba_support.args import RULES, UsageError, arg, run_command
from grpo_ba_lab.lab_args import check_args, parse_command
from grpo_ba_lab.train import train
from grpo_ba_lab.plumbing import run_dirs
from grpo_ba_lab import designs

REPO = designs.REPO       # the repository root: holds grpo_ba_lab/, grpo_ba.py and toy_tasks/


@dataclass
class SweepOptions:
    seeds: int = arg(5, "seeds per (regime, rule); with --design the design's own seeds instead; "
                        "rules are compared paired by seed", section="the sweep")
    variant: str = arg("", "with --design: only the seeds of this machine variant "
                           "(toy_tasks/designs.py; default: all)")
    figures_dir: str = arg("", "where figures and tables go (default: the runs directory)")
    until: str = arg("", "with --design: no seed starts after this UTC time (YYYY-MM-DDTHH:MM), a "
                         "registered time limit; the seed in progress finishes",
                     section="the sweep")


class Progress:
    """'[k/N] RUN_DIR, about M min left' before each run of a multi-run command; the time
    left is the mean of the runs trained so far (skipped ones cost nothing) times those left."""

    def __init__(self, total: int, log=print):
        self.total, self.log, self.count, self.trained, self.seconds = total, log, 0, 0, 0.0

    def next(self, what: str, skipped: bool = False):
        self.count += 1
        left = self.total - self.count + 1
        eta = (f", about {self.seconds / self.trained * left / 60:.0f} min left" if self.trained
               else "")
        self.log(f"[{self.count}/{self.total}] {what}{' (done before)' if skipped else ''}{eta}")
        self.started = time.time()

    def done(self):
        self.trained += 1
        self.seconds += time.time() - self.started


def until_time(text: str) -> float:
    """Seconds since the epoch of a registered time limit given as a UTC minute
    (YYYY-MM-DDTHH:MM); a UsageError for any other text."""
    import calendar
    try:
        return calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M"))
    except ValueError:
        raise UsageError(f"--until {text!r}: give a UTC time as YYYY-MM-DDTHH:MM") from None


def run_sweep(args, seeds: int = 5, log=print, variant: str = "",
              until: float | None = None) -> str:
    """Both regimes x three rules x `seeds` seeds, one run after another, or with --design
    that design's registered seeds x three rules (only those of machine `variant` if given),
    a process each (run_design); returns the sweep's directory."""
    if args.design in designs.DESIGNS:            # each seed on its machine variant, a process each
        return run_design(args, log, variant, until)
    base = args.output_dir or "runs/sweep"
    plan = [(regime, seed) for regime in ("gap", "variance") for seed in range(seeds)]
    progress = Progress(len(plan) * len(RULES), log)
    for regime, seed in plan:
        for rule in RULES:
            out = os.path.join(base, f"{regime}-{rule}-s{seed}")
            status = run_dirs.run_status(out, args.steps, log)   # restores lines a power cut lost
            if status == "finished":
                progress.next(out, skipped=True)
                continue
            resume = out if status == "resume" else ""
            progress.next(out)
            train(dataclasses.replace(args, aggregator=rule, regime=regime, seed=seed,
                                              output_dir=out, resume=resume), log)
            progress.done()
    return base


# Flags a design's run may set apart from the design's: where and how fast it ran, not what it is.
NOT_DESIGN = {"aggregator", "seed", "output_dir", "cache_dir", "threads", "resume", "device",
              "warmup_from_scratch", "design"}


def run_design(args, log=print, variant: str = "", until: float | None = None) -> str:
    """`python -m grpo_ba_lab.analysis.sweep --design NAME`: the design's registered seeds x
    three rules, each run in a process of its own on its seed's machine variant (the kernels
    must be chosen before torch loads); finished runs are skipped, stopped ones resumed. No
    seed (its first unfinished rule) starts after `until`, seconds since the epoch: a
    registered time limit, which a seed in progress finishes past. Returns the runs' folder."""
    name, base = args.design, args.output_dir or f"runs/{args.design}"
    defaults = parse_command(["--design", name], prog="")[0]
    passed = []                          # flags typed apart from the design's (the report names)
    for field in dataclasses.fields(args):
        value = getattr(args, field.name)
        if field.name not in NOT_DESIGN and value != getattr(defaults, field.name):
            values = map(str, value) if isinstance(value, tuple) else [str(value)]
            passed += [f"--{field.name.replace('_', '-')}", *values]
    plan = [(seed, v, rule) for seed, v in designs.registered_seeds(name) for rule in RULES
            if not variant or v == variant]
    progress = Progress(len(plan), log)
    started = set()                                   # (seed, variant) begun by this sweep
    for seed, v, rule in plan:
        out = os.path.join(base, toy_consequences.run_folder(name, args.regime, rule, seed, v))
        status = run_dirs.run_status(out, args.steps, log)
        if status != "finished" and (seed, v) not in started:
            if until is not None and time.time() >= until:
                log(f"design {name}: the time limit has come; no seed starts after it "
                    f"(seed {seed} ({v}) and later are not started)")
                return base
            started.add((seed, v))
        progress.next(f"design {name}, seed {seed} ({v}), {rule}: {out}",
                      skipped=status == "finished")
        if status == "finished":
            continue
        env = {key: value for key, value in os.environ.items() if key != "ATEN_CPU_CAPABILITY"}
        if designs.VARIANTS[v]["cpu_capability"]:
            env["ATEN_CPU_CAPABILITY"] = designs.VARIANTS[v]["cpu_capability"]
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (REPO, env.get("PYTHONPATH"))))
        command = [sys.executable, "-m", "grpo_ba_lab.train", "--design", name,
                   "--aggregator", rule, "--seed", str(seed),
                   "--threads", str(designs.VARIANTS[v]["threads"]),
                   "--cache-dir", args.cache_dir, "--output-dir", out, *passed]
        if status == "resume":
            command += ["--resume", out]
        returncode = subprocess.run(command, env=env).returncode
        if returncode == 130:            # Ctrl-C: the run saved a checkpoint; a new sweep resumes
            raise KeyboardInterrupt
        if returncode != 0:
            raise ValueError(f"design {name}: the run {out} failed "
                             f"(its command: {' '.join(command)})")
        progress.done()
    return base


def main(argv=None) -> int:
    def command():
        args, options = parse_command(argv, SweepOptions, description=__doc__.split("\n\n")[0],
                                      prog="python -m grpo_ba_lab.analysis.sweep")
        if args.resume:
            raise UsageError("--resume continues one run: python -m grpo_ba_lab.train --resume DIR")
        if args.aggregator != "all":
            raise UsageError(f"a sweep compares the three rules; --aggregator {args.aggregator} "
                             f"trains one: python -m grpo_ba_lab.train --aggregator "
                             f"{args.aggregator} "
                             f"(or drop --aggregator here)")
        if options.seeds < 1:
            raise UsageError("--seeds must be at least 1")
        if options.variant and args.design not in designs.DESIGNS:
            raise UsageError("--variant picks seeds of a design: add --design NAME")
        until = None
        if options.until:
            if args.design not in designs.DESIGNS:
                raise UsageError("--until is a design's time limit: add --design NAME")
            until = until_time(options.until)
        check_args(args)
        base = run_sweep(args, options.seeds, variant=options.variant, until=until)
        if options.variant:                    # a part of a design: its report waits for the rest
            print(f"variant {options.variant} of design {args.design} done; when every variant is, "
                  f"`python -m grpo_ba_lab.analysis.report {base}` writes the report")
            return
        report.report(base, options.figures_dir)
    return run_command("grpo_ba_lab.analysis.sweep", command,
                       interrupted="interrupted; run the same command again to go on")


if __name__ == "__main__":
    sys.exit(main())
