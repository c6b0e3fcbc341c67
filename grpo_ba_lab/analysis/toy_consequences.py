"""grpo_ba_lab/analysis/toy_consequences.py -- do the paper's consequences show on the toy?

The toy shows the mechanism of each aggregation rule exactly; this module measures the
*consequences* the paper reports, on designs registered before they ran (registrations/,
docs/toy-designs.md): the last held-out accuracy, the peak, and the drop from the peak to
the last step, paired by seed between rules (grpo_ba_lab/analysis/paired_stats.py), and the
curves that explain them (entropy, the weight on the positive side, right and wrong lengths).

    python -m grpo_ba_lab.analysis.toy_consequences runs/d1-loop-gap --out runs/d1-loop-gap/report

Each design is a named set of grpo_ba.py flags (toy_tasks/designs.py); its runs are one
directory per (rule, seed) under one folder, as `python -m grpo_ba_lab.analysis.sweep --design NAME`
writes them (that command also writes this report). The report uses exactly the design's
registered runs, each with the design's settings in every key of args.json but the machine
keys (MACHINE_KEYS), all on one CPU model; it prints every (pair, metric) row with its label
(primary, secondary, post hoc) and its verdict (holds, contradicted, not detected with the
difference it could have seen), the primaries judged after Holm within the design.
"""
from __future__ import annotations

import argparse
import math
import os

from grpo_ba_support.args import RULES
from grpo_ba_lab.analysis import paired_stats
from grpo_ba_support import run as grpo_ba_run
from grpo_ba_lab.plumbing import run_dirs
from grpo_ba_lab import designs
from toy_tasks.designs import DESIGNS


def design_args(name: str, **overrides):
    """grpo_ba.Args of a named design, as `--design NAME` parses them (the rule, seed and
    output directory are overrides)."""
    import dataclasses

    from grpo_ba_lab import lab_args
    return dataclasses.replace(lab_args.parse_args(["--design", name]), **overrides)


def step0_statistics(name: str, cache_dir: str, seed: int = 0, batches: int = 4, eval_prompts: int = 729,
                     shipped: tuple[str, str] | None = None) -> dict:
    """The design's step-0 statistics on a seed, as its step-0 rollouts measure them:
    `batches` batches of P * G sampled responses (forced prefixes included) from the
    warmed-up policy, and greedy accuracy on the first `eval_prompts` held-out prompts.
    `shipped`: (file, sha256) of a warm-up file to start from instead of the design's own."""
    import torch

    import grpo_ba
    from toy_tasks import length_stats
    args = design_args(name, seed=seed, eval_prompts=eval_prompts, cache_dir=cache_dir)
    policy, tokenizer, task = step0_policy(args, shipped)
    lengths, rewards = (torch.tensor(x) for x in step0_batches(args, batches, (policy, tokenizer, task)))
    accuracy = grpo_ba.evaluate(policy, tokenizer, task, task.heldout[:eval_prompts], args)
    return {**length_stats(lengths, rewards), "reward": rewards.float().mean().item(), "accuracy": accuracy}


def step0_policy(args, shipped: tuple[str, str] | None = None):
    """(policy, tokenizer, task) a run of `args` starts from: the shipped warm-up file, or
    the run's own (cached) warm-up."""
    import grpo_ba
    from grpo_ba_lab.plumbing import lm_setup
    if shipped:
        policy, tokenizer = lm_setup.load_warmup_file(*shipped)
        return policy, tokenizer, lm_setup.toy_task(args, tokenizer)
    return lm_setup.build(args, lambda *a: None, grpo_ba.greedy_accuracy)


def step0_batches(args, batches: int, start=None) -> tuple[list[int], list[float]]:
    """(lengths, rewards) of the `batches` batches of P * G responses that steps 0..batches-1
    of a run of `args` would sample from its start, before any update (forced prefixes
    included). `start`: (policy, tokenizer, task), else step0_policy(args)."""
    import random

    import grpo_ba
    policy, tokenizer, task = start or step0_policy(args)
    lengths, rewards = [], []
    for b in range(batches):
        step_seed = grpo_ba_run.seed_step(args.seed, b)
        batch, batch_rewards, _ = grpo_ba.sample_groups(policy, tokenizer, task, grpo_ba.step_rows(task, step_seed, args),
                                                        random.Random(step_seed), args)
        lengths += batch.response_mask.sum(1).tolist()
        rewards += batch_rewards.float().tolist()
    return lengths, rewards


# ------------------------------------------------------------------ a design's units

def version(name: str) -> int:
    """The registration version of a design's current settings."""
    return designs.DESIGNS[name].get("version", designs.VERSION)


def crossed(name: str) -> bool:
    """Whether every seed of the design runs on every machine variant."""
    seeds = list(designs.DESIGNS[name]["seeds"].values())
    return all(s == seeds[0] for s in seeds)


def design_rules(name: str) -> tuple:
    """The rules a design registered: all three, or (regime-v4) the ones its primary reads."""
    return tuple(designs.DESIGNS[name].get("rules", RULES))


