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

Advantages as the trainer that wrote the file computed them: lines may carry `adv_scale`
("std" or "none"; TRL's "batch" and "normalize_then_sum" are read only with --adv-scale, which
their refusal names), `std` ("population", grpo_ba's; "unbiased", TRL's and verl's) and `eps`
(TRL 1.16: 1e-4; grpo_ba and verl: 1e-6); TRL's dump_rollouts writes all three. Lines without
them are grpo_ba's (population std, eps 1e-6); --adv-scale overrides the file's "std" or "none", and
a flag other than the one that reads a recorded batch scale is refused naming that one.

The report ends with a decision: where the run sits (its step-0 wrong/right length ratio with a
95% bootstrap interval over its groups, token's share on right answers with its interval, the
length spread) against the ranges of the toy's registered designs (assets/*-v3, and regime-v4's
two levels, a token - sequence design with no balanced runs): inside a design's range, outside it,
or borderline (the interval crosses an edge), what each covering design found (its primary rows,
each with its verdict: holds, contradicted, not detected with the detectable size), and a one-line
recommendation that counts the designs of one world once (WORLDS), says how each world it quotes
was chosen, and whose scope is those toy worlds. Below MIN_SIGNAL_GROUPS groups with a signal, or
with a right or a wrong answer in the loss, it makes none (the simulation:
grpo_ba_lab/analysis/diagnose_min_groups.py), nor when more than MAX_LEFT_OUT of the bootstrap's
resamples have no ratio (masked runs). Nor does it place a batch the designs do not speak to: one
after the run's first step (a resumed dump; the designs' ranges are step 0's; verl counts from 1, and
its lines say "trainer": "verl"), one with a reward other than 0 or 1 (every design is binary-reward),
or one with a response that has an advantage at length 0 (masked; no design masks any). A run inside a
design by its ratio whose length std/mean is outside the design's units' is borderline for it; a run
that every design the recommendation rests on covers only at an edge gets a "borderline: " recommendation,
a weaker one. The recommendation names the rule the run trains with (the dump's loss_type or
aggregation_rule) and speaks of token only for a token rule. A recommendation that names token says it is
the per-group rule (TRL's default 'dapo' pools the batch). The JSON line carries the decision. Lengths, ratio, spread and shares are over the responses in the loss (length > 0).

Every number comes from grpo_ba's own functions, never from a formula typed twice:
advantages from `group_advantages`, the per-sign gradient weights from `sign_weights`
(autograd through the real clipped term and the real aggregators, docs/method.md §3),
the token rule's loss at ratio 1 from `clipped_token_loss` + `aggregate_token`. The
same `bias_metrics` (grpo_ba_lab/integrations/bias_metrics.py, torch only) feeds the TRL and
verl integrations' logged metrics, so a trainer's log and this report agree on one batch.
"""
from __future__ import annotations

import argparse
import functools
import json
import math
import os
import sys
import textwrap
from typing import NamedTuple

import torch

from grpo_ba import AGGREGATORS, UsageError, group_advantages, mask_from_lengths, token_weights
from grpo_ba_lab.integrations.bias_metrics import bias_metrics, loss_at_ratio_one


class RolloutsError(UsageError):
    """A rollouts file diagnose cannot read: one line on stderr, exit code 2."""


# =====================================================================================
# The numbers: the bias (integrations/bias_metrics.py, shared with the trainers' logs), the regime
# =====================================================================================


def regime_stats(advantages: torch.Tensor, lengths: torch.Tensor) -> dict[str, float | None]:
    """Mean length of positive- and negative-advantage responses (Lbar+, Lbar-), their
    ratio Lbar- / Lbar+, and std/mean of the lengths (population std, as metrics.jsonl), all
    over the responses in the loss (L_i > 0), the ones the shares weigh: a response masked to
    length 0 (TRL's mask_truncated_completions) is in none of them, and n_length_zero counts it."""
    lengths = lengths.double()                                 # exact means of whole numbers
    in_loss = lengths > 0
    pos, neg = (advantages > 0) & in_loss, (advantages < 0) & in_loss
    len_pos = lengths[pos].mean().item() if pos.any() else None
    len_neg = lengths[neg].mean().item() if neg.any() else None
    kept = lengths[in_loss] if in_loss.any() else lengths
    mean = kept.mean().item()
    return {"len_pos": len_pos, "len_neg": len_neg,
            "neg_over_pos": len_neg / len_pos if len_pos and len_neg is not None else None,
            "len_mean": mean, "len_min": kept.min().item(), "len_max": kept.max().item(),
            "std_over_mean": kept.std(unbiased=False).item() / mean if mean > 0 else None,
            "n_length_zero": int((~in_loss).sum())}


def shares_are_identities(rewards: torch.Tensor, advantages: torch.Tensor, lengths: torch.Tensor,
                          group_size: int) -> bool:
    """Are sequence's and balanced's 1/2 shares and zero losses at ratio 1 identities of this batch,
    whatever its lengths? They are where rewards are binary and every group's advantages over the
    responses in the loss sum to 0: each sign then carries the same advantage mass, and k |A+| =
    (G - k) |A-| in every group. A masked response with an advantage (length 0) breaks it, and so do
    graded rewards for a balanced rule that weighs its signs by counts."""
    binary = bool(((rewards == rewards.min()) | (rewards == rewards.max())).all())
    kept = (advantages.double() * (lengths > 0)).view(-1, group_size)              # (P, G)
    if not bool((kept != 0).any()):
        return False              # no advantage in the loss: no share to be 1/2 (the report prints n/a)
    return binary and bool((kept.sum(dim=1).abs() <= 1e-6 * (kept.abs().sum(dim=1) + 1e-12)).all())


# =====================================================================================
# Reading ROLLOUTS.jsonl: one response per line, grouped by id
# =====================================================================================


def count_of(count: int, noun: str) -> str:
    """'1 group', '2 groups': every count diagnose prints agrees with its noun."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


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
    convention: tuple            # (adv_scale or None, std, eps): how the trainer computed advantages
    trainer: str | None = None   # "trl" or "verl" where the line says which trainer wrote it (its first step)
    trained: tuple = (None, None, None, None)   # (aggregation_rule, loss_type, adv_estimator, loss_agg_mode)
                                                # where the line says: TRL's dump_rollouts; verl's config keys


# The step number of each trainer's first training batch: TRL's global_step is 0 while its first batch
# is generated; verl's ray_trainer counts global_steps from 1 (it adds 1 before the first batch; its step
# 0 is the validation before training). Lines without `trainer` are read as starting at 0.
FIRST_STEP = {"trl": 0, "verl": 1}


def _run_id(value, where):
    if value is None:
        return None
    if isinstance(value, str) and value.strip():
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)                                  # --run types it as text
    raise RolloutsError(f"{where}: 'run' must be a non-empty string or a whole number, "
                        f"got {json.dumps(value)}")


STDS = ("population", "unbiased")       # grpo_ba's (divide by G), TRL's and verl's (by G - 1)
# Advantages diagnose does not compute, each a per-group scale times one constant of the whole batch,
# which cancels in the shares and the ratio: the flag that reads them, and what the constant is.
BATCH_SCALES = {
    "batch": ("none", "TRL's scale_rewards='batch' (each group centred, then divided by one std of the whole batch)"),
    "normalize_then_sum": ("std", "TRL's multi_objective_aggregation='normalize_then_sum' (each group standardised "
                                  "by its unbiased std + 1e-4, then divided by one std of the whole batch)"),
}
DEFAULT_CONVENTION = (None, "population", 1e-6)


def _convention(row, where):
    """(adv_scale or None, std, eps) of one line: how the trainer that wrote it computed advantages."""
    scale, std, eps = row.get("adv_scale"), row.get("std", "population"), row.get("eps", 1e-6)
    if scale is not None and scale not in ("std", "none", *BATCH_SCALES):   # BATCH_SCALES: decided in _conventions
        raise RolloutsError(f"{where}: 'adv_scale' {json.dumps(scale)}: diagnose computes per-group advantages, "
                            "'std' or 'none' (and reads TRL's 'batch' and 'normalize_then_sum' with a flag)")
    if std not in STDS:
        raise RolloutsError(f"{where}: 'std' must be 'population' or 'unbiased', got {json.dumps(std)}")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 <= eps < 1:
        raise RolloutsError(f"{where}: 'eps' must be a number in [0, 1), got {json.dumps(eps)}")
    return scale, std, float(eps)


def convention_of(path: str, rows: list[Line]) -> tuple:
    """The run's one (adv_scale or None, std, eps); a run whose lines disagree is refused."""
    found = list(dict.fromkeys(line.convention for line in rows))
    if len(found) > 1:
        number = next(line.number for line in rows if line.convention != found[0])
        raise RolloutsError(f"{path} line {number}: its adv_scale/std/eps {found[1]} differ from line "
                            f"{rows[0].number}'s {found[0]}; one run has one advantage convention")
    return found[0]


def trainer_advantages(rewards: torch.Tensor, group_size: int, adv_scale: str = "std",
                       std: str = "population", eps: float = 1e-6) -> torch.Tensor:
    """A_i as the trainer computed them: grpo_ba's group_advantages (population std), or the
    same centring divided by the unbiased std + eps (TRL, verl); a tied group is 0 either way."""
    if std == "population" or adv_scale == "none":
        return group_advantages(rewards, group_size, adv_scale, eps)
    centred = group_advantages(rewards, group_size, "none")                        # (B,), 0 in a tied group
    spread = rewards.float().view(-1, group_size).std(dim=1, unbiased=True, keepdim=True)   # (P, 1)
    return (centred.view(-1, group_size) / (spread + eps)).view(-1)


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
                             _run_id(row.get("run"), where), _convention(row, where), _trainer(row, where),
                             _trained(row, where)))
    if not rows:
        raise RolloutsError(f"{path}: no responses")
    return rows


