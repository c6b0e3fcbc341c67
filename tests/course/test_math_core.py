"""The math core against docs/method.md: advantages, clipped term, three aggregators.

The claims about the five functions of the exercises (group_advantages, the three
aggregators, sign_weights) run against the module named by the environment variable
GRPO_BA_MATH_CORE (default: grpo_ba); `python -m exercises.check` points it at a
student's stubs. `@checks(name)` tags the function a claim is about ("{rule}" stands for
the test's `rule` parameter); everything else in a claim (its set-up) comes from grpo_ba.
"""
import importlib
import math
import os

import pytest
import torch

import grpo_ba
from grpo_ba import (aggregation_coefficients, clipped_token_loss, group_advantages, k3_kl,
                     sign_weights)

subject = importlib.import_module(os.environ.get("GRPO_BA_MATH_CORE", "grpo_ba"))
RULES = ["token", "sequence", "balanced"]


def subject_aggregator(rule):
    return getattr(subject, f"aggregate_{rule}")


def checks(*functions):
    """Tag a claim with the exercise function(s) it is about (read by exercises/check.py)."""
    def tag(test):
        test.checks = functions
        return test
    return tag


def make_mask(lengths, width=None):
    width = width or max(max(lengths), 1) + 2
    mask = torch.zeros(len(lengths), width)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
    return mask


def on_policy_loss(mask, adv):
    """l_it at rho = 1: -A_i on every response token."""
    return -adv[:, None] * mask


# ------------------------------------------------------------------ advantages

@checks("group_advantages")
def test_advantages_have_zero_mean_and_unit_population_std_per_group():
    rewards = torch.tensor([1., 0, 1, 1, 0, 0, 0, 1])
    adv = subject.group_advantages(rewards, 4).view(2, 4)
    assert torch.allclose(adv.sum(1), torch.zeros(2), atol=1e-6)
    assert torch.allclose(adv.std(1, unbiased=False), torch.ones(2), atol=1e-4)
    # k = 3 of G = 4: A+ = sqrt((G-k)/k), A- = -sqrt(k/(G-k)) (population std)
    assert adv[0, 0].item() == pytest.approx(math.sqrt(1 / 3), rel=1e-4)
    assert adv[0, 1].item() == pytest.approx(-math.sqrt(3), rel=1e-4)


@checks("group_advantages")
def test_advantages_none_scale_is_dr_grpo_centering():
    rewards = torch.tensor([1., 0, 0, 0])
    assert torch.allclose(subject.group_advantages(rewards, 4, scale="none"), torch.tensor([.75, -.25, -.25, -.25]))


@checks("group_advantages")
def test_groups_of_one_and_all_equal_groups_give_zero_advantage_without_nan():
    assert torch.equal(subject.group_advantages(torch.tensor([1., 0, 1]), 1), torch.zeros(3))
    adv = subject.group_advantages(torch.tensor([1., 1, 1, 0, 0, 0]), 3)
    assert torch.isfinite(adv).all() and torch.equal(adv, torch.zeros(6))


@checks("group_advantages")
def test_advantages_reject_batch_that_does_not_split_into_groups():
    with pytest.raises(ValueError):
        subject.group_advantages(torch.ones(5), 2)


# ------------------------------------------------------------------ clipped term

def test_clipped_term_gradient_at_ratio_one_is_minus_advantage_times_grad_logp():
    torch.manual_seed(0)
    logits = torch.randn(3, 4, requires_grad=True)
    logp = torch.log_softmax(logits, -1)
    adv = torch.tensor([0.7, -1.3, 0.2])
    mask = torch.ones(3, 4)
    loss = clipped_token_loss(logp, logp.detach(), adv, mask).sum()
    (grad,) = torch.autograd.grad(loss, logits)
    (expected,) = torch.autograd.grad((-adv[:, None] * torch.log_softmax(logits, -1)).sum(), logits)
    assert torch.allclose(grad, expected, atol=1e-6)


