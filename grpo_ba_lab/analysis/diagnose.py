"""grpo_ba_lab/analysis/diagnose.py -- how biased is the aggregation of *your* run? Measured from its rollouts.

    python -m grpo_ba_lab.analysis.diagnose rollouts.jsonl                   # GRPO advantages (std scaling)
    python -m grpo_ba_lab.analysis.diagnose rollouts.jsonl --adv-scale none  # Dr. GRPO advantages
    python -m grpo_ba_lab.analysis.diagnose completions.jsonl --figure bias.png   # the same, and step by step

ROLLOUTS.jsonl holds one JSON object per response:

    {"group": "step3-prompt17", "reward": 1.0, "length": 212}

`group` is any id shared by the responses to one prompt (every group must have the
same size G), `reward` any finite number, `length` the response's tokens in the loss.
The whole file is read as one batch of P groups of G (docs/method.md §5). Other keys
are ignored, so a run's completions.jsonl (grpo_ba_lab/plumbing/completions.py: prompt, completion,
reward, length, group, step) is read as it is; when every line carries a whole-number
`step`, each step is also read as its own batch: a table of each rule's positive share
per step, and with --figure a plot of it.

Runs are never merged: lines may carry a `run` id (grpo_ba_lab.integrations.trl_balanced's
dump_rollouts writes one per trainer run, and appends), and a file holding several runs is
refused with one line listing them unless `--run ID` picks one. Lines without `run` (older
dumps, completions.jsonl) are one run, read as before.

Every number comes from grpo_ba's own functions, never from a formula typed twice:
advantages from `group_advantages`, the per-sign gradient weights from `sign_weights`
(autograd through the real clipped term and the real aggregators, docs/method.md §3),
the token rule's loss at ratio 1 from `clipped_token_loss` + `aggregate_token`. The
same `bias_metrics` (grpo_ba_lab/integrations/bias_metrics.py, torch only) feeds the TRL and
verl integrations' logged metrics, so a trainer's log and this report agree on one batch.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import textwrap
from typing import NamedTuple

import torch

from grpo_ba import AGGREGATORS, UsageError, group_advantages, mask_from_lengths
from grpo_ba_lab.integrations.bias_metrics import bias_metrics, loss_at_ratio_one


class RolloutsError(UsageError):
    """A rollouts file --diagnose cannot read: one line on stderr, exit code 2."""


# =====================================================================================
# The numbers: the bias (integrations/bias_metrics.py, shared with the trainers' logs), the regime
# =====================================================================================


def regime_stats(advantages: torch.Tensor, lengths: torch.Tensor) -> dict[str, float | None]:
    """Mean length of positive- and negative-advantage responses (Lbar+, Lbar-), their
    ratio Lbar- / Lbar+, and std/mean of all lengths (population std, as metrics.jsonl)."""
    lengths = lengths.double()                                 # exact means of whole numbers
    pos, neg = advantages > 0, advantages < 0
    len_pos = lengths[pos].mean().item() if pos.any() else None
    len_neg = lengths[neg].mean().item() if neg.any() else None
    mean = lengths.mean().item()
    return {"len_pos": len_pos, "len_neg": len_neg,
            "neg_over_pos": len_neg / len_pos if len_pos and len_neg is not None else None,
            "len_mean": mean, "len_min": lengths.min().item(), "len_max": lengths.max().item(),
            "std_over_mean": lengths.std(unbiased=False).item() / mean if mean > 0 else None}


# =====================================================================================
# Reading ROLLOUTS.jsonl: one response per line, grouped by id
# =====================================================================================


def _number(value, key, where, integer=False):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RolloutsError(f"{where}: {key!r} must be a finite number, got {json.dumps(value)}")
    if integer and (value < 0 or value != int(value)):
        raise RolloutsError(f"{where}: 'length' must be a whole number of tokens >= 0, got {json.dumps(value)}")
    return value


class Line(NamedTuple):
    """One response of a rollouts file, checked."""
    number: int                  # line number in the file, for messages
    group: str                   # the group id as JSON: any JSON id, 1 and "1" differ
    reward: float
    length: int | float
    step: int | None
    run: str | None


def _run_id(value, where):
    if value is None:
        return None
    if isinstance(value, str) and value.strip():
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)                                  # --run types it as text
    raise RolloutsError(f"{where}: 'run' must be a non-empty string or a whole number, "
                        f"got {json.dumps(value)}")


def _read_lines(path: str) -> list[Line]:
    """Every line of the file, checked, whatever run it belongs to."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for number, text in enumerate(_text_lines(f, path), start=1):
            where = f"{path} line {number}"
            if not text.strip():
                continue                          # blank lines (a trailing newline) are not responses
            try:
                row = json.loads(text)
            except json.JSONDecodeError as err:
                raise RolloutsError(f"{where}: not JSON ({err.msg})") from None
            if not isinstance(row, dict) or not {"group", "reward", "length"} <= row.keys():
                raise RolloutsError(f"{where}: need one object with 'group', 'reward' and 'length'")
            step = row.get("step")
            if step is not None and (isinstance(step, bool) or not isinstance(step, int) or step < 0):
                raise RolloutsError(f"{where}: 'step' must be a whole number >= 0, got {json.dumps(step)}")
            rows.append(Line(number, json.dumps(row["group"], sort_keys=True),
                             _number(row["reward"], "reward", where),
                             _number(row["length"], "length", where, integer=True), step,
                             _run_id(row.get("run"), where)))
    if not rows:
        raise RolloutsError(f"{path}: no responses")
    return rows