def _trained(row, where):
    """(aggregation_rule, loss_type, adv_estimator, loss_agg_mode) as the line records them (None where it
    does not): text or nothing. verl's mode names under TRL's key are refused: they would read as another rule."""
    if row.get("loss_type") in VERL_AGG_FAMILY:
        raise RolloutsError(f"{where}: loss_type {json.dumps(row['loss_type'])} is verl's loss_agg_mode name; "
                            "record it as \"loss_agg_mode\" (loss_type is TRL's)")
    out = []
    for key in ("aggregation_rule", "loss_type", "adv_estimator", "loss_agg_mode"):
        value = row.get(key)
        if value is not None and not (isinstance(value, str) and value.strip()):
            raise RolloutsError(f"{where}: {key!r} must be a non-empty string (the rule the run trains with), "
                                f"got {json.dumps(value)}")
        out.append(value)
    return tuple(out)


# The rule a run trains with, by the family the designs' rows compare: "token" (each token weighs the same
# within what it is pooled over; the designs ran grpo_ba's per-group token mean), "sequence" (a mean over
# each response's tokens first; grpo_ba's sequence), "balanced", or "other" (no design ran anything like
# it). TRL 1.16's loss types, as docs/trainer-names.md's table gives their normalisers.
TRL_LOSS_FAMILY = {"dapo": "token", "bnpo": "token", "dr_grpo": "token", "cispo": "token", "vespo": "token",
                   "grpo": "sequence", "sapo": "sequence", "luspo": "other"}
# verl 0.9.1's actor.loss_agg_mode values (docs/trainer-names.md), and the plug-in's estimators, whose rule
# is their own whatever the mode (verl_balanced.py undoes the mode's normaliser).
VERL_AGG_FAMILY = {"token-mean": "token", "token-sum": "token", "seq-mean-token-sum": "token",
                   "seq-mean-token-sum-norm": "token", "seq-mean-token-mean": "sequence"}
VERL_ESTIMATOR_RULE = {"grpo_token": "token", "grpo_sequence": "sequence", "grpo_balanced": "balanced"}
# verl's estimators whose advantages are GRPO's group-normalised ones, the only ones diagnose computes
VERL_GRPO_ESTIMATORS = {"grpo", "grpo_with_bias_metrics", *VERL_ESTIMATOR_RULE}


class Trained(NamedTuple):
    """The rule the run trained with, as its dump records it."""
    family: str                  # "token", "sequence", "balanced", "other"; "token" where the dump does not say
    said: str                    # how the recommendation names it
    recorded: bool               # did the dump record it?


def trained_rule(path: str, rows: list[Line]) -> Trained:
    """The run's rule from its lines' aggregation_rule (AggregationGRPOConfig's, which trains through TRL's
    dapo) or else loss_type (TRL's), or verl's adv_estimator (the plug-in's grpo_token, grpo_sequence,
    grpo_balanced) or else loss_agg_mode; lines that record none are read as token aggregation, and say so.
    A run whose lines record two rules is refused."""
    rule, loss_type, estimator, mode = one_per_run(
        path, rows, lambda line: line.trained, "aggregation_rule/loss_type/adv_estimator/loss_agg_mode {} differ",
        str, "one run trains with one rule")
    if rule is not None:
        family = rule if rule in ("token", "sequence", "balanced") else "other"
        return Trained(family, f"AggregationGRPOConfig(aggregation_rule={rule!r})", True)
    if estimator is not None and estimator not in VERL_GRPO_ESTIMATORS:
        raise RolloutsError(f"{path}: adv_estimator {estimator!r} does not give GRPO's group-normalised "
                            "advantages, the only ones diagnose computes (it reads verl runs with "
                            f"{', '.join(sorted(VERL_GRPO_ESTIMATORS))})")
    if estimator in VERL_ESTIMATOR_RULE:
        return Trained(VERL_ESTIMATOR_RULE[estimator], f"verl's algorithm.adv_estimator={estimator!r}", True)
    if mode is not None or estimator is not None:
        mode = mode or "token-mean"              # verl's default mode
        family = VERL_AGG_FAMILY.get(mode, "other")
        said = f"verl's loss_agg_mode={mode!r}" + ("" if estimator is None else f" (adv_estimator={estimator!r})")
        return Trained(family, said + {"token": ", a token rule", "sequence": ", a sequence rule (a mean over "
                                       "each response's tokens, then over responses)"}.get(family, ""), True)
    if loss_type is not None:
        family = TRL_LOSS_FAMILY.get(loss_type, "other")
        return Trained(family, f"TRL's loss_type={loss_type!r}"
                       + {"token": ", a token rule", "sequence": ", a sequence rule (a mean over each response's "
                          "tokens, then over responses)"}.get(family, ""), True)
    return Trained("token", "not recorded in the dump: read as token aggregation", False)


def _trainer(row, where):
    trainer = row.get("trainer")
    if trainer is not None and trainer not in FIRST_STEP:
        raise RolloutsError(f"{where}: 'trainer' must be one of {', '.join(map(json.dumps, FIRST_STEP))} "
                            f"(it says which step is the run's first), got {json.dumps(trainer)}")
    return trainer


def first_step_of(path: str, rows: list[Line]) -> int:
    """The run's first training step, by the trainer its lines name (FIRST_STEP); 0 without one.
    A run whose lines name two trainers is refused."""
    trainer = one_per_run(path, rows, lambda line: line.trainer, "trainer {} differs", json.dumps,
                          "one run has one trainer")
    return FIRST_STEP.get(trainer, 0)


def one_per_run(path: str, rows: list[Line], value_of, differs: str, shown, why: str):
    """The one value that every line of a run gives (value_of); a second is refused in one line."""
    found = list(dict.fromkeys(value_of(line) for line in rows))
    if len(found) > 1:
        number = next(line.number for line in rows if value_of(line) != found[0])
        raise RolloutsError(f"{path} line {number}: its {differs.format(shown(found[1]))} from line "
                            f"{rows[0].number}'s {shown(found[0])}; {why}")
    return found[0]


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
    return ", ".join(f"run {run} ({count_of(len(lines), 'response')}, from line {lines[0]})" if run is not None
                     else f"{count_of(len(lines), 'line')} without a 'run' (from line {lines[0]})"
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
    order of first appearance, rows in file order); groups of unequal size refused (a verl dump's step 0,
    its validation, often one response per prompt, is told to drop those lines, as a placeable one is)."""
    try:
        return _equal_groups(path, rows, what)
    except RolloutsError as err:
        if any(line.step == 0 and line.trainer == "verl" for line in rows):
            raise RolloutsError(f"{err}. verl's step 0 is its validation, not a training batch: {DROP_STEP_ZERO}") \
                from None
        raise


def _equal_groups(path: str, rows, what: str):
    groups: dict[str, list] = {}                  # group key -> [(reward, length)]
    first_line: dict[str, int] = {}
    for line in rows:
        groups.setdefault(line.group, []).append((line.reward, line.length))
        first_line.setdefault(line.group, line.number)
    keys = list(groups)
    size = len(groups[keys[0]])
    for key in keys:
        if len(groups[key]) != size:
            raise RolloutsError(f"{path} line {first_line[key]}: group {key} has "
                                f"{count_of(len(groups[key]), 'response')}, "
                                f"group {keys[0]} (line {first_line[keys[0]]}) has {size}{what}; "
                                "diagnose needs groups of equal size")
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


def _conventions(path, rows, adv_scale):
    """(adv_scale, std, eps) for this run: the file's, --adv-scale first where given."""
    scale, std, eps = convention_of(path, rows)
    if scale in BATCH_SCALES and adv_scale != BATCH_SCALES[scale][0]:
        flag, what = BATCH_SCALES[scale]
        given = (f"--adv-scale {adv_scale} contradicts it (that flag reads other advantages); " if adv_scale
                 else "")
        raise RolloutsError(f"{path}: its advantages are {what}, which diagnose does not compute: {given}pass "
                            f"--adv-scale {flag} (the same shares and ratio; the token loss at ratio 1 then lacks "
                            "the batch std)")
    return adv_scale or scale or "std", std, eps


def diagnose_steps(path: str, adv_scale: str | None = None, rows=None, run_id=None) -> list[dict]:
    """One row per step (empty without steps): the step, its bias metrics (each rule's
    positive share, the token rule's loss at ratio 1) and its regime (Lbar+, Lbar-, gap)."""
    out = []
    rows = read_lines(path, run_id)[0] if rows is None else rows
    scale, std, eps = _conventions(path, rows, adv_scale)
    for step, (rewards, lengths, group_size) in read_steps(path, rows).items():
        advantages = trainer_advantages(rewards, group_size, scale, std, eps)
        out.append({"step": step, "n_groups": rewards.numel() // group_size, "group_size": group_size,
                    **bias_metrics(advantages, lengths, group_size), **regime_stats(advantages, lengths)})
    return out