def units(name: str) -> list[tuple]:
    """[(unit, seed, variant)]: a design's runs of one rule. A unit is the seed, or in a
    crossed design (seed, variant): there a seed runs once on each variant."""
    both = crossed(name)
    return [((seed, variant) if both else seed, seed, variant)
            for seed, variant in designs.registered_seeds(name)]


def run_folder(name: str, regime: str, rule: str, seed: int, variant: str) -> str:
    """The folder of one run of a design, under the design's runs folder."""
    return f"{regime}-{rule}-s{seed}" + (f"-{variant}" if crossed(name) else "")


# ------------------------------------------------------------------ per-run numbers (pre-registered)

last_accuracy = paired_stats.last_accuracy


def peak_accuracy(metrics: list[dict]) -> float:
    """The best held-out accuracy of any evaluation, step 0 included."""
    _, acc = paired_stats.evaluations(metrics)
    return max(acc) if acc else float("nan")


def peak_to_last_drop(metrics: list[dict]) -> float:
    """peak - last held-out accuracy: 0 for a run that ends at its best, the size of the
    fall otherwise (the paper's token-aggregation collapse is a large one)."""
    return peak_accuracy(metrics) - last_accuracy(metrics)


def tail_accuracy(metrics: list[dict], last: int = 5) -> float:
    """Mean held-out accuracy of the last `last` evaluations (a less noisy 'end')."""
    _, acc = paired_stats.evaluations(metrics)
    tail = acc[-last:]
    return sum(tail) / len(tail) if tail else float("nan")


def _late_mean(key: str, last: int = 10):
    """Mean of a per-step metric over the last `last` training steps (the mechanism's end)."""
    def late(metrics: list[dict]) -> float:
        return paired_stats.mean_finite([m.get(key) for m in run_dirs.step_lines(metrics)[0]][-last:])
    return late


def _run_mean(key: str):
    def whole(metrics: list[dict]) -> float:
        return paired_stats.mean_finite(m.get(key) for m in run_dirs.step_lines(metrics)[0])
    return whole


METRICS = [("last_acc", "last held-out acc", last_accuracy),
           ("peak_acc", "peak held-out acc", peak_accuracy),
           ("drop", "peak-to-last drop", peak_to_last_drop),
           ("tail_acc", "mean of the last 5 evals", tail_accuracy),
           ("acc_area", "area under the acc curve (mean acc)", paired_stats.accuracy_area),
           # the mechanism (docs/toy-designs.md, version 2): lengths at the end, weight on right answers
           ("late_len_right", "right-answer length, last 10 steps", _late_mean("len_right")),
           ("late_len_wrong", "wrong-answer length, last 10 steps", _late_mean("len_wrong")),
           ("pos_share", "weight share on right answers, run mean", _run_mean("pos_share"))]


# ------------------------------------------------------------------ a design's runs: all of them, no others

# Keys of args.json that may differ between a design's runs: they say where a run writes
# (output_dir, resume, cache_dir), what it reports (log_every, save_every, report_to,
# completions) and where it runs (threads, device), never what it computes. The variant
# check below covers threads from run.json, and the device check the device a run used.
# Everything else, dtype and micro_batch_size included (each changes the floating-point
# path), must equal the design's settings; aggregator and seed name the run.
MACHINE_KEYS = ("output_dir", "resume", "cache_dir", "log_every", "save_every", "report_to",
                "completions", "threads", "device")
RUN_KEYS = ("aggregator", "seed")
# Settings added after some design's runs were made, with the value every run before them
# computed with: such a run's args.json lacks the key, and stands for that value only.
ADDED_LATER = {"truncated": "keep", "endless_slips": 0.0}


def expected_settings(name: str, rule: str, seed: int) -> dict:
    """args.json of (rule, seed) of design `name` as `--design NAME` writes it (JSON types)."""
    import dataclasses
    import json
    return json.loads(json.dumps(dataclasses.asdict(design_args(name, aggregator=rule, seed=seed))))


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def settings_problems(name: str, args: dict) -> list[str]:
    """Each key of a run's args.json that differs from its design's settings, by name."""
    expected = expected_settings(name, args.get("aggregator"), args.get("seed"))
    problems = []
    for key in sorted(set(expected) | set(args)):
        if key in MACHINE_KEYS or key in RUN_KEYS:
            continue
        if key not in args and ADDED_LATER.get(key, object()) == expected[key]:
            continue
        if key not in args:
            problems.append(f"{_flag(key)} missing from args.json "
                            f"(the design has {expected[key]!r})")
        elif key not in expected:
            problems.append(f"{_flag(key)} {args[key]!r}: not a setting of this grpo_ba.py")
        elif args[key] != expected[key]:
            problems.append(f"{_flag(key)} {args[key]} where the design has {expected[key]}")
    return problems