def _text_lines(f, path):
    """The file's lines; a binary file is one clear error, not a UnicodeDecodeError."""
    try:
        yield from f
    except UnicodeDecodeError:
        raise RolloutsError(f"{path}: not UTF-8 text; diagnose reads JSON lines") from None


def _runs_listed(rows: list[Line]) -> str:
    """'run A (16 responses, from line 1), run B (...)': what --run can pick."""
    counts: dict[str | None, list] = {}
    for line in rows:
        counts.setdefault(line.run, []).append(line.number)
    return ", ".join(f"run {run} ({len(lines)} responses, from line {lines[0]})" if run is not None
                     else f"{len(lines)} lines without a 'run' (from line {lines[0]})"
                     for run, lines in counts.items())


def one_run(path: str, rows: list[Line], run_id: str | None = None
            ) -> tuple[list[Line], str | None]:
    """The lines of one run and its id (None: the lines carry none). `run_id` picks a run;
    without it a file of several runs is refused, listing them: appended runs restart
    their group ids, so read as one batch they would merge into wrong groups."""
    ids = list(dict.fromkeys(line.run for line in rows))           # in order of first appearance
    if run_id is not None:
        if run_id not in ids:
            raise RolloutsError(f"{path}: no run {run_id!r}; the file holds {_runs_listed(rows)}")
        return [line for line in rows if line.run == run_id], run_id
    if len(ids) > 1:
        raise RolloutsError(f"{path} holds {len(ids)} runs, never read as one batch: "
                            f"{_runs_listed(rows)}; pick one with --run ID")
    return rows, ids[0]


def read_lines(path: str, run_id: str | None = None) -> tuple[list[Line], str | None]:
    """The checked lines of one run of the file (see one_run) and its id."""
    return one_run(path, _read_lines(path), run_id)


def _batch(path: str, rows, what: str = ""):
    """rows -> rewards (B,), lengths (B,), G, each group's rows contiguous (groups in
    order of first appearance, rows in file order); groups of unequal size refused."""
    groups: dict[str, list] = {}                  # group key -> [(reward, length)]
    first_line: dict[str, int] = {}
    for line in rows:
        groups.setdefault(line.group, []).append((line.reward, line.length))
        first_line.setdefault(line.group, line.number)
    keys = list(groups)
    size = len(groups[keys[0]])
    for key in keys:
        if len(groups[key]) != size:
            raise RolloutsError(f"{path} line {first_line[key]}: group {key} has {len(groups[key])} responses, "
                                f"group {keys[0]} (line {first_line[keys[0]]}) has {size}{what}; "
                                "--diagnose needs groups of equal size")
    if size < 2:
        raise RolloutsError(f"{path}: groups of {size} response{what}; a group needs at least 2 for a relative advantage")
    ordered = [row for key in keys for row in groups[key]]
    rewards = torch.tensor([r for r, _ in ordered], dtype=torch.float32)
    lengths = torch.tensor([int(length) for _, length in ordered], dtype=torch.float32)
    return rewards, lengths, size