def diagnose(path: str, adv_scale: str | None = None, rows=None, run_id=None) -> dict:
    """The whole file (one run of it) as one batch: advantages (as the trainer that wrote the
    file computed them), regime statistics and bias metrics; with `run` when the lines name
    their run. A file whose responses all have length 0 is refused in one line."""
    if rows is None:
        rows, run_id = read_lines(path, run_id)
    adv_scale, std, eps = _conventions(path, rows, adv_scale)
    rewards, lengths, group_size = read_rollouts(path, rows)
    if not (lengths > 0).any():
        raise RolloutsError(f"{_named(path, run_id)}: all {lengths.numel()} responses have length 0: no token is "
                            "in the loss, so no rule weighs anything (a fully masked batch?)")
    advantages = trainer_advantages(rewards, group_size, adv_scale, std, eps)             # (B,)
    # A group carries a signal when a response in the loss has an advantage: the groups group_sums keeps
    # and the decision counts. Without one: rewards all equal (tied), or every response with an
    # advantage masked to length 0.
    in_loss = (advantages != 0) & (lengths > 0)                                            # (B,)
    no_signal = ~in_loss.view(-1, group_size).any(dim=1)                                   # (P,)
    tied = (rewards.view(-1, group_size) == rewards.view(-1, group_size)[:, :1]).all(dim=1)
    mask = mask_from_lengths(lengths)                                                      # (B, T)
    losses = {f"loss_at_ratio_one_{rule}": loss_at_ratio_one(advantages, mask, group_size, rule)
              for rule in AGGREGATORS}
    return {**bias_metrics(advantages, lengths, group_size), **regime_stats(advantages, lengths), **losses,
            "shares_are_identities": shares_are_identities(rewards, advantages, lengths, group_size),
            "n_groups": rewards.numel() // group_size, "group_size": group_size,
            "n_responses": rewards.numel(), "groups_without_signal": int(no_signal.sum()),
            "groups_tied": int((no_signal & tied).sum()),
            "binary_rewards": bool(((rewards == rewards.min()) | (rewards == rewards.max())).all()),
            "n_length_zero_with_advantage": int(((advantages != 0) & (lengths == 0)).sum()),
            "adv_scale": adv_scale, "trainer_adv_scale": convention_of(path, rows)[0], "std": std, "eps": eps,
            **({"run": run_id} if run_id is not None else {})}


# =====================================================================================
# The report
# =====================================================================================


def _fmt(value, spec=".2f"):
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def reading(s: dict) -> str:
    """The paper's reading of this regime (docs/method.md §3, §6), with this file's numbers. The model
    cases come from public summaries the project could not check against the paper's full text."""
    paper = ("The paper's claim, as its abstract and public summaries give it (docs/method.md §6; the full "
             "text was not available here): a large gap between the lengths of positive and negative responses "
             "hurts token aggregation and high length variance hurts sequence aggregation (the summaries tie "
             "these to a Qwen3-1.7B and a Qwen2.5-Math-7B case, unverified); Balanced Aggregation is meant "
             "to be robust to both. These are the paper's claims, not verdicts of this project's runs.")
    if s["len_pos"] is None or s["len_neg"] is None or s["neg_over_pos"] is None:
        return paper + (" Here the responses in the loss do not have both signs of advantage (rewards tied, or one "
                        "sign masked to length 0), so there is no balance between the signs for a rule to bias.")
    longer, shorter, ratio = (("negative", "positive", s["neg_over_pos"]) if s["len_neg"] >= s["len_pos"]
                              else ("positive", "negative", 1 / s["neg_over_pos"]))
    return (paper + f" Here {longer} responses are {ratio:.2f}x as long as {shorter} ones, which gives the "
            f"positive side {_fmt(s['pos_share_token'], '.0%')} of token aggregation's gradient weight "
            f"(sequence {_fmt(s['pos_share_sequence'], '.0%')}, balanced {_fmt(s['pos_share_balanced'], '.0%')}), "
            f"and lengths spread with std/mean {_fmt(s['std_over_mean'])}: under sequence aggregation a token "
            f"gets 1/L_i of its response's weight, from 1/{s['len_max']:.0f} to 1/{max(s['len_min'], 1):.0f} here.")


def _named(path: str, run_id: str | None) -> str:
    return path if run_id is None else f"{path}, run {run_id}"


def _advantages_said(s: dict) -> str:
    """'std scaling, unbiased std + 0.0001' or 'none scaling': the advantages as diagnose computed them."""
    return (f"{s['adv_scale']} scaling"
            + (f", {s['std']} std + {s['eps']:g}" if s['adv_scale'] == "std" else "") + " advantages")


def _identity_notes(s: dict) -> list[str]:
    """The note under the rules' table, only where the printed numbers show it: sequence's and balanced's
    0.500 and zero loss are identities only where shares_are_identities holds *and* the table prints
    0.500 and +-0.0000; the 'no identity' note only where masked responses with an advantage are the
    reason (binary rewards) and the table prints the shares it says are measured."""
    printed = {rule: (_fmt(s[f"pos_share_{rule}"], ".3f"), f"{s[f'loss_at_ratio_one_{rule}']:+.4f}")
               for rule in ("sequence", "balanced")}
    if s.get("shares_are_identities") and all(share == "0.500" and loss in ("+0.0000", "-0.0000")
                                              for share, loss in printed.values()):
        return ["(sequence's and balanced's 0.500 and zero loss are identities here: binary rewards, and in every "
                "group the advantages of the responses in the loss sum to 0, so each sign carries the same "
                "advantage mass; token's share is the measurement)"]
    masked = s.get("n_length_zero_with_advantage", 0)
    binary = s.get("binary_rewards", True)
    if masked and binary and all(share != "n/a" for share, _ in printed.values()):
        return [f"(no identity here: {count_of(masked, 'response')} of length 0 with an advantage "
                f"take{'s' if masked == 1 else ''} {'its' if masked == 1 else 'their'} advantage out of the loss, "
                "so sequence's and balanced's shares and losses are measured, not 0.500 and 0 by construction)"]
    return []


def format_report(path: str, s: dict) -> str:
    zero = s.get("n_length_zero", 0)
    tied = s.get("groups_tied", s["groups_without_signal"])
    masked_out = s["groups_without_signal"] - tied
    trainer_scale = s.get("trainer_adv_scale")
    lines = [
        f"{_named(path, s.get('run'))}: {count_of(s['n_responses'], 'response')} in {count_of(s['n_groups'], 'group')} "
        f"of {s['group_size']} (advantages: {_advantages_said(s)[:-len(' advantages')]}"
        + (f", read for the trainer's {trainer_scale}" if trainer_scale not in (None, s["adv_scale"]) else "")
        + "; the whole file as one batch)",
        f"groups without a signal in the loss (no gradient under any rule): {s['groups_without_signal']} of "
        f"{s['n_groups']}" + (f" ({tied} with all rewards equal, {masked_out} with every response that has an "
                              "advantage at length 0)" if masked_out else " (all rewards equal)"
                              if s["groups_without_signal"] else ""),
        *([f"responses of length 0 (no token in the loss, e.g. masked truncations): {zero} of {s['n_responses']}; "
           "the lengths, the ratio, the spread and the shares below are over the other "
           f"{s['n_responses'] - zero}"] if zero else []),
        "",
        "regime",
        f"  mean length of positive-advantage responses  Lbar+       {_fmt(s['len_pos'], '8.1f')}",
        f"  mean length of negative-advantage responses  Lbar-       {_fmt(s['len_neg'], '8.1f')}",
        f"  length ratio, negative over positive         Lbar-/Lbar+ {_fmt(s['neg_over_pos'], '8.2f')}",
        f"  length spread                                std/mean    {_fmt(s['std_over_mean'], '8.2f')}",
        "",
        "rule       share of gradient weight on positive responses   loss at ratio 1",
        *(f"{rule:<10s} {_fmt(s[f'pos_share_{rule}'], '.3f'):<48s} {s[f'loss_at_ratio_one_{rule}']:+.4f}"
          for rule in AGGREGATORS),
        *_identity_notes(s),
        "",
        textwrap.fill("reading: " + reading(s), width=100, subsequent_indent="  "),
    ]
    keys = ("pos_share_token", "pos_share_sequence", "pos_share_balanced", "token_loss_at_ratio_one", "len_pos",
            "len_neg", "neg_over_pos", "std_over_mean", "len_mean", "n_groups", "group_size", "n_responses",
            "groups_without_signal", "groups_tied", "n_length_zero", "shares_are_identities", "adv_scale",
            "trainer_adv_scale", "std", "eps",
            *(("run",) if "run" in s else ()), *(("decision",) if "decision" in s else ()))
    summary = {k: (None if math.isnan(s[k]) else float(f"{s[k]:.6g}")) if isinstance(s[k], float) else s[k]
               for k in keys if k in s}                    # 6 significant digits, within float32 precision
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


# =====================================================================================
# The decision: where the run sits against the toy's registered designs
# =====================================================================================

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Regime(NamedTuple):
    """A registered regime design: its report, its runs and its levels (each level a design here)."""
    name: str                    # "regime-v3"
    report: str                  # its regime.md: the seeds kept (first line), the level table, the rows
    archives: str                # a glob of its runs' tar.gz files, {design}/s{SEED}-{variant}/{rule}/...
    levels: tuple                # the levels its registration names, each a row of the report's level table


REGIME_V3 = Regime("regime-v3", "assets/regime-v3/regime.md", "assets/regime-v3/runs.tar.gz",
                   ("none", "weak", "strong"))
REGIME_V4 = Regime("regime-v4", "assets/regime-v4/regime.md", "assets/regime-v4/archive/part-*.tar.gz",
                   ("weak", "strong"))           # token and sequence only: no balanced - token row
REGIMES = (REGIME_V3, REGIME_V4)


class Band(NamedTuple):
    """A band design, read from its consequences.md."""
    name: str                    # "strong-band-v3"
    report: str


class Level(NamedTuple):
    """One level of a regime design, a design of its own here."""
    regime: Regime
    level: str                   # "strong"