@pytest.mark.parametrize("adv, log_ratio", [(1.0, math.log(1.5)), (-1.0, math.log(0.5))])
def test_clipped_term_has_zero_gradient_outside_the_clip_range_on_the_clipped_side(adv, log_ratio):
    logp = torch.full((1, 1), log_ratio, requires_grad=True)
    loss = clipped_token_loss(logp, torch.zeros(1, 1), torch.tensor([adv]), torch.ones(1, 1))
    (grad,) = torch.autograd.grad(loss.sum(), logp)
    assert grad.item() == 0.0
    # ... while on the unclipped side the gradient is alive
    logp2 = torch.full((1, 1), -log_ratio, requires_grad=True)
    loss2 = clipped_token_loss(logp2, torch.zeros(1, 1), torch.tensor([adv]), torch.ones(1, 1))
    (grad2,) = torch.autograd.grad(loss2.sum(), logp2)
    assert grad2.item() != 0.0


@pytest.mark.parametrize("clip_ratio_c", [None, 3.0])
def test_the_clipped_tokens_clip_frac_counts_are_exactly_those_with_no_gradient(clip_ratio_c):
    """clip_frac's mask (clipped_tokens) against autograd through the clipped term, the dual
    clip included: ratios from 0.1 to 10 on both signs of A."""
    from grpo_ba import clipped_tokens, policy_ratio
    log_ratio = torch.linspace(math.log(0.1), math.log(10.0), 41)
    logp = torch.stack([log_ratio, log_ratio]).clone().requires_grad_(True)          # (2, 41)
    advantages, old, mask = torch.tensor([1.5, -0.7]), torch.zeros(2, 41), torch.ones(2, 41)
    loss = clipped_token_loss(logp, old, advantages, mask, 0.2, 0.28, clip_ratio_c=clip_ratio_c)
    (grad,) = torch.autograd.grad(loss.sum(), logp)
    clipped = clipped_tokens(policy_ratio(logp.detach(), old, mask), advantages, 0.2, 0.28, clip_ratio_c)
    assert torch.equal(clipped, grad == 0)
    beyond_c = log_ratio > math.log(3.0)                   # negative tokens past c: the dual clip's
    assert clipped[1][beyond_c].all() == bool(clip_ratio_c) and beyond_c.any()


def test_clip_higher_uses_eps_high_for_positive_advantages():
    logp = torch.full((1, 1), math.log(1.25))
    loss = clipped_token_loss(logp, torch.zeros(1, 1), torch.ones(1), torch.ones(1, 1), 0.2, 0.28)
    assert loss.item() == pytest.approx(-1.25, rel=1e-6)          # 1.25 < 1.28: not clipped
    loss = clipped_token_loss(logp, torch.zeros(1, 1), torch.ones(1), torch.ones(1, 1), 0.2, 0.2)
    assert loss.item() == pytest.approx(-1.2, rel=1e-6)


def test_k3_is_nonnegative_and_zero_when_policies_agree():
    torch.manual_seed(0)
    a, b = torch.randn(1000), torch.randn(1000)
    assert (k3_kl(a, b) >= 0).all()
    assert torch.equal(k3_kl(a, a), torch.zeros(1000))
    logp = torch.randn(2, 3)
    with_kl = clipped_token_loss(logp, logp, torch.zeros(2), torch.ones(2, 3), ref_logp=logp - 1, beta=0.5)
    assert torch.allclose(with_kl, 0.5 * k3_kl(logp, logp - 1))


def test_masked_positions_with_infinite_ratio_give_no_nan():
    logp = torch.tensor([[0.0, 50.0]], requires_grad=True)
    old = torch.tensor([[0.0, -1e4]])
    loss = clipped_token_loss(logp, old, torch.tensor([0.0]), torch.tensor([[1.0, 0.0]]))
    loss.sum().backward()
    assert torch.isfinite(loss).all() and torch.isfinite(logp.grad).all()


# ------------------------------------------------------------------ aggregators: docs/method.md §3

@checks("aggregate_{rule}")
@pytest.mark.parametrize("rule, expected", [("token", 0.4), ("sequence", 0.0), ("balanced", 0.0)])
def test_worked_example_of_method_section_3(rule, expected):
    adv = torch.tensor([1., -1, 1, -1])
    mask = make_mask([2, 4, 1, 3])
    loss = on_policy_loss(mask, adv)
    assert subject_aggregator(rule)(loss, mask, adv, 4).item() == pytest.approx(expected, abs=1e-7)


