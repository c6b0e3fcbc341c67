"""grpo_ba_lab/plumbing/lora.py -- train LoRA adapters instead of all weights (--lora-rank R), with PEFT.

Full fine-tuning keeps float32 weights, gradients and two AdamW moments: 16 bytes per
parameter, about 120 GB for Qwen2.5-Math-7B (7.6 billion) before activations. LoRA freezes every
weight W and trains a low-rank correction beside the chosen linear layers:

    h = W x + (alpha / R) * B A x,      A: (R, d_in) random,  B: (d_out, R) = 0 at the start

so step 0 is the base model exactly. Only A and B train, in float32 with AdamW; the
frozen base is stored in the compute dtype (--dtype bfloat16: 15 GB for the 7B model).
Its weights never change, so nothing rounds away, and autocast (which re-casts a frozen
float32 weight at every call, every decoding step) has nothing left to cast.

The reference policy for --beta > 0 is the same model with its adapters switched off
(`ReferenceWithoutAdapters`): the base weights exactly, with no second copy of them.
Checkpoints keep the trainable tensors only (`grpo_ba_run.model_state`), so an adapter
checkpoint is megabytes, not the model.
"""
from __future__ import annotations

import torch

from grpo_ba_lab.plumbing import lm_setup

from grpo_ba_support import task as grpo_ba_setup
from grpo_ba_support import run as grpo_ba_run
from grpo_ba_support.run import SetupError

INSTALL_HINT = "pip install -r requirements/trl.txt (tested: peft==0.21.2)"


def add_adapters(policy, args, device_type: str):
    """The policy with LoRA adapters of rank args.lora_rank on args.lora_target_modules
    (comma-separated names, or 'all-linear': every linear layer but the output head);
    only the adapters train. The adapters' random A is drawn from args.seed, so every rule
    and a resumed run start from the same adapters."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise SetupError(f"--lora-rank needs the peft package: {INSTALL_HINT}") from None
    targets = args.lora_target_modules
    config = LoraConfig(r=args.lora_rank, lora_alpha=args.lora_alpha or args.lora_rank,
                        target_modules=targets if targets == "all-linear" else [t.strip() for t in targets.split(",")],
                        lora_dropout=0.0,          # dropout would break ratio = 1 on the first inner update
                        bias="none", task_type="CAUSAL_LM")
    torch.manual_seed(args.seed)
    try:
        policy = get_peft_model(policy, config)
    except ValueError as err:                      # a target module the model does not have
        raise SetupError(f"--lora-target-modules {targets!r}: {str(err).splitlines()[0]}") from None
    # The frozen base in the dtype autocast really computes in on this device (float32 where
    # the device lacks --dtype: train() then computes in float32 too).
    computed = grpo_ba_run.autocast_dtype(device_type, args.dtype, log=lambda line: None)
    frozen_dtype = grpo_ba_setup.DTYPES[computed]
    for parameter in policy.parameters():
        if not parameter.requires_grad:
            parameter.data = parameter.data.to(frozen_dtype)
    return policy


class ReferenceWithoutAdapters:
    """pi_ref for the k3 KL under LoRA: the policy with its adapters disabled, i.e. the
    frozen base model. Called like a model: reference(input_ids=..., ...)."""

    def __init__(self, policy):
        self.policy = policy

    def __call__(self, **inputs):
        with self.policy.disable_adapter():
            return self.policy(**inputs)
