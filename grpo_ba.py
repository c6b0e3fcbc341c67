"""grpo_ba.py -- GRPO with three loss-aggregation rules, side by side.

A reference implementation to read beside *Balanced Aggregation: Understanding and
Fixing Aggregation Bias in GRPO* (arXiv 2605.04077). Section names in the docstrings
("method §2") point to `shared/method.md`, the project's statement of the math.

    python grpo_ba.py                                  # demo: warm-up, then token / sequence / balanced
    python grpo_ba.py --aggregator balanced --regime variance --steps 200
    python grpo_ba.py --sweep                          # 2 regimes x 3 rules x 3 seeds, figures + table
    python grpo_ba.py --plot-only runs/sweep           # redraw figures from saved metrics
    python grpo_ba.py --preset qwen3-1.7b --model Qwen/Qwen3-1.7B --dataset data.jsonl   # one GPU

Choices where GRPO implementations disagree (each pinned by a test in tests/):
 1. Advantages use the population std (divide by G), so a group of one gives 0, not NaN.
 2. A group whose rewards are all equal has A = 0: it contributes 0 loss and 0 gradient.
 3. The ratio is exp(logp - old_logp) with masked positions zeroed *before* exp, so a
    masked or padded token can never produce inf * 0 = NaN.
 4. The loss mask covers every sampled token up to and including the first EOS, even a
    PAD the policy sampled itself (otherwise the policy learns to emit PAD for free).
 5. Every rule is applied per group, then averaged over the P groups (method §5).
 6. A response of zero length contributes nothing (its normaliser is clamped to 1).
 7. Balanced aggregation for non-binary rewards uses advantage mass (method §4): the
    project's choice, as the paper's exact form is not public.
 8. The three rules are linear in the token terms, so J = sum_it c_it * l_it; the
    coefficients c_it = dJ/dl_it are taken once over whole groups, which makes
    micro-batching exact (the bug of verl issues 2776 and 7321 cannot happen).
 9. KL to a reference (k3 estimator) is off by default (beta = 0), as in DAPO / Dr. GRPO.
"""
from __future__ import annotations

import torch

# =====================================================================================
# 1. Group-relative advantages (method §1)
# =====================================================================================


def group_advantages(rewards: torch.Tensor, group_size: int, scale: str = "std",
                     eps: float = 1e-6) -> torch.Tensor:
    """A_i = (r_i - mean(r)) / (std(r) + eps)   (scale="std", GRPO)
       A_i =  r_i - mean(r)                      (scale="none", Dr. GRPO)

    Mean and population std are taken over each contiguous group of G responses.
    rewards: (B,) with B = P * G  ->  advantages: (B,)
    """
    if rewards.ndim != 1 or rewards.numel() % group_size != 0:
        raise ValueError(f"rewards of shape {tuple(rewards.shape)} do not split into groups of {group_size}")
    r = rewards.float().view(-1, group_size)                      # (P, G)
    centred = r - r.mean(dim=1, keepdim=True)                     # sum_i A_i = 0 in every group
    if scale == "std":
        centred = centred / (r.std(dim=1, unbiased=False, keepdim=True) + eps)
    elif scale != "none":
        raise ValueError(f"unknown advantage scale {scale!r}; use 'std' or 'none'")
    return centred.view(-1)


# =====================================================================================
# 2. The clipped per-token term (method §1)
# =====================================================================================