def read_rollouts(path: str, rows=None, run_id=None):
    """-> rewards (B,), lengths (B,), G, with each group's rows contiguous (groups in
    order of first appearance, rows in file order). Refuses, naming the line, anything
    that is not one {"group", "reward", "length"} object per line or groups of unequal size,
    and a file of several runs unless `run_id` picks one. `rows`: one run's lines as
    read_lines returns them, when already read."""
    return _batch(path, read_lines(path, run_id)[0] if rows is None else rows)


def read_steps(path: str, rows=None, run_id=None) -> dict[int, tuple]:
    """{step: (rewards, lengths, G)}, each step's lines as one batch, steps in increasing
    order; {} when no line carries `step`. Lines with and without `step`, or one group
    spread over several steps, are refused naming the line. `rows`, `run_id`: as read_rollouts'."""
    rows = read_lines(path, run_id)[0] if rows is None else rows
    with_step = [line for line in rows if line.step is not None]
    if not with_step:
        return {}
    if len(with_step) != len(rows):
        number = next(line.number for line in rows if line.step is None)
        raise RolloutsError(f"{path} line {number}: no 'step', while other lines have one; "
                            "give every line its step, or none")
    step_of: dict[str, tuple] = {}
    for line in rows:
        first = step_of.setdefault(line.group, (line.step, line.number))
        if first[0] != line.step:
            raise RolloutsError(f"{path} line {line.number}: group {line.group} is in step {line.step} "
                                f"here and in step {first[0]} on line {first[1]}; "
                                "a group belongs to one step")
    by_step: dict[int, list] = {}
    for line in rows:
        by_step.setdefault(line.step, []).append(line)
    return {step: _batch(path, by_step[step], f" in step {step}") for step in sorted(by_step)}


def diagnose_steps(path: str, adv_scale: str = "std", rows=None, run_id=None) -> list[dict]:
    """One row per step (empty without steps): the step, its bias metrics (each rule's
    positive share, the token rule's loss at ratio 1) and its regime (Lbar+, Lbar-, gap)."""
    out = []
    for step, (rewards, lengths, group_size) in read_steps(path, rows, run_id).items():
        advantages = group_advantages(rewards, group_size, adv_scale)
        out.append({"step": step, "n_groups": rewards.numel() // group_size, "group_size": group_size,
                    **bias_metrics(advantages, lengths, group_size), **regime_stats(advantages, lengths)})
    return out


def diagnose(path: str, adv_scale: str = "std", rows=None, run_id=None) -> dict:
    """The whole file (one run of it) as one batch: advantages, regime statistics and bias
    metrics; with `run` when the lines name their run."""
    if rows is None:
        rows, run_id = read_lines(path, run_id)
    rewards, lengths, group_size = read_rollouts(path, rows)
    advantages = group_advantages(rewards, group_size, adv_scale)                         # (B,)
    no_signal = (advantages.view(-1, group_size) == 0).all(dim=1)                          # (P,)
    mask = mask_from_lengths(lengths)                                                      # (B, T)
    losses = {f"loss_at_ratio_one_{rule}": loss_at_ratio_one(advantages, mask, group_size, rule)
              for rule in AGGREGATORS}
    return {**bias_metrics(advantages, lengths, group_size), **regime_stats(advantages, lengths), **losses,
            "n_groups": rewards.numel() // group_size, "group_size": group_size,
            "n_responses": rewards.numel(), "groups_without_signal": int(no_signal.sum()),
            "adv_scale": adv_scale, **({"run": run_id} if run_id is not None else {})}


# =====================================================================================
# The report
# =====================================================================================


