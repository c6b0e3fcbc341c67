"""grpo_ba_support/coefficients.py -- off grpo_ba.py's reading path (docs/method.md §7, choices 7
and 8): Balanced Aggregation by advantage mass for graded rewards (the TRL and verl plug-ins'),
and c = dJ/dl of whole groups, for a micro-batch that splits a group (the qwen3-1.7b preset)."""
import torch


def aggregate_balanced_by_advantage_mass(per_token_loss, mask, advantages, group_size):
    """J_BA for graded rewards, this project's generalisation (docs/method.md §4, choice 7):
        J_BA = sum_{s in +,-} (M_s / G) * (sum_{i in S_s} sum_t l_it) / (sum_{i in S_s} |A_i| L_i)
    M_s = sum_{i in S_s} |A_i|; A_i = 0 or L_i = 0: neither side. Binary rewards: |A_i| is one
    value per side and cancels, k/G times the token mean over S+ ..., grpo_ba.aggregate_balanced."""
    mask = mask.to(per_token_loss.dtype)
    token_sums = (per_token_loss * mask).sum(dim=1).view(-1, group_size)        # (P, G)
    lengths = mask.sum(dim=1).view(-1, group_size)                               # L_i: (P, G)
    adv = advantages.to(token_sums.dtype).view(-1, group_size)                   # (P, G)
    has_tokens = lengths > 0               # S+, S-: (2, P, G); choice 6: no tokens, neither side
    sides = torch.stack([(adv > 0) & has_tokens, (adv < 0) & has_tokens]).to(token_sums.dtype)
    mass = (adv.abs() * sides).sum(dim=2)                                        # M_s: (2, P)
    numerator = (token_sums * sides).sum(dim=2)                                  # (2, P)
    denominator = (adv.abs() * lengths * sides).sum(dim=2)                       # (2, P)
    # An empty side (no response with tokens: no mass, no sum) contributes 0, not 0/0.
    safe = torch.where(denominator > 0, denominator, torch.ones_like(denominator))
    return (mass / group_size * numerator / safe).sum(dim=0).mean()


def rule_coefficients(rule, mask, advantages, group_size):
    """c_it = dJ/dl_it, (B, T), of a rule function at l = 0: for a rule linear in l (the three),
    J = sum_it c_it * l_it exactly, c depending only on the mask and advantages of whole groups."""
    zeros = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device, requires_grad=True)
    with torch.enable_grad():
        (coefficients,) = torch.autograd.grad(rule(zeros, mask, advantages.float(), group_size),
                                              zeros)
    return coefficients * mask.to(coefficients.dtype)


def coefficients_for_split_groups(rule, mask, advantages, group_size, micro_batches):
    """None when every micro-batch (a slice of rows) holds whole groups. Else c = dJ/dl of whole
    groups, (B, T): a micro-batch's exact part of J is sum_it c_it * l_it over its rows (choice 8),
    for a rule linear in l; one that is not is refused here in one line, before any step."""
    if all(rows.start % group_size == 0 and (rows.stop - rows.start) % group_size == 0
           for rows in micro_batches):
        return None
    coefficients = rule_coefficients(rule, mask, advantages, group_size)         # (B, T)
    # linear in l: J at random token terms is sum c * l (a rule that is not, differs)
    terms = torch.randn(mask.shape, generator=torch.Generator().manual_seed(0)).to(mask) * mask
    called = rule(terms, mask, advantages.float(), group_size)
    linear = (coefficients * terms).sum()
    if not torch.isclose(called, linear, rtol=1e-4, atol=1e-6):
        raise ValueError(f"micro-batches of {micro_batches[0].stop} rows split groups of "
                         f"{group_size}: exact for a rule linear in l only, and this one is not "
                         f"(J {called:.4f}, sum c*l {linear:.4f}); use a multiple of {group_size}")
    return coefficients
