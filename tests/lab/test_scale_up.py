"""The real-model path: --model DIR with a chat template and a local dataset, micro-batching, bf16."""
import json

import pytest
import torch

import grpo_ba
from grpo_ba_lab import lab_args
from grpo_ba_support import task as grpo_ba_setup
from grpo_ba import AGGREGATORS, aggregation_coefficients, clipped_token_loss, group_advantages
from grpo_ba_lab.train import main

from conftest import forced_kernels


def test_local_model_with_chat_template_trains_two_steps_on_a_local_jsonl(tmp_path, tiny_model_dir):
    data = tmp_path / "gsm.jsonl"
    rows = [{"question": f"What is {a} plus {b}?", "solution": f"{a} + {b} = {a + b}\n#### {a + b}"}
            for a in range(1, 9) for b in range(1, 4)]
    data.write_text("\n".join(json.dumps(r) for r in rows))
    out = tmp_path / "run"
    code = main(["--model", tiny_model_dir, "--dataset", str(data), "--prompt-column", "question",
                 "--answer-column", "solution", "--aggregator", "balanced", "--steps", "2", "--group-size", "4",
                 "--prompts-per-step", "2", "--max-new-tokens", "8", "--eval-prompts", "4",
                 "--micro-batch-size", "4", "--output-dir", str(out)])
    assert code == 0
    metrics = [json.loads(line) for line in open(out / "metrics.jsonl")]
    assert [m["step"] for m in metrics] == [0, 1, 2] and "accuracy" in metrics[0] and metrics[-1]["final_evaluation"]


def test_prompts_go_through_the_chat_template_and_ask_for_boxed(tiny_model_dir):
    tokenizer = grpo_ba_setup.load_tokenizer(tiny_model_dir)
    text = grpo_ba_setup.format_prompt(tokenizer, "What is 2 plus 2?")
    assert text.startswith("<|user|>What is 2 plus 2?") and "\\boxed{}" in text and text.endswith("<|assistant|>")
    chat = [{"role": "user", "content": "hi"}]                   # DAPO-style prompts are messages already
    assert grpo_ba_setup.format_prompt(tokenizer, chat) == "<|user|>hi\n<|assistant|>"


def test_nested_answer_columns_are_reachable(tmp_path):
    from grpo_ba_lab.plumbing import lm_setup
    data = tmp_path / "dapo.jsonl"
    data.write_text("\n".join(json.dumps({"prompt": [{"role": "user", "content": f"q{i}"}],
                                          "reward_model": {"ground_truth": str(i)}}) for i in range(10)))
    train, heldout = lm_setup.load_prompt_dataset(str(data), "prompt", "reward_model.ground_truth", heldout=2)
    assert len(train) == 8 and len(heldout) == 2 and isinstance(train[0]["prompt"], list)


@pytest.mark.parametrize("rule", ["token", "sequence", "balanced"])
def test_micro_batches_give_the_full_batch_loss_and_gradients(rule):
    torch.manual_seed(0)
    P, G, T, V = 3, 4, 7, 11
    B = P * G
    logits_param = torch.nn.Parameter(torch.randn(B, T, V))
    tokens = torch.randint(V, (B, T))
    lengths = torch.tensor([1, 7, 3, 5, 2, 2, 6, 7, 4, 1, 3, 6])
    mask = (torch.arange(T)[None] < lengths[:, None]).float()
    advantages = group_advantages(torch.tensor([1., 0, 0, 1, 1, 1, 0, 0, 0, 1, 1, 0]), G)
    old_logp = torch.log_softmax(torch.randn(B, T, V), -1).gather(-1, tokens[..., None]).squeeze(-1)

    def logp_of(rows):
        return torch.log_softmax(logits_param[rows], -1).gather(-1, tokens[rows][..., None]).squeeze(-1)

    full = AGGREGATORS[rule](clipped_token_loss(logp_of(slice(None)), old_logp, advantages, mask), mask, advantages, G)
    (full_grad,) = torch.autograd.grad(full, logits_param)
    coefficients = aggregation_coefficients(mask, advantages, G, rule)    # over whole groups, once
    for size in (1, 2, 3, 6):                                            # sizes that cut groups apart too
        total = 0.0
        for chunk in grpo_ba.micro_batches(B, size):
            part = (coefficients[chunk] * clipped_token_loss(logp_of(chunk), old_logp[chunk], advantages[chunk], mask[chunk])).sum()
            part.backward()
            total += part.item()
        assert total == pytest.approx(full.item(), rel=1e-5, abs=1e-7)
        assert torch.allclose(logits_param.grad, full_grad, atol=1e-6)
        logits_param.grad = None


def test_naive_per_micro_batch_normalisation_would_differ():
    """The bug the coefficients avoid: normalising each micro-batch on its own."""
    torch.manual_seed(1)
    lengths = torch.tensor([1, 9, 2, 3])           # micro-batches of 10 and 5 tokens
    mask = (torch.arange(9)[None] < lengths[:, None]).float()
    adv = group_advantages(torch.tensor([1., 0, 1, 0]), 4)
    loss = torch.randn(4, 9) * mask
    full = AGGREGATORS["token"](loss, mask, adv, 4)
    naive = sum((loss[c].sum() / mask[c].sum()) / 2 for c in (slice(0, 2), slice(2, 4)))
    assert abs(full.item() - naive.item()) > 1e-3


@forced_kernels
def test_a_bf16_step_runs_on_cpu(tmp_path, tiny_model_dir):
    data = tmp_path / "d.jsonl"
    data.write_text("\n".join(json.dumps({"prompt": f"{i}+1", "answer": str(i + 1)}) for i in range(10)))
    out = tmp_path / "bf16"
    assert main(["--model", tiny_model_dir, "--dataset", str(data), "--aggregator", "token", "--steps", "1",
                 "--group-size", "2", "--prompts-per-step", "2", "--max-new-tokens", "6", "--eval-prompts", "2",
                 "--dtype", "bfloat16", "--gradient-checkpointing", "--output-dir", str(out)]) == 0
    metrics = json.loads(open(out / "metrics.jsonl").readline())
    assert metrics["skipped_updates"] == 0 and metrics["grad_norm"] == metrics["grad_norm"]


def test_bf16_compute_keeps_float32_master_weights(tiny_model_dir):
    policy = grpo_ba_setup.load_model(tiny_model_dir)
    args = lab_args.parse_args(["--aggregator", "token", "--dtype", "bfloat16"])
    ids = torch.tensor([[5, 6, 7, 8]])
    with grpo_ba.autocast(args, "cpu"):
        logits = policy(input_ids=ids).logits
    assert logits.dtype == torch.bfloat16                      # compute in bf16 ...
    assert all(p.dtype == torch.float32 for p in policy.parameters())   # ... weights stay float32
    with grpo_ba.autocast(lab_args.parse_args(["--aggregator", "token"]), "cpu"):
        assert policy(input_ids=ids).logits.dtype == torch.float32
