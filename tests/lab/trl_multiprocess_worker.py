"""One optimizer step of AggregationGRPOTrainer for each rule (token, sequence, balanced:
three trainers from the same start, one after the other) in each of several processes (run by
tests/lab/test_trl_multiprocess.py under `torchrun --nproc_per_node 2`, CPU, gloo).

Each process saves what it saw to OUT_DIR/rank<r>.pt, per rule: its generation batch before
and after the rescaling, the gradient of the one optimizer step (after DDP's all-reduce), the
logged metrics and the lines dump_rollouts wrote for it. The test recomputes all of it in one
process on the gathered batch.

    torchrun --standalone --nproc_per_node 2 tests/lab/trl_multiprocess_worker.py OUT_DIR
"""
import os
import sys

import torch
from datasets import Dataset
from transformers import TrainerCallback
from trl import GRPOTrainer

from grpo_ba_lab.integrations.trl_balanced import (RULES, AggregationGRPOConfig, AggregationGRPOTrainer,
                                                   BalancedGRPOTrainer, dump_rollouts)
from toy_tasks.model import char_tokenizer, tiny_qwen3

PER_DEVICE, GROUP = 6, 4          # 12 rows globally, 3 groups of 4: the middle group spans both processes
PROMPTS = ["12+3+4=", "45+6+7=", "30+1+1=", "77+2+9=", "18+5+2=", "63+4+4="]   # equal lengths: no left padding


def odd_length_reward(completions, **kwargs):
    return [float(len(c) % 2) for c in completions]


_trl_generate = GRPOTrainer._generate_and_score_completions


def recording_trl_generate(self, inputs):
    """TRL's own generation batch, kept before the trainer rescales its advantages."""
    output = _trl_generate(self, inputs)
    self.record = {k: v.detach().clone() for k, v in output.items() if isinstance(v, torch.Tensor)}
    return output


GRPOTrainer._generate_and_score_completions = recording_trl_generate   # what the trainers' super() calls


class Recording:
    """Keeps the advantages the trainer rescaled, beside TRL's own batch."""

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        self.record["rescaled_advantages"] = output["advantages"].detach().clone()
        return output


class RecordingTrainer(Recording, AggregationGRPOTrainer):
    pass


class BalancedRecordingTrainer(Recording, BalancedGRPOTrainer):
    pass


class GradientRecorder(TrainerCallback):
    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        self.grads = {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}


def train_one(rule, out_dir):
    """One optimizer step of `rule` from the same weights and seed; -> what this process saw."""
    tokenizer = char_tokenizer()
    model = tiny_qwen3(tokenizer, seed=0)
    config = AggregationGRPOConfig(output_dir=out_dir, per_device_train_batch_size=PER_DEVICE, num_generations=GROUP,
                                   max_completion_length=10, loss_type="dapo", beta=0.0, use_cpu=True, report_to=[],
                                   temperature=1.0, logging_steps=1, max_steps=1, save_strategy="no",
                                   max_grad_norm=0.0, seed=0, ddp_backend="gloo", bf16=False,   # float32: exact
                                   aggregation_rule=rule)
    recorder = GradientRecorder()
    rollouts = os.path.join(out_dir, f"rollouts-{rule}.jsonl")       # each process writes its .rank<r>
    reward = dump_rollouts(odd_length_reward, rollouts, GROUP)
    kwargs = dict(model=model, reward_funcs=reward, args=config, callbacks=[recorder], processing_class=tokenizer,
                  train_dataset=Dataset.from_dict({"prompt": PROMPTS}))
    trainer = BalancedRecordingTrainer(**kwargs) if rule == "balanced" else RecordingTrainer(**kwargs)
    trainer.train()
    with open(f"{rollouts}.rank{trainer.accelerator.process_index}") as f:
        dumped = f.read().splitlines()
    return trainer, {**trainer.record, "grads": recorder.grads, "logs": trainer.state.log_history,
                     "rollouts": dumped, "rule": trainer.rule}


def main(out_dir):
    torch.set_num_threads(1)
    runs = {}
    for rule in RULES:                                   # the balanced case through BalancedGRPOTrainer
        trainer, runs[rule] = train_one(rule, out_dir)
    rank = trainer.accelerator.process_index
    torch.save({"rank": rank, "world": trainer.accelerator.num_processes, "runs": runs},
               os.path.join(out_dir, f"rank{rank}.pt"))
    # Leave together and close gloo before the interpreter exits: a process group still
    # open at exit can abort one rank in teardown ("terminate called without an active
    # exception"), failing a run whose results are already saved.
    trainer.accelerator.wait_for_everyone()
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
