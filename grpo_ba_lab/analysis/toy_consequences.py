"""grpo_ba_lab/analysis/toy_consequences.py -- do the paper's consequences show on the toy?

The toy shows the mechanism of each aggregation rule exactly; this module measures the
*consequences* the paper reports, on designs written down before they ran
(docs/toy-designs.md): the last held-out accuracy, the peak, and the drop from the peak
to the last step, paired by seed between rules (grpo_ba_lab/analysis/paired_stats.py), and the curves that
explain them (entropy, the weight on the positive side, right and wrong lengths).

    python -m grpo_ba_lab.analysis.toy_consequences runs/d1-loop-gap --out runs/d1-loop-gap/report

Each design is a named set of grpo_ba.py flags (toy_tasks/designs.py); its runs are one
directory per (rule, seed) under one folder, as `python -m grpo_ba_lab.analysis.sweep --design NAME`
writes them (that command also writes this report).
"""
from __future__ import annotations

import argparse
import math
import os

from grpo_ba_args import RULES
from grpo_ba_lab.analysis import paired_stats
from grpo_ba_lab.plumbing import run_io
from toy_tasks import designs
from toy_tasks.designs import DESIGNS


def design_args(name: str, **overrides):
    """grpo_ba.Args of a named design, as `--design NAME` parses them (the rule, seed and
    output directory are overrides)."""
    import dataclasses

    import grpo_ba
    return dataclasses.replace(grpo_ba.parse_args(["--design", name]), **overrides)


def step0_statistics(name: str, cache_dir: str, seed: int = 0, batches: int = 4, eval_prompts: int = 729,
                     shipped: tuple[str, str] | None = None) -> dict:
    """The design's step-0 statistics on a seed, as its step-0 rollouts measure them:
    `batches` batches of P * G sampled responses (forced prefixes included) from the
    warmed-up policy, and greedy accuracy on the first `eval_prompts` held-out prompts.
    `shipped`: (file, sha256) of a warm-up file to start from instead of the design's own."""
    import random

    import torch

    import grpo_ba
    from grpo_ba_lab.plumbing import lm_setup
    from toy_tasks import length_stats
    args = design_args(name, seed=seed, eval_prompts=eval_prompts, cache_dir=cache_dir)
    if shipped:
        policy, tokenizer = lm_setup.load_warmup_file(*shipped)
        task = lm_setup.toy_task(args, tokenizer)
    else:
        policy, tokenizer, task = lm_setup.build(args, grpo_ba.WARMUP_STEPS, log=lambda *a: None)
    lengths, rewards = [], []
    for b in range(batches):                       # what steps 0..batches-1 of a run sample, before any update
        step_seed = grpo_ba.seed_step(seed, b)
        batch, batch_rewards, _ = grpo_ba.sample_groups(policy, tokenizer, task, grpo_ba.step_rows(task, step_seed, args),
                                                        random.Random(step_seed), args)
        lengths.append(batch.response_mask.sum(1))
        rewards.append(batch_rewards)
    lengths, rewards = torch.cat(lengths), torch.cat(rewards)
    accuracy = grpo_ba.evaluate(policy, tokenizer, task, task.heldout[:eval_prompts], args)
    return {**length_stats(lengths, rewards), "reward": rewards.float().mean().item(), "accuracy": accuracy}


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
        return paired_stats.mean_finite([m.get(key) for m in run_io.step_lines(metrics)[0]][-last:])
    return late


def _run_mean(key: str):
    def whole(metrics: list[dict]) -> float:
        return paired_stats.mean_finite(m.get(key) for m in run_io.step_lines(metrics)[0])
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

def _run_problems(name: str, run_dir: str, args: dict, metrics: list[dict], record: dict,
                  settings: bool = True) -> list[str]:
    """Why one run cannot stand for (its rule, its seed) of design `name` ([] if it can).
    settings=False: only whether it finished (a demo may change the design's flags and machine)."""
    problems = []
    flags = designs.design_flags(name)
    differing = sorted(k for k, v in flags.items() if settings and k != "seed" and args.get(k) != v)
    if differing:
        problems.append("not this design's settings (" + ", ".join(f"--{k.replace('_', '-')} {args.get(k)} "
                                                                    f"where the design has {flags[k]}"
                                                                    for k in differing) + ")")
    if not run_io.is_finished(run_dir, metrics, args.get("steps")):
        problems.append(f"unfinished: no evaluation after its last update (step {args.get('steps')})")
    if not settings:
        return problems
    variant_name = designs.variant_of(name, args.get("seed"))
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
    return problems