class World(NamedTuple):
    """One world of the toy: the designs run in it count once, whatever their number, and every
    recommendation that quotes them says how the world was chosen. A new design with a report is
    one entry here (its own world), or one more design in the entry of the world it ran in."""
    name: str
    chosen: str                  # how the world was chosen, quoted wherever its verdicts are
    designs: tuple               # Band and Level entries: where its designs' step-0 ranges and verdicts come from
    short: str = ""              # how it was chosen, in a few words: on the worlds line, placed or not


WORLDS = (
    World("gap 30 (strong-band's world)",
          "chosen after its exploratory pilot's accuracies were seen, balanced's last accuracy above token's "
          "on both of its pilot seeds (docs/strong-coupling.md), and the regime pilot's round 1 showed the same "
          "on both of its seeds before it made gap 30 a level (docs/regime-design.md); that round also showed token "
          "ahead of sequence at gap 6 and behind it at gap 30 on both seeds, the direction of regime-v3's and "
          "regime-v4's interaction primary (registrations/regime-v4.md)",
          (Band("strong-band-v3", "assets/strong-band-v3/consequences.md"),
           Band("endless-band-v3", "assets/endless-band-v3/consequences.md"),   # its warm-ups add endless slips
           Level(REGIME_V3, "strong"), Level(REGIME_V4, "strong")),
          "chosen after its pilot's accuracies were seen, and with the interaction's direction in view"),
    World("gap 18, spread 8, forced 0.3 (version 2's demo world)",
          "version 2's demo world (the course demo runs strong-band's world since 2026-12-02), fixed before demo-band was registered and after version 2's runs in it "
          "had been seen: version 1's, from one warm-up, had balanced ahead of both rules; version 2's two "
          "intervals contained 0 (registrations/demo-band-v3.md); its "
          "balanced - token is contradicted under its registered rule (version 1's +0.080 lies outside its "
          "interval) and not detected against 0, the rule adopted after its report (its note of 2026-12-07)",
          (Band("demo-band-v3", "assets/demo-band-v3/consequences.md"),),
          "chosen after earlier runs there had been seen (its balanced - token: contradicted "
          "under its registered rule, not detected against 0, the rule adopted after its report)"),
    World("gap 6",
          "a level chosen by the regime pilot's committed rule, which compares no rules but drops a world whose accuracy fell more than 0.1 from its peak; the pilot's first-round "
          "accuracies were seen before its second round (docs/regime-design.md); round 1 showed token ahead of "
          "sequence at gap 6 and behind it at gap 30 on both seeds, the direction of regime-v3's and regime-v4's "
          "interaction primary (registrations/regime-v4.md)",
          (Level(REGIME_V3, "weak"), Level(REGIME_V4, "weak")),
          "chosen by the regime pilot's rule after its first round had shown the interaction's direction"),
    World("gap 0",
          "a level chosen by the regime pilot's committed rule, which compares no rules but drops a world whose accuracy fell more than 0.1 from its peak; the pilot's first-round "
          "accuracies were seen before its second round (docs/regime-design.md)",
          (Level(REGIME_V3, "none"),),
          "chosen by the regime pilot's rule after its first round's accuracies were seen"),
)

SHARE_COLUMN = "weight share on right answers, run mean"
BETWEEN_LEVELS = " (a change between the design's two gaps, not a result at your ratio)"
SCOPE = ("scope: the toy's worlds named here (a tiny model on toy arithmetic, last held-out accuracy), "
         "not your model or task")


class Finding(NamedTuple):
    """One primary row of a design's report."""
    row: str                     # "balanced - token, last held-out acc"
    mean: float                  # its pooled mean
    interval: str                # "+0.077 [+0.058, +0.095]"
    verdict: str                 # "holds", "contradicted" or "not detected (0.031 or more ...)"
    word: str                    # "holds", "contradicted" or "not detected"


class Design(NamedTuple):
    """One registered design as its report gives it."""
    name: str
    source: str                  # the report (and archive) the numbers come from
    ratios: list                 # step-0 wrong/right, one per run (seed x machine variant)
    shares: list                 # token's weight share on right answers, run mean, one per run
    spreads: list                # step-0 length std/mean, one per run
    findings: list               # its primary rows
    manipulation: str            # the report's manipulation check line, or ""
    world: str = ""              # the World it ran in (registered_designs fills it)
    versus_sequence: tuple = ()  # (label, Finding) of its balanced - sequence, last held-out acc rows, any label


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _table(lines: list[str], first_header: str) -> tuple[list[str], list[list[str]]]:
    """The markdown table whose header row starts with `first_header`: (header, rows)."""
    for at, line in enumerate(lines):
        if line.startswith(first_header):
            rows = []
            for body in lines[at + 2:]:
                if not body.startswith("|"):
                    break
                rows.append(_cells(body))
            return _cells(line), rows
    raise RolloutsError(f"no table starting {first_header!r} in a registered design's report")


def _verdict(cell: str) -> tuple[str, str]:
    """A report's verdict cell -> (verdict with the detectable size, its word)."""
    cell = cell.split(". Not a verdict")[0]
    for word in ("holds", "contradicted"):
        if cell.startswith(word):
            return word, word
    if cell.startswith("not detected"):
        size = cell.split("differences of ")[1].split(" or more")[0] if "differences of " in cell else "?"
        return f"not detected (differences of {size} or more would have been seen at 80% power)", "not detected"
    return cell, cell


def _findings(rows, row_name, at=None) -> list[Finding]:
    """Primary rows (label starting "primary"), optionally only those naming `at` (" at strong")."""
    out = []
    for cells in rows:
        label = cells[2] if row_name == 2 else cells[1]
        if not label.startswith("primary"):
            continue
        name = f"{cells[0]}, {cells[1]}" if row_name == 2 else cells[0]
        if at is not None and f" at {at}" not in name:
            continue
        pooled = cells[4] if row_name == 2 else cells[3]
        verdict, word = _verdict(cells[-1])
        out.append(Finding(name, float(pooled.split()[0]), pooled, verdict, word))
    return out


def _versus_sequence(rows, row_name, at=None) -> tuple:
    """((label, Finding), ...): the report's balanced - sequence rows on last held-out accuracy, primary or not
    (the label says which), for a run that trains with a sequence rule."""
    out = []
    for cells in rows:
        name = f"{cells[0]}, {cells[1]}" if row_name == 2 else cells[0]
        if not (name.startswith("balanced - sequence") and "last held-out acc" in name):
            continue
        if at is not None and f" at {at}" not in name:
            continue
        label, pooled = (cells[2], cells[4]) if row_name == 2 else (cells[1], cells[3])
        verdict, word = _verdict(cells[-1])
        out.append((label.split(";")[0], Finding(name, float(pooled.split()[0]), pooled, verdict, word)))
    return tuple(out)


def band_design(name: str, report: str, repo: str = REPO) -> Design:
    """A band design from its consequences.md: the step-0 table (wrong/right, std/mean per run),
    token's per-run share from the per-rule table, and the primary rows."""
    with open(os.path.join(repo, report), encoding="utf-8") as f:
        lines = f.read().splitlines()
    header, rows = _table(lines, "| seed | variant |")
    ratio_at, spread_at = header.index("wrong/right"), header.index("std/mean")
    ratios = [float(row[ratio_at]) for row in rows]
    spreads = [float(row[spread_at]) for row in rows]
    header, rows = _table(lines, "| rule | seeds |")
    column = next(at for at, title in enumerate(header) if title.startswith(SHARE_COLUMN))
    token = next(row for row in rows if row[0] == "token")
    shares = [float(value) for value in token[column].split(";")[1].split()]
    _, rows = _table(lines, "| pair | metric | label |")
    manipulation = next((line for line in lines if line.startswith("Manipulation check")), "")
    return Design(name, report, ratios, shares, spreads, _findings(rows, 2), manipulation,
                  versus_sequence=_versus_sequence(rows, 2))


@functools.lru_cache(maxsize=32)
def _archive_token_units(archive: str, mtime_ns: int, size: int) -> tuple:
    """((design, unit, step-0 wrong/right, token's run-mean share, step-0 std/mean), ...): the token
    runs of one archive, read once per file version (mtime and size are the cache key's part)."""
    import tarfile
    found = []
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            parts = member.name.split("/")
            if len(parts) != 4 or parts[2] != "token" or parts[3] != "metrics.jsonl":
                continue
            steps = [json.loads(text) for text in tar.extractfile(member).read().decode().splitlines()]
            shares = [step["pos_share_token"] for step in steps if step.get("pos_share_token") is not None]
            found.append((parts[0], parts[1], steps[0]["wrong_over_right"], sum(shares) / len(shares),
                          steps[0]["std_over_mean"]))
    return tuple(found)


def _regime_units(repo: str, regime: Regime, first: int, last: int) -> dict[str, list]:
    """{design: [(step-0 wrong/right, token's run-mean share, step-0 std/mean)]}, one per unit (seed,
    variant) of the seeds first-last, from the token runs in the design's archive(s). A unit found twice
    (in two parts) is refused: it would count twice."""
    import glob
    import re
    archives = sorted(glob.glob(os.path.join(repo, regime.archives)))
    if not archives:
        raise FileNotFoundError(f"{regime.name}: no runs archive {regime.archives}")
    units: dict[tuple, tuple] = {}
    for archive in archives:
        stat = os.stat(archive)
        for design, unit, *values in _archive_token_units(archive, stat.st_mtime_ns, stat.st_size):
            if not first <= int(re.match(r"s(\d+)-", unit).group(1)) <= last:
                continue
            if (design, unit) in units:
                raise RolloutsError(f"{regime.name}: unit {design}/{unit} is in its archive twice")
            units[design, unit] = tuple(values)
    out: dict[str, list] = {}
    for (design, _), values in sorted(units.items()):
        out.setdefault(design, []).append(values)
    return out