def _run_problems(name: str, run_dir: str, args: dict, metrics: list[dict], record: dict,
                  settings: bool = True, variant_name: str = "") -> list[str]:
    """Why one run cannot stand for (its rule, its unit) of design `name` ([] if it can):
    `variant_name` is the variant it must have run on (default: its seed's).
    settings=False: only whether it finished (a demo may change the design's flags and machine)."""
    problems = []
    differing = settings_problems(name, args) if settings else []
    if differing:
        problems.append("not this design's settings (" + "; ".join(differing) + ")")
    if not run_dirs.is_finished(run_dir, metrics, args.get("steps")):
        problems.append(f"unfinished: no evaluation after its last update (step {args.get('steps')})")
    if not settings:
        return problems
    variant_name = variant_name or designs.variant_of(name, args.get("seed"))
    variant = designs.VARIANTS[variant_name]
    for start in record.get("starts", []) or [{}]:
        machine = start.get("machine")
        if machine is None:
            problems.append("no machine record (run.json): trained before runs recorded their machine")
            break
        if machine["threads"] != variant["threads"] or machine["aten_cpu_capability"].lower() != variant["cpu_capability"]:
            problems.append(f"ran on threads {machine['threads']}, ATEN_CPU_CAPABILITY "
                            f"'{machine['aten_cpu_capability']}' where its seed's variant "
                            f"{variant_name} asks {variant['threads']} and '{variant['cpu_capability']}'")
            break
    for start in record.get("starts", []):
        device = (start.get("provenance") or {}).get("device", "cpu")
        if device != "cpu":          # --device auto takes a GPU where there is one
            problems.append(f"trained on {device}: a design's runs train on the CPU")
            break
    return problems


def cpu_model_problems(records: dict) -> list[str]:
    """One CPU model per design: {run_dir: run.json} -> a problem for each run (start) on a
    model other than the most common one, naming both ([] when all ran on one model)."""
    by_model = {}
    for run_dir, record in records.items():
        for start in record.get("starts", []):
            model = (start.get("machine") or {}).get("cpu_model")
            if model is not None:
                by_model.setdefault(model, set()).add(run_dir)
    if len(by_model) < 2:
        return []
    common = max(sorted(by_model), key=lambda m: len(by_model[m]))
    return [f"{run_dir}: ran on CPU {model!r} where the design's other runs ran on {common!r} "
            f"(one CPU model per design)"
            for model in sorted(by_model) if model != common for run_dir in sorted(by_model[model])]


def ran_on(record: dict) -> str:
    """The machine variant (designs.VARIANTS) a run's run.json says it ran on ('' if none)."""
    machine = ((record.get("starts") or [{}])[0]).get("machine") or {}
    return next((name for name, v in designs.VARIANTS.items()
                 if machine.get("threads") == v["threads"]
                 and str(machine.get("aten_cpu_capability", "")).lower() == v["cpu_capability"]), "")


def design_runs(runs_dir: str, name: str, seeds=None) -> tuple[dict, dict]:
    """({rule: {unit: metrics}}, {unit: run.json}) of design `name` under runs_dir: exactly
    its registered units (designs.units: seeds, or (seed, variant) in a crossed design) x
    three rules, each finished, on its machine variant, on the CPU, all on one CPU model, each
    with the design's settings in every key of args.json but MACHINE_KEYS. Anything missing,
    extra, duplicated or off is a ValueError that names every such run (and key), so a report
    can never be drawn from a chosen subset.
    `seeds`: expect only these registered seeds (the one-seed demo), not all of them."""
    registered = {seed for seed, _ in designs.registered_seeds(name)}
    left_out = set()
    if seeds is None and REGISTRATIONS.get(name, {}).get("time_limited"):
        kept = time_limited_seeds(runs_dir, name)     # the registered stopping rule
        left_out, registered = registered - set(kept), set(kept)
    if seeds is not None:
        if not set(seeds) <= registered:
            raise ValueError(f"design {name}: seed(s) {sorted(set(seeds) - registered)} are not registered "
                             f"(seeds {sorted(registered)})")
        registered = set(seeds)
    expected = {unit: v for unit, seed, v in units(name) if seed in registered}   # unit -> variant
    rules = design_rules(name)
    both = crossed(name)
    found, problems = {}, []
    for run_dir, args in run_dirs.saved_args(runs_dir):
        if args.get("seed") in left_out and args.get("design") == name:
            continue                              # after the time limit's last complete seed
        metrics = grpo_ba_run.read_metrics(os.path.join(run_dir, "metrics.jsonl"))
        record = grpo_ba_run.read_run_record(run_dir)
        # in a crossed design the variant a run ran on is part of what it stands for
        unit = (args.get("seed"), ran_on(record)) if both else args.get("seed")
        key = (args.get("aggregator"), unit)
        if key in found:
            problems.append(f"{run_dir}: duplicate of {found[key][0]} (rule {key[0]}, {_unit_text(unit)})")
            continue
        found[key] = (run_dir, metrics, record)
        if args.get("design") != name:
            problems.append(f"{run_dir}: a run of design {args.get('design')!r}, not {name!r}")
        elif unit not in expected or key[0] not in rules:
            problems.append(f"{run_dir}: extra: (rule {key[0]}, {_unit_text(unit)}) is not registered for "
                            f"{name} (seeds {sorted(registered)})")
        else:
            problems += [f"{run_dir}: {p}" for p in _run_problems(name, run_dir, args, metrics, record,
                                                                   seeds is None, expected[unit])]
    if seeds is None and not designs.DESIGNS[name].get("any_cpu_model"):
        problems += cpu_model_problems({run_dir: record for run_dir, _, record in found.values()})
    missing = [(rule, unit) for unit in expected for rule in rules if (rule, unit) not in found]
    if missing:
        problems.append(f"missing under {runs_dir}: " + ", ".join(f"{r} {_unit_text(u)}" for r, u in missing)
                        + f" (python -m grpo_ba_lab.analysis.sweep --design {name} --output-dir {runs_dir} trains them)")
    if problems:
        raise ValueError(f"design {name}: the report needs exactly its registered runs:\n  " + "\n  ".join(problems))
    by_rule = {rule: {unit: found[(rule, unit)][1] for unit in expected} for rule in rules}
    return by_rule, {unit: found[("token", unit)][2] for unit in expected}


