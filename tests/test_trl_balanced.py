"""TRL's GRPOTrainer with integrations.trl_balanced computes exactly aggregate_balanced."""
import pytest
import torch

trl = pytest.importorskip("trl", reason="TRL is optional: pip install -r requirements-trl.txt")

from datasets import Dataset  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from grpo_ba import aggregate_balanced, clipped_token_loss  # noqa: E402
from integrations.trl_balanced import BalancedGRPOTrainer, balanced_advantages  # noqa: E402
from lm_setup import char_tokenizer, tiny_qwen3  # noqa: E402


def odd_length_reward(completions, **kwargs):
    return [float(len(c) % 2) for c in completions]


def make_trainer(tmp_path, cls=BalancedGRPOTrainer, loss_type="dapo"):
    tokenizer = char_tokenizer()
    model = tiny_qwen3(tokenizer, seed=0)
    data = Dataset.from_dict({"prompt": ["12+3+4=", "45+6+7=", "30+1+1=", "77+2+9="]})
    config = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=8, num_generations=4,
                        max_completion_length=10, loss_type=loss_type, beta=0.0, use_cpu=True, report_to=[],
                        temperature=1.0, logging_steps=1, max_steps=1, save_strategy="no")
    return cls(model=model, reward_funcs=odd_length_reward, args=config, train_dataset=data, processing_class=tokenizer)


def test_trl_loss_and_gradients_equal_aggregate_balanced(tmp_path):
    trainer = make_trainer(tmp_path)
    trainer.model.train()
    rows = [{"prompt": "12+3+4="}] * 4 + [{"prompt": "45+6+7="}] * 4
    torch.manual_seed(0)
    raw = GRPOTrainer._generate_and_score_completions(trainer, rows)
    torch.manual_seed(0)
    batch = trainer._generate_and_score_completions(rows)
    assert torch.equal(batch["completion_ids"], raw["completion_ids"])
    adv, mask = raw["advantages"], raw["completion_mask"].float()
    assert (adv > 0).any() and (adv < 0).any() and len(set(mask.sum(1).tolist())) > 1   # a real test case
    assert torch.allclose(batch["advantages"], balanced_advantages(adv, raw["completion_mask"], raw["num_items_in_batch"], 4))

    # off-policy ratios, some beyond the clip range, so the test covers clipping too
    model = trainer.model
    input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
    T = batch["completion_ids"].shape[1]
    with torch.no_grad():
        logp0 = trainer._get_per_token_logps_and_entropies(model, input_ids, attention, T)[0]
    old = logp0 + 0.3 * torch.randn(logp0.shape, generator=torch.Generator().manual_seed(1))
    batch["old_per_token_logps"] = old

    trainer.current_gradient_accumulation_steps = 1          # set by train() in real use
    params = [p for p in model.parameters() if p.requires_grad]
    trl_loss = trainer.compute_loss(model, batch)
    trl_grads = torch.autograd.grad(trl_loss, params)

    logp = trainer._get_per_token_logps_and_entropies(model, input_ids, attention, T)[0]
    token_loss = clipped_token_loss(logp, old, adv, mask, trainer.epsilon_low, trainer.epsilon_high)
    ours = aggregate_balanced(token_loss, mask, adv, 4)
    our_grads = torch.autograd.grad(ours, params)

    assert trl_loss.item() == pytest.approx(ours.item(), rel=1e-5, abs=1e-7)
    for a, b in zip(trl_grads, our_grads):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-7)


def test_trainer_refuses_a_loss_type_it_cannot_rescale(tmp_path):
    with pytest.raises(ValueError, match="dapo"):
        make_trainer(tmp_path, loss_type="grpo")


def test_balanced_trainer_trains_a_step(tmp_path):
    trainer = make_trainer(tmp_path)
    trainer.train()
    assert trainer.state.global_step == 1
