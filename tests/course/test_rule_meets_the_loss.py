"""Where the rule meets the loss: the update steps on the gradient of the paper's
J = rule(l, mask, A, G) (grpo_update: `rule(...)` on a micro-batch's whole groups times their
fraction of the batch's groups), for any rule a student writes, linear or not, also in micro-batches of whole groups;
in micro-batches smaller than a group (the qwen3-1.7b preset: 4 rows, G = 8) each computes its
part sum_it c_it * l_it with the coefficients of whole groups
(grpo_ba_support/coefficients.py's coefficients_for_split_groups), exact for a linear rule, and a
nonlinear rule is refused there (docs/method.md §7, choice 8)."""
import ast
import inspect

import dataclasses

import pytest
import torch
import torch.nn.functional as F

import grpo_ba
from toy_tasks import model as toy_model

G, P = 4, 2
REWARDS = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0])       # k = 2 of 4, then 3 of 4
LENGTHS = [3, 9, 12, 2, 7, 1, 5, 10]                                       # tokens up to and with EOS


def batch_and_policy(policy_seed=3):
    tokenizer = toy_model.char_tokenizer()
    policy = toy_model.tiny_qwen3(tokenizer, seed=policy_seed)
    torch.manual_seed(0)
    prompt = tokenizer(["<bos>12+3+4="] * (G * P), return_tensors="pt", add_special_tokens=False)
    response = torch.randint(3, len(tokenizer), (G * P, max(LENGTHS) + 2))     # no pad, bos or eos
    for row, length in enumerate(LENGTHS):
        response[row, length - 1] = tokenizer.eos_token_id
    mask, truncated = grpo_ba.response_mask_from_eos(response, tokenizer.eos_token_id)
    batch = grpo_ba.Rollout(torch.cat([prompt["input_ids"], response], 1),
                            torch.cat([prompt["attention_mask"], mask], 1), mask, [""] * (G * P), truncated)
    return policy, batch


def assert_one_step_is_the_gradient_of_J(moved, stats, J, expected):
    """One SGD step at lr 1 moved the weights by -grad J exactly, and the logged pg-loss is J."""
    assert stats["pg_loss"] == pytest.approx(J.item(), abs=1e-6)
    scale = max(g.abs().max().item() for g in expected)
    assert scale > 0
    for step, grad in zip(moved, expected):
        assert torch.allclose(step, grad, atol=1e-5 * scale, rtol=1e-4)


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
    J = grpo_ba.AGGREGATORS[rule](token_loss, mask, advantages, G)
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


def softplus_token(per_token_loss, mask, advantages, group_size):
    """A student's nonlinear rule: token's per-group mean of softplus(l), not linear in l."""
    return grpo_ba.aggregate_token(F.softplus(per_token_loss), mask, advantages, group_size)


def twice_sequence(per_token_loss, mask, advantages, group_size):
    """A student's linear rule."""
    return 2 * grpo_ba.aggregate_sequence(per_token_loss, mask, advantages, group_size)


def gradient_of_J_as_called(rule):
    """(J, dJ/dtheta) of the rule called once on the whole batch's token terms at ratio 1."""
    policy, batch = batch_and_policy()
    T = batch.response_mask.shape[1]
    advantages = grpo_ba.group_advantages(REWARDS, G)
    logp, _ = grpo_ba.token_logprobs(policy, batch.sequences, batch.attention, T)
    mask = batch.response_mask.float()
    J = rule(grpo_ba.clipped_token_loss(logp, logp.detach(), advantages, mask), mask, advantages, G)
    return J, torch.autograd.grad(J, list(policy.parameters()))


def one_sgd_step(rule, micro_batch_size):
    """What grpo_update moved (one SGD step of lr 1 moves -grad) and its stats."""
    policy, batch = batch_and_policy()
    args = grpo_ba.parse_args(["--group-size", str(G), "--prompts-per-step", str(P), "--inner-updates", "1",
                               "--micro-batch-size", str(micro_batch_size), "--max-grad-norm", "1e9"])
    args = dataclasses.replace(args, aggregator=rule)
    before = [p.detach().clone() for p in policy.parameters()]
    stats = grpo_ba.grpo_update(policy, None, torch.optim.SGD(policy.parameters(), lr=1.0), batch, REWARDS, args)
    return [b - p.detach() for b, p in zip(before, policy.parameters())], stats


@pytest.mark.parametrize("micro_batch_size", [0, G])          # the whole batch; one group at a time
def test_a_students_nonlinear_rule_trains_on_the_gradient_of_J_exactly_as_called(micro_batch_size):
    J, expected = gradient_of_J_as_called(softplus_token)
    # the rule is not linear: its linearisation at l = 0 (the coefficient form) is another loss
    policy, batch = batch_and_policy()
    mask, advantages = batch.response_mask.float(), grpo_ba.group_advantages(REWARDS, G)
    T = mask.shape[1]
    logp, _ = grpo_ba.token_logprobs(policy, batch.sequences, batch.attention, T)
    token_loss = grpo_ba.clipped_token_loss(logp, logp.detach(), advantages, mask)
    linearised = (grpo_ba.aggregation_coefficients(mask, advantages, G, softplus_token) * token_loss).sum()
    assert abs(linearised.item() - J.item()) > 0.1
    moved, stats = one_sgd_step(softplus_token, micro_batch_size)
    assert_one_step_is_the_gradient_of_J(moved, stats, J, expected)


