"""The dual clip (clip_ratio_c) of grpo_ba's clipped term against verl 0.9.1's own
compute_policy_loss_vanilla, token by token, on negative-advantage tokens whose ratio is
above clip_ratio_c; off by default; and Balanced Aggregation through verl equal to
grpo_ba's J_BA with the dual clip on (issue 32, item 7)."""

import numpy as np
import pytest
import torch

verl = pytest.importorskip("verl", reason="verl is optional: pip install -r requirements/verl.txt && "
                                          "pip install --no-deps verl==0.9.1")

from verl.trainer.ppo import core_algos  # noqa: E402
from verl.utils.config import omega_conf_to_dataclass  # noqa: E402

import grpo_ba_lab.integrations.verl_balanced as vb  # noqa: E402
from conftest import verl_actor_config  # noqa: E402
from grpo_ba import aggregate_balanced, clipped_token_loss  # noqa: E402

EPS_LOW, EPS_HIGH, C = 0.2, 0.28, 3.0
G = 4


def actor(base, clip_ratio_c=C, mode="token-mean", prompts=2):
    cfg, a = verl_actor_config(base, prompts, mode, G, EPS_LOW, EPS_HIGH)
    a.clip_ratio_c = clip_ratio_c
    return cfg, omega_conf_to_dataclass(a)


def verl_terms(actor_config, logp, old, advantages, mask):
    """verl's per-token policy loss l_it: compute_policy_loss_vanilla with 'token-sum' over a
    mask holding that one token."""
    actor_config.global_batch_info.update(dp_size=1, batch_num_tokens=None, global_batch_size=None,
                                          loss_scale_factor=actor_config.loss_scale_factor)
    terms = torch.zeros(mask.shape)
    adv = advantages[:, None].expand_as(mask)                     # verl's advantages are per token
    for i, t in mask.nonzero().tolist():
        one = torch.zeros_like(mask, dtype=torch.bool)
        one[i, t] = True
        loss, _ = core_algos.compute_policy_loss_vanilla(old_log_prob=old, log_prob=logp, advantages=adv,
                                                         response_mask=one, loss_agg_mode="token-sum",
                                                         config=actor_config)
        terms[i, t] = loss
    return terms


