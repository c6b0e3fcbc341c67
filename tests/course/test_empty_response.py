"""A response with no tokens (an empty completion, or one whose mask is all zero: TRL's
mask_truncated_completions, any overlong masking) under grpo_ba's rules.

The choice (docs/method.md §7, choice 6): such a response contributes nothing, neither tokens
nor, under balanced, its advantage mass. Why: §4's property 1 defines balanced's weight per
sign as sequence aggregation's, W_s = sum_{i in S_s} A_i / G, and sequence gives a response
without tokens weight 0; counting its |A_i| in M_s would instead hand its weight to the
same-sign responses that have tokens (a lone 2-token wrong answer beside an empty one would get
twice its weight). The TRL and verl integrations train with this choice
(tests/lab/test_trl_rules.py, tests/lab/test_verl_balanced.py).

One group, G = 4: rewards [1, 1, 0, 0], lengths [3, 5, 2, 0]; the empty response is wrong.
"""
import pytest
import torch

from grpo_ba import (AGGREGATORS, aggregate_balanced, aggregation_coefficients, clipped_token_loss,
                     group_advantages, mask_from_lengths, sign_weights)

G = 4
LENGTHS = torch.tensor([3, 5, 2, 0])
REWARDS = torch.tensor([1.0, 1.0, 0.0, 0.0])


def group():
    mask = mask_from_lengths(LENGTHS)
    return mask, group_advantages(REWARDS, G)


@pytest.mark.parametrize("rule", list(AGGREGATORS))
def test_an_empty_response_gets_no_token_weight_under_every_rule(rule):
    mask, adv = group()
    coefficients = aggregation_coefficients(mask, adv, G, rule)
    assert coefficients[3].abs().sum() == 0 and torch.isfinite(coefficients).all()
    logp = torch.zeros(mask.shape, requires_grad=True)
    value = AGGREGATORS[rule](clipped_token_loss(logp, logp.detach(), adv, mask), mask, adv, G)
    assert torch.isfinite(value)


def test_balanced_gives_an_empty_response_no_advantage_mass_so_its_peer_keeps_its_weight():
    """The 2-token wrong answer's coefficient is 1 / (G * 2): its own mass |A| / G over its own
    |A| L, the same as without the empty response; not 2 / (G * 2) (the empty one's mass moved to it)."""
    mask, adv = group()
    coefficients = aggregation_coefficients(mask, adv, G, "balanced")[:, 0]
    assert coefficients[2].item() == pytest.approx(1 / (G * 2), rel=1e-6)
    without = adv * (LENGTHS > 0)                                   # the empty response left out
    logp = torch.randn(mask.shape, generator=torch.Generator().manual_seed(0))
    terms = clipped_token_loss(logp, logp + 0.3, adv, mask)
    assert aggregate_balanced(terms, mask, adv, G).item() == pytest.approx(
        aggregate_balanced(terms, mask, without, G).item(), rel=1e-6)


def test_balanced_keeps_sequences_weight_per_sign_when_a_response_is_empty():
    """§4's property 1 with an empty response: balanced's weight on each sign is sequence's."""
    mask, adv = group()
    for balanced, sequence in zip(sign_weights(mask, adv, G, "balanced"), sign_weights(mask, adv, G, "sequence")):
        assert balanced.item() == pytest.approx(sequence.item(), rel=1e-6)