def _fmt(value, spec=".2f"):
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def reading(s: dict) -> str:
    """The paper's reading of this regime (docs/method.md §3, §6), with this file's numbers."""
    paper = ("The paper finds that a large gap between the lengths of positive and negative responses "
             "hurts token aggregation (its Qwen3-1.7B case) and that high length variance hurts sequence "
             "aggregation (its Qwen2.5-Math-7B case); Balanced Aggregation is meant to be robust to both.")
    if s["len_pos"] is None or s["len_neg"] is None:
        return paper + " Here no group has both signs of advantage, so no rule has a gradient to bias."
    longer, shorter, ratio = (("negative", "positive", s["neg_over_pos"]) if s["len_neg"] >= s["len_pos"]
                              else ("positive", "negative", 1 / s["neg_over_pos"]))
    return (paper + f" Here {longer} responses are {ratio:.2f}x as long as {shorter} ones, which gives the "
            f"positive side {_fmt(s['pos_share_token'], '.0%')} of token aggregation's gradient weight "
            f"(sequence {_fmt(s['pos_share_sequence'], '.0%')}, balanced {_fmt(s['pos_share_balanced'], '.0%')}), "
            f"and lengths spread with std/mean {_fmt(s['std_over_mean'])}: under sequence aggregation a token "
            f"gets 1/L_i of its response's weight, from 1/{s['len_max']:.0f} to 1/{max(s['len_min'], 1):.0f} here.")


def _named(path: str, run_id: str | None) -> str:
    return path if run_id is None else f"{path}, run {run_id}"


def format_report(path: str, s: dict) -> str:
    lines = [
        f"{_named(path, s.get('run'))}: {s['n_responses']} responses in {s['n_groups']} groups "
        f"of {s['group_size']} "
        f"(advantages: {s['adv_scale']} scaling; the whole file as one batch)",
        f"groups whose rewards are all equal (no gradient under any rule): {s['groups_without_signal']} of {s['n_groups']}",
        "",
        "regime",
        f"  mean length of positive-advantage responses  Lbar+       {_fmt(s['len_pos'], '8.1f')}",
        f"  mean length of negative-advantage responses  Lbar-       {_fmt(s['len_neg'], '8.1f')}",
        f"  gap                                          Lbar-/Lbar+ {_fmt(s['neg_over_pos'], '8.2f')}",
        f"  length spread                                std/mean    {_fmt(s['std_over_mean'], '8.2f')}",
        "",
        "rule       share of gradient weight on positive responses   loss at ratio 1",
        *(f"{rule:<10s} {_fmt(s[f'pos_share_{rule}'], '.3f'):<48s} {s[f'loss_at_ratio_one_{rule}']:+.4f}"
          for rule in AGGREGATORS),
        "",
        textwrap.fill("reading: " + reading(s), width=100, subsequent_indent="  "),
    ]
    keys = ("pos_share_token", "pos_share_sequence", "pos_share_balanced", "token_loss_at_ratio_one", "len_pos",
            "len_neg", "neg_over_pos", "std_over_mean", "len_mean", "n_groups", "group_size", "n_responses",
            "groups_without_signal", "adv_scale", *(("run",) if "run" in s else ()))
    summary = {k: (None if math.isnan(s[k]) else float(f"{s[k]:.6g}")) if isinstance(s[k], float) else s[k]
               for k in keys}                              # 6 significant digits, within float32 precision
    return "\n".join(lines + [json.dumps(summary)])


def format_steps(path: str, steps: list[dict], run_id: str | None = None) -> str:
    """The step-by-step table: each step's lines as one batch."""
    lines = [f"{_named(path, run_id)}, step by step (each step's responses as one batch):",
             "step   groups  positive share:  token  sequence  balanced    Lbar+     Lbar-  Lbar-/Lbar+  token loss at 1"]
    for s in steps:
        lines.append(f"{s['step']:>4d}  {s['n_groups']:>7d}                  {_fmt(s['pos_share_token'], '5.3f'):>5s}"
                     f"  {_fmt(s['pos_share_sequence'], '8.3f'):>8s}  {_fmt(s['pos_share_balanced'], '8.3f'):>8s}"
                     f"  {_fmt(s['len_pos'], '7.1f'):>7s}  {_fmt(s['len_neg'], '8.1f'):>8s}"
                     f"  {_fmt(s['neg_over_pos'], '11.2f'):>11s}  {s['token_loss_at_ratio_one']:+15.4f}")
    return "\n".join(lines)