@checks("sign_weights")
@pytest.mark.parametrize("rule, expected", [("token", (0.3, -0.7)), ("sequence", (0.5, -0.5)), ("balanced", (0.5, -0.5))])
def test_sign_weights_of_the_worked_example(rule, expected):
    adv = torch.tensor([1., -1, 1, -1])
    w_pos, w_neg = subject.sign_weights(make_mask([2, 4, 1, 3]), adv, 4, rule)
    assert (float(w_pos), float(w_neg)) == pytest.approx(expected, abs=1e-6)


GROUP_LENGTHS = [3, 7, 2, 9, 4, 12, 5, 1]        # G = 8
GROUP_REWARDS = [1., 0, 1, 0, 0, 0, 1, 0]         # k = 3


def _table_setup():
    rewards = torch.tensor(GROUP_REWARDS)
    adv = group_advantages(rewards, 8)
    mask = make_mask(GROUP_LENGTHS)
    return rewards, adv, mask


@checks("aggregate_{rule}")
@pytest.mark.parametrize("rule", RULES)
def test_per_token_gradient_weight_matches_method_table(rule):
    rewards, adv, mask = _table_setup()
    lengths = mask.sum(1)
    G = 8
    pos = adv > 0
    expected_per_token = {
        "sequence": adv / (G * lengths),
        "token": adv / lengths.sum(),
        "balanced": torch.where(pos, adv / (G * lengths[pos].mean()), adv / (G * lengths[~pos].mean())),
    }[rule]
    logp = torch.zeros_like(mask, requires_grad=True)
    value = subject_aggregator(rule)(clipped_token_loss(logp, logp.detach(), adv, mask), mask, adv, G)
    (grad,) = torch.autograd.grad(value, logp)
    assert torch.allclose(-grad, expected_per_token[:, None] * mask, atol=1e-6)


@checks("sign_weights")
@pytest.mark.parametrize("rule", ["sequence", "balanced"])
def test_balanced_and_sequence_give_each_sign_sqrt_k_g_minus_k_over_g(rule):
    _, adv, mask = _table_setup()
    k, G = 3, 8
    w_pos, w_neg = subject.sign_weights(mask, adv, G, rule)
    expected = math.sqrt(k * (G - k)) / G
    assert w_pos.item() == pytest.approx(expected, rel=1e-4)
    assert w_neg.item() == pytest.approx(-expected, rel=1e-4)


@checks("sign_weights")
def test_token_positive_to_negative_weight_ratio_equals_mean_length_ratio():
    rewards, adv, mask = _table_setup()
    lengths = mask.sum(1)
    ratio = lengths[rewards == 1].mean() / lengths[rewards == 0].mean()
    w_pos, w_neg = subject.sign_weights(mask, adv, 8, "token")
    assert (w_pos / -w_neg).item() == pytest.approx(ratio.item(), rel=1e-4)
    assert (w_pos / -w_neg).item() != pytest.approx(1.0, rel=0.05)   # the setup has a real gap


@checks("aggregate_token")
def test_token_loss_at_ratio_one_is_minus_sum_a_l_over_sum_l():
    _, adv, mask = _table_setup()
    lengths = mask.sum(1)
    loss = subject.aggregate_token(on_policy_loss(mask, adv), mask, adv, 8)
    assert loss.item() == pytest.approx((-(adv * lengths).sum() / lengths.sum()).item(), rel=1e-5)
    assert abs(loss.item()) > 1e-3


# ------------------------------------------------------------------ aggregators: edge cases

@checks("aggregate_{rule}")
@pytest.mark.parametrize("rule", RULES)
def test_all_rules_coincide_when_every_response_has_the_same_length(rule):
    """With L_i = L for all i every rule is the plain token mean sum_it l_it / (G L)."""
    torch.manual_seed(1)
    mask = make_mask([5] * 8)
    adv = group_advantages(torch.tensor(GROUP_REWARDS), 8)
    loss = torch.randn(8, mask.shape[1]) * mask
    assert subject_aggregator(rule)(loss, mask, adv, 8).item() == pytest.approx((loss.sum() / 40).item(), rel=1e-5)