def time_limited_seeds(runs_dir: str, name: str) -> list[int]:
    """A time-limited design's seeds (its registration's stopping rule): the longest prefix of
    its seeds, in the order its sweep runs them, whose every rule is finished on every variant
    under runs_dir. A seed after the first incomplete one is left out even if it finished."""
    finished = set()
    for run_dir, args in run_dirs.saved_args(runs_dir):
        if args.get("design") != name:
            continue
        metrics = grpo_ba_run.read_metrics(os.path.join(run_dir, "metrics.jsonl"))
        if run_dirs.is_finished(run_dir, metrics, args.get("steps")):
            variant = ran_on(grpo_ba_run.read_run_record(run_dir)) if crossed(name) else ""
            finished.add((args.get("aggregator"), args.get("seed"), variant))
    order = list(dict.fromkeys(seed for seed, _ in designs.registered_seeds(name)))
    kept = []
    for seed in order:
        variants = [v for s, v in designs.registered_seeds(name) if s == seed]
        if not all((rule, seed, v if crossed(name) else "") in finished
                   for rule in design_rules(name) for v in variants):
            break
        kept.append(seed)
    return kept


def _unit_text(unit) -> str:
    return f"seed {unit[0]} on {unit[1] or 'no known variant'}" if isinstance(unit, tuple) else f"seed {unit}"


def by_variant_units(name: str, by_rule: dict | None = None) -> dict:
    """{variant: [(unit, seed)]}: the units each variant's own interval is over (only those
    in by_rule, when a time limit kept fewer than the registered seeds)."""
    out = {}
    present = set(by_rule["token"]) if by_rule else None
    for unit, seed, variant in units(name):
        if present is not None and unit not in present:
            continue
        out.setdefault(variant, []).append((unit, seed))
    return out


# ------------------------------------------------------------------ runs -> tables

def load(runs_dir: str, finished_only: bool = True) -> dict:
    """{rule: {seed: metrics}} of every run under runs_dir (one design); a run still going
    (run_dirs.is_finished) is left out unless finished_only is False."""
    by_rule = {}
    for run_dir, args, metrics in run_dirs.saved_runs(runs_dir):
        if finished_only and not run_dirs.is_finished(run_dir, metrics, args["steps"]):
            continue
        by_rule.setdefault(args["aggregator"], {})[args["seed"]] = metrics
    return by_rule


def saved_design(runs_dir: str) -> str:
    """The named design the runs under runs_dir were trained with ('' if none); runs of
    several named designs in one folder are a ValueError (no report mixes designs)."""
    names = sorted({args.get("design") for _, args in run_dirs.saved_args(runs_dir)} & set(DESIGNS))
    if len(names) > 1:
        raise ValueError(f"{runs_dir} holds runs of several designs ({', '.join(names)}): one folder per design")
    return names[0] if names else ""


def step0_stats(by_rule: dict) -> dict:
    """Step-0 statistics of the design (the three rules of a seed share step 0)."""
    runs = [m for by_seed in by_rule.values() for m in by_seed.values() if m]
    pick = lambda key: paired_stats.mean_finite(m[0].get(key) for m in runs)
    return {"acc": pick("accuracy"), "wrong_over_right": pick("wrong_over_right"), "std_over_mean": pick("std_over_mean"),
            "len_right": pick("len_right"), "len_wrong": pick("len_wrong"), "reward": pick("reward_mean")}


