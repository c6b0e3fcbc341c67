"""Where the rule meets the loss: the update steps on the gradient of the paper's
J = rule(l, mask, A, G) (grpo_ba.grpo_loss, applied to the whole batch at once), also when
the batch is split into micro-batches smaller than a group, where each micro-batch computes
its share sum_it c_it * l_it with the coefficients of whole groups (docs/method.md §7, choice 8)."""
import pytest
import torch

import grpo_ba
from toy_tasks import model as toy_model

G, P = 4, 2
REWARDS = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0])       # k = 2 of 4, then 3 of 4
LENGTHS = [3, 9, 12, 2, 7, 1, 5, 10]                                       # tokens up to and with EOS


def batch_and_policy():
    tokenizer = toy_model.char_tokenizer()
    policy = toy_model.tiny_qwen3(tokenizer, seed=3)
    torch.manual_seed(0)
    prompt = tokenizer(["<bos>12+3+4="] * (G * P), return_tensors="pt", add_special_tokens=False)
    response = torch.randint(3, len(tokenizer), (G * P, max(LENGTHS) + 2))     # no pad, bos or eos
    for row, length in enumerate(LENGTHS):
        response[row, length - 1] = tokenizer.eos_token_id
    mask, truncated = grpo_ba.response_mask_from_eos(response, tokenizer.eos_token_id)
    batch = grpo_ba.Rollout(torch.cat([prompt["input_ids"], response], 1),
                            torch.cat([prompt["attention_mask"], mask], 1), mask, [""] * (G * P), truncated)
    return policy, batch


@pytest.mark.parametrize("rule", ["token", "sequence", "balanced"])
def test_the_update_steps_on_the_gradient_of_the_rules_loss_even_in_micro_batches_smaller_than_a_group(rule):
    policy, batch = batch_and_policy()
    assert batch.response_mask.sum(1).tolist() == LENGTHS
    T = batch.response_mask.shape[1]
    # the paper's line, on the whole batch: J = rule(l, mask, A, G), differentiated by autograd
    advantages = grpo_ba.group_advantages(REWARDS, G)
    logp, _ = grpo_ba.token_logprobs(policy, batch.sequences, batch.attention, T)
    mask = batch.response_mask.float()
    token_loss = grpo_ba.clipped_token_loss(logp, logp.detach(), advantages, mask)
    J = grpo_ba.grpo_loss(token_loss, mask, advantages, G, rule)
    expected = torch.autograd.grad(J, list(policy.parameters()))
    # the update, in micro-batches of 2 rows (half a group): one SGD step of lr 1 moves -grad
    args = grpo_ba.parse_args(["--aggregator", rule, "--group-size", str(G), "--prompts-per-step", str(P),
                               "--inner-updates", "1", "--micro-batch-size", "2", "--max-grad-norm", "1e9"])
    before = [p.detach().clone() for p in policy.parameters()]
    stats = grpo_ba.grpo_update(policy, None, torch.optim.SGD(policy.parameters(), lr=1.0), batch, REWARDS, args)
    moved = [b - p.detach() for b, p in zip(before, policy.parameters())]
    scale = max(g.abs().max().item() for g in expected)
    assert scale > 0 and stats["pg_loss"] == pytest.approx(J.item(), abs=1e-6)
    for step, grad in zip(moved, expected):
        assert torch.allclose(step, grad, atol=1e-5 * scale, rtol=1e-4)
