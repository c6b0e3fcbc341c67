"""Exercises: the math core of GRPO with three aggregation rules.

Replace each `raise NotImplementedError` with your code, then run, from the
repository root,

    python -m exercises.check                     # every function
    python -m exercises.check group_advantages    # only this one

The checker runs the project's own claims (tests/course/test_math_core.py) against this
file and prints, per function, passed or what failed. The math is in
docs/method.md; read the section named in each docstring first. Work in this order:
group_advantages, aggregate_sequence, aggregate_token, aggregate_balanced,
sign_weights.

Conventions (the same as grpo_ba.py):
- B = P * G responses in contiguous groups of G (rows 0..G-1 are the first prompt's).
- per_token_loss, mask: (B, T), mask 1 on the response's tokens, 0 on padding;
  advantages: (B,). L_i = mask[i].sum().
- Every rule is applied per group and the P group values are averaged (§5).
- Use torch operations only (no Python loops over responses are needed), so that
  autograd can differentiate your aggregators: sign_weights and the checks do.
"""
from __future__ import annotations

import torch


def group_advantages(rewards: torch.Tensor, group_size: int, scale: str = "std",
                     eps: float = 1e-6) -> torch.Tensor:
    """Group-relative advantages (docs/method.md §1). rewards: (B,) -> (B,).

        scale="std":  A_i = (r_i - mean(r)) / (std(r) + eps)     (GRPO)
        scale="none": A_i =  r_i - mean(r)                       (Dr. GRPO)

    Mean and std are taken over each group of G = group_size responses. Use the
    *population* std (divide by G), so that a group of one gives 0, not NaN.
    Raise ValueError when the rewards do not split into groups of G (or an unknown
    scale is given). Hint: rewards.view(-1, group_size) is (P, G).
    """
    raise NotImplementedError("group_advantages: your code here")


def aggregate_sequence(per_token_loss, mask, advantages, group_size):
    """Sequence aggregation, the original GRPO (docs/method.md §2):

        J_seq = (1/G) * sum_i (1/L_i) * sum_t l_it       per group, then the mean over groups

    Only masked tokens count (padding may hold any value). A response of length 0
    contributes 0, not 0/0: clamp its normaliser to 1. Returns a scalar tensor.
    """
    raise NotImplementedError("aggregate_sequence: your code here")


def aggregate_token(per_token_loss, mask, advantages, group_size):
    """Token aggregation, DAPO's (docs/method.md §2; Dr. GRPO divides the same token sum by a
    constant instead, docs/trainer-names.md: every token weighs the same in both):

        J_tok = (1 / sum_i L_i) * sum_i sum_t l_it       per group, then the mean over groups

    Only masked tokens count; a group with no tokens at all gives 0.
    Returns a scalar tensor.
    """
    raise NotImplementedError("aggregate_token: your code here")


def aggregate_balanced(per_token_loss, mask, advantages, group_size):
    """Balanced Aggregation, the paper's form for binary rewards (docs/method.md §2):

        J_BA = (k/G) * (token mean of l over S+)  +  ((G-k)/G) * (token mean of l over S-)

    S+ = {i : A_i > 0} holds the k right answers, S- = {i : A_i < 0} the G - k wrong ones;
    a response with A_i = 0, or with no tokens, belongs to neither (k counts S+ only). The
    token mean over a side is the sum of l_it over its tokens over its number of tokens.
    Per group, then the mean over groups. A side that is empty (or whose responses all have
    length 0) contributes 0, not 0/0.
    Returns a scalar tensor.
    """
    raise NotImplementedError("aggregate_balanced: your code here")


def sign_weights(mask, advantages, group_size, aggregator):
    """(w_pos, w_neg): the total gradient weight at ratio 1 on the responses with
    A_i > 0 and on those with A_i < 0 (docs/method.md §3), as two scalar tensors.

    The weight of token t of response i is w_it = -dJ/dlogp_it at logp = old_logp
    (ratio 1); w_pos sums it over the tokens of the positive responses, w_neg over
    the negative ones. `aggregator` is a rule's name ("token", "sequence",
    "balanced") or an aggregation function.

    Measure it with autograd: make logp = torch.zeros(mask.shape, requires_grad=True),
    build the token terms with grpo_ba.clipped_token_loss(logp, logp.detach(), advantages, mask),
    aggregate them with grpo_ba.aggregator_function(aggregator), and differentiate.
    (Do not call grpo_ba.token_weights or grpo_ba.sign_weights: that is the answer.)
    Expect +-sqrt(k(G-k))/G for sequence and balanced, and a ratio Lbar+/Lbar- for token.
    """
    raise NotImplementedError("sign_weights: your code here")
