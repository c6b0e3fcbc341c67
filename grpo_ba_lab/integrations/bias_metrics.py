"""The bias of one batch's aggregation, from its advantages and response lengths.

The numbers `python -m grpo_ba_lab.analysis.diagnose` prints and the TRL and verl
integrations log. They live here, beside the integrations and below the studies, so
the integrations never import grpo_ba_lab.analysis: diagnose imports them from here.
Only torch and grpo_ba's own functions (never a formula typed twice); no trainer import.
"""
from __future__ import annotations

import torch

from grpo_ba import AGGREGATORS, clipped_token_loss, mask_from_lengths, positive_share

METRICS = ("pos_share_token", "pos_share_sequence", "pos_share_balanced", "token_loss_at_ratio_one")


def bias_metrics(advantages: torch.Tensor, lengths: torch.Tensor, group_size: int) -> dict[str, float]:
    """The bias of one batch, from its advantages (B,) and response lengths L_i (B,),
    rows in contiguous groups of G:

    pos_share_<rule>         share of the rule's gradient weight at ratio 1 on A_i > 0 (docs/method.md §3)
    token_loss_at_ratio_one  J_tok at ratio 1 = mean over groups of -sum_i A_i L_i / sum_i L_i,
                             the drift of token aggregation's loss (0 for sequence and balanced)

    A response without tokens (L_i = 0) contributes nothing, its advantage mass included: the
    choice the TRL and verl integrations train with (docs/trl.md, docs/verl.md).
    """
    lengths = lengths.detach().float().cpu()
    advantages = advantages.detach().float().cpu() * (lengths > 0)                 # (B,); no tokens, no mass
    mask = mask_from_lengths(lengths)                                               # (B, T)
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
