"""grpo_ba_lab/analysis/paired_stats.py -- compare the aggregation rules paired by seed, with intervals.

The three rules of one seed start from the same warmed-up weights and draw the same
prompts, so their runs are pairs, not independent samples: the seed-to-seed spread
(one warm-up may simply be luckier) cancels in the differences. For each pair of
rules and each seed s we take d_s = metric(rule A, s) - metric(rule B, s) and report

    mean d  +-  t_{0.975, n-1} * sd(d) / sqrt(n)        (Student t interval, n seeds)

An interval that excludes 0 is a difference the seeds support; one that contains 0 says
only that no difference was detected at this number of seeds, never that there is none:
how large a difference the seeds could have seen is the detectable difference below.
With one seed there is no interval.

A design's claim (docs/toy-designs.md, "The claim rule") has three verdicts:

- holds: the pooled interval over the seeds excludes 0 AND, on every machine variant, that
  variant's own interval over its own seeds (at least MIN_VARIANT_SEEDS) excludes 0 on
  the same side. Every part can fail, so each part is a test with power of its own;
- contradicted: it holds with the other sign than the value an earlier version claimed;
- not detected: neither; printed with the smallest difference detectable at 80% power.

The verdict is always against 0, and it leads the row. Whether the pooled interval excludes
an earlier version's value is a second, separate statement after it, marked as no verdict
("Not a verdict: the pooled interval excludes this project's version-1 toy value +0.080").

Smallest difference detectable at 80% power, two-sided alpha = 0.05, n pairs whose
differences have standard deviation sd (the usual t approximation):

    delta_80 = (t_{1 - alpha/2, n-1} + t_{0.80, n-1}) * sd / sqrt(n)

and the seeds a registration needs to detect delta: the smallest n with delta_80 <= delta.
At most MAX_PRIMARIES metrics per design are primary; Holm's step-down adjusts the
primaries' tests within the design.

    python -m grpo_ba_lab.analysis.sweep        # writes paired_differences.md beside table.md
    python -m grpo_ba_lab.analysis.paired_stats --interval -0.007 0.055 --seeds 6   # a row's power
"""
from __future__ import annotations

import argparse
import functools
import math
import statistics

from grpo_ba_lab.plumbing import run_dirs

PAIRS = [("balanced", "token"), ("balanced", "sequence"), ("token", "sequence")]

ALPHA = 0.05                 # two-sided level of every test and 95% interval
POWER = 0.80                 # the power a detectable difference is quoted at
MIN_VARIANT_SEEDS = 6        # a variant's own interval needs this many seeds to count
MAX_PRIMARIES = 2            # primary metrics per design (Holm within the design)

HOLDS, CONTRADICTED, NOT_DETECTED = "holds", "contradicted", "not detected"


# ------------------------------------------------------------------ Student t, exact, no scipy