def test_a_students_linear_rule_trains_exactly_in_micro_batches_smaller_than_a_group():
    J, expected = gradient_of_J_as_called(twice_sequence)
    moved, stats = one_sgd_step(twice_sequence, 2)
    assert stats["pg_loss"] == pytest.approx(J.item(), abs=1e-6)
    scale = max(g.abs().max().item() for g in expected)
    for step, grad in zip(moved, expected):
        assert torch.allclose(step, grad, atol=1e-5 * scale, rtol=1e-4)


def test_micro_batches_that_split_groups_refuse_a_nonlinear_rule_in_one_line():
    with pytest.raises(ValueError) as refused:
        one_sgd_step(softplus_token, 2)
    message = str(refused.value)
    assert "\n" not in message and "split groups of 4" in message and "multiple of 4" in message


def test_the_preset_that_splits_groups_trains_exactly_on_the_gradient_of_J():
    """qwen3-1.7b's micro-batch of 4 rows with G = 8: every micro-batch holds half a group."""
    from grpo_ba_support.args import PRESETS
    preset = PRESETS["qwen3-1.7b"]
    assert preset["micro_batch_size"] % preset.get("group_size", 8) != 0     # the case this test is for
    J, expected = gradient_of_J_as_called(grpo_ba.aggregate_balanced)
    moved, stats = one_sgd_step("balanced", G // 2)
    assert_one_step_is_the_gradient_of_J(moved, stats, J, expected)


def test_in_grpo_update_the_loss_of_a_micro_batch_reads_the_rule_times_its_fraction_of_the_groups():
    source = inspect.getsource(grpo_ba.grpo_update)
    assert "rule(token_loss, mask[rows], advantages[rows], G) * fraction" in " ".join(source.split())
    assert "share" not in source                    # "share" is only the right answers' (positive_share)
    calls = {node.func.attr for node in ast.walk(ast.parse(inspect.cleandoc("\n" + source)))
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)}
    assert "coefficients_for_split_groups" in calls                        # the split case, named
    assert "if split_c is None:" in source and "(split_c[rows] * token_loss).sum()" in source   # beside it
    nested = [node.name for node in ast.walk(ast.parse(inspect.cleandoc("\n" + source)))
              if isinstance(node, (ast.FunctionDef, ast.Lambda)) and getattr(node, "name", "") != "grpo_update"]
    assert nested == []                             # no closure between the call site and the rule


def test_micro_batches_end_at_the_batch_so_each_fraction_is_its_rows_share():
    assert grpo_ba.micro_batches(12, 8) == [slice(0, 8), slice(8, 12)]     # not slice(8, 16): 8/12
    assert grpo_ba.micro_batches(16, 8) == [slice(0, 8), slice(8, 16)]
    assert grpo_ba.micro_batches(6, 0) == [slice(0, 6)]
    fractions = [(rows.stop - rows.start) / 12 for rows in grpo_ba.micro_batches(12, 8)]
    assert sum(fractions) == pytest.approx(1)


def test_one_grpo_step_from_sampling_to_the_optimizer_runs_code_of_at_most_four_repository_files():
    """Traced: every repository function one toy step calls, sampling, reward, diagnostics, the
    update, in micro-batches that split groups (the longest path)."""
    import os
    import random
    import sys
    from grpo_ba_support import task as setup
    from toy_tasks import ToyWorld
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    tokenizer = toy_model.char_tokenizer()
    policy = toy_model.tiny_qwen3(tokenizer)
    task = setup.toy_task(ToyWorld(force_frac=0.5), tokenizer)
    args = grpo_ba.parse_args(["--aggregator", "balanced", "--group-size", str(G), "--prompts-per-step", str(P),
                               "--micro-batch-size", "2", "--max-new-tokens", "8", "--inner-updates", "2"])
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-4)
    files = set()

    def trace(frame, event, arg):
        name = frame.f_code.co_filename                  # "<frozen abc>" is no file of ours
        path = os.path.abspath(name)
        if os.path.isabs(name) and path.startswith(root + os.sep) and "tests" not in os.path.relpath(
                path, root).split(os.sep):
            files.add(os.path.relpath(path, root))
    sys.setprofile(trace)
    try:
        grpo_ba.grpo_step(policy, None, optimizer, tokenizer, task, task.train[:P], random.Random(0), args)
    finally:
        sys.setprofile(None)
    assert "grpo_ba.py" in files and "grpo_ba_support/coefficients.py" in files        # the trace is real
    assert files <= {"grpo_ba.py", "grpo_ba_support/task.py", "toy_tasks/arithmetic.py",
                     "grpo_ba_support/coefficients.py"}, sorted(files)


@pytest.mark.parametrize("rule, micro_batch_size", [("sequence", 0), ("balanced", 2), (twice_sequence, G)])
def test_with_a_kl_term_the_logged_pg_loss_is_j_of_the_clipped_terms_alone(rule, micro_batch_size):
    """beta > 0: the update steps on l + beta * KL, and pg_loss logs J without the KL, in split
    micro-batches (the coefficient form) as in whole ones (the rule called)."""
    J, _ = gradient_of_J_as_called(rule if callable(rule) else grpo_ba.AGGREGATORS[rule])
    policy, batch = batch_and_policy()
    reference = toy_model.tiny_qwen3(toy_model.char_tokenizer(), seed=11).eval()   # KL > 0 at every token
    args = grpo_ba.parse_args(["--group-size", str(G), "--prompts-per-step", str(P), "--inner-updates", "1",
                               "--micro-batch-size", str(micro_batch_size), "--beta", "0.5"])
    args = dataclasses.replace(args, aggregator=rule)
    stats = grpo_ba.grpo_update(policy, reference, torch.optim.SGD(policy.parameters(), lr=0.0), batch, REWARDS,
                                args)
    assert stats["pg_loss"] == pytest.approx(J.item(), abs=1e-6)