def regime_designs(regime: Regime, repo: str = REPO) -> list[Design]:
    """A regime design's levels, each a design: per-unit step-0 wrong/right, std/mean and token's
    run-mean share from its runs archive (the token runs of the seeds the report names), the
    manipulation check from the report's level table, the primary rows that name the level."""
    import re
    with open(os.path.join(repo, regime.report), encoding="utf-8") as f:
        lines = f.read().splitlines()
    seeds = re.search(r"seeds \((\d+)-(\d+)[:)]", lines[0] if lines else "")   # "(1400-1408: ..." or "(1800-1848),"
    if seeds is None:
        raise RolloutsError(f"{regime.report}: its first line names no seeds (FIRST-LAST)")
    first, last = map(int, seeds.groups())
    _, level_rows = _table(lines, "| level | design |")
    by_level = {row[0]: row for row in level_rows}
    missing = [level for level in regime.levels if level not in by_level]
    if missing:
        raise RolloutsError(f"{regime.report}: no level row for {', '.join(missing)}")
    _, rows = _table(lines, "| row | label |")
    units = _regime_units(repo, regime, first, last)
    out = []
    for level in regime.levels:
        design = by_level[level][1]                       # the design's folder in the archive: regime-weak
        values = units.get(design, [])
        out.append(Design(f"{regime.name} {level} ({design})",
                          f"{regime.report}, {regime.archives} (seeds {first}-{last})",
                          [v[0] for v in values], [v[1] for v in values], [v[2] for v in values],
                          _findings(rows, 1, level), f"manipulation check: {by_level[level][-1]}",
                          versus_sequence=_versus_sequence(rows, 1, level)))
    return out


def registered_designs(repo: str = REPO) -> list[Design]:
    """The designs with registered results diagnose compares a run with, from their reports, world
    by world (WORLDS), each with its world's name."""
    levels: dict[str, dict] = {}                  # regime name -> {level: Design}, each regime read once
    out = []
    for world in WORLDS:
        for entry in world.designs:
            if isinstance(entry, Band):
                design = band_design(entry.name, entry.report, repo)
            else:
                if entry.regime.name not in levels:
                    levels[entry.regime.name] = dict(zip(entry.regime.levels, regime_designs(entry.regime, repo)))
                design = levels[entry.regime.name][entry.level]
            out.append(design._replace(world=world.name))
    return out


def _span(values, spec=".2f") -> str:
    return f"{min(values):{spec}}-{max(values):{spec}}" if values else "n/a"


def headline(design: Design) -> str:
    """The verdict word of the design's primary balanced - token row on last held-out accuracy."""
    rows = [f for f in design.findings if f.row.startswith("balanced - token") and "last held-out acc" in f.row]
    if not rows:
        return "no such primary row"
    if rows[0].word == "not detected":                      # with the difference it would have seen
        return f"not detected (>= {rows[0].verdict.split('differences of ')[1].split(' ')[0]})"
    return rows[0].word


def _interval(ratio) -> tuple | None:
    """A ratio or its (low, high) interval -> (low, high); None stays None."""
    if ratio is None:
        return None
    return (float(ratio), float(ratio)) if isinstance(ratio, (int, float)) else (float(ratio[0]), float(ratio[1]))


def _spread_outside(design: Design, spread) -> bool:
    return spread is not None and bool(design.spreads) and not min(design.spreads) <= spread <= max(design.spreads)


def place(design: Design, ratio, spread: float | None = None) -> str:
    """Where the run's step-0 wrong/right interval (or a ratio) sits against the range of the design's
    units' step-0 ratios: "inside" it, "borderline" (it crosses an edge of the range) or "outside".
    A run inside by its ratio whose step-0 length std/mean (`spread`) lies outside the design's units'
    step-0 spreads is "borderline" too: the design ran the ratio, not that spread (which the paper ties
    to sequence aggregation's trouble). Token's share is printed, not used: the designs' shares are
    means over a run's steps, not step 0's, so the run's step-0 share is not the same quantity."""
    interval = _interval(ratio)
    if interval is None or not design.ratios:
        return "outside"
    low, high = min(design.ratios), max(design.ratios)
    if interval[1] < low or interval[0] > high:
        return "outside"
    if low <= interval[0] and interval[1] <= high:
        return "borderline" if _spread_outside(design, spread) else "inside"
    return "borderline"


def covers(design: Design, ratio) -> bool:
    """Does the design speak to the run: its range holds the run's interval, or the interval crosses
    one of its edges (borderline)?"""
    return place(design, ratio) != "outside"


def coverage(designs: list[Design], interval, spread: float | None = None) -> str:
    """The run's coverage by the designs a recommendation rests on: "inside" where one of them (those
    with a primary balanced - token last-acc row that cover the run, else every covering design) holds
    the whole interval and the run's spread, "borderline" where each of them only meets it at an edge,
    "outside" where none covers it. A borderline run's recommendation says so first: the designs ran
    units up to that edge, not the run's side of it."""
    interval = _interval(interval)
    if interval is None:
        return "outside"
    voting = [d for d in designs if _last_acc_row(d) is not None and covers(d, interval)]
    resting = voting or [d for d in designs if covers(d, interval)]
    if not resting:
        return "outside"
    return "inside" if any(place(d, interval, spread) == "inside" for d in resting) else "borderline"


BORDERLINE_SAID = ("recommendation: borderline (no design it rests on covers your interval fully: it crosses "
                   "their range's edge or your spread lies outside their units', so this is weaker than the same "
                   "words for a run inside a range): ")


def _edge_crossed(design: Design, interval, spread: float | None = None) -> str:
    low, high = min(design.ratios), max(design.ratios)
    edges = ([f"bottom {low:.2f}"] if interval[0] < low else []) + ([f"top {high:.2f}"] if interval[1] > high else [])
    reasons = [f"its range {low:.2f}-{high:.2f}, at its {' and '.join(edges)}"] if edges else []
    if _spread_outside(design, spread):
        reasons.append(f"your length std/mean {spread:.2f} outside its units' {min(design.spreads):.2f}-"
                       f"{max(design.spreads):.2f}")
    return f"{design.name} ({'; '.join(reasons)})"


BALANCED_TOKEN = "balanced - token on last held-out accuracy"
# The token rule the designs ran and whose share diagnose prints: a token mean per group. TRL's default
# loss_type "dapo" and verl's "token-mean" pool the batch instead; a recommendation naming token says so.
TOKEN_RULE = "token: per group, the designs' rule and the printed share's; TRL's default 'dapo' pools the batch"


def _last_acc_row(design: Design):
    return next((f for f in design.findings
                 if f.row.startswith("balanced - token") and "last held-out acc" in f.row), None)


def world_votes(designs: list[Design], ratio) -> list[tuple]:
    """[(world name, [(design, its balanced - token last-acc finding)])] for each world with a covering
    design that has that row: one entry per world, however many of its designs cover the run."""
    votes: dict[str, list] = {}
    for design in designs:
        finding = _last_acc_row(design)
        if finding is not None and covers(design, ratio):
            votes.setdefault(design.world or design.name, []).append((design, finding))
    return list(votes.items())


def _world_said(world: str, members: list) -> str:
    verdicts = ", ".join(f"{d.name}: {f.word if f.word != 'not detected' else f.verdict}" for d, f in members)
    counted = f"; {len(members)} designs of one world, counted once" if len(members) > 1 else ""
    return f"{world} ({verdicts}{counted})"


def recommendation(designs: list[Design], ratio, signal_groups: int | None = None, left_out: float | None = None,
                   sides: tuple | None = None, step: int | None = None, masked: int = 0,           # responses at length 0
                   first_step: int = 0, graded: int = 0, spread: float | None = None,
                   step_zero_validation: bool = False, trained: Trained | None = None,
                   masked_with_advantage: int | None = None) -> tuple[str, str]:
    """(kind, one line). The line's scope is never wider than the worlds whose designs cover the run's
    interval, it counts each world once, says how each was chosen, and names the designs the interval
    is borderline for. `ratio`: the step-0 wrong/right interval (low, high), or one ratio. No
    recommendation below MIN_SIGNAL_GROUPS groups with a signal, above MAX_LEFT_OUT of the resamples
    left out (`left_out`), or below MIN_SIGNAL_GROUPS groups with a right or with a wrong answer in
    the loss (`sides`: the two counts; the simulation's groups each had both). Nor for a batch the designs
    do not speak to whatever its sample: one after the run's first step (`step`, a resumed run's first;
    `first_step`, the trainer's first: 0, verl's 1; the designs' ranges are their runs' step 0's), one with
    `graded` responses, whose reward is neither 0 nor 1 (every design, and the simulation behind the
    minimum, has binary rewards), or one with `masked` responses that carry an advantage at length 0
    (no design masks any, and masking moves the shares the designs' ranges were measured without).
    A run every design it rests on covers only at an edge (`coverage` "borderline") gets the same words
    after "recommendation: borderline (...)", and its kind is "borderline: " + the kind: a weaker one.
    `step_zero_validation`: a verl dump whose step-0 lines are its validation, not a training batch."""
    interval = _interval(ratio)
    with_advantage = masked if masked_with_advantage is None else masked_with_advantage
    kind, line = _recommendation(designs, interval, signal_groups, left_out, sides, step, (masked, with_advantage),
                                 first_step, graded, spread, step_zero_validation, trained)
    if kind in (*NOT_PLACED, "none", "no design covers") or coverage(designs, interval, spread) != "borderline":
        return kind, line
    return f"borderline: {kind}", BORDERLINE_SAID + line[len("recommendation: "):]