def design_runs(runs_dir: str, name: str, seeds=None) -> tuple[dict, dict]:
    """({rule: {seed: metrics}}, {seed: run.json}) of design `name` under runs_dir: exactly
    its registered seeds x three rules, each finished, on its seed's machine variant, with
    the design's settings. Anything missing, extra, duplicated or off is a ValueError
    that names every such run, so a report can never be drawn from a chosen subset.
    `seeds`: expect only these registered seeds (the one-seed demo), not all of them."""
    registered = {seed for seed, _ in designs.registered_seeds(name)}
    if seeds is not None:
        if not set(seeds) <= registered:
            raise ValueError(f"design {name}: seed(s) {sorted(set(seeds) - registered)} are not registered "
                             f"(seeds {sorted(registered)})")
        registered = set(seeds)
    found, problems = {}, []
    for run_dir, args in run_io.saved_args(runs_dir):
        key = (args.get("aggregator"), args.get("seed"))
        metrics = run_io.read_metrics(os.path.join(run_dir, "metrics.jsonl"))
        record = run_io.read_run_record(run_dir)
        if key in found:
            problems.append(f"{run_dir}: duplicate of {found[key][0]} (rule {key[0]}, seed {key[1]})")
            continue
        found[key] = (run_dir, metrics, record)
        if args.get("design") != name:
            problems.append(f"{run_dir}: a run of design {args.get('design')!r}, not {name!r}")
        elif key[1] not in registered or key[0] not in RULES:
            problems.append(f"{run_dir}: extra: (rule {key[0]}, seed {key[1]}) is not registered for {name} "
                            f"(seeds {sorted(registered)})")
        else:
            problems += [f"{run_dir}: {p}" for p in _run_problems(name, run_dir, args, metrics, record,
                                                                   settings=seeds is None)]
    missing = [(rule, seed) for seed in sorted(registered) for rule in RULES if (rule, seed) not in found]
    if missing:
        problems.append(f"missing under {runs_dir}: " + ", ".join(f"{r} seed {s}" for r, s in missing)
                        + f" (python -m grpo_ba_lab.analysis.sweep --design {name} --output-dir {runs_dir} trains them)")
    if problems:
        raise ValueError(f"design {name}: the report needs exactly its registered runs:\n  " + "\n  ".join(problems))
    by_rule = {rule: {seed: found[(rule, seed)][1] for seed in sorted(registered)} for rule in RULES}
    return by_rule, {seed: found[("token", seed)][2] for seed in sorted(registered)}


# ------------------------------------------------------------------ runs -> tables

def load(runs_dir: str, finished_only: bool = True) -> dict:
    """{rule: {seed: metrics}} of every run under runs_dir (one design); a run still going
    (run_io.is_finished) is left out unless finished_only is False."""
    by_rule = {}
    for run_dir, args, metrics in run_io.saved_runs(runs_dir):
        if finished_only and not run_io.is_finished(run_dir, metrics, args["steps"]):
            continue
        by_rule.setdefault(args["aggregator"], {})[args["seed"]] = metrics
    return by_rule


def saved_design(runs_dir: str) -> str:
    """The named design the runs under runs_dir were trained with ('' if none); runs of
    several named designs in one folder are a ValueError (no report mixes designs)."""
    names = sorted({args.get("design") for _, args in run_io.saved_args(runs_dir)} & set(DESIGNS))
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


