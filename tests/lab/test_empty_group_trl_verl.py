"""One convention for a group whose responses all have no loss token, in the course (grpo_ba.py),
the TRL integration and the verl integration: it is a group, its value is 0, and it counts in P
(docs/method.md §7, choice 6). Issue 67 found verl dropping it from P: at P = 6 that made its
gradient 6/5 of TRL's. verl's own padding rows (a "pad" + 32 hex uid) are not a group.

The three are compared on one batch, on the same advantages (verl's: unbiased std), at
off-policy ratios with clipping active, for each rule; the TRL side is its rescaled advantages
through dapo's loss, sum_it l_it(A') / N (tests/lab/test_trl_rules.py shows TRL computes that).
"""
import numpy as np
import pytest
import torch

from grpo_ba import AGGREGATORS, clipped_token_loss, mask_from_lengths
from grpo_ba_lab.integrations.trl_balanced import rule_advantages

G = 4
EPS_LOW, EPS_HIGH = 0.2, 0.28
REWARDS = [[1, 0, 1, 0], [1, 1, 0, 0], [0, 1, 0, 0], [1, 0, 0, 1], [1, 1, 1, 0], [0, 0, 1, 1]]   # P = 6
LENGTHS = [[2, 9, 1, 7], [3, 5, 4, 12], [0, 0, 0, 0], [10, 4, 2, 6], [5, 5, 8, 3], [7, 2, 6, 9]]  # group 2: empty
EMPTY = 2


def flat(values):
    return torch.tensor([v for group in values for v in group], dtype=torch.float32)


def off_policy(mask, seed=1):
    gen = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(mask.shape, generator=gen) * 3).requires_grad_()
    old = logp.detach() + (0.5 * torch.randn(mask.shape, generator=gen)).clamp(-1, 1)
    return logp, old


def unbiased_advantages(rewards):
    r = rewards.view(-1, G)
    adv = (r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-6)
    return torch.where((r == r[:, :1]).all(1, keepdim=True), torch.zeros_like(adv), adv).view(-1)


def course_gradient(rule, logp, old, adv, mask, group_size=G):
    loss = AGGREGATORS[rule](clipped_token_loss(logp, old, adv, mask, EPS_LOW, EPS_HIGH), mask, adv, group_size)
    return torch.autograd.grad(loss, logp)[0]


@pytest.mark.parametrize("rule", list(AGGREGATORS))
def test_the_course_counts_an_empty_group_in_p(rule):
    """grpo_ba's aggregators take the mean over all P groups: the empty group's 0 included, so the
    gradient is 5/6 of the mean over the 5 groups with tokens."""
    mask, adv = mask_from_lengths(flat(LENGTHS)), unbiased_advantages(flat(REWARDS))
    logp, old = off_policy(mask)
    keep = torch.tensor([row // G != EMPTY for row in range(len(adv))])
    full = course_gradient(rule, logp, old, adv, mask)
    without = torch.zeros_like(full)
    without[keep] = course_gradient(rule, logp[keep].detach().requires_grad_(), old[keep], adv[keep], mask[keep])
    assert full.abs().sum() > 0
    assert torch.allclose(full, without * 5 / 6, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("rule", list(AGGREGATORS))
def test_the_trl_integration_counts_an_empty_group_in_p_as_the_course_does(rule):
    mask, adv = mask_from_lengths(flat(LENGTHS)), unbiased_advantages(flat(REWARDS))
    logp, old = off_policy(mask)
    n = mask.sum()
    rescaled = rule_advantages(adv, mask, n, G, rule)                       # A'_i = A_i c_i N
    trl = clipped_token_loss(logp, old, rescaled, mask, EPS_LOW, EPS_HIGH).sum() / n   # dapo's loss
    trl_grad = torch.autograd.grad(trl, logp)[0]
    assert torch.allclose(trl_grad, course_gradient(rule, logp, old, adv, mask), rtol=1e-4, atol=1e-8)


def verl_batch(pad_uid=None):
    """The batch in shuffled rows with verl's uids; a padding uid adds G rows without tokens."""
    rewards, lengths = flat(REWARDS), flat(LENGTHS).long()
    rows = len(rewards) + (G if pad_uid else 0)
    width = int(lengths.max())
    perm = torch.randperm(len(rewards), generator=torch.Generator().manual_seed(0))
    mask, scores = torch.zeros(rows, width), torch.zeros(rows, width)
    uids = np.empty(rows, dtype=object)
    for row, c in enumerate(perm.tolist()):
        mask[row, :lengths[c]] = 1
        scores[row, max(int(lengths[c]) - 1, 0)] = rewards[c]       # verl sums the row's token rewards
        uids[row] = f"prompt{c // G}"
    if pad_uid:
        uids[len(rewards):] = pad_uid
    return scores, mask, uids, torch.argsort(perm)


@pytest.mark.parametrize("rule", list(AGGREGATORS))
@pytest.mark.parametrize("padding", [False, True])
def test_the_verl_integration_counts_an_empty_group_in_p_and_not_its_padding(verl_base_config, rule, padding):
    from verl.trainer.ppo import core_algos      # verl_base_config skips without verl
    from verl.utils.config import omega_conf_to_dataclass

    import grpo_ba_lab.integrations.verl_balanced as vb
    from conftest import verl_actor_config

    estimator = {"token": "grpo_token", "sequence": "grpo_sequence", "balanced": "grpo_balanced"}[rule]
    cfg, _ = verl_actor_config(verl_base_config, len(REWARDS), "token-mean", G, EPS_LOW, EPS_HIGH)
    cfg.algorithm.adv_estimator = estimator
    scores, mask, uids, order = verl_batch("pad" + "0123456789abcdef" * 2 if padding else None)
    rescaled, verl_adv = vb.rule_advantage(estimator, scores, mask, uids, config=cfg.algorithm)
    logp, old = off_policy(mask)
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    actor.global_batch_info.update(dp_size=1, batch_num_tokens=int(mask.sum()), global_batch_size=None,
                                   loss_scale_factor=actor.loss_scale_factor)
    loss, _ = core_algos.compute_policy_loss_vanilla(old_log_prob=old, log_prob=logp, advantages=rescaled,
                                                     response_mask=mask.bool(), loss_agg_mode="token-mean",
                                                     config=actor)
    verl_grad = torch.autograd.grad(loss, logp)[0]
    real = order                                                                 # contiguous row -> batch row
    adv = vb.response_advantages(verl_adv, mask)[real]
    has_tokens = mask[real].sum(1) > 0                                            # verl says 0 on an empty row
    assert torch.allclose(adv[has_tokens], unbiased_advantages(flat(REWARDS))[has_tokens], atol=1e-5)
    leaf = logp.detach()[real].requires_grad_()
    ours = course_gradient(rule, leaf, old[real], adv, mask[real])
    assert torch.allclose(verl_grad[real], ours, rtol=1e-4, atol=1e-8)
    if padding:
        assert verl_grad[len(real):].abs().sum() == 0 and rescaled[len(real):].abs().sum() == 0