DROP_STEP_ZERO = ("drop the step-0 lines (e.g. jq -c 'select(.step != 0)' or grep -v '\"step\": 0,') and rerun "
                  "diagnose: it then places the run by step 1's batch, the one the designs' ranges speak to")


def _recommendation(designs, interval, signal_groups, left_out, sides, step, masked, first_step, graded, spread,
                    step_zero_validation=False, trained=None) -> tuple[str, str]:
    token_rule = TOKEN_RULE + (f"; your run: {trained.said}" if trained is not None else "")
    if interval is None:
        return "none", ("recommendation: none: the placement batch has no response in the loss with a positive "
                        "advantage, or none with a negative one, so it has no step-0 wrong/right ratio to place")
    if step is not None and step != first_step and step_zero_validation:
        return "not step 0", (
            f"recommendation: none: this verl dump starts with step 0's lines, and verl's step 0 is its validation "
            f"before training (its first training step is {first_step}), not a training batch; {DROP_STEP_ZERO}")
    if step is not None and step != first_step:
        trainers = ("TRL's, and that of lines without \"trainer\"; a verl dump's lines need \"trainer\": \"verl\", "
                    "whose first is 1" if first_step == 0 else "verl's")
        resumed = " (a resumed run?)" if step > first_step else ""
        return "not step 0", (
            f"recommendation: none: this batch is step {step}'s, the dump's first, and the run's first training "
            f"step is {first_step} ({trainers}){resumed}; the designs' ranges are their runs' first "
            "step's, so it is not placed against them; to place the run, diagnose a dump that starts at its "
            "first step")
    if graded:
        return "graded rewards", (
            f"recommendation: none: {count_of(graded, 'response')} with a reward other than 0 or 1, and every "
            "registered design (and the simulation behind the minimum) has binary rewards: graded rewards move "
            "token's share at a given ratio, so the run is not placed against the designs' ranges; these "
            "numbers describe this batch. Two-valued rewards other than 0 and 1 (+-1, 0/2) are refused too: if "
            "yours are pass/fail, rescale them to 0/1, r' = (r - low) / (high - low), and rerun (std-scaled "
            "advantages do not change; unscaled ones shrink by one constant, which the shares and the ratio do "
            "not see)")
    if signal_groups is not None and signal_groups < MIN_SIGNAL_GROUPS:
        return "too few groups", (
            f"recommendation: none: {signal_groups} group{'s' if signal_groups != 1 else ''} with a signal, "
            f"fewer than the {MIN_SIGNAL_GROUPS} below which the bootstrap interval is too often too narrow "
            "(docs/diagnose.md, 'How many groups'); these numbers describe this batch, they do not place the run")
    if left_out is not None and left_out > MAX_LEFT_OUT:
        return "too many resamples left out", (
            f"recommendation: none: {left_out:.1%} of the bootstrap's resamples drew no right or no wrong answer in "
            f"the loss and were left out of the interval, more than the {MAX_LEFT_OUT:.0%} up to which the printed "
            f"{BOOTSTRAP_LEVEL:.0%} interval still holds 90% of all resamples"
            + (f" (a right answer in the loss in {count_of(sides[0], 'group')}, a wrong one in "
               f"{count_of(sides[1], 'group')}: masked responses?)" if sides else "")
            + " (docs/diagnose.md, 'How many groups'); these numbers describe this batch, they do not place the run")
    if sides is not None and min(sides) < MIN_SIGNAL_GROUPS:
        side, count = ("right", sides[0]) if sides[0] <= sides[1] else ("wrong", sides[1])
        return "too few groups on one side", (
            f"recommendation: none: a {side} answer in the loss in only {count_of(count, 'group')}, fewer than the "
            f"{MIN_SIGNAL_GROUPS} groups the interval needs on each side (in the simulation every group had both; "
            "masked responses?) (docs/diagnose.md, 'How many groups'); these numbers describe this batch, they do "
            "not place the run")
    zero, with_advantage = masked                  # responses at length 0, and those with an advantage
    if zero:
        return "masked responses", (
            f"recommendation: none: {count_of(zero, 'response')} at length 0 ({with_advantage} with an advantage), "
            "no token in the loss (masked, e.g. mask_truncated_completions), and no registered design masks any: "
            "masking moves the shares (balanced's is no longer 0.5, token's can pass it) and the ratio (the "
            "designs' wrong/right counts every answer at its length, a tied group's too), so the run is not placed; "
            "to place it, diagnose a dump of the run without masking")
    if not any(covers(d, interval) for d in designs):
        ranged = [d for d in designs if d.ratios]
        low, high = min(min(d.ratios) for d in ranged), max(max(d.ratios) for d in ranged)
        return "no design covers", (
            f"recommendation: no registered design covers this range (your wrong/right {_fmt_interval(interval)}; "
            f"the designs span {low:.2f}-{high:.2f}): the toy's evidence says nothing about this run; compare the "
            "rules on your own task")
    borderline = [d for d in designs if place(d, interval, spread) == "borderline"]
    edge = ("; borderline: your interval " + _fmt_interval(interval) + " against "
            + ", ".join(_edge_crossed(d, interval, spread) for d in borderline) + ", and each counts as covering"
            if borderline else "")
    votes = world_votes(designs, interval)
    chosen = {world.name: world.chosen for world in WORLDS}
    if trained is not None and trained.family != "token":
        return _not_token(designs, interval, trained, votes, edge, chosen)
    if not votes:
        return "none from the toy", (
            "recommendation: none from the toy: the designs covering your ratio ("
            + ", ".join(d.name for d in designs if covers(d, interval)) + f") have no primary {BALANCED_TOKEN} row"
            + edge + f"; {SCOPE}")
    favour = [(w, m) for w, m in votes if any(f.word == "holds" and f.mean > 0 for _, f in m)
              and not any(f.word in ("holds", "contradicted") and f.mean < 0 for _, f in m)]
    against = [(w, m) for w, m in votes if any(f.word in ("holds", "contradicted") and f.mean < 0 for _, f in m)]
    silent = [(w, m) for w, m in votes if any(f.word == "not detected" for _, f in m) and (w, m) not in against]
    named = {w for w, _ in votes}
    scope = (f"{SCOPE}; how each world was chosen: "
             + "; ".join(f"{w}: {chosen.get(w, 'not recorded')}" for w in dict.fromkeys(w for w, _ in votes)))
    worlds = f"{len(named)} world{'s' if len(named) != 1 else ''}"

    def said(group):
        return "; ".join(_world_said(w, m) for w, m in group)
    if against:
        return "do not switch", (
            f"recommendation: do not switch to balanced on the toy's word ({token_rule}): {BALANCED_TOKEN} holds "
            f"against balanced in {said(against)}{edge}; {scope}")
    if favour and not silent:
        return "try balanced", (
            f"recommendation: try balanced in place of token aggregation ({token_rule}): {BALANCED_TOKEN} holds in "
            + ("the one world covering your ratio that has this row" if len(named) == 1 else
               f"every world covering your ratio that has this row, {worlds}")
            + f": {said(favour)}{edge}; {scope}")
    if favour:
        return "test balanced", (
            f"recommendation: test balanced against token on your own task ({token_rule}): {BALANCED_TOKEN}, {worlds} covering "
            f"your ratio: {said(votes)} (separate worlds in separately registered designs, never compared with "
            f"each other){edge}; {scope}")
    return "compare the rules", (
        f"recommendation: compare the rules on your own task ({token_rule}): at your ratio the toy's worlds did not detect "
        f"{BALANCED_TOKEN} ({said(silent)}), which is not evidence that the rules are equal{edge}; {scope}")


def _not_token(designs, interval, trained: Trained, votes, edge: str, chosen: dict) -> tuple[str, str]:
    """The recommendation for a run that does not train with a token rule: the designs' balanced - token rows
    do not speak to a switch from its rule, so it says what the covering designs found for balanced against
    that rule (each number with its report), or that none ran it."""
    covering = [d for d in designs if covers(d, interval)]
    def scope(worlds):
        return (f"{SCOPE}; how each world was chosen: "
                + "; ".join(f"{w}: {chosen.get(w, 'not recorded')}" for w in dict.fromkeys(worlds)))
    if trained.family == "balanced":
        found = "; ".join(_world_said(w, m) for w, m in votes) or "no primary row"
        return "trains with balanced", (
            f"recommendation: your run already trains with balanced ({trained.said}); {BALANCED_TOKEN} in the "
            f"designs covering your ratio: {found}{edge}; {scope(w for w, _ in votes)}")
    if trained.family == "sequence":
        rows = [(d, label, f) for d in covering for label, f in d.versus_sequence]
        if not rows:
            return "trains with sequence", (
                f"recommendation: none from the toy: your run trains with {trained.said}, not token aggregation, and "
                "no design covering your ratio has a balanced - sequence row on last held-out accuracy ("
                + ", ".join(d.name for d in covering) + f"); compare balanced against your rule on your own task{edge}")
        per_world = {}
        for d, label, f in rows:
            per_world.setdefault(d.world, []).append(f"{d.name} ({d.source}): {f.row}, {label}: {f.verdict}; "
                                                     f"pooled {f.interval}")
        said = "; ".join(f"{world}: " + "; ".join(found) + (f" ({len(found)} designs of one world, counted once)"
                                                              if len(found) > 1 else "")
                         for world, found in per_world.items())
        return "trains with sequence", (
            f"recommendation: your run trains with {trained.said}, not token aggregation, so the designs' "
            f"balanced - token rows do not speak to it; balanced - sequence on last held-out accuracy in the designs "
            f"covering your ratio, each from its report: {said} (a secondary row is not a registered test of "
            f"balanced against sequence; a row holds only when its pooled interval and each machine variant's own "
            f"exclude 0 on one side){edge}; {scope(d.world for d, _, _ in rows)}")
    return "rule not in the designs", (
        f"recommendation: none from the toy: your run trains with {trained.said}, which no registered design ran "
        "(they ran grpo_ba's token, sequence and balanced rules); compare balanced against it on your own task")