def claim_rows(name: str, by_rule: dict) -> list[dict]:
    """Per (pair of rules, metric): the paired difference pooled over all the design's
    seeds, and its mean on each machine variant's seeds. A claim *holds* when the pooled
    interval excludes 0 and every variant's mean has the pooled mean's sign."""
    rows = []
    for row in paired_rows(by_rule):
        rule_a, rule_b = row["pair"].split(" - ")
        fn = next(f for key, _, f in METRICS if key == row["key"])
        by_variant = {}
        for variant, seeds in DESIGNS[name]["seeds"].items():
            diffs = [fn(by_rule[rule_a][s]) - fn(by_rule[rule_b][s]) for s in seeds]
            by_variant[variant] = sum(diffs) / len(diffs)
        same_sign = all(math.copysign(1, v) == math.copysign(1, row["mean"]) and v != 0 for v in by_variant.values())
        rows.append({**row, "by_variant": by_variant, "holds": bool(row["excludes_zero"] and same_sign)})
    return rows


def claims_table(name: str, by_rule: dict) -> str:
    variants = list(DESIGNS[name]["seeds"])
    lines = ["| pair | metric | seeds | pooled mean [95% interval] | " + " | ".join(f"mean, {v}" for v in variants)
             + " | holds |", "|---|---|---|---|" + "---|" * len(variants) + "---|"]
    for r in claim_rows(name, by_rule):
        lines.append(f"| {r['pair']} | {r['metric']} | {r['n']} | {paired_stats._fmt_interval(r)} | "
                     + " | ".join(f"{r['by_variant'][v]:+.3f}" for v in variants) + f" | {'yes' if r['holds'] else 'no'} |")
    return "\n".join(lines) + "\n"


def seeds_table(name: str, by_rule: dict, records: dict) -> str:
    """One row per seed: its variant, the machine and warm-up it started from, its step 0."""
    lines = ["| seed | variant | CPU, kernels, threads | warm-up (source, sha256) | step-0 acc | wrong/right | std/mean |",
             "|---|---|---|---|---|---|---|"]
    for seed in sorted(records):
        variant, start = designs.variant_of(name, seed), records[seed]["starts"][0]
        m, w = start["machine"], start.get("warmup") or {}
        first = by_rule["token"][seed][0]
        lines.append(f"| {seed} | {variant} | {m['cpu_model']}, {m['cpu_capability']}, {m['threads']} | "
                     f"{w.get('source', '?')}, {str(w.get('sha256', ''))[:12]} | {first.get('accuracy', float('nan')):.3f} | "
                     f"{first.get('wrong_over_right', float('nan')):.2f} | {first.get('std_over_mean', float('nan')):.2f} |")
    return "\n".join(lines) + "\n"


def design_report_text(name: str, by_rule: dict, records: dict) -> str:
    """consequences.md of a design (version 2): its seeds, the claims pooled and per
    machine variant, then the per-rule and paired tables."""
    return (f"Design {name} (version {designs.VERSION}): {len(records)} seeds, each with its own warm-up, over the "
            f"machine variants {', '.join(DESIGNS[name]['seeds'])}.\n\n" + seeds_table(name, by_rule, records) +
            "\nClaims (a claim holds when the pooled interval excludes 0 and every variant's mean has its sign):\n\n"
            + claims_table(name, by_rule) + "\n" + report_text(by_rule))


def report_text(by_rule: dict) -> str:
    s = step0_stats(by_rule)
    return (f"Step 0: greedy held-out accuracy {s['acc']:.3f}, wrong/right {s['wrong_over_right']:.2f} "
            f"(right {s['len_right']:.1f}, wrong {s['len_wrong']:.1f} tokens), std/mean {s['std_over_mean']:.2f}, "
            f"sampled reward {s['reward']:.2f} (mean over the runs' step-0 rollouts).\n\n"
            "Per rule:\n\n" + per_rule_table(by_rule) +
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
    fig.suptitle(f"{title} mean over {n} seeds".strip())
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plots.plt.close(fig)


def report(runs_dir: str, out: str, figure: str = "", title: str = "", log=print, seeds=None,
           checked=None) -> str:
    """consequences.md (step 0, per rule, paired) and the mechanism figure of one design's
    runs; returns the report's text. `seeds`: the runs are only these seeds of the design
    (the demo's one seed): checked the same way, and no claim is made from them.
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