def batch(seed=0):
    """Two groups of 4 with ratios from 0.2 to 7: negative-advantage tokens above c = 3 among them."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([3, 6, 2, 5, 4, 1, 6, 3])
    mask = (torch.arange(6)[None, :] < lengths[:, None]).float()
    advantages = torch.tensor([0.9, -1.1, 0.9, -0.7, -0.5, 1.5, -0.5, -0.5])
    logp = -torch.rand(mask.shape, generator=gen) * 3
    log_ratio = torch.empty(mask.shape).uniform_(np.log(0.2), np.log(7.0), generator=gen)
    return logp, logp - log_ratio, advantages, mask


def test_the_case_has_negative_advantage_tokens_above_clip_ratio_c():
    logp, old, advantages, mask = batch()
    ratio = torch.exp(logp - old)
    beyond = (ratio > C) & (advantages[:, None] < 0) & mask.bool()
    assert beyond.sum() >= 4 and ((ratio > C) & (advantages[:, None] > 0) & mask.bool()).any()


def test_the_dual_clip_matches_verls_compute_policy_loss_vanilla_token_by_token(verl_base_config):
    logp, old, advantages, mask = batch()
    _, config = actor(verl_base_config)
    ours = clipped_token_loss(logp, old, advantages, mask, EPS_LOW, EPS_HIGH, clip_ratio_c=C)
    torch.testing.assert_close(ours, verl_terms(config, logp, old, advantages, mask), rtol=1e-6, atol=1e-7)
    beyond = (torch.exp(logp - old) > C) & (advantages[:, None] < 0) & mask.bool()
    # there the term is the cap -A_i c, and without the dual clip it is larger, so the test can fail
    torch.testing.assert_close(ours[beyond], (-advantages[:, None] * C).expand_as(mask)[beyond])
    plain = clipped_token_loss(logp, old, advantages, mask, EPS_LOW, EPS_HIGH)
    assert (plain[beyond] > ours[beyond] + 1e-3).all()
    assert torch.equal(plain[~beyond], ours[~beyond])            # every other token unchanged


def test_the_dual_clip_is_off_by_default_like_verl_with_an_unreachable_c(verl_base_config):
    logp, old, advantages, mask = batch(seed=1)
    _, config = actor(verl_base_config, clip_ratio_c=1e6)              # verl cannot switch it off; c = 1e6 never binds
    default = clipped_token_loss(logp, old, advantages, mask, EPS_LOW, EPS_HIGH)
    torch.testing.assert_close(default, verl_terms(config, logp, old, advantages, mask), rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match="above 1"):
        clipped_token_loss(logp, old, advantages, mask, clip_ratio_c=1.0)


def test_dual_clipped_tokens_get_no_gradient(verl_base_config):
    logp, old, advantages, mask = batch()
    logp = logp.clone().requires_grad_()
    loss = clipped_token_loss(logp, old, advantages, mask, EPS_LOW, EPS_HIGH, clip_ratio_c=C).sum()
    (grad,) = torch.autograd.grad(loss, logp)
    beyond = (torch.exp(logp.detach() - old) > C) & (advantages[:, None] < 0) & mask.bool()
    assert torch.equal(grad[beyond], torch.zeros_like(grad[beyond]))
    assert grad[mask.bool() & ~beyond].abs().sum() > 0


@pytest.mark.parametrize("mode", vb.LOSS_AGG_MODES)
def test_balanced_aggregation_through_verl_equals_grpo_bas_objective_with_the_dual_clip(verl_base_config, mode):
    """verl's grpo_balanced advantages through verl's loss (its dual clip at c = 3 always on)
    = aggregate_balanced of grpo_ba's clipped term with clip_ratio_c = 3."""
    rewards = [[1, 0, 1, 0], [0, 1, 0, 0]]
    lengths = [[3, 6, 2, 5], [4, 1, 6, 3]]
    width = 6
    mask = torch.zeros(8, width)
    scores = torch.zeros(8, width)
    for row, (r, n) in enumerate(zip(sum(rewards, []), sum(lengths, []))):
        mask[row, :n] = 1
        scores[row, n - 1] = r                                    # verl's score sits on the last response token
    uids = np.array([f"prompt{row // G}" for row in range(8)], dtype=object)
    cfg, config = actor(verl_base_config, mode=mode)
    balanced, _ = vb.compute_grpo_balanced_advantage(scores, mask, uids, config=cfg.algorithm)
    adv = vb.response_advantages(core_algos.compute_grpo_outcome_advantage(
        token_level_rewards=scores, response_mask=mask, index=uids)[0], mask)     # verl's A_i, (R,)
    gen = torch.Generator().manual_seed(5)
    logp = (-torch.rand(mask.shape, generator=gen) * 3).requires_grad_()
    old = logp.detach() - torch.empty(mask.shape).uniform_(np.log(0.2), np.log(7.0), generator=gen)
    assert ((torch.exp(logp.detach() - old) > C) & (adv[:, None] < 0) & mask.bool()).sum() >= 3
    config.global_batch_info.update(dp_size=1, batch_num_tokens=int(mask.sum()), global_batch_size=8,
                                    loss_scale_factor=config.loss_scale_factor)
    theirs, metrics = core_algos.compute_policy_loss_vanilla(old_log_prob=old, log_prob=logp, advantages=balanced,
                                                             response_mask=mask.bool(), loss_agg_mode=mode,
                                                             config=config)
    assert metrics["actor/pg_clipfrac_lower"] > 0                 # verl's dual clip is active
    ours = aggregate_balanced(clipped_token_loss(logp, old, adv, mask, EPS_LOW, EPS_HIGH, clip_ratio_c=C), mask, adv, G)
    assert theirs.item() == pytest.approx(ours.item(), rel=1e-5, abs=1e-7)
    (g_theirs,), (g_ours,) = torch.autograd.grad(theirs, logp), torch.autograd.grad(ours, logp)
    assert torch.allclose(g_theirs, g_ours, rtol=1e-5, atol=1e-8) and g_ours.abs().sum() > 0
    without = aggregate_balanced(clipped_token_loss(logp, old, adv, mask, EPS_LOW, EPS_HIGH), mask, adv, G)
    assert without.item() != pytest.approx(theirs.item(), rel=1e-3)  # without the dual clip they differ