def _fmt_interval(interval, spec=".2f") -> str:
    if interval[0] == interval[1]:
        return format(interval[0], spec)
    return f"[{interval[0]:{spec}}, {interval[1]:{spec}}]"


# =====================================================================================
# The run's placement: its step-0 batch, its interval over groups, the minimum number of groups
# =====================================================================================

# The percentile bootstrap over the placement batch's groups in the loss (tied ones too; the simulation
# behind the minimum has none): resampled with replacement, its wrong/right ratio and token's share
# recomputed from per-group sums.
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0               # fixed: the same file prints the same interval
BOOTSTRAP_LEVEL = 0.95
# Below this many groups with a signal no recommendation is made. From the simulation of the
# interval's coverage, grpo_ba_lab/analysis/diagnose_min_groups.py (its table:
# assets/diagnose-min-groups/table.txt, shown in docs/diagnose.md): the smallest number of groups
# from which, in every simulated setting, the 95% interval covers the true ratio and share in at
# least 85% of runs (0.90 less three standard errors of a cell). test_the_minimum_is_the_committed_simulations
# checks the two agree.
MIN_SIGNAL_GROUPS = 12
COVERAGE_SEEN = 0.85             # what the printed "95%" covered from MIN_SIGNAL_GROUPS groups on: nominal
# Resamples that draw no right or no wrong answer in the loss have no ratio and are left out of the
# quantiles: the interval is then that of the other resamples only. The simulation's runs left none out
# (binary rewards, nothing masked: every group with a signal has both signs), so its coverage says
# nothing about a run that leaves many out. Above this share no recommendation is made: up to it, the
# printed 95% interval still holds at least 0.95 x 0.95 = 0.90 of all the resamples, the coverage from
# which the simulation's 0.85 floor was set (0.90 less three standard errors); above it, less.
MAX_LEFT_OUT = round(1 - BOOTSTRAP_LEVEL, 6)
# The recommendations that refuse, for the sample's sake or because the designs do not speak to the batch
# (not step 0, or masked): the run is then not placed at all.
NOT_PLACED = ("too few groups", "too many resamples left out", "too few groups on one side", "not step 0",
              "graded rewards", "masked responses")


class Placement(NamedTuple):
    """The batch a run is placed by: step 0's when the lines carry steps (the designs' numbers are
    step 0's), else the whole file."""
    where: str
    advantages: torch.Tensor     # (B,) as the trainer computed them
    lengths: torch.Tensor        # (B,) tokens in the loss
    group_size: int
    step: int | None = None      # the batch's step (the file's first); None: the lines carry no step
    first_step: int = 0          # the trainer's first training step (FIRST_STEP): verl's is 1
    graded: int = 0              # responses whose reward is neither 0 nor 1 (the designs' are all binary)
    step_zero_validation: bool = False   # a verl dump with step-0 lines (verl's validation) and its step 1
    trained: Trained | None = None       # the rule the run trains with (its dump's loss_type / aggregation_rule)
    rewards: torch.Tensor | None = None  # (B,): the placement ratio is wrong/right by reward, as the designs'


def placement_batch(path: str, rows, adv_scale: str | None = None) -> Placement:
    scale, std, eps = _conventions(path, rows, adv_scale)
    steps = read_steps(path, rows)
    if steps:
        first = min(steps)
        rewards, lengths, group_size = steps[first]
        where = f"step {first}'s batch"
    else:
        rewards, lengths, group_size = read_rollouts(path, rows)
        where = "the whole file as one batch"
    graded = int(((rewards != 0) & (rewards != 1)).sum())
    first_step = first_step_of(path, rows)
    # verl's step 0 is its validation before training: lines of step 0 in a verl dump are never its first batch
    validation = bool(steps) and first_step == 1 and first == 0
    trained = trained_rule(path, rows)
    if trained.said.startswith("verl's") and first_step != FIRST_STEP["verl"]:
        raise RolloutsError(f"{path}: its lines name {trained.said.split(',')[0]} but not \"trainer\": \"verl\"; "
                            "add it: verl counts training steps from 1, and its step 0 is validation")
    return Placement(where, trainer_advantages(rewards, group_size, scale, std, eps), lengths, group_size,
                     first if steps else None, first_step, graded, validation, trained, rewards)


# Columns of group_sums: per group, over its responses in the loss ("positives"/"negatives": by the sign of
# the advantage, or, with rewards, right (reward > 0.5) and wrong answers, as the designs' step-0 ratio).
SUMS = ("length of positives", "positives", "length of negatives", "negatives",
        "token's weight on positives", "token's weight on negatives")


def group_sums(advantages: torch.Tensor, lengths: torch.Tensor, group_size: int,
               rewards: torch.Tensor | None = None) -> torch.Tensor:
    """(S, 6) float64: the SUMS columns, one row per group with a signal (a response in the loss with
    A_i != 0); with `rewards`, one per group with any response in the loss, tied groups too, and the
    length columns split by reward: the designs' step-0 wrong/right is a mean over every wrong and every
    right answer, tied groups included. Token's per-response weights are grpo_ba's token_weights
    (autograd through the real clipped term and aggregator); a response of length 0 has no tokens and
    no advantage mass, as in bias_metrics. The token rule normalises within each group, so a resample's
    share is exact from these sums (its 1/P factor cancels in the share; tied groups add 0 to it)."""
    lengths = lengths.detach().float().cpu()
    advantages = advantages.detach().float().cpu() * (lengths > 0)
    weights = token_weights(mask_from_lengths(lengths), advantages, group_size, "token").sum(dim=1).double().abs()
    pos, neg = (advantages > 0).double(), (advantages < 0).double()
    length = lengths.double()
    right, wrong = pos, neg
    if rewards is not None:
        in_loss = lengths > 0
        right = ((rewards.detach().cpu() > 0.5) & in_loss).double()
        wrong = ((rewards.detach().cpu() <= 0.5) & in_loss).double()
    columns = (length * right, right, length * wrong, wrong, weights * pos, weights * neg)
    table = torch.stack([column.view(-1, group_size).sum(dim=1) for column in columns], dim=1)   # (P, 6)
    return table[(table[:, 1] + table[:, 3]) > 0]