@checks("aggregate_{rule}")
@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("rewards", [[1., 1, 1, 1], [0., 0, 0, 0]])
def test_all_rules_give_zero_with_finite_gradients_when_k_is_0_or_g(rule, rewards):
    adv = group_advantages(torch.tensor(rewards), 4)
    mask = make_mask([2, 4, 1, 3])
    logp = torch.randn(mask.shape, requires_grad=True)
    value = subject_aggregator(rule)(clipped_token_loss(logp, logp.detach() + 0.1, adv, mask), mask, adv, 4)
    (grad,) = torch.autograd.grad(value, logp)
    assert value.item() == 0.0 and torch.isfinite(grad).all() and torch.equal(grad, torch.zeros_like(grad))


@checks("aggregate_{rule}")
@pytest.mark.parametrize("rule", RULES)
def test_padding_beyond_the_mask_changes_nothing(rule):
    torch.manual_seed(2)
    _, adv, mask = _table_setup()
    loss = torch.randn(mask.shape)
    garbage = loss + (1 - mask) * 1e6
    wide_mask = torch.cat([mask, torch.zeros(8, 5)], 1)
    wide_loss = torch.cat([loss, torch.randn(8, 5)], 1)
    f = subject_aggregator(rule)
    base = f(loss * mask, mask, adv, 8)
    assert f(garbage * mask, mask, adv, 8).item() == pytest.approx(base.item(), rel=1e-6)
    assert f(wide_loss * wide_mask, wide_mask, adv, 8).item() == pytest.approx(base.item(), rel=1e-6)


@checks("aggregate_{rule}")
@pytest.mark.parametrize("rule", RULES)
def test_zero_length_response_gives_no_nan(rule):
    adv = group_advantages(torch.tensor([1., 0, 1, 0]), 4)
    mask = make_mask([0, 3, 2, 0])
    logp = torch.zeros(mask.shape, requires_grad=True)
    value = subject_aggregator(rule)(clipped_token_loss(logp, logp.detach(), adv, mask), mask, adv, 4)
    (grad,) = torch.autograd.grad(value, logp)
    assert torch.isfinite(value) and torch.isfinite(grad).all()
    # every response empty: loss 0, not 0/0
    empty = torch.zeros(4, 3)
    assert subject_aggregator(rule)(empty, empty, adv, 4).item() == 0.0


@checks("aggregate_balanced")
def test_balanced_is_the_papers_binary_form_k_over_g_times_each_signs_token_mean():
    torch.manual_seed(3)
    rewards, adv, mask = _table_setup()
    loss = torch.randn(mask.shape) * mask
    lengths = mask.sum(1)
    pos, neg = rewards == 1, rewards == 0
    k, G = int(pos.sum()), 8
    binary = (k / G) * loss[pos].sum() / lengths[pos].sum() + ((G - k) / G) * loss[neg].sum() / lengths[neg].sum()
    assert subject.aggregate_balanced(loss, mask, adv, G).item() == pytest.approx(binary.item(), rel=1e-5)


@pytest.mark.parametrize("scale", ["std", "none"])
def test_the_advantage_mass_form_equals_the_papers_form_on_binary_batches(scale):
    """grpo_ba_support/coefficients.py's graded form (the plug-ins') is aggregate_balanced on
    binary rewards, empty responses, tied groups and several groups included."""
    torch.manual_seed(5)
    rewards = torch.tensor([1., 0, 0, 1, 1, 1, 1, 1, 0, 1, 0, 0, 1, 1, 1, 0])   # k = 2, tied, 1, 3
    mask = make_mask([3, 0, 9, 2, 4, 4, 1, 6, 7, 1, 0, 5, 2, 8, 3, 11])
    adv = group_advantages(rewards, 4, scale)
    loss = torch.randn(mask.shape) * mask
    paper = grpo_ba.aggregate_balanced(loss, mask, adv, 4)
    graded = grpo_ba.aggregate_balanced_by_advantage_mass(loss, mask, adv, 4)
    assert paper.item() == pytest.approx(graded.item(), rel=1e-6, abs=1e-7)
    assert torch.allclose(aggregation_coefficients(mask, adv, 4, grpo_ba.aggregate_balanced),
                          aggregation_coefficients(mask, adv, 4, "balanced"), rtol=1e-6, atol=1e-8)


