"""The stability probe's knobs (docs/stability-probe.md) on hand-made rollouts: --truncated
keep|mask (DAPO's overlong filter) and --endless-slips (wrong answers that run to the cap)."""
import pytest
import torch

import grpo_ba
from grpo_ba_support.args import UsageError
from grpo_ba_lab.lab_args import parse_args
from toy_tasks import ToyWorld, make_problems, warmup_corpus
from toy_tasks.model import char_tokenizer, encode_pairs, tiny_qwen3, warmup_cache_dir

# One group of G = 4 (right, right, wrong, wrong) with lengths 3, 2, 2 and a response cut at
# the cap (6 tokens, no EOS): the last one is the truncated one.
LENGTHS, TRUNCATED_ROW, T = (3, 2, 2, 6), 3, 6
REWARDS = torch.tensor([1.0, 1.0, 0.0, 0.0])


def _hand_made_rollout(tokenizer):
    eos, digit = tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("7")
    response = torch.full((4, T), digit)
    for row, length in enumerate(LENGTHS):
        if row != TRUNCATED_ROW:
            response[row, length - 1] = eos
    prompt = torch.tensor([[tokenizer.bos_token_id] + tokenizer("1+2+3=")["input_ids"]] * 4)
    mask, truncated = grpo_ba.response_mask_from_eos(response, [eos])
    attention = torch.cat([torch.ones_like(prompt), mask], dim=1)
    return grpo_ba.Rollout(torch.cat([prompt, response], dim=1), attention, mask, [""] * 4, truncated)


def _args(rule, truncated):
    return parse_args(["--aggregator", rule, "--group-size", "4", "--prompts-per-step", "1",
                       "--truncated", truncated, "--inner-updates", "1"])


def _coefficients_used(monkeypatch, rule, truncated):
    """The c_it grpo_update really trained on, for the hand-made group."""
    tokenizer = char_tokenizer()
    policy = tiny_qwen3(tokenizer)
    batch = _hand_made_rollout(tokenizer)
    assert batch.truncated.tolist() == [False, False, False, True]
    assert batch.response_mask.sum(1).tolist() == list(LENGTHS)
    seen = []
    real = grpo_ba.AGGREGATORS[rule]

    def spy(token_loss, mask, advantages, group_size):        # the rule meets the loss
        seen.append((mask, advantages, group_size, rule))
        return real(token_loss, mask, advantages, group_size)
    monkeypatch.setitem(grpo_ba.AGGREGATORS, rule, spy)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-4)
    grpo_ba.grpo_update(policy, None, optimizer, batch, REWARDS, _args(rule, truncated))
    monkeypatch.setitem(grpo_ba.AGGREGATORS, rule, real)
    return grpo_ba.aggregation_coefficients(*seen[0])        # dJ/dl of the loss it called


# per-token coefficient of each row (every token of a row weighs the same), keep vs mask:
# token: 1 / sum L over the kept rows; sequence: 1 / (G L_i), the cut row's 1/G simply gone;
# balanced: each sign's mass M_s / G over the sign's tokens; a masked answer has no tokens and
# no mass (docs/method.md §7, choice 6), so the other wrong answer keeps sequence's 1/8.
EXPECTED = {
    ("token", "keep"): (1 / 13, 1 / 13, 1 / 13, 1 / 13),
    ("token", "mask"): (1 / 7, 1 / 7, 1 / 7, 0.0),
    ("sequence", "keep"): (1 / 12, 1 / 8, 1 / 8, 1 / 24),
    ("sequence", "mask"): (1 / 12, 1 / 8, 1 / 8, 0.0),
    ("balanced", "keep"): (1 / 10, 1 / 10, 1 / 16, 1 / 16),
    ("balanced", "mask"): (1 / 10, 1 / 10, 1 / 8, 0.0),
}


@pytest.mark.parametrize("rule,truncated", sorted(EXPECTED))
def test_a_truncated_response_is_kept_or_masked_as_set_and_each_rules_coefficients_follow(
        monkeypatch, rule, truncated):
    coefficients = _coefficients_used(monkeypatch, rule, truncated)          # (4, T)
    for row, (length, expected) in enumerate(zip(LENGTHS, EXPECTED[(rule, truncated)])):
        assert coefficients[row, :length].tolist() == pytest.approx([expected] * length), row
        assert coefficients[row, length:].abs().sum().item() == 0.0            # padding: nothing


def test_masking_a_truncated_response_keeps_its_advantage_in_the_group():
    # the overlong filter removes the cut response from the loss, not from A = (r - mean) / std:
    # the other wrong answer's advantage is the same whether the cut one is masked or not
    advantages = grpo_ba.group_advantages(REWARDS, 4)
    assert advantages[2].item() == advantages[3].item() < 0


def test_truncated_refuses_anything_but_keep_or_mask():
    with pytest.raises(UsageError, match="--truncated: invalid choice: 'drop'"):
        parse_args(["--truncated", "drop"])


def test_endless_slips_write_wrong_answers_past_the_warmup_width_with_no_eos():
    world = ToyWorld("gap", slip_style="loop", endless_slips=1.0, corpus_error=0.0)
    train, _ = make_problems()
    pairs = warmup_corpus(world, train["prompt"][:300], 600, seed=0)
    width = 1 + 8 + world.longest_response()
    tokenizer = char_tokenizer()
    slips = [(p, r) for p, r in pairs if r.split()[0] == p.split("+")[0]]
    assert len(slips) > 100
    _, labels = encode_pairs(tokenizer, slips, width)
    assert not (labels == tokenizer.eos_token_id).any()        # cut at the width: never stops
    plain = [(p, r) for p, r in pairs if (p, r) not in slips]
    _, labels = encode_pairs(tokenizer, plain, width)
    assert (labels == tokenizer.eos_token_id).any(dim=1).all()  # the rest still end


def test_endless_slips_change_a_fraction_of_slips_and_the_warmup_cache_key():
    train, _ = make_problems()
    half = ToyWorld("gap", endless_slips=0.5, corpus_error=0.0)
    pairs = warmup_corpus(half, train["prompt"], 4000, seed=0)
    slips = [r for p, r in pairs if r.split()[0] == p.split("+")[0]]
    endless = sum(len(r) > 3 * half.longest_response() for r in slips)
    assert 0.4 < endless / len(slips) < 0.6
    assert (warmup_cache_dir("/c", half, 600, 0) != warmup_cache_dir("/c", ToyWorld("gap"), 600, 0)
            == warmup_cache_dir("/c", ToyWorld("gap", endless_slips=0.0), 600, 0))
    with pytest.raises(ValueError):
        ToyWorld(endless_slips=1.5)
