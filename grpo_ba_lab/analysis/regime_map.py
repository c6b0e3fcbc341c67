"""grpo_ba_lab/analysis/regime_map.py -- which aggregation rule wins where on the (gap, spread) plane.

The paper's diagnosis (docs/method.md §3): a length *gap* between wrong and right
answers hurts token aggregation, a length *spread* hurts sequence aggregation, and
balanced aggregation is robust to both. The toy has a knob for each (toy_tasks:
`gap_size`, how far a slip rambles; `spread_size`, how far half of all answers
ramble, right or wrong), so we can map the whole plane. Every cell gets its own
warm-up; in every cell the three rules of one seed share that warm-up and the prompt
order, so they are compared paired by seed (grpo_ba_lab/analysis/paired_stats.py) and a cell's winner is
the rule whose 95% interval excludes 0, else "tie". The map's axes are the *measured*
step-0 statistics of the policy's own rollouts (wrong/right mean length and
std/mean of lengths), not the knob values.

    python -m grpo_ba_lab.analysis.regime_map                     # 3 gaps x 3 spreads x 3 rules x --seeds seeds
    python -m grpo_ba_lab.analysis.regime_map --workers 2         # two runs at a time, one thread each
    python -m grpo_ba_lab.analysis.report runs/regime_map         # redraw regime_map.png / .md from the metrics

It takes every training flag of grpo_ba.py (`--steps`, `--lr`, ...) for all its runs.

Interrupted? Run the same command again: finished runs are skipped, a run stopped
with Ctrl-C resumes from its checkpoint, the rest start over.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import json
import math
import multiprocessing
import os
import sys
import time
from dataclasses import dataclass

from grpo_ba_lab.analysis import paired_stats
from grpo_ba_support.args import RULES, UsageError, arg, run_command
from grpo_ba_lab.lab_args import check_args, parse_command
from grpo_ba_support import run as grpo_ba_run
from grpo_ba_lab.plumbing import run_dirs
from toy_tasks import ToyWorld, designs

MAP_WARMUP_STEPS = 1000           # every cell: spread cells need as many as regime variance (grpo_ba.WARMUP_STEPS)
INDEX_FILE = "regime_map.json"     # marks a directory as a regime map; holds the grid and the wall times
WINNER_LABEL = {"balanced": "BA", "token": "token", "sequence": "seq", "tie": "tie", "n/a": "1 seed"}
MAP_METRICS = sorted((m for m in paired_stats.METRICS if m[0] in ("acc_area", "last_acc")),
                     key=lambda m: m[0])          # learning speed first, then where the run ends


# ------------------------------------------------------------------ the grid

@dataclasses.dataclass(frozen=True)
class Cell:
    gap_size: int       # how far a slip rambles: the length gap (0: none)
    spread_size: int    # how far half of all answers ramble, right or wrong: the spread (0: none)

    @property
    def name(self) -> str:
        return f"gap{self.gap_size}-spread{self.spread_size}"


def build_grid(gap_sizes, spread_sizes) -> list[Cell]:
    """Every (gap, spread) pair, gap-major; refuses a grid that cannot make a map."""
    sizes = {}
    for name, values in (("gap", gap_sizes), ("spread", spread_sizes)):
        try:
            sizes[name] = [int(v) for v in values]
        except ValueError:
            raise ValueError(f"--map-{name}-sizes takes whole numbers of tokens (got {' '.join(map(str, values))})") from None
        if not values or min(sizes[name]) < 0 or len(set(sizes[name])) != len(values):
            raise ValueError(f"--map-{name}-sizes needs distinct values >= 0 (got {' '.join(map(str, values))})")
    return [Cell(g, s) for g in sizes["gap"] for s in sizes["spread"]]


def longest_response(cells: list[Cell]) -> int:
    """Tokens the longest corpus answer of the grid can take: every cell samples up to
    this many, so none is cut short."""
    return max(ToyWorld("gap", gap_size=c.gap_size, spread_size=c.spread_size).longest_response() for c in cells)


def run_plan(base: str, cells: list[Cell], seeds: int, rules) -> list[tuple[Cell, str, int, str]]:
    """(cell, rule, seed, run directory) of every run, seed-major so that an early stop
    leaves whole seeds (three paired rules) in every cell rather than whole cells."""
    return [(cell, rule, seed, os.path.join(base, cell.name, f"{rule}-s{seed}"))
            for seed in range(seeds) for cell in cells for rule in rules]


# ------------------------------------------------------------------ one cell's verdict

def winner(difference: dict, rule_a: str, rule_b: str) -> str:
    """rule_a if the interval of a - b lies above 0, rule_b if below, else "tie"
    ("n/a" with one seed: no interval)."""
    if difference["low"] is None:
        return "n/a"
    if difference["low"] > 0:
        return rule_a
    if difference["high"] < 0:
        return rule_b
    return "tie"


def cell_summary(runs_by_rule: dict) -> dict:
    """{rule: {seed: metrics}} of one cell -> its measured step-0 statistics and, per
    pair of rules and per metric, the paired difference with its interval and winner."""
    all_runs = [m for by_seed in runs_by_rule.values() for m in by_seed.values() if m]
    stats = [paired_stats.regime_stats(m) for m in all_runs]
    summary = {"seeds": len(set.intersection(*(set(s) for s in runs_by_rule.values()))) if runs_by_rule else 0,
               "step0_wrong_over_right": paired_stats.mean_finite(s["step0_wrong_over_right"] for s in stats),
               "step0_std_over_mean": paired_stats.mean_finite(s["step0_std_over_mean"] for s in stats),
               "step0_acc": paired_stats.mean_finite(m[0].get("accuracy") for m in all_runs),
               "pairs": {}}
    for rule_a, rule_b in paired_stats.PAIRS:
        a_runs, b_runs = runs_by_rule.get(rule_a, {}), runs_by_rule.get(rule_b, {})
        seeds = sorted(set(a_runs) & set(b_runs))
        if not seeds:
            continue
        pair = summary["pairs"][f"{rule_a} - {rule_b}"] = {}
        for key, _, fn in MAP_METRICS:
            d = paired_stats.paired_difference([fn(a_runs[s]) for s in seeds], [fn(b_runs[s]) for s in seeds])
            pair[key] = {**d, "winner": winner(d, rule_a, rule_b)}
    return summary


# ------------------------------------------------------------------ runs on disk -> the map

def load_cells(runs_dir: str) -> dict:
    """{Cell: {rule: {seed: metrics}}} from every run under runs_dir."""
    cells = {}
    for _, args, metrics in run_dirs.saved_runs(runs_dir):
        cell = Cell(args["gap_size"], args.get("spread_size", 0))
        cells.setdefault(cell, {}).setdefault(args["aggregator"], {})[args["seed"]] = metrics
    return cells


def _fmt(d: dict) -> str:
    if d["low"] is None:
        return f"{d['mean']:+.3f} (1 seed)"
    return f"{d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}] **{WINNER_LABEL[d['winner']]}**"


def map_table(summaries: dict) -> str:
    """Markdown, one row per cell: knobs, measured step-0 statistics, paired differences."""
    pairs = [f"{a} - {b}" for a, b in paired_stats.PAIRS]
    head = " | ".join(f"{p.replace('balanced', 'BA').replace('sequence', 'seq')}: {label}"
                      for key, label, _ in MAP_METRICS for p in pairs)
    lines = ["Regime map: per cell, the paired difference between rules (mean [95% Student t interval] over "
             "seeds; the three rules of one seed share the cell's warm-up and the prompt order) and the winner "
             "(**tie** where the interval contains 0). Step-0 statistics are measured on the policy's own "
             "rollouts at step 0, averaged over the cell's runs.", "",
             "| gap_size | spread_size | seeds | step-0 acc | step-0 wrong/right | step-0 std/mean | " + head + " |",
             "|---|---|---|---|---|---|" + "---|" * (len(pairs) * len(MAP_METRICS))]
    for cell, s in sorted(summaries.items(), key=lambda kv: (kv[0].gap_size, kv[0].spread_size)):
        diffs = [_fmt(s["pairs"][p][key]) if p in s["pairs"] else "-" for key, _, _ in MAP_METRICS for p in pairs]
        lines.append(f"| {cell.gap_size} | {cell.spread_size} | {s['seeds']} | {s['step0_acc']:.3f} | "
                     f"{s['step0_wrong_over_right']:.2f} | {s['step0_std_over_mean']:.2f} | " + " | ".join(diffs) + " |")
    lines += ["", "Cells won, per pair of rules and metric:", ""]
    for key, label, _ in MAP_METRICS:
        for (rule_a, rule_b), p in zip(paired_stats.PAIRS, pairs):
            verdicts = [s["pairs"][p][key]["winner"] for s in summaries.values() if p in s["pairs"]]
            counts = ", ".join(f"{WINNER_LABEL[w]} {verdicts.count(w)}" for w in (rule_a, rule_b, "tie", "n/a")
                               if verdicts.count(w))
            lines.append(f"- {label}, {p}: {counts} (of {len(verdicts)} cells)")
    return "\n".join(lines) + "\n"


def plot_map(summaries: dict, path: str) -> str:
    """One panel per (metric, pair of rules): every cell a square at its measured
    (wrong/right, std/mean), coloured by the paired difference and labelled with the
    winner; thin lines join cells of equal knob values (the grid as the toy bent it)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    xy = {c: (s["step0_wrong_over_right"], s["step0_std_over_mean"]) for c, s in summaries.items()}
    cells = sorted((c for c in summaries if all(math.isfinite(v) and v > 0 for v in xy[c])),
                   key=lambda c: (c.gap_size, c.spread_size))   # a cell without right (or wrong) answers at step 0 has no x
    fig, axes = plt.subplots(len(MAP_METRICS), len(paired_stats.PAIRS), figsize=(18, 5.6 * len(MAP_METRICS)),
                             squeeze=False)
    for row, (key, label, _) in enumerate(MAP_METRICS):
        values = [summaries[c]["pairs"][p][key]["mean"] for c in cells for p in summaries[c]["pairs"]]
        scale = max([abs(v) for v in values if math.isfinite(v)] + [1e-3])
        for col, (rule_a, rule_b) in enumerate(paired_stats.PAIRS):
            ax, pair = axes[row][col], f"{rule_a} - {rule_b}"
            for knob in ("gap_size", "spread_size"):          # the grid's lines, in measured coordinates
                for value in sorted({getattr(c, knob) for c in cells}):
                    line = [xy[c] for c in cells if getattr(c, knob) == value]
                    line.sort(key=lambda p: p[0] if knob == "spread_size" else p[1])
                    ax.plot(*zip(*line), color="0.8", lw=0.8, zorder=1)
            shown = [c for c in cells if pair in summaries[c]["pairs"]]
            diffs = [summaries[c]["pairs"][pair][key] for c in shown]
            points = ax.scatter([xy[c][0] for c in shown], [xy[c][1] for c in shown], c=[d["mean"] for d in diffs],
                                cmap="RdBu", vmin=-scale, vmax=scale, marker="s", s=560, edgecolors="0.3", zorder=2)
            for c, d in zip(shown, diffs):
                ax.annotate(f"{WINNER_LABEL[d['winner']]}\n{d['mean']:+.3f}", xy[c], ha="center", va="center",
                            fontsize=5.5, zorder=3, color="white" if abs(d["mean"]) > 0.6 * scale else "black",
                            fontweight="bold" if d["winner"] not in ("tie", "n/a") else "normal")
                ax.annotate(f"g{c.gap_size} s{c.spread_size}", xy[c], xytext=(15, 0), textcoords="offset points",
                            ha="left", va="center", fontsize=6, color="0.45", zorder=3)   # the knobs, as in the table
            ax.set(title=f"{pair}: {label}", xlabel="step-0 wrong/right mean length (gap, log scale)",
                   ylabel="step-0 std/mean of lengths (spread)")
            if shown:
                ax.set_xscale("log")
                ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
                ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
                ax.set_xticks([0.8, 1, 1.25, 1.5, 2, 2.5, 3, 4])
            ax.margins(0.15)
            fig.colorbar(points, ax=ax, label=f"{rule_a} - {rule_b} (blue: {rule_a} higher)")
    seeds = sorted({s["seeds"] for s in summaries.values()})
    missing = len(summaries) - len(cells)
    fig.suptitle(f"Which rule wins where (toy, {'/'.join(map(str, seeds))} paired seeds per cell; "
                 "winner where the 95% interval excludes 0, else tie)"
                 + (f"\n{missing} cell(s) not drawn: no right or no wrong answer at step 0, so no wrong/right"
                    if missing else ""))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def report(runs_dir: str, figures_dir: str | None = None, log=print) -> list[str]:
    """regime_map.png and regime_map.md from the metrics under runs_dir."""
    figures_dir = figures_dir or runs_dir
    cells = load_cells(runs_dir)
    if not cells:
        raise ValueError(f"no runs (args.json + metrics.jsonl) under {runs_dir!r}")
    summaries = {cell: cell_summary(by_rule) for cell, by_rule in cells.items()}
    os.makedirs(figures_dir, exist_ok=True)
    table = map_table(summaries) + _timing_note(runs_dir, cells)
    table_path = os.path.join(figures_dir, "regime_map.md")
    with open(table_path, "w") as f:
        f.write(table)
    log(table)
    figure = plot_map(summaries, os.path.join(figures_dir, "regime_map.png"))
    log(f"wrote {figure}, {table_path}")
    return [figure, table_path]