def clipped_token_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
                       mask: torch.Tensor, eps_low: float = 0.2, eps_high: float = 0.28,
                       ref_logp: torch.Tensor | None = None, beta: float = 0.0) -> torch.Tensor:
    """l_it = -min(rho_it * A_i, clip(rho_it, 1 - eps_low, 1 + eps_high) * A_i) + beta * KL_it

    rho_it = exp(logp_it - old_logp_it);  KL_it = k3 = exp(q) - q - 1 with q = ref_logp - logp.
    logp, old_logp, ref_logp, mask: (B, T);  advantages: (B,)  ->  per-token loss (B, T),
    exactly 0 where mask is 0.
    """
    mask = mask.bool()
    # Zero masked log-ratios before exp: a padded position could otherwise give inf * 0 = NaN.
    log_ratio = torch.where(mask, logp - old_logp, torch.zeros_like(logp))
    ratio = torch.exp(log_ratio)                                            # (B, T)
    adv = advantages.to(logp.dtype)[:, None]                                # (B, 1)
    surrogate = torch.minimum(ratio * adv, torch.clamp(ratio, 1 - eps_low, 1 + eps_high) * adv)
    loss = -surrogate
    if ref_logp is not None and beta != 0.0:
        q = torch.where(mask, ref_logp - logp, torch.zeros_like(logp))
        loss = loss + beta * (torch.exp(q) - q - 1)                        # k3 >= 0, 0 iff equal
    return torch.where(mask, loss, torch.zeros_like(loss))


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3 estimator of KL(pi_theta || pi_ref) per token: exp(q) - q - 1, q = ref_logp - logp."""
    q = ref_logp - logp
    return torch.exp(q) - q - 1


# =====================================================================================
# 3. The three aggregation rules, side by side (method §2, §4, §5)
#    Each: (per_token_loss (B,T), mask (B,T), advantages (B,), group_size G) -> scalar.
#    Rows come in contiguous groups of G; the rule is applied per group, then averaged.
# =====================================================================================


def _per_response_sums(per_token_loss, mask, group_size):
    """Row sums of the token terms and row lengths L_i, both shaped (P, G)."""
    mask = mask.to(per_token_loss.dtype)
    token_sums = (per_token_loss * mask).sum(dim=1).view(-1, group_size)   # sum_t l_it
    lengths = mask.sum(dim=1).view(-1, group_size)                          # L_i
    return token_sums, lengths


def aggregate_token(per_token_loss, mask, advantages, group_size):
    """J_tok = (1 / sum_i L_i) * sum_i sum_t l_it          (DAPO / Dr. GRPO token sums)

    Every token of the group weighs the same, so the side that writes more tokens
    gets more total weight (sign-length coupling, method §3).
    """
    token_sums, lengths = _per_response_sums(per_token_loss, mask, group_size)   # (P, G)
    per_group = token_sums.sum(dim=1) / lengths.sum(dim=1).clamp(min=1)          # (P,)
    return per_group.mean()


def aggregate_sequence(per_token_loss, mask, advantages, group_size):
    """J_seq = (1/G) * sum_i (1/L_i) * sum_t l_it          (original GRPO)

    Every response weighs the same, so each token of a long response weighs less
    (sequence equal-weighting, method §3).
    """
    token_sums, lengths = _per_response_sums(per_token_loss, mask, group_size)   # (P, G)
    per_group = (token_sums / lengths.clamp(min=1)).mean(dim=1)                  # (P,)
    return per_group.mean()


def aggregate_balanced(per_token_loss, mask, advantages, group_size):
    """Balanced Aggregation, advantage-mass form (method §4; binary case method §2):

        J_BA = sum_{s in +,-} (M_s / G) * (sum_{i in S_s} sum_t l_it) / (sum_{i in S_s} |A_i| L_i)
        M_s  = sum_{i in S_s} |A_i|

    With binary rewards this is (k/G) * token-mean over S+  +  ((G-k)/G) * token-mean over S-:
    token mean inside each sign, sequence-count weights between the signs.
    Responses with A_i = 0 belong to neither side and carry no weight.
    """
    token_sums, lengths = _per_response_sums(per_token_loss, mask, group_size)   # (P, G)
    adv = advantages.to(token_sums.dtype).view(-1, group_size)                   # (P, G)
    sides = torch.stack([adv > 0, adv < 0]).to(token_sums.dtype)                # S+, S-: (2, P, G)
    mass = (adv.abs() * sides).sum(dim=2)                                        # M_s: (2, P)
    numerator = (token_sums * sides).sum(dim=2)                                  # (2, P)
    denominator = (adv.abs() * lengths * sides).sum(dim=2)                       # (2, P)
    # An empty side, or one whose responses are all empty, contributes 0 (not 0/0).
    safe = torch.where(denominator > 0, denominator, torch.ones_like(denominator))
    per_side = torch.where(denominator > 0, mass / group_size * numerator / safe,
                           torch.zeros_like(numerator))                          # (2, P)
    return per_side.sum(dim=0).mean()


AGGREGATORS = {
    "token": aggregate_token,
    "sequence": aggregate_sequence,
    "balanced": aggregate_balanced,
}


def aggregation_coefficients(mask, advantages, group_size, aggregator):
    """c_it = dJ/dl_it, shape (B, T): the weight each token term gets under a rule.

    Every rule is linear in l, so J = sum_it c_it * l_it exactly. The coefficients
    depend only on the mask and the advantages of *whole groups*; computing them once
    before splitting a batch into micro-batches keeps micro-batching exact.
    """
    probe = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device, requires_grad=True)
    with torch.enable_grad():
        value = AGGREGATORS[aggregator](probe, mask, advantages.float(), group_size)
        (coefficients,) = torch.autograd.grad(value, probe)
    return coefficients * mask.to(coefficients.dtype)


def sign_weights(mask, advantages, group_size, aggregator):
    """(w_pos, w_neg): total gradient weight on the positive and the negative responses
    at ratio 1 (method §3's table), measured by autograd through the real clipped term
    and the real aggregator.

    At rho = 1, -dJ/dlogp_it is the weight token t of response i gets in the ascent
    direction (A_i times its aggregation coefficient). w_pos sums it over A_i > 0,
    w_neg over A_i < 0. Sequence and balanced give +-sqrt(k(G-k))/G per group (binary,
    std scaling); token gives a ratio |w_pos / w_neg| = Lbar+ / Lbar-.
    """
    advantages = advantages.float()
    logp = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device, requires_grad=True)
    with torch.enable_grad():
        token_loss = clipped_token_loss(logp, logp.detach(), advantages, mask)
        value = AGGREGATORS[aggregator](token_loss, mask, advantages, group_size)
        (grad,) = torch.autograd.grad(value, logp)
    per_response = (-grad).sum(dim=1)                                           # (B,)
    return per_response[advantages > 0].sum(), per_response[advantages < 0].sum()
