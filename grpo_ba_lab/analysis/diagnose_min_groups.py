"""How many groups diagnose needs before its interval can be trusted: a simulation of the bootstrap.

    python -m grpo_ba_lab.analysis.diagnose_min_groups > assets/diagnose-min-groups/table.txt

diagnose places a run by its step-0 wrong/right length ratio and token's share on right answers,
each with a 95% percentile bootstrap interval over the batch's groups with a signal
(diagnose.bootstrap). With few groups that interval is too narrow: one group's resamples are all
the same group, so its interval has width 0 and covers nothing. This script measures, for each
number S of groups with a signal, how often the interval covers the value it estimates.

Settings (seeded, each a population of synthetic groups): group size G 4 or 8; each prompt's
chance of a right answer uniform on [0.05, 0.95] and rewards binary; lengths log-normal, right
answers around 100 tokens and wrong ones around 1.9x or 3.5x that (the two sides of demo-band's
top, 1.88), log-sd 0.4 or 0.8, capped at 1024 tokens like a max_completion_length. A population
holds POOL groups with a signal; its own ratio and share (diagnose.ratio_and_share of all of it)
are the truth. A simulated run is S groups drawn from the population without replacement; its
interval is diagnose.bootstrap's, with diagnose's resamples and level. Coverage: the share of
RUNS runs whose interval holds the truth (its standard error 0.015 at 0.90).

The minimum (diagnose.MIN_SIGNAL_GROUPS) is the smallest S of the grid from which, in every
setting, both intervals cover in at least 85% of runs, at that S and every larger S of the grid:
a nominal 95% percentile interval of a ratio of sums undercovers somewhat at every S here, and
0.85 is 0.90 less three standard errors (0.015) of one cell, so a true coverage of 0.90 passes the worst
of the 16 cells an S has.
The per-group sums come from diagnose.group_sums (grpo_ba's token_weights), never a formula typed
twice.
"""
from __future__ import annotations

import itertools
import sys

import torch

from grpo_ba import group_advantages
from grpo_ba_lab.analysis import diagnose

SEED = 20261207
GRID = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)
RUNS = 400                       # simulated runs per setting and S
POOL = 4000                      # groups with a signal per setting's population
TARGET = 0.85                    # asked of every cell: 0.90 less three standard errors of a cell of RUNS runs
SETTINGS = [{"group_size": g, "ratio": r, "log_sd": sd}
            for g, r, sd in itertools.product((4, 8), (1.9, 3.5), (0.4, 0.8))]
RIGHT_LENGTH, CAP = 100.0, 1024


def population(group_size: int, ratio: float, log_sd: float, generator: torch.Generator) -> torch.Tensor:
    """(POOL, 6) diagnose.group_sums rows of synthetic groups with a signal."""
    rows = []
    while sum(r.shape[0] for r in rows) < POOL:
        count = 1000
        chance = 0.05 + 0.9 * torch.rand(count, 1, generator=generator)
        rewards = (torch.rand(count, group_size, generator=generator) < chance).float().view(-1)   # (count * G,)
        centre = torch.where(rewards > 0, torch.tensor(RIGHT_LENGTH), torch.tensor(RIGHT_LENGTH * ratio))
        noise = torch.randn(rewards.shape, generator=generator) * log_sd
        lengths = (centre * torch.exp(noise - log_sd ** 2 / 2)).round().clamp(1, CAP)   # mean `centre` before the cap
        rows.append(diagnose.group_sums(group_advantages(rewards, group_size), lengths, group_size))
    return torch.cat(rows)[:POOL]


def coverage(pool: torch.Tensor, count: int, generator: torch.Generator) -> dict:
    """Coverage and median width of both intervals over RUNS runs of `count` groups from `pool`."""
    truth = diagnose.ratio_and_share(pool.sum(dim=0))
    picks = torch.stack([torch.randperm(pool.shape[0], generator=generator)[:count] for _ in range(RUNS)])
    runs = pool[picks]                                                            # (RUNS, count, 6)
    bounds = diagnose.bootstrap(runs, seed=int(torch.randint(0, 2 ** 31, (1,), generator=generator)))
    out = {}
    for name, true in zip(("ratio", "share"), truth):
        low, high = bounds[name][:, 0], bounds[name][:, 1]
        inside = (low <= true) & (true <= high)                                   # NaN bounds: not covered
        out[name] = (inside.double().mean().item(), torch.nanmedian(high - low).item())
    return out


def worst_line(worst: dict) -> str:
    """The summary of the worst coverage per number of groups, each count agreeing with its noun."""
    return ("worst coverage over the settings and both intervals: "
            + ", ".join(f"{diagnose.count_of(count, 'group')} {worst[count]:.3f}" for count in GRID))


def main(out=print) -> int:
    generator = torch.Generator().manual_seed(SEED)
    torch.manual_seed(SEED)
    out(f"diagnose's bootstrap interval ({diagnose.BOOTSTRAP_LEVEL:.0%}, {diagnose.BOOTSTRAP_RESAMPLES} resamples) "
        f"against the number of groups with a signal; {RUNS} simulated runs per cell, seed {SEED}")
    out("(python -m grpo_ba_lab.analysis.diagnose_min_groups; coverage: runs whose interval holds the population's "
        "value; width: median interval width)")
    out("")
    out(f"{'G':>2s} {'wrong/right':>11s} {'log-sd':>6s} {'groups':>6s}  {'ratio coverage':>14s} {'ratio width':>11s}  "
        f"{'share coverage':>14s} {'share width':>11s}")
    worst = {count: 1.0 for count in GRID}
    for setting in SETTINGS:
        pool = population(setting["group_size"], setting["ratio"], setting["log_sd"], generator)
        for count in GRID:
            found = coverage(pool, count, generator)
            worst[count] = min(worst[count], found["ratio"][0], found["share"][0])
            out(f"{setting['group_size']:>2d} {setting['ratio']:>11.1f} {setting['log_sd']:>6.1f} {count:>6d}  "
                f"{found['ratio'][0]:>14.3f} {found['ratio'][1]:>11.3f}  {found['share'][0]:>14.3f} "
                f"{found['share'][1]:>11.3f}")
    out("")
    out(worst_line(worst))
    minimum = next((count for at, count in enumerate(GRID) if all(worst[c] >= TARGET for c in GRID[at:])), None)
    out(f"minimum: {minimum} groups with a signal (the smallest of the grid from which every setting's coverage "
        f"is at least {TARGET:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