def test_the_logged_balanced_share_and_weight_are_the_papers_form_on_binary_rewards(monkeypatch):
    """A step logs balanced's right-answer share and long/short token weight with the rule it
    trains on, aggregate_balanced (rewards are 0 or 1): the advantage-mass form, the plug-ins'
    for graded rewards, is never called on the course's path."""
    import argparse

    import grpo_ba_support.coefficients

    def graded_form(*_):
        raise AssertionError("the course's diagnostics called the graded form")
    monkeypatch.setattr(grpo_ba_support.coefficients, "aggregate_balanced_by_advantage_mass", graded_form)
    monkeypatch.setattr(grpo_ba, "aggregate_balanced_by_advantage_mass", graded_form)
    rewards = torch.tensor([1., 0, 0, 1, 1, 1, 1, 1, 0, 1, 0, 0, 1, 1, 1, 0])   # k = 2, tied, 1, 3
    mask = make_mask([3, 0, 9, 2, 4, 4, 1, 6, 7, 1, 0, 5, 2, 8, 3, 11])
    args = argparse.Namespace(group_size=4, adv_scale="std", aggregator="balanced")
    logged = grpo_ba.step_diagnostics(rewards, mask, args)
    adv = group_advantages(rewards, 4)
    paper = grpo_ba.aggregate_balanced
    assert logged["pos_share"] == logged["pos_share_balanced"]
    assert logged["pos_share"] == pytest.approx(grpo_ba.positive_share(mask, adv, 4, paper), rel=1e-6)
    assert logged["long_right_weight"] == pytest.approx(grpo_ba.long_right_weight(mask, adv, 4, paper),
                                                        rel=1e-6)
    assert logged["pos_share"] != pytest.approx(0.5)        # not a trivial share: the test can fail


def test_on_graded_rewards_the_mass_form_differs_from_count_weights_and_keeps_sequences_masses():
    rewards = torch.tensor([0.9, 0.1, 0.5, 0.0, 0.7, 0.3])
    adv = group_advantages(rewards, 6)
    mask = make_mask([4, 9, 2, 7, 3, 11])
    graded = grpo_ba.aggregate_balanced_by_advantage_mass
    w_bal = sign_weights(mask, adv, 6, graded)
    w_seq = sign_weights(mask, adv, 6, "sequence")
    assert w_bal[0].item() == pytest.approx(w_seq[0].item(), rel=1e-5)
    assert w_bal[1].item() == pytest.approx(w_seq[1].item(), rel=1e-5)
    assert w_bal[0].item() == pytest.approx(-w_bal[1].item(), rel=1e-5)  # sum A_i = 0
    # ... and tokens inside a sign share one coefficient
    coeff = aggregation_coefficients(mask, adv, 6, graded)
    pos_coeffs = coeff[(adv > 0)[:, None].expand_as(mask) & mask.bool()]
    assert torch.allclose(pos_coeffs, pos_coeffs[0].expand_as(pos_coeffs))
    # the count weights of the paper's binary form are another loss here
    counts = sign_weights(mask, adv, 6, grpo_ba.aggregate_balanced)
    assert abs(counts[0].item() - w_bal[0].item()) > 1e-3


@checks("aggregate_{rule}")
@pytest.mark.parametrize("rule", RULES)
def test_p_groups_give_the_mean_of_the_p_single_group_values(rule):
    torch.manual_seed(4)
    rewards = torch.tensor([1., 0, 0, 1, 0, 0, 0, 1, 1, 1, 0, 1])
    adv = group_advantages(rewards, 4)
    mask = make_mask([2, 5, 1, 7, 3, 3, 8, 1, 4, 6, 2, 2])
    loss = torch.randn(mask.shape) * mask
    f = subject_aggregator(rule)
    singles = [f(loss[i:i + 4], mask[i:i + 4], adv[i:i + 4], 4) for i in range(0, 12, 4)]
    assert f(loss, mask, adv, 4).item() == pytest.approx(torch.stack(singles).mean().item(), rel=1e-5)


@checks("aggregate_{rule}")
@pytest.mark.parametrize("rule", RULES)
def test_coefficients_reproduce_the_aggregate(rule):
    """The rule is linear in the token terms: J = sum_it c_it * l_it (docs/method.md §7, choice 8)."""
    torch.manual_seed(5)
    _, adv, mask = _table_setup()
    loss = torch.randn(mask.shape) * mask
    f = subject_aggregator(rule)
    coeff = aggregation_coefficients(mask, adv, 8, f)
    assert (coeff * loss).sum().item() == pytest.approx(f(loss, mask, adv, 8).item(), rel=1e-5)