def _timing_note(runs_dir: str, cells: dict) -> str:
    """The map's wall time as recorded by run_map, with the step time it came with."""
    steps = [m["step_time"] for by_rule in cells.values() for by_seed in by_rule.values()
             for metrics in by_seed.values() for m in metrics if m.get("step_time")]
    note = f"\n{sum(len(s) for r in cells.values() for s in r.values())} runs, mean step time {paired_stats.mean_finite(steps):.2f} s"
    index = os.path.join(runs_dir, INDEX_FILE)
    if os.path.exists(index):
        with open(index) as f:
            sessions = json.load(f).get("sessions", [])
        if sessions:
            note += "; wall time " + " + ".join(f"{s['wall_seconds'] / 60:.1f} min ({s['workers']} workers x "
                                                f"{s['threads']} thread, {s['runs_trained']} runs trained)" for s in sessions)
    return note + ".\n"


# ------------------------------------------------------------------ running the map

def _quietly(function, log_path, *args):
    """Run function(*args) in a worker process, its output into log_path."""
    os.makedirs(os.path.dirname(log_path) or ".", exist_ok=True)
    with open(log_path, "a", buffering=1) as log_file, contextlib.redirect_stdout(log_file), contextlib.redirect_stderr(log_file):
        return function(*args)


def _warm_up(args):
    from grpo_ba_lab.plumbing import lm_setup
    import torch
    torch.set_num_threads(args.threads)                # its share of the cores (train() sets its own)
    lm_setup.load_or_warmup_toy(args.cache_dir, lm_setup.toy_world(args), args.warmup_steps, lm_setup.warmup_seed(args))