def per_rule_table(by_rule: dict) -> str:
    lines = ["| rule | seeds | " + " | ".join(label + " (mean; per seed)" for _, label, _ in METRICS) + " |",
             "|---|---|" + "---|" * len(METRICS)]
    for rule in RULES:
        runs = by_rule.get(rule, {})
        seeds = sorted(runs)
        cells = []
        for _, _, fn in METRICS:
            values = [fn(runs[s]) for s in seeds]
            cells.append(f"{paired_stats.mean_finite(values):.3f}; " + " ".join(f"{v:.3f}" for v in values))
        lines.append(f"| {rule} | {len(seeds)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def paired_rows(by_rule: dict) -> list[dict]:
    """paired_stats.paired_rows of one design's runs, on this module's METRICS."""
    return paired_stats.paired_rows({("design", rule): by_seed for rule, by_seed in by_rule.items()}, METRICS)


def paired_table(by_rule: dict) -> str:
    lines = ["| pair | metric | seeds | mean difference [95% interval] | interval excludes 0 |", "|---|---|---|---|---|"]
    for r in paired_rows(by_rule):
        verdict = "n/a" if r["low"] is None else ("yes" if r["excludes_zero"] else "no")
        lines.append(f"| {r['pair']} | {r['metric']} | {r['n']} | {paired_stats._fmt_interval(r)} | {verdict} |")
    return "\n".join(lines) + "\n"


# What each design's registration (registrations/<design>-v<version>.md) fixes for its
# report: its primaries ((pair, metric key), at most 2: Holm within the design), the metrics
# chosen after its runs began (post hoc), and the values an earlier version claimed, which a
# row's pooled interval may exclude (a second statement, never the verdict). Every other row is
# secondary. Version 2 registered no primary; its
# mechanism metrics were added after the demo's runs and while loop-gap's were going.
MECHANISM_KEYS = ("late_len_right", "late_len_wrong", "pos_share")
# balanced's weight share is 1/2 by formula and token's follows the lengths: a check that
# the rules do what they say, not a finding
MANIPULATION_CHECKS = ("pos_share",)
# Rows whose two rules are equal by their formulas: no test, the reason instead of a verdict
# (their per-seed differences are floating-point noise, at most BY_CONSTRUCTION_TOLERANCE).
BY_CONSTRUCTION = {("balanced - sequence", "pos_share"):
                   "balanced and sequence both give right answers one half of the weight, by formula"}
BY_CONSTRUCTION_TOLERANCE = 1e-6
IDENTICAL = "identical by construction"
REGISTRATIONS = {
    # registered as `demo` (registrations/demo-v2.md); renamed when the demo moved to strong-band's world
    "demo-v2": dict(version=2, primaries=(), post_hoc=MECHANISM_KEYS, file="registrations/demo-v2.md",
                    earlier={("balanced - sequence", "last_acc"): 0.155,
                             ("balanced - token", "last_acc"): 0.080}),
    "loop-gap": dict(version=2, primaries=(), post_hoc=MECHANISM_KEYS,
                     earlier={("balanced - token", "last_acc"): 0.042}),
    "spread-room": dict(version=2, primaries=(), post_hoc=(),
                        earlier={("balanced - sequence", "last_acc"): 0.035}),
    "tilde-gap": dict(version=2, primaries=(), post_hoc=(), earlier={}),
    # version 3: two primaries, registered before any of its runs (registrations/demo-band-v3.md);
    # earlier: version 1's claims for the demo's world
    "demo-band": dict(version=3, primaries=(("balanced - token", "last_acc"),
                                            ("balanced - sequence", "last_acc")),
                      post_hoc=(), earlier={("balanced - sequence", "last_acc"): 0.155,
                                            ("balanced - token", "last_acc"): 0.080}),
    # registrations/strong-band-v3.md: both primaries are balanced - token (the paper's central
    # comparison where the coupling is strong); the earlier values are demo-band's (weak
    # coupling); no accuracy verdict unless token's run-mean weight share on right answers,
    # averaged over token's runs, is at most 0.40 (the manipulation check, registered)
    "strong-band": dict(version=3, primaries=(("balanced - token", "last_acc"),
                                              ("balanced - token", "acc_area")),
                        post_hoc=(), earlier={("balanced - token", "last_acc"): 0.008,
                                              ("balanced - token", "acc_area"): 0.016,
                                              ("balanced - sequence", "last_acc"): 0.039},
                        earlier_name="demo-band's weak-coupling value", time_limited=True,
                        earlier_note=" (design demo-band, a different world: both can be true)",
                        manipulation=dict(rule="token", key="pos_share", most=0.40)),
    # registrations/endless-band-v3.md: the paper's stability claim, the drop from the peak to
    # the last evaluation first, then the last accuracy; the same manipulation check as
    # strong-band; no earlier value (the probe's seeds were exploratory and confirm nothing)
    "endless-band": dict(version=3, primaries=(("balanced - token", "drop"),
                                               ("balanced - token", "last_acc")),
                         post_hoc=(), earlier={}, time_limited=True,
                         manipulation=dict(rule="token", key="pos_share", most=0.40)),
}
# The regime design's levels (registrations/regime-v3.md): one design whose three primaries read
# several levels (grpo_ba_lab/analysis/regime_design.py judges them), so no level has its own.
for _name in designs.REGIME_LEVELS.values():
    REGISTRATIONS[_name] = dict(version=3, primaries=(), post_hoc=(), earlier={}, time_limited=True,
                                file="registrations/regime-v3.md", earlier_name="the earlier value")
# The confirmatory regime design (registrations/regime-v4.md): one primary across its two levels,
# judged by grpo_ba_lab/analysis/regime_v4.py; its stopping rule is the registered n, not a clock.
for _name in designs.REGIME_V4_LEVELS.values():
    REGISTRATIONS[_name] = dict(version=4, primaries=(), post_hoc=(), earlier={},
                                file="registrations/regime-v4.md", earlier_name="the earlier value")
# Designs read from a data file (registrations/NAME.json, grpo_ba_lab/analysis/registered_design.py
# judges their rows across levels), whose worlds a registered rule chose: no level has its own rows.
for _name, _design in designs.DESIGNS.items():
    if _design.get("data_file"):
        REGISTRATIONS[_name] = dict(version=_design["version"], primaries=(), post_hoc=(), earlier={},
                                    file=_design["data_file"].replace(".json", ".md"),
                                    earlier_name="the earlier value")
# Whose earlier values a design's rows may exclude: this project's own, never the paper's.
for _registration in REGISTRATIONS.values():
    _registration.setdefault("earlier_name", "this project's version-1 toy value")


def registration_file(name: str) -> str:
    """Where design `name`'s registration lies, relative to the repository root."""
    registration = REGISTRATIONS[name]
    return registration.get("file") or f"registrations/{name}-v{registration['version']}.md"


def row_label(name: str, pair: str, key: str) -> str:
    """primary / secondary / post hoc, as the design's registration fixed it before its runs."""
    registration = REGISTRATIONS[name]
    label = ("primary" if (pair, key) in registration["primaries"] else
             "post hoc" if key in registration["post_hoc"] else "secondary")
    return label + ("; manipulation check" if key in MANIPULATION_CHECKS else "")


def claim_rows(name: str, by_rule: dict) -> list[dict]:
    """Every (pair of rules, metric) of the design: paired_stats.claim_test over its seeds
    per machine variant, its label, its verdict (holds / contradicted / not detected; the
    primaries after Holm within the design) and that verdict in words."""
    registration = REGISTRATIONS[name]
    tests = {}
    for rule_a, rule_b in paired_stats.PAIRS:
        pair = f"{rule_a} - {rule_b}"
        for key, label, fn in METRICS:
            by_variant = {variant: {seed: fn(by_rule[rule_a][unit]) - fn(by_rule[rule_b][unit])
                                    for unit, seed in pairs}
                          for variant, pairs in by_variant_units(name, by_rule).items()}
            test = paired_stats.claim_test(by_variant, registration["earlier"].get((pair, key)))
            tests[(pair, key)] = {**test, "pair": pair, "key": key, "metric": label,
                                  "label": row_label(name, pair, key)}
    verdicts = paired_stats.design_verdicts(tests, registration["primaries"])
    failed = manipulation_failed(name, by_rule)
    rows = []
    primaries = len(registration["primaries"])
    for key, row in tests.items():
        if key in BY_CONSTRUCTION and _identical(row):
            rows.append({**row, "verdict": IDENTICAL, "verdict_text": f"{IDENTICAL} ({BY_CONSTRUCTION[key]}); no test"})
            continue
        if key in registration["primaries"]:      # Holm's first step tests at alpha / m
            row["claim_detectable"] = paired_stats.claim_detectable(
                row, paired_stats.ALPHA / primaries)
        word, excluded = verdicts[key]
        if failed and key[1] in ACCURACY_KEYS:     # the registered condition: no accuracy verdict
            rows.append({**row, "verdict": NO_VERDICT, "verdict_text": f"{NO_VERDICT} ({failed})"})
            continue
        holm = f" (Holm over {primaries} primaries)" if key in registration["primaries"] else ""
        text = paired_stats.verdict_text(row, word, excluded=excluded, after_verdict=holm,
                                         earlier_name=registration.get("earlier_name", "the earlier value"),
                                         earlier_note=registration.get("earlier_note", ""))
        rows.append({**row, "verdict": word, "verdict_text": text})
    return rows


def _identical(test: dict) -> bool:
    """Whether every part of a claim_test is within BY_CONSTRUCTION_TOLERANCE of 0 (pooled and
    each variant's interval ends)."""
    parts = [test, *test["variants"].values()]
    return all(abs(p[end]) <= BY_CONSTRUCTION_TOLERANCE for p in parts for end in ("mean", "low", "high")
               if p.get(end) is not None)


# The accuracy rows: what a registered manipulation check withholds when it fails.
ACCURACY_KEYS = ("last_acc", "peak_acc", "drop", "tail_acc", "acc_area")
NO_VERDICT = "no verdict"


def _manipulation(name: str, by_rule: dict):
    """(check, value): a design's registered manipulation check {rule, key, most} and the mean
    over that rule's runs of its per-run METRICS value ((None, None) if it registered none)."""
    check = REGISTRATIONS[name].get("manipulation")
    if not check:
        return None, None
    fn = dict((key, f) for key, _, f in METRICS)[check["key"]]
    return check, paired_stats.mean_finite(fn(m) for m in by_rule[check["rule"]].values())


def manipulation_text(name: str, by_rule: dict) -> str:
    """The registered manipulation check's outcome, as the report prints it ('' if none)."""
    check, value = _manipulation(name, by_rule)
    if not check:
        return ""
    outcome = ("passed" if value <= check["most"] else
               "failed: the design claims no accuracy verdict")
    return (f"Manipulation check (registered): {check['rule']}'s {check['key']} (weight share on right "
            f"answers, run mean) averaged {value:.3f} over its runs; at most {check['most']:.2f} "
            f"required: {outcome}.\n\n")


def manipulation_failed(name: str, by_rule: dict) -> str:
    """Why a design's registered manipulation check failed ('' when it passed or the design
    registered none; strong-band: token's run-mean weight share on right answers must be at
    most 0.40, or the coupling was not strong and no accuracy verdict is made)."""
    check, value = _manipulation(name, by_rule)
    if not check or value <= check["most"]:
        return ""
    return (f"the manipulation failed: {check['rule']}'s {check['key']} averaged {value:.3f} over its "
            f"runs, above the registered {check['most']:.2f}")


def _interval(d: dict) -> str:
    return paired_stats._fmt_interval(d) if d["n"] > 1 else f"{d['mean']:+.3f} (1 seed)"


def claims_table(name: str, by_rule: dict) -> str:
    variants = list(DESIGNS[name]["seeds"])
    lines = ["| pair | metric | label | seeds | pooled mean [95% interval] | "
             + " | ".join(f"{v}: own [95% interval]" for v in variants) + " | verdict |",
             "|---|---|---|---|---|" + "---|" * len(variants) + "---|"]
    for r in claim_rows(name, by_rule):
        lines.append(f"| {r['pair']} | {r['metric']} | {r['label']} | {r['n']} | {_interval(r)} | "
                     + " | ".join(_interval(r["variants"][v]) for v in variants)
                     + f" | {r['verdict_text']} |")
    return "\n".join(lines) + "\n"


CLAIM_RULE = ("A row's verdict is against 0: it holds when its pooled 95% interval excludes 0 and "
              f"each machine variant's own interval, over at least {paired_stats.MIN_VARIANT_SEEDS} "
              "seeds, excludes 0 on the same side; contradicted when it holds with the other sign "
              "than an earlier version's value; otherwise not detected, with the smallest difference "
              "the whole rule detects at 80% power. Whether the pooled interval excludes an earlier "
              "version's value is a second statement after the verdict, never the verdict. "
              "Primaries are judged after Holm within the design; every other row is secondary or "
              "post hoc, as labelled. A row whose two rules are equal by their formulas reads identical "
              "by construction and gets no test")


def seeds_table(name: str, by_rule: dict, records: dict) -> str:
    """One row per seed: its variant, the machine and warm-up it started from, its step 0."""
    lines = ["| seed | variant | CPU, kernels, threads | warm-up (source, sha256) | step-0 acc | wrong/right | std/mean |",
             "|---|---|---|---|---|---|---|"]
    for unit in sorted(records):
        seed, variant = unit if isinstance(unit, tuple) else (unit, designs.variant_of(name, unit))
        start = records[unit]["starts"][0]
        m, w = start["machine"], start.get("warmup") or {}
        first = by_rule["token"][unit][0]
        lines.append(f"| {seed} | {variant} | {m['cpu_model']}, {m['cpu_capability']}, {m['threads']} | "
                     f"{w.get('source', '?')}, {str(w.get('sha256', ''))[:12]}{_draws_text(w)} | {first.get('accuracy', float('nan')):.3f} | "
                     f"{first.get('wrong_over_right', float('nan')):.2f} | {first.get('std_over_mean', float('nan')):.2f} |")
    return "\n".join(lines) + "\n"


def _draws_text(warmup: dict) -> str:
    """A band warm-up's draws: which one entered the band, at which step."""
    draws = warmup.get("draws")
    if not draws:
        return ""
    return (f"; draw {len(draws)} of seed {draws[-1]['seed']} stopped at warm-up step "
            f"{draws[-1]['steps']}")


def design_report_text(name: str, by_rule: dict, records: dict) -> str:
    """consequences.md of a design: its seeds, then every (pair, metric) row with its label
    and verdict, then the per-rule table."""
    seeds = sorted({seed for _, seed, _ in units(name)})
    kept = sorted({unit[0] if isinstance(unit, tuple) else unit for unit in by_rule["token"]})
    how = ("each on every variant" if crossed(name) else "each on one variant")
    count = (f"{len(seeds)} seeds" if len(kept) == len(seeds) else
             f"{len(kept)} of its {len(seeds)} registered seeds ({kept[0]}-{kept[-1]}: the first "
             f"seeds finished on every variant when the registered time limit came)" if kept else
             f"none of its {len(seeds)} registered seeds")
    return (f"Design {name} (version {version(name)}, registered in {registration_file(name)}): "
            f"{count}, {how}, each run with its own warm-up, over the machine variants "
            f"{', '.join(DESIGNS[name]['seeds'])}.\n\n" + seeds_table(name, by_rule, records) +
            "\n" + manipulation_text(name, by_rule) + f"Every row ({CLAIM_RULE}):\n\n" + claims_table(name, by_rule) + "\n"
            + spread_text(name, by_rule) + step0_text(by_rule) + "Per rule:\n\n"
            + per_rule_table(by_rule))


def spread_text(name: str, by_rule: dict) -> str:
    """The primaries' sd of the paired differences (pooled and per variant) and what the whole
    rule could detect with them: what the registration's power statement assumed, measured."""
    lines = [f"- {r['pair']}, {r['metric']}: sd {r['sd']:.3f} pooled, "
             + ", ".join(f"{v['sd']:.3f} on {k}" for k, v in r["variants"].items() if v["sd"] is not None)
             + f"; the whole rule detects {r['claim_detectable']:.3f} at 80% power"
             for r in claim_rows(name, by_rule)
             if r["label"].startswith("primary") and r["sd"] is not None]   # 1 seed: no sd
    return ("The primaries' spread (sd of the paired differences):\n\n" + "\n".join(lines) + "\n\n"
            if lines else "")


def step0_text(by_rule: dict) -> str:
    s = step0_stats(by_rule)
    return (f"Step 0: greedy held-out accuracy {s['acc']:.3f}, wrong/right {s['wrong_over_right']:.2f} "
            f"(right {s['len_right']:.1f}, wrong {s['len_wrong']:.1f} tokens), std/mean {s['std_over_mean']:.2f}, "
            f"sampled reward {s['reward']:.2f} (mean over the runs' step-0 rollouts).\n\n")


def report_text(by_rule: dict) -> str:
    return (step0_text(by_rule) + "Per rule:\n\n" + per_rule_table(by_rule) +
            "\nPaired by seed (mean [95% Student t interval] of the per-seed difference):\n\n" + paired_table(by_rule))


# ------------------------------------------------------------------ the mechanism curves

def _smooth(values, window: int = 10):
    out = []
    for i in range(len(values)):
        chunk = [v for v in values[max(0, i - window + 1):i + 1] if v is not None and math.isfinite(v)]
        out.append(sum(chunk) / len(chunk) if chunk else float("nan"))
    return out


PANELS = [("accuracy", "held-out greedy accuracy", False), ("entropy", "entropy per token", True),
          ("pos_share", "weight share on right answers (own rule)", True), ("len_right", "mean length, right answers", True),
          ("len_wrong", "mean length, wrong answers", True), ("wrong_over_right", "wrong/right mean length", True),
          ("reward_mean", "sampled reward", True), ("truncated_frac", "truncated fraction", True)]


def mechanism_figure(by_rule: dict, path: str, title: str = ""):
    from grpo_ba_lab.analysis import plots                     # matplotlib, Agg
    fig, axes = plots.plt.subplots(2, 4, figsize=(17, 7))
    for ax, (key, label, smooth) in zip(axes.flat, PANELS):
        for rule in RULES:
            if rule not in by_rule:
                continue
            steps, values, _ = plots.mean_over_seeds(by_rule[rule].values(), key)
            ax.plot(steps, _smooth(values) if smooth else values, color=plots.COLORS[rule], label=rule,
                    marker=None if smooth else ".", lw=1.4, ls="--" if rule == "sequence" else "-")   # seq = BA at 1/2
        ax.set_title(label + (" (10-step mean)" if smooth else ""), fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes.flat[0].legend()
    n = min(len(v) for v in by_rule.values()) if by_rule else 0
    fig.suptitle(f"{title} mean over {n} runs per rule".strip())
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plots.plt.close(fig)


def report(runs_dir: str, out: str, figure: str = "", title: str = "", log=print, seeds=None,
           checked=None) -> str:
    """consequences.md (a design's: its seeds, every row with its verdict, per rule; other
    runs: step 0, per rule, paired) and the mechanism figure; returns the report's text.
    `seeds`: the runs are only these seeds of the design (the demo's one seed): checked the
    same way, and no claim is made from them.
    `checked`: design_runs' result when the caller has already checked the runs."""
    os.makedirs(out, exist_ok=True)
    name = saved_design(runs_dir)
    if name:                                       # exactly the registered runs, or an error naming the others
        by_rule, records = checked or design_runs(runs_dir, name, seeds)
        text = (design_report_text(name, by_rule, records) if seeds is None else
                f"Design {name}, seed(s) {', '.join(map(str, seeds))} only: no claim is made from them "
                f"(`python -m grpo_ba_lab.analysis.sweep --design {name}` runs all {len(designs.registered_seeds(name))}).\n\n"
                + seeds_table(name, by_rule, records) + "\n" + report_text(by_rule))
    else:
        by_rule = load(runs_dir)
        if not by_rule:
            raise ValueError(f"no finished runs (args.json + metrics.jsonl) under {runs_dir!r}")
        text = report_text(by_rule)
    with open(os.path.join(out, "consequences.md"), "w") as f:
        f.write(text)
    figure = figure or os.path.join(out, "mechanism.png")
    mechanism_figure(by_rule, figure, title)
    log(text)
    log(f"wrote {os.path.join(out, 'consequences.md')}, {figure}")
    return text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs_dir")
    parser.add_argument("--out", default="", help="where consequences.md and mechanism.png go (default: runs_dir)")
    parser.add_argument("--title", default="")
    parser.add_argument("--figure", default="", help="where the mechanism figure goes (default: <out>/mechanism.png)")
    args = parser.parse_args(argv)
    report(args.runs_dir, args.out or args.runs_dir, args.figure, args.title)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