def ratio_and_share(sums: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(..., 6) summed SUMS -> Lbar-/Lbar+ and token's share on positives (NaN where undefined)."""
    with torch.no_grad():
        ratio = (sums[..., 2] / sums[..., 3]) / (sums[..., 0] / sums[..., 1])
        share = sums[..., 4] / (sums[..., 4] + sums[..., 5])
    return ratio, share


def bootstrap(sums: torch.Tensor, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED,
              level: float = BOOTSTRAP_LEVEL) -> dict:
    """Percentile intervals of the ratio and token's share, resampling the groups (rows of `sums`,
    (..., S, 6); leading dimensions are independent runs, as the simulation passes them) with
    replacement. -> {"ratio": (..., 2), "share": (..., 2), "left_out": (...)}: a resample without both
    signs in the loss has no ratio and is left out of its quantiles; "left_out" is the share of the
    resamples left out (format_decision prints it and refuses to place a run above MAX_LEFT_OUT)."""
    generator = torch.Generator().manual_seed(seed)
    *runs, count, _ = sums.shape
    flat = sums.reshape(-1, count, 6)                                              # (R, S, 6)
    chunk = max(1, 2_000_000 // max(1, flat.shape[0] * count))      # bounds the (R, n, S) draws
    ratios, shares = [], []
    for start in range(0, resamples, chunk):
        n = min(chunk, resamples - start)
        picks = torch.randint(0, count, (flat.shape[0], n, count), generator=generator)   # (R, n, S)
        times = torch.zeros(picks.shape, dtype=flat.dtype).scatter_add_(2, picks, torch.ones(picks.shape,
                                                                                          dtype=flat.dtype))
        drawn = torch.bmm(times, flat)                   # (R, n, 6): each resample's sums, a group once per draw
        ratio, share = ratio_and_share(drawn)
        ratios.append(ratio)
        shares.append(share)
    tail = (1 - level) / 2
    out = {"left_out": torch.cat(ratios, dim=1).isnan().double().mean(dim=1).reshape(runs)}
    for name, values in (("ratio", torch.cat(ratios, dim=1)), ("share", torch.cat(shares, dim=1))):
        quantiles = torch.tensor([tail, 1 - tail], dtype=values.dtype)
        out[name] = torch.nanquantile(values, quantiles, dim=1).T.reshape(*runs, 2)   # (..., 2)
    return out


def run_interval(batch: Placement) -> dict:
    """The placement batch's groups with a signal, its ratio and token's share with their intervals."""
    sums = group_sums(batch.advantages, batch.lengths, batch.group_size, batch.rewards)
    signal = (sums[:, 4] + sums[:, 5]) > 0        # groups with a signal: token's weight on a response
    # groups with a right (positive) and with a wrong (negative) answer in the loss: without masking every
    # group with a signal has both, as in the simulation; masking can leave one side to a few groups
    sides = {"groups_with_right": int((sums[:, 4] > 0).sum()), "groups_with_wrong": int((sums[:, 5] > 0).sum())}
    if not signal.any():
        return {"groups": 0, "ratio": None, "share": None, "ratio_interval": None, "share_interval": None,
                "left_out": None, **sides}
    ratio, share = (None if math.isnan(v) else v for v in (x.item() for x in ratio_and_share(sums.sum(dim=0))))
    bounds = bootstrap(sums)
    def pair(values):
        low, high = values.tolist()
        return None if math.isnan(low) else (low, high)
    return {"groups": int(signal.sum()), "ratio": ratio, "share": share,
            "ratio_interval": pair(bounds["ratio"]) if ratio is not None else None,
            "share_interval": pair(bounds["share"]) if share is not None else None,
            "left_out": bounds["left_out"].item(), **sides}


def format_decision(batch: Placement, repo: str = REPO) -> tuple[str, dict]:
    """The decision block and its numbers (for the JSON line)."""
    try:
        designs = registered_designs(repo)
    except OSError:
        return ("decision: the registered designs' reports (assets/ of a clone of this repository) are not "
                "here, so this run is not placed against them"), {"recommendation": "not placed"}
    found = run_interval(batch)
    spread = regime_stats(batch.advantages, batch.lengths)["std_over_mean"]
    interval = found["ratio_interval"]
    if interval is None and found["ratio"] is not None:
        interval = (found["ratio"], found["ratio"])
    width = max([34] + [len(d.name) for d in designs])            # the names' column fits the longest
    level = f"{BOOTSTRAP_LEVEL:.0%}"
    lines = ["decision: this run against the toy's registered designs",
             f"  this run ({batch.where}): wrong/right (by reward, as the designs' step 0) {_fmt(found['ratio'])}, token's share (per "
             f"group) on right answers {_fmt(found['share'], '.3f')}, length std/mean {_fmt(spread)}"]
    if found["ratio_interval"] is not None:
        lines.append(f"  {level} intervals over its {found['groups']} group{'s' * (found['groups'] != 1)} with a signal (bootstrap, "
                     f"{BOOTSTRAP_RESAMPLES} resamples of its groups in the loss, tied ones too, seed {BOOTSTRAP_SEED}; nominal: from {MIN_SIGNAL_GROUPS} "
                     f"groups they covered at least {COVERAGE_SEEN} in simulation): wrong/right "
                     f"{_fmt_interval(found['ratio_interval'])}, token's share "
                     f"{_fmt_interval(found['share_interval'], '.3f') if found['share_interval'] else 'n/a'}")
        lines.append(f"  resamples left out of the interval (no right or no wrong answer in the loss): "
                     f"{found['left_out']:.1%} of {BOOTSTRAP_RESAMPLES} (above {MAX_LEFT_OUT:.0%}: no recommendation); "
                     f"groups with a signal and a right answer (positive advantage) in the loss {found['groups_with_right']}, "
                     f"with a wrong one "
                     f"{found['groups_with_wrong']}")
    else:
        lines.append(f"  groups with a signal: {found['groups']}; no interval")
    masked = int(((batch.advantages != 0) & (batch.lengths == 0)).sum())   # with an advantage, out of the loss
    # any length-0 answer (a tied group's too) leaves the by-reward means the designs' ratio counted it in
    length_zero = int((batch.lengths == 0).sum())
    kind, rec = recommendation(designs, interval, found["groups"], found["left_out"],
                               (found["groups_with_right"], found["groups_with_wrong"]), batch.step, length_zero,
                               batch.first_step, batch.graded, spread, batch.step_zero_validation, batch.trained,
                               masked_with_advantage=masked)
    # An interval too uncertain to recommend from is too uncertain to place the run: no design is said to
    # cover it, in the table, the findings or the JSON, so nothing reads as a placement the last line denies.
    placed = kind not in NOT_PLACED
    where = {d.name: place(d, interval, spread) if placed else "not placed" for d in designs}
    lines.append(f"  {'design':<{width}s} {'units':>5s}  {'step-0 wrong/right':>18s}  {'token share (run mean)':>22s}  "
                 f"{'std/mean':>9s}  {'balanced - token, last acc':<26s}  your interval against its units' range")
    for d in designs:
        lines.append(f"  {d.name:<{width}s} {len(d.ratios):>5d}  {_span(d.ratios):>18s}  "
                     f"{_span(d.shares, '.3f'):>22s}  {_span(d.spreads):>9s}  {headline(d):<26s}  "
                     f"{where[d.name]}")
    lines.append("  (a unit: one seed on one machine variant, its rules from one warm-up; the verdict column: not "
                 "detected (>= d) means a difference of d or more would have been seen at 80% power)")
    lines.append("  (a design's verdict is its average over units whose step-0 ratios span its range, not a "
                 "result at your ratio; a spread outside a design's units' puts your run at its edge; your share is "
                 "printed, not used: the designs' are run means)")
    lines.append("  (worlds: " + "; ".join(f"{w.name}" + (f", {w.short}" if w.short else "") + ": "
                                          + ", ".join(d.name for d in designs if d.world == w.name)
                                          for w in WORLDS) + "; the designs of one world count once)")
    covering = [d for d in designs if covers(d, interval)] if placed else []
    lines.append("  what the designs covering your ratio found (primary rows; verdicts: holds, contradicted, "
                 "not detected), world by world, each with how it was chosen:" if covering
                 else "  not placed against the designs: the last line says why" if not placed
                 else "  no design's step-0 wrong/right range covers your ratio" if found["ratio"] is not None
                 else "  no wrong/right ratio to place: no group has a signal (a response in the loss with an "
                      "advantage), or the batch has no right or no wrong answer in the loss")
    for world in [w for w in WORLDS if any(d.world == w.name for d in covering)]:
        lines.append(f"   {world.name}, {world.chosen}:")
        for d in [d for d in covering if d.world == world.name]:
            if not d.findings:
                lines.append(f"    {d.name}: no primary row at this level")
            for f in d.findings:
                # an interaction row compares two levels: it is not a result at the run's ratio
                across = BETWEEN_LEVELS if " minus at " in f.row else ""
                lines.append(f"    {d.name}: {f.row}: {f.verdict}; pooled {f.interval}{across}")
    lines.append(rec)

    def rounded(values):
        return None if values is None else [float(f"{v:.6g}") for v in values]
    numbers = {"placed_on": batch.where, "step": batch.step, "first_step": batch.first_step,
               "masked_with_advantage": masked, "length_zero": length_zero, "graded_rewards": batch.graded,
               "groups_with_signal": found["groups"], "min_groups": MIN_SIGNAL_GROUPS,
               "groups_with_right": found["groups_with_right"], "groups_with_wrong": found["groups_with_wrong"],
               "resamples_left_out": None if found["left_out"] is None else float(f"{found['left_out']:.6g}"),
               "max_left_out": MAX_LEFT_OUT,
               "ratio": rounded([found["ratio"]])[0] if found["ratio"] is not None else None,
               "ratio_interval": rounded(found["ratio_interval"]),
               "share": rounded([found["share"]])[0] if found["share"] is not None else None,
               "share_interval": rounded(found["share_interval"]),
               "trained_with": None if batch.trained is None else {
                   "family": batch.trained.family, "said": batch.trained.said, "recorded": batch.trained.recorded},
               "length_std_over_mean": None if spread is None else float(f"{spread:.6g}"),   # the decision batch's
               "designs": where,
               "coverage": {"overall": coverage(designs, interval, spread) if placed else "not placed",
                            "designs": {name: w for name, w in where.items() if w in ("inside", "borderline")}},
               "worlds": sorted({d.world for d in covering}, key=[w.name for w in WORLDS].index),
               "recommendation": kind, "recommendation_line": rec}
    return "\n".join(lines), numbers


def _check_figure_format(png: str):
    """An extension matplotlib cannot write is refused before anything is read or printed."""
    from matplotlib.backend_bases import FigureCanvasBase
    extension = os.path.splitext(png)[1].lstrip(".").lower()
    if extension and extension not in FigureCanvasBase.get_supported_filetypes():
        raise RolloutsError(f"--figure {png}: matplotlib cannot write .{extension} files; "
                            "use a .png name")


def run(path: str, adv_scale: str | None = None, out=print, figure: str | None = None,
        run_id: str | None = None) -> dict:
    """`python -m grpo_ba_lab.analysis.diagnose PATH`: print the report; its last line is one JSON
    object. Lines with `step` first get the step-by-step table (and `figure`, a PNG).
    A file of several runs is refused unless `run_id` picks one (one_run)."""
    if figure:
        _check_figure_format(figure)
    rows, run_id = read_lines(path, run_id)        # parsed and checked once: the file can be large
    summary = diagnose(path, adv_scale, rows, run_id)
    steps = diagnose_steps(path, adv_scale, rows)
    decision, numbers = format_decision(placement_batch(path, rows, adv_scale))
    if figure and not steps:
        raise RolloutsError(f"{path}: --figure plots the bias per step, and no line has a 'step'")
    if steps:
        out(format_steps(path, steps, run_id))
        if figure:
            title = f"{_named(os.path.basename(path), run_id)} ({_advantages_said(summary)})"
            out(f"figure: {plot_steps(steps, figure, title=title)}")
        out("")
    report = format_report(path, {**summary, "decision": numbers}).split("\n")   # the JSON line carries it
    out("\n".join(report[:-1] + ["", decision, report[-1]]))    # the JSON line stays last
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
                    "merged across runs: a file of several runs needs --run. The report ends with a "
                    "decision: where the run sits against the toy's registered designs, their verdicts, "
                    "and a recommendation scoped to them. The last line printed is one JSON object.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("file", metavar="FILE", help="rollouts or completions, one JSON object per line")
    parser.add_argument("--adv-scale", choices=("std", "none"), default=None,
                        help="advantages as GRPO (std: divided by the group's reward std) or Dr. GRPO (none); "
                             "default: the lines' adv_scale (TRL's dump writes it), else std")
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