def _train(args):
    import grpo_ba
    from grpo_ba_lab.train import train
    train(args)


@dataclass
class MapOptions:
    map_gap_sizes: tuple = arg(("0", "9", "18"), "the cells' --gap-size values (0: no gap)",
                               section="the map")
    map_spread_sizes: tuple = arg(("0", "8", "16"), "the cells' --spread-size values (0: no spread)")
    seeds: int = arg(5, "seeds per (cell, rule); rules are compared paired by seed")
    workers: int = arg(0, "runs trained at a time, one thread each (0: one per CPU core)")
    figures_dir: str = arg("", "where regime_map.png and .md go (default: the runs directory)")


def run_map(args, options: MapOptions, log=print) -> list[str]:
    """Warm up every cell, train every (cell, rule, seed) not yet finished,
    `options.workers` runs at a time, then draw the map. `args` is grpo_ba_args.Args,
    the settings of every run."""
    from tqdm import tqdm

    base = args.output_dir or "runs/regime_map"
    cells = build_grid(options.map_gap_sizes, options.map_spread_sizes)
    workers = options.workers or os.cpu_count() or 1
    threads = args.threads or 1                               # parallel runs: one thread each
    max_new_tokens = max(args.max_new_tokens, longest_response(cells))
    warmup_steps = args.warmup_steps or MAP_WARMUP_STEPS
    grpo_ba_run.prepare_output_dir(base)
    index_path = os.path.join(base, INDEX_FILE)
    index = {"sessions": []}
    if os.path.exists(index_path):                     # a map run before: keep its wall times
        with open(index_path) as f:
            index = json.load(f)
    index.update(gap_sizes=sorted({c.gap_size for c in cells}), spread_sizes=sorted({c.spread_size for c in cells}),
                 seeds=options.seeds, steps=args.steps, warmup_steps=warmup_steps, max_new_tokens=max_new_tokens)
    start = time.time()

    def cell_args(cell, **changes):
        return dataclasses.replace(args, regime="gap", gap_size=cell.gap_size, spread_size=cell.spread_size,
                                   threads=threads, warmup_steps=warmup_steps,
                                   max_new_tokens=max_new_tokens, **changes)

    todo, resumable = [], 0
    for cell, rule, seed, out in run_plan(base, cells, options.seeds, RULES):
        status = run_dirs.run_status(out, args.steps, log)   # restores lines a power cut lost
        if status == "finished":
            continue
        has_checkpoint = status == "resume"
        resumable += has_checkpoint
        todo.append((cell, cell_args(cell, aggregator=rule, seed=seed, output_dir=out,
                                     resume=out if has_checkpoint else "")))
    total = len(cells) * options.seeds * len(RULES)
    log(f"regime map: {len(cells)} cells x {len(RULES)} rules x {options.seeds} seeds = {total} runs of "
        f"{args.steps} steps in {base} ({warmup_steps} warm-up steps per cell, up to {max_new_tokens} new tokens); "
        f"{total - len(todo)} finished, {resumable} to resume, {len(todo) - resumable} to train; "
        f"{workers} workers x {threads} thread; each run's output in <its directory>.log")
    context = multiprocessing.get_context("spawn")       # fresh interpreters: no forked torch thread pools
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        try:
            cells_todo = sorted({cell for cell, _ in todo}, key=lambda c: (c.gap_size, c.spread_size))
            warmups = [pool.submit(_quietly, _warm_up, os.path.join(base, f"warmup-{c.name}.log"), cell_args(c))
                       for c in cells_todo]              # once per cell, before its runs need it
            for future in tqdm(concurrent.futures.as_completed(warmups), total=len(warmups), desc="warm-ups",
                               unit="cell", dynamic_ncols=True, disable=not warmups):
                future.result()
            runs = {pool.submit(_quietly, _train, a.output_dir + ".log", a): a for _, a in todo}
            bar = tqdm(total=total, initial=total - len(todo), desc="runs", unit="run", dynamic_ncols=True)
            for future in concurrent.futures.as_completed(runs):
                future.result()                           # a failed run stops the map, with its error
                bar.update(1)
                bar.write(f"done {runs[future].output_dir}")
            bar.close()
        except BaseException as err:                       # Ctrl-C or a failed run: queued runs never start
            pool.shutdown(wait=False, cancel_futures=True)
            if isinstance(err, KeyboardInterrupt):         # running runs finish their step and save a checkpoint
                log(f"interrupted: run the same command again to go on ({base} keeps every finished run)")
            raise
    if todo:
        index["sessions"].append({"wall_seconds": round(time.time() - start, 1), "workers": workers,
                                  "threads": threads, "runs_trained": len(todo)})
    with open(index_path, "w") as f:
        json.dump(index, f, indent=2)
    log(f"regime map: {len(todo)} runs trained in {(time.time() - start) / 60:.1f} min")
    return report(base, options.figures_dir or None, log)


def main(argv=None) -> int:
    def command():
        args, options = parse_command(argv, MapOptions, prog="python -m grpo_ba_lab.analysis.regime_map",
                                      description=__doc__.split("\n\n")[0])
        if args.model or args.resume or args.design in designs.DESIGNS:
            raise UsageError("the regime map maps the toy's own knobs: it runs without --model, "
                             "--resume and --design")
        if options.seeds < 1 or options.workers < 0:
            raise UsageError("--seeds must be at least 1, --workers at least 0 (0: one per CPU core)")
        check_args(args)
        run_map(args, options)
    return run_command("grpo_ba_lab.analysis.regime_map", command)


if __name__ == "__main__":
    sys.exit(main())
