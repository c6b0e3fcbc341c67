"""Balanced Aggregation inside TRL's GRPOTrainer, from one import.

    from integrations.trl_balanced import BalancedGRPOTrainer
    config = GRPOConfig(..., loss_type="dapo")        # required: see below
    trainer = BalancedGRPOTrainer(model=..., reward_funcs=..., args=config, train_dataset=...)
    trainer.train()

How, without copying TRL's code. The clipped term is positively homogeneous in the
advantage: for s > 0, -min(rho * sA, clip(rho) * sA) = s * l_it(A). So any per-response
weighting can be moved into the advantages. With `loss_type="dapo"` TRL computes

    loss = sum_it l_it(A'_i) / N,      N = completion tokens of the whole generation batch

(`num_items_in_batch`, gathered over processes). Setting A'_i = A_i * c_i * N, where
c_i = dJ_BA/dl_it is Balanced Aggregation's coefficient of response i computed by
grpo_ba.aggregation_coefficients over whole groups, makes TRL's loss equal
J_BA = sum_it c_i * l_it(A_i) exactly, term by term, at any ratio (test:
tests/test_trl_balanced.py). TRL's advantages (its reward scaling, its std) are
kept; BA's coefficients do not depend on how a group's advantages are scaled.

Tested with trl 1.16.0 (transformers 5.24, accelerate 1.15). Limits:
- beta > 0: TRL adds beta * KL_it *after* the advantage enters, so the KL term keeps
  TRL's dapo aggregation (token mean over the batch); the policy-gradient term is BA.
- Several processes: lengths and advantages are gathered, the coefficients computed
  over the global batch (TRL's group layout), and each process keeps its slice; the
  normaliser N is already global in TRL. With steps_per_generation larger than
  gradient_accumulation_steps each optimizer step sees part of the generation batch,
  weighted as BA over the whole generation batch (as TRL's dapo does for token mean).
- token-level importance sampling only; a tool_mask (multi-turn tools) is ignored.
"""
from __future__ import annotations

from trl import GRPOTrainer

from grpo_ba import aggregation_coefficients, mask_from_lengths


def balanced_advantages(advantages, completion_mask, num_items_in_batch, group_size, gather=None,
                        process_index=0):
    """A'_i = A_i * c_i * N: TRL's dapo loss with these advantages is J_BA.

    advantages: (B_local,), completion_mask: (B_local, T) of this process; `gather`
    concatenates a (B_local,) tensor over processes (accelerator.gather), or None.
    """
    lengths = completion_mask.sum(dim=1).float()                                   # (B_local,)
    all_lengths = gather(lengths) if gather else lengths                           # (B_global,)
    all_advantages = gather(advantages.float()) if gather else advantages.float()
    mask = mask_from_lengths(all_lengths)                                          # only lengths matter
    coefficients = aggregation_coefficients(mask, all_advantages, group_size, "balanced")   # (B_global, T)
    per_response = coefficients[:, 0]                                              # constant along a response
    local = slice(process_index * lengths.numel(), (process_index + 1) * lengths.numel())
    return advantages * per_response[local].to(advantages.dtype) * num_items_in_batch.to(advantages.dtype)


class BalancedGRPOTrainer(GRPOTrainer):
    """GRPOTrainer whose policy-gradient loss is Balanced Aggregation (docs/method.md §2, §4)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.loss_type != "dapo":
            raise ValueError(f"BalancedGRPOTrainer needs GRPOConfig(loss_type='dapo'), got {self.loss_type!r}: "
                             "it rescales advantages against dapo's normaliser")
        if self.importance_sampling_level != "token":
            raise ValueError("BalancedGRPOTrainer supports importance_sampling_level='token' only")

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        gather = self.accelerator.gather if self.accelerator.num_processes > 1 else None
        output["advantages"] = balanced_advantages(output["advantages"], output["completion_mask"],
                                                   output["num_items_in_batch"], self.num_generations,
                                                   gather, self.accelerator.process_index)
        return output