def t_abs_cdf(x: float, df: int) -> float:
    """P(|T| <= x) for Student's t with integer df, by the closed form in theta = atan(x / sqrt(df))
    (a finite sum of powers of cos(theta): exact, and stable far in the tails)."""
    if df < 1 or int(df) != df:
        raise ValueError(f"degrees of freedom must be a positive integer (got {df})")
    x = abs(x)
    if math.isinf(x):
        return 1.0
    theta = math.atan(x / math.sqrt(df))
    sin, cos2 = math.sin(theta), math.cos(theta) ** 2
    if df % 2 == 0:          # sin(theta) * (1 + 1/2 c^2 + (1*3)/(2*4) c^4 + ...), df/2 terms
        term, total = 1.0, 1.0
        for k in range(1, df // 2):
            term *= cos2 * (2 * k - 1) / (2 * k)
            total += term
        return min(1.0, sin * total)
    if df == 1:
        return 2 * theta / math.pi
    term, total = 1.0, 1.0   # 2/pi * (theta + sin cos (1 + 2/3 c^2 + (2*4)/(3*5) c^4 + ...))
    for k in range(1, (df - 1) // 2):
        term *= cos2 * (2 * k) / (2 * k + 1)
        total += term
    return min(1.0, 2 / math.pi * (theta + sin * math.sqrt(cos2) * total))


def t_cdf(x: float, df: int) -> float:
    """P(T <= x) for Student's t with df degrees of freedom."""
    half = 0.5 * t_abs_cdf(x, df)
    return 0.5 + half if x >= 0 else 0.5 - half


@functools.lru_cache(maxsize=None)
def t_quantile(p: float, df: int) -> float:
    """The q with P(T <= q) = p, by bisection on t_cdf."""
    if not 0 < p < 1:
        raise ValueError(f"a quantile needs 0 < p < 1 (got {p})")
    if df < 1:
        raise ValueError("a t interval needs at least 2 paired values (df >= 1)")
    if p < 0.5:
        return -t_quantile(1 - p, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        low, high = high, 2 * high
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if t_cdf(mid, df) < p else (low, mid)
    return (low + high) / 2


def t_critical(df: int, level: float = 0.95) -> float:
    """The two-sided critical value t_{(1+level)/2, df}."""
    return t_quantile((1 + level) / 2, df)


def t_test_p(mean: float, sd: float, n: int, null: float = 0.0) -> float:
    """Two-sided p of the paired t test of `mean` (n differences, their sd) against `null`."""
    if n < 2:
        return 1.0
    if sd == 0:
        return 1.0 if mean == null else 0.0
    return 1.0 - t_abs_cdf((mean - null) / (sd / math.sqrt(n)), n - 1)


# ------------------------------------------------------------------ power

def detectable_difference(sd: float, n: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest true mean difference a two-sided paired t test at level `alpha` detects
    with probability `power`: (t_{1-alpha/2, n-1} + t_{power, n-1}) * sd / sqrt(n)."""
    if n < 2:
        return math.inf
    return (t_quantile(1 - alpha / 2, n - 1) + t_quantile(power, n - 1)) * sd / math.sqrt(n)


def sd_from_interval(low: float, high: float, n: int, level: float = 0.95) -> float:
    """The sd of the n paired differences behind a printed Student t interval [low, high]."""
    return (high - low) / 2 / t_critical(n - 1, level) * math.sqrt(n)


def seeds_for(delta: float, sd: float, alpha: float = ALPHA, power: float = POWER,
              most: int = 100_000) -> int:
    """Seeds (pairs) needed to detect a true difference `delta` at `power`, given the sd of
    the differences a registration expects: the smallest n with detectable_difference <= delta."""
    if delta <= 0 or sd < 0:
        raise ValueError(f"need delta > 0 and sd >= 0 (got {delta}, {sd})")
    z = statistics.NormalDist().inv_cdf
    # t quantiles exceed the normal's, so the normal's n is a lower bound to start from
    n = max(2, math.floor(((z(1 - alpha / 2) + z(power)) * sd / delta) ** 2))
    while detectable_difference(sd, n, alpha, power) > delta:
        n += 1
        if n > most:
            raise ValueError(f"more than {most} seeds to detect {delta} with sd {sd}")
    return n


# |mean difference| below this is float noise around an identity, never a difference
# (sequence's and balanced's weight shares are both 1/2 by formula; they differ by ~1e-8).
# Added after the version-2 demo's runs were seen: registrations/demo-v2.md records it.
EXACT_TIE = 1e-6


def difference_summary(diffs: list[float], level: float = 0.95) -> dict:
    """Mean of paired differences with its Student t interval, two-sided p against 0, sd and
    the difference detectable at 80% power: {"n", "mean", "sd", "low", "high", "p",
    "excludes_zero", "detectable"}; low/high/sd are None with fewer than 2 values, and an
    exact tie (|mean| < EXACT_TIE) excludes nothing (p = 1)."""
    if not diffs:
        raise ValueError("no paired values")
    n, mean = len(diffs), sum(diffs) / len(diffs)
    if n < 2:
        return {"n": n, "mean": mean, "sd": None, "low": None, "high": None, "p": 1.0,
                "excludes_zero": False, "detectable": math.inf}
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    half = t_critical(n - 1, level) * sd / math.sqrt(n)
    tie = abs(mean) < EXACT_TIE
    return {"n": n, "mean": mean, "sd": sd, "low": mean - half, "high": mean + half,
            "p": 1.0 if tie else t_test_p(mean, sd, n),
            "excludes_zero": not tie and (mean - half > 0 or mean + half < 0),
            "detectable": detectable_difference(sd, n)}


def paired_difference(a: list[float], b: list[float], level: float = 0.95) -> dict:
    """difference_summary of a_s - b_s over paired seeds."""
    if len(a) != len(b) or not a:
        raise ValueError(f"paired values need equal, non-zero counts (got {len(a)} and {len(b)})")
    return difference_summary([x - y for x, y in zip(a, b)], level)


# ------------------------------------------------------------------ the claim rule

def _sign(x: float) -> int:
    return (x > 0) - (x < 0)


def claim_test(by_variant: dict, earlier: float | None = None,
               min_variant_seeds: int = MIN_VARIANT_SEEDS) -> dict:
    """One difference (rule A - rule B on one metric) of a design run on machine variants.

    by_variant: {variant: {seed: d_s}}. The pooled interval is over seeds: a seed run on
    several variants counts once, with the mean of its differences (so a design that runs
    every seed on every variant does not confound the variant with the seeds). Each
    variant's own interval is over its own seeds. The claim is an intersection-union test:
    it holds only if every part rejects, so its p is the largest part's (1 if a variant has
    fewer than `min_variant_seeds` seeds or another sign). `earlier`: the value an earlier
    version claimed, which the pooled interval may exclude (p_earlier)."""
    per_seed = {}
    for diffs in by_variant.values():
        for seed, d in diffs.items():
            per_seed.setdefault(seed, []).append(d)
    pooled = difference_summary([sum(ds) / len(ds) for _, ds in sorted(per_seed.items())])
    variants = {v: difference_summary(list(d.values())) for v, d in by_variant.items()}
    direction = _sign(pooled["mean"])
    why = []
    if not pooled["excludes_zero"]:
        why.append("the pooled interval contains 0")
    for name, part in variants.items():
        if part["n"] < min_variant_seeds:
            why.append(f"variant {name} has {part['n']} seeds (its own interval needs "
                       f">= {min_variant_seeds})")
        elif not part["excludes_zero"] or _sign(part["mean"]) != direction:
            why.append(f"variant {name}'s own interval does not exclude 0 on the pooled side")
    parts_p = [pooled["p"]] + [v["p"] for v in variants.values()]
    short = any(v["n"] < min_variant_seeds for v in variants.values())
    against = any(_sign(v["mean"]) != direction for v in variants.values())
    p_claim = 1.0 if short or against or direction == 0 else max(parts_p)
    p_earlier = None
    if earlier is not None:
        p_earlier = t_test_p(pooled["mean"], pooled["sd"] or 0.0, pooled["n"], null=earlier)
    test = {**pooled, "variants": variants, "earlier": earlier, "p_claim": p_claim,
            "p_earlier": p_earlier, "why": why}
    return {**test, "claim_detectable": claim_detectable(test, ALPHA, min_variant_seeds)}


def claim_detectable(test: dict, alpha: float = ALPHA,
                     min_variant_seeds: int = MIN_VARIANT_SEEDS) -> float:
    """The smallest difference the whole rule of a claim_test detects with ~80% power: the
    pooled test at 80%, and each of k variants' own tests at 0.8**(1/k) (independent parts;
    conservative when the variants share seeds), all at level `alpha` (a primary: alpha / m,
    Holm's first step). Infinite when a variant is too short to count."""
    variants = test["variants"]
    if test["n"] < 2 or any(v["n"] < min_variant_seeds for v in variants.values()):
        return math.inf
    each = POWER ** (1 / len(variants)) if variants else POWER
    parts = [detectable_difference(test["sd"], test["n"], alpha)]
    parts += [detectable_difference(v["sd"], v["n"], alpha, each) for v in variants.values()]
    return max(parts)


def holm(p_values: dict) -> dict:
    """Holm's step-down adjusted p-values: sorted p_(1) <= ... <= p_(m), the i-th adjusted
    is max_{j <= i} min(1, (m - j + 1) p_(j)). A test rejects at alpha iff its adjusted
    p < alpha."""
    adjusted, running = {}, 0.0
    ordered = sorted(p_values.items(), key=lambda kv: kv[1])
    for rank, (key, p) in enumerate(ordered):
        running = max(running, min(1.0, (len(ordered) - rank) * p))
        adjusted[key] = running
    return adjusted


def verdict(test: dict, p_claim: float | None = None, p_earlier: float | None = None,
            alpha: float = ALPHA) -> str:
    """holds / contradicted / not detected for one claim_test, against 0 (p_claim: Holm-adjusted
    for a primary, else the test's own): contradicted only when the difference holds with the
    other sign than an earlier version's value. p_earlier is accepted for symmetry with
    earlier_excluded and plays no part: an excluded earlier value never decides the verdict."""
    p_claim = test["p_claim"] if p_claim is None else p_claim
    earlier = test["earlier"]
    if p_claim < alpha:
        return CONTRADICTED if earlier is not None and _sign(test["mean"]) != _sign(earlier) else HOLDS
    return NOT_DETECTED


def earlier_excluded(test: dict, p_earlier: float | None = None, alpha: float = ALPHA) -> bool:
    """Whether the pooled interval excludes the earlier version's value (p_earlier:
    Holm-adjusted for a primary): the second statement of a row, never its verdict."""
    p_earlier = test["p_earlier"] if p_earlier is None else p_earlier
    return test["earlier"] is not None and p_earlier is not None and p_earlier < alpha


def design_verdicts(tests: dict, primaries=(), alpha: float = ALPHA) -> dict:
    """{key: (verdict, earlier value excluded)} for a design's claim_tests; the (at most
    MAX_PRIMARIES) primaries are judged on Holm-adjusted p values within the design (both
    the test against 0 and the test against the earlier value), every other row on its own."""
    primaries = list(primaries)
    if len(primaries) > MAX_PRIMARIES:
        raise ValueError(f"{len(primaries)} primary metrics: a design registers at most "
                         f"{MAX_PRIMARIES}")
    missing = [k for k in primaries if k not in tests]
    if missing:
        raise ValueError(f"registered primaries without a row: {missing}")
    claim_p = holm({k: tests[k]["p_claim"] for k in primaries})
    earlier_p = holm({k: tests[k]["p_earlier"] for k in primaries
                      if tests[k]["p_earlier"] is not None})
    return {k: (verdict(t, claim_p.get(k), alpha=alpha), earlier_excluded(t, earlier_p.get(k), alpha))
            for k, t in tests.items()}


def verdict_text(test: dict, word: str, digits: int = 3, excluded: bool | None = None,
                 earlier_name: str = "the earlier value", after_verdict: str = "",
                 earlier_note: str = "") -> str:
    """The verdict as the docs print it, against 0 first: a not-detected row names what it could
    have seen, at what power; `after_verdict` (the report's "(Holm over 2 primaries)") follows the
    verdict; then, as a separate sentence marked as no verdict, the earlier value the pooled
    interval excludes (`excluded`: design_verdicts' second item; default: the test's own
    p_earlier), with `earlier_note` after the value."""
    if word == NOT_DETECTED:
        seen = test["claim_detectable"]
        if math.isinf(seen):        # too few seeds somewhere: no size of difference could hold
            short = [why for why in test["why"] if "seeds" in why]
            text = f"{word}; no difference could have been seen ({'; '.join(short)})"
        else:
            text = (f"{word}; differences of {seen:.{digits}f} or more would have been seen "
                    f"at {POWER:.0%} power")
    elif word == CONTRADICTED:
        text = f"{word} (holds with the other sign than {earlier_name} {test['earlier']:+.{digits}f})"
    else:
        text = word
    text += after_verdict
    if excluded is None:
        excluded = earlier_excluded(test)
    if excluded and word != CONTRADICTED:
        text += (f". Not a verdict: the pooled interval excludes {earlier_name} "
                 f"{test['earlier']:+.{digits}f}{earlier_note}")
    return text


# ------------------------------------------------------------------ per-run numbers

def evaluations(metrics: list[dict]) -> tuple[list[int], list[float]]:
    """(steps, held-out accuracy) of the steps that evaluated."""
    points = [(m["step"], m["accuracy"]) for m in metrics if m.get("accuracy") is not None]
    return [p[0] for p in points], [p[1] for p in points]


def accuracy_gain(metrics: list[dict], last: int = 3) -> float:
    """Mean of the last `last` evaluations minus the step-0 evaluation."""
    _, acc = evaluations(metrics)
    if len(acc) < 2:
        return float("nan")
    tail = acc[1:][-last:]
    return sum(tail) / len(tail) - acc[0]


def accuracy_area(metrics: list[dict]) -> float:
    """Area under the held-out accuracy curve over the run, divided by its length: the
    run's average accuracy (trapezoids between evaluations). Rewards learning early."""
    steps, acc = evaluations(metrics)
    if len(acc) < 2:
        return acc[0] if acc else float("nan")
    area = sum((s1 - s0) * (a0 + a1) / 2 for s0, s1, a0, a1 in zip(steps, steps[1:], acc, acc[1:]))
    return area / (steps[-1] - steps[0])


def late_reward(metrics: list[dict], fraction: float = 0.1) -> float:
    """Mean sampled reward over the last `fraction` of the steps."""
    rewards = [m["reward_mean"] for m in metrics if m.get("reward_mean") is not None]
    tail = rewards[-max(1, int(len(rewards) * fraction)):]
    return sum(tail) / len(tail) if tail else float("nan")


def mean_finite(values):
    values = [v for v in values if v is not None and math.isfinite(v)]
    return sum(values) / len(values) if values else float("nan")


def regime_stats(metrics: list[dict], window: int = 20) -> dict:
    """The regime statistics at step 0 and averaged over the last `window` steps."""
    tail = metrics[-window:]
    return {"step0_wrong_over_right": metrics[0].get("wrong_over_right") if metrics else None,
            "step0_std_over_mean": metrics[0].get("std_over_mean") if metrics else None,
            "late_wrong_over_right": mean_finite(m.get("wrong_over_right") for m in tail),
            "late_std_over_mean": mean_finite(m.get("std_over_mean") for m in tail)}


def last_accuracy(metrics: list[dict]) -> float:
    """Held-out accuracy of the last evaluation."""
    _, acc = evaluations(metrics)
    return acc[-1] if acc else float("nan")


METRICS = [("last_acc", "last held-out acc", last_accuracy),
           ("acc_area", "area under the acc curve (mean acc)", accuracy_area),
           ("late_reward", "sampled reward, last 10% of steps", late_reward)]


# ------------------------------------------------------------------ runs on disk -> table

def load_seed_runs(runs_dir: str) -> dict:
    """{(regime, rule): {seed: metrics}} from every run under runs_dir."""
    runs = {}
    for _, args, metrics in run_dirs.saved_runs(runs_dir):
        runs.setdefault((run_dirs.run_label(args), args["aggregator"]), {})[args["seed"]] = metrics   # regime or model
    return runs


def _fmt_interval(d: dict, digits: int = 3) -> str:
    if d["low"] is None:
        return f"{d['mean']:+.{digits}f} (no interval: 1 seed)"
    return f"{d['mean']:+.{digits}f} [{d['low']:+.{digits}f}, {d['high']:+.{digits}f}]"


def paired_rows(runs: dict, metrics=METRICS) -> list[dict]:
    """One row per (regime, pair of rules, metric): the paired difference over the seeds
    both rules have run. `metrics`: (key, label, per-run function) triples."""
    rows = []
    for regime in sorted({r for r, _ in runs}, key=str):
        for rule_a, rule_b in PAIRS:
            a_runs, b_runs = runs.get((regime, rule_a), {}), runs.get((regime, rule_b), {})
            seeds = sorted(set(a_runs) & set(b_runs))
            if not seeds:
                continue
            for key, label, fn in metrics:
                d = paired_difference([fn(a_runs[s]) for s in seeds], [fn(b_runs[s]) for s in seeds])
                rows.append({"regime": regime, "pair": f"{rule_a} - {rule_b}", "metric": label, "key": key, **d})
    return rows


def paired_table(runs: dict) -> str:
    """Markdown of paired_rows, with the number of seeds in words."""
    rows = paired_rows(runs)
    n_seeds = sorted({r["n"] for r in rows})
    lines = [f"Paired differences between rules, {', '.join(map(str, n_seeds))} seeds "
             f"(mean [95% Student t interval] of the per-seed difference; the rules of one seed share "
             f"the warm-up weights and the prompt order).", "",
             "| regime | pair | metric | seeds | mean difference [95% interval] | interval excludes 0 |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        verdict = "n/a" if r["low"] is None else ("yes" if r["excludes_zero"] else "no")
        lines.append(f"| {r['regime']} | {r['pair']} | {r['metric']} | {r['n']} | {_fmt_interval(r)} | {verdict} |")
    return "\n".join(lines) + "\n"


def learning_table(runs: dict) -> str:
    """Markdown: per (regime, rule), the per-seed accuracy gain and the regime statistics."""
    lines = ["| regime | rule | seeds | step-0 acc | gain (last 3 evals - step 0), per seed | mean gain | "
             "step-0 wrong/right | last-20 wrong/right | step-0 std/mean |",
             "|---|---|---|---|---|---|---|---|---|"]
    for (regime, rule), by_seed in sorted(runs.items(), key=str):
        seeds = sorted(by_seed)
        gains = [accuracy_gain(by_seed[s]) for s in seeds]
        stats = [regime_stats(by_seed[s]) for s in seeds]
        acc0 = mean_finite(evaluations(by_seed[s])[1][0] if evaluations(by_seed[s])[1] else None for s in seeds)
        lines.append(f"| {regime} | {rule} | {len(seeds)} | {acc0:.3f} | " + ", ".join(f"{g:+.2f}" for g in gains)
                     + f" | {mean_finite(gains):+.3f} | {mean_finite(s['step0_wrong_over_right'] for s in stats):.2f}"
                     f" | {mean_finite(s['late_wrong_over_right'] for s in stats):.2f}"
                     f" | {mean_finite(s['step0_std_over_mean'] for s in stats):.2f} |")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ the power of a printed row

def main(argv=None) -> int:
    """What a printed interval could see: its sd, the difference detectable at 80% power,
    and the seeds that would detect --delta (a registration's power calculation)."""
    parser = argparse.ArgumentParser(prog="python -m grpo_ba_lab.analysis.paired_stats",
                                     description=main.__doc__.split("\n\n")[0])
    parser.add_argument("--interval", nargs=2, type=float, metavar=("LOW", "HIGH"), required=True,
                        help="a printed 95%% Student t interval of a paired mean difference")
    parser.add_argument("--seeds", type=int, required=True, help="the pairs behind it")
    parser.add_argument("--delta", type=float, default=0.02, help="difference to plan seeds for")
    options = parser.parse_args(argv)
    low, high = options.interval
    sd = sd_from_interval(low, high, options.seeds)
    print(f"sd {sd:.4f}; detectable at 80% power with {options.seeds} seeds: "
          f"{detectable_difference(sd, options.seeds):.4f}; "
          f"seeds to detect {options.delta}: {seeds_for(options.delta, sd)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
