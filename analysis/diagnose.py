"""analysis/diagnose.py -- how biased is the aggregation of *your* run? Measured from its rollouts.

    python grpo_ba.py --diagnose rollouts.jsonl                  # GRPO advantages (std scaling)
    python grpo_ba.py --diagnose rollouts.jsonl --adv-scale none # Dr. GRPO advantages

ROLLOUTS.jsonl holds one JSON object per response:

    {"group": "step3-prompt17", "reward": 1.0, "length": 212}

`group` is any id shared by the responses to one prompt (every group must have the
same size G), `reward` any finite number, `length` the response's tokens in the loss.
The whole file is read as one batch of P groups of G (docs/method.md §5).

Every number comes from grpo_ba's own functions, never from a formula typed twice:
advantages from `group_advantages`, the per-sign gradient weights from `sign_weights`
(autograd through the real clipped term and the real aggregators, docs/method.md §3),
the token rule's loss at ratio 1 from `clipped_token_loss` + `aggregate_token`. The
same `bias_metrics` feeds the TRL integration's logged metrics
(integrations/trl_balanced.py), so a TRL log and this report agree on one batch.
"""
from __future__ import annotations

import json
import math
import textwrap

import torch

from grpo_ba import AGGREGATORS, UsageError, clipped_token_loss, group_advantages, mask_from_lengths, positive_share


class RolloutsError(UsageError):
    """A rollouts file --diagnose cannot read: one line on stderr, exit code 2."""


# =====================================================================================
# The numbers: shares of gradient weight, the token loss at ratio 1, the regime
# =====================================================================================


def bias_metrics(advantages: torch.Tensor, lengths: torch.Tensor, group_size: int) -> dict[str, float]:
    """The bias of one batch, from its advantages (B,) and response lengths L_i (B,),
    rows in contiguous groups of G:

    pos_share_<rule>         share of the rule's gradient weight at ratio 1 on A_i > 0 (docs/method.md §3)
    token_loss_at_ratio_one  J_tok at ratio 1 = mean over groups of -sum_i A_i L_i / sum_i L_i,
                             the drift of token aggregation's loss (0 for sequence and balanced)
    """
    advantages = advantages.detach().float().cpu()                                  # (B,)
    mask = mask_from_lengths(lengths.detach().float().cpu())                        # (B, T)
    out = {}
    for rule in AGGREGATORS:
        share = positive_share(mask, advantages, group_size, rule)
        out[f"pos_share_{rule}"] = float("nan") if share is None else share
    out["token_loss_at_ratio_one"] = loss_at_ratio_one(advantages, mask, group_size, "token")
    return out


def loss_at_ratio_one(advantages, mask, group_size, rule) -> float:
    """J_rule on-policy (rho = 1, so l_it = -A_i): token gives -sum_i A_i L_i / sum_i L_i
    per group, sequence and balanced give 0 (docs/method.md §3)."""
    logp = torch.zeros(mask.shape)
    token_loss = clipped_token_loss(logp, logp, advantages, mask)                   # (B, T)
    return AGGREGATORS[rule](token_loss, mask, advantages, group_size).item()


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


def read_rollouts(path: str):
    """-> rewards (B,), lengths (B,), G, with each group's rows contiguous (groups in
    order of first appearance, rows in file order). Refuses, naming the line, anything
    that is not one {"group", "reward", "length"} object per line or groups of unequal size."""
    groups: dict[str, list] = {}                  # group key -> [(reward, length)]
    first_line: dict[str, int] = {}
    with open(path) as f:
        for number, text in enumerate(f, start=1):
            where = f"{path} line {number}"
            if not text.strip():
                continue                          # blank lines (a trailing newline) are not responses
            try:
                row = json.loads(text)
            except json.JSONDecodeError as err:
                raise RolloutsError(f"{where}: not JSON ({err.msg})") from None
            if not isinstance(row, dict) or not {"group", "reward", "length"} <= row.keys():
                raise RolloutsError(f"{where}: need one object with 'group', 'reward' and 'length'")
            key = json.dumps(row["group"], sort_keys=True)          # any JSON id; 1 and "1" differ
            groups.setdefault(key, []).append((_number(row["reward"], "reward", where),
                                               _number(row["length"], "length", where, integer=True)))
            first_line.setdefault(key, number)
    if not groups:
        raise RolloutsError(f"{path}: no responses")
    keys = list(groups)
    size = len(groups[keys[0]])
    for key in keys:
        if len(groups[key]) != size:
            raise RolloutsError(f"{path} line {first_line[key]}: group {key} has {len(groups[key])} responses, "
                                f"group {keys[0]} (line {first_line[keys[0]]}) has {size}; "
                                "--diagnose needs groups of equal size")
    if size < 2:
        raise RolloutsError(f"{path}: groups of {size} response; a group needs at least 2 for a relative advantage")
    rows = [row for key in keys for row in groups[key]]
    rewards = torch.tensor([r for r, _ in rows], dtype=torch.float32)
    lengths = torch.tensor([int(length) for _, length in rows], dtype=torch.float32)
    return rewards, lengths, size


def diagnose(path: str, adv_scale: str = "std") -> dict:
    """The whole file as one batch: advantages, regime statistics and bias metrics."""
    rewards, lengths, group_size = read_rollouts(path)
    advantages = group_advantages(rewards, group_size, adv_scale)                         # (B,)
    no_signal = (advantages.view(-1, group_size) == 0).all(dim=1)                          # (P,)
    mask = mask_from_lengths(lengths)                                                      # (B, T)
    losses = {f"loss_at_ratio_one_{rule}": loss_at_ratio_one(advantages, mask, group_size, rule)
              for rule in AGGREGATORS}
    return {**bias_metrics(advantages, lengths, group_size), **regime_stats(advantages, lengths), **losses,
            "n_groups": rewards.numel() // group_size, "group_size": group_size,
            "n_responses": rewards.numel(), "groups_without_signal": int(no_signal.sum()),
            "adv_scale": adv_scale}


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


def format_report(path: str, s: dict) -> str:
    lines = [
        f"{path}: {s['n_responses']} responses in {s['n_groups']} groups of {s['group_size']} "
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
            "groups_without_signal", "adv_scale")
    summary = {k: (None if math.isnan(s[k]) else float(f"{s[k]:.6g}")) if isinstance(s[k], float) else s[k]
               for k in keys}                              # 6 significant digits, within float32 precision
    return "\n".join(lines + [json.dumps(summary)])


def run(path: str, adv_scale: str = "std", out=print) -> dict:
    """`python grpo_ba.py --diagnose PATH`: print the report; its last line is one JSON object."""
    summary = diagnose(path, adv_scale)
    out(format_report(path, summary))
    return summary