def plot_steps(steps: list[dict], png: str, title: str = "") -> str:
    """Each rule's share of gradient weight on positive responses per step (0.5: no sign
    bias), and the mean lengths of positive and negative responses below it."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    from grpo_ba_lab.analysis.plots import COLORS   # each rule's colour in every figure
    x = [s["step"] for s in steps]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True, height_ratios=(3, 2))
    styles = {"token": "-", "sequence": "--", "balanced": ":"}     # sequence and balanced often coincide at 0.5
    for rule in AGGREGATORS:
        top.plot(x, [s[f"pos_share_{rule}"] for s in steps], styles.get(rule, "-"), marker="o", markersize=3,
                 linewidth=1.8, label=rule, color=COLORS[rule])
    top.axhline(0.5, color="grey", linewidth=0.8, linestyle="--")
    top.set_ylabel("share of gradient weight\non positive responses")
    top.set_ylim(0, 1)
    top.legend(loc="best", fontsize=8)
    top.set_title(title or "Aggregation bias step by step")
    nan = float("nan")
    bottom.plot(x, [nan if s["len_pos"] is None else s["len_pos"] for s in steps], label="Lbar+ (positive)")
    bottom.plot(x, [nan if s["len_neg"] is None else s["len_neg"] for s in steps], label="Lbar- (negative)")
    bottom.set_ylabel("mean length (tokens)")
    bottom.set_xlabel("step")
    bottom.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    bottom.legend(loc="best", fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(png)), exist_ok=True)
    fig.savefig(png, dpi=120)
    plt.close(fig)
    return png


def _check_figure_format(png: str):
    """An extension matplotlib cannot write is refused before anything is read or printed."""
    from matplotlib.backend_bases import FigureCanvasBase
    extension = os.path.splitext(png)[1].lstrip(".").lower()
    if extension and extension not in FigureCanvasBase.get_supported_filetypes():
        raise RolloutsError(f"--figure {png}: matplotlib cannot write .{extension} files; "
                            "use a .png name")


def run(path: str, adv_scale: str = "std", out=print, figure: str | None = None,
        run_id: str | None = None) -> dict:
    """`python -m grpo_ba_lab.analysis.diagnose PATH`: print the report; its last line is one JSON
    object. Lines with `step` first get the step-by-step table (and `figure`, a PNG).
    A file of several runs is refused unless `run_id` picks one (one_run)."""
    if figure:
        _check_figure_format(figure)
    rows, run_id = read_lines(path, run_id)        # parsed and checked once: the file can be large
    summary = diagnose(path, adv_scale, rows, run_id)
    steps = diagnose_steps(path, adv_scale, rows)
    if figure and not steps:
        raise RolloutsError(f"{path}: --figure plots the bias per step, and no line has a 'step'")
    if steps:
        out(format_steps(path, steps, run_id))
        if figure:
            title = f"{_named(os.path.basename(path), run_id)} ({adv_scale} advantages)"
            out(f"figure: {plot_steps(steps, figure, title=title)}")
        out("")
    out(format_report(path, summary))
    return summary


def main(argv=None) -> int:
    """python -m grpo_ba_lab.analysis.diagnose FILE [--adv-scale std|none] [--figure PNG]"""
    parser = argparse.ArgumentParser(
        prog="python -m grpo_ba_lab.analysis.diagnose",
        description="How biased is the loss aggregation of your run? Reads one JSON object per response "
                    "({group, reward, length}; a run's completions.jsonl as written) and reports, for the whole "
                    "file as one batch, each rule's share of gradient weight on positive-advantage responses, the "
                    "length regime and the token rule's loss at ratio 1 (docs/diagnose.md). Lines that carry "
                    "`step` are also reported step by step. Lines that carry `run` are never "
                    "merged across runs: a file of several runs needs --run. The last line "
                    "printed is one JSON object.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("file", metavar="FILE", help="rollouts or completions, one JSON object per line")
    parser.add_argument("--adv-scale", choices=("std", "none"), default="std",
                        help="advantages as GRPO (std: divided by the group's reward std) or Dr. GRPO (none)")
    parser.add_argument("--figure", metavar="PNG", default=None,
                        help="also plot each rule's positive share per step into this PNG (needs lines with 'step')")
    parser.add_argument("--run", metavar="ID", default=None,
                        help="read only the lines of this run (their 'run' key); "
                             "a file of several runs needs it")
    args = parser.parse_args(argv)
    try:
        run(args.file, args.adv_scale, figure=args.figure, run_id=args.run)
    except (RolloutsError, OSError) as err:
        print(f"python -m grpo_ba_lab.analysis.diagnose: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
