"""Speed against the peer: one GRPO step of grpo_ba.py vs TRL's GRPOTrainer, on CPU.

Both get the identical tiny Qwen3 (random weights from one seed), the same character
tokenizer, prompts, group size, generation length and inner updates (mu = 1). Then the
three aggregators are timed on (1024 x 4096) tensors, forward and backward.

    pip install -r requirements/trl.txt && python grpo_ba_lab/bench/vs_trl.py

It prints the seven lines docs/trl.md shows ("Speed against TRL"; tests/lab/test_trl_bench_page.py
runs it at a tiny size and compares the lines' shape with the page's); the last is
`ratio_vs_trl=<ours/trl> balanced_vs_token=<ratio>`.
"""
import argparse
import contextlib
import io
import os
import random
import sys
import tempfile
import time
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import grpo_ba  # noqa: E402
from grpo_ba_support.task import Task  # noqa: E402
from toy_tasks.model import char_tokenizer, tiny_qwen3  # noqa: E402
from toy_tasks import make_problems  # noqa: E402
from verifier import verify  # noqa: E402


def verifier_reward(completions, answer, **kwargs):
    return [verify(c, a) for c, a in zip(completions, answer)]


def time_ours(rows, opts):
    torch.set_flush_denormal(True)             # as grpo_ba.train() does on CPU
    tokenizer = char_tokenizer()
    policy = tiny_qwen3(tokenizer, seed=0)
    args = grpo_ba.parse_args(["--aggregator", "balanced", "--group-size", str(opts.group_size),
                               "--prompts-per-step", str(opts.prompts), "--max-new-tokens", str(opts.new_tokens),
                               "--inner-updates", "1", "--threads", str(opts.threads)])
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-5)
    task = Task(rows, [], lambda p: tokenizer.bos_token + p, lambda p, rng: "")     # nothing forced, as in TRL
    times = []
    for step in range(opts.steps + 1):
        start = time.perf_counter()
        batch_rows = rows[step * opts.prompts:(step + 1) * opts.prompts]
        grpo_ba.grpo_step(policy, None, optimizer, tokenizer, task, batch_rows, random.Random(step), args)
        times.append(time.perf_counter() - start)
    torch.set_flush_denormal(False)            # TRL runs as its users run it
    return sorted(times[1:])[len(times[1:]) // 2]                 # median, first step excluded


def time_trl(rows, opts):
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.times, self.start = [], None

        def on_step_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.times.append(time.perf_counter() - self.start)

    tokenizer = char_tokenizer()
    policy = tiny_qwen3(tokenizer, seed=0)
    data = Dataset.from_dict({"prompt": [tokenizer.bos_token + r["prompt"] for r in rows],
                              "answer": [r["answer"] for r in rows]})
    timer = StepTimer()
    with tempfile.TemporaryDirectory() as out:
        config = GRPOConfig(output_dir=out, per_device_train_batch_size=opts.prompts * opts.group_size,
                            num_generations=opts.group_size, max_completion_length=opts.new_tokens,
                            num_iterations=1, loss_type="dapo", beta=0.0, learning_rate=1e-5, use_cpu=True,
                            report_to=[], logging_steps=10**6, max_steps=opts.steps + 1, save_strategy="no",
                            temperature=1.0, top_k=0, disable_tqdm=True, shuffle_dataset=False)
        trainer = GRPOTrainer(model=policy, reward_funcs=verifier_reward, args=config, train_dataset=data,
                              processing_class=tokenizer, callbacks=[timer])
        with contextlib.redirect_stdout(io.StringIO()):    # TRL prints its run's summary dict: not the bench's
            trainer.train()
    return sorted(timer.times[1:])[len(timer.times[1:]) // 2]


def time_aggregators(rows=1024, width=4096, group_size=8, repeats=21):
    torch.manual_seed(0)
    lengths = torch.randint(1, width + 1, (rows,))
    mask = (torch.arange(width)[None] < lengths[:, None]).float()
    advantages = grpo_ba.group_advantages(torch.randint(0, 2, (rows,)).float(), group_size)
    samples = {name: [] for name in grpo_ba.AGGREGATORS}
    loss = torch.randn(rows, width, requires_grad=True)
    for _ in range(repeats + 1):                      # interleaved, so drifts in machine load hit all alike
        for name, fn in grpo_ba.AGGREGATORS.items():
            loss.grad = None
            start = time.perf_counter()
            fn(loss, mask, advantages, group_size).backward()
            samples[name].append(time.perf_counter() - start)
    return {name: sorted(times[1:])[repeats // 2] for name, times in samples.items()}


def main():
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_argument("--prompts", type=int, default=8, help="P prompts per step")
    cli.add_argument("--group-size", type=int, default=8, help="G responses per prompt")
    cli.add_argument("--new-tokens", type=int, default=32, help="generation length")
    cli.add_argument("--steps", type=int, default=9, help="timed steps (after one warm-up step)")
    cli.add_argument("--threads", type=int, default=2)
    opts = cli.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(opts.threads)
    rows = make_problems()[0].to_list()[: opts.prompts * (opts.steps + 2)]
    print(f"one GRPO step: P={opts.prompts} x G={opts.group_size}, up to {opts.new_tokens} new tokens, mu=1, "
          f"tiny Qwen3 ({sum(p.numel() for p in tiny_qwen3(char_tokenizer()).parameters()):,} parameters), "
          f"{opts.threads} threads, median of {opts.steps} steps after one warm-up step")
    ours = time_ours(rows, opts)
    print(f"grpo_ba.py     {ours * 1000:8.1f} ms/step")
    trl_time = time_trl(rows, opts)
    print(f"TRL GRPOTrainer {trl_time * 1000:7.1f} ms/step")
    aggregators = time_aggregators()
    for name, seconds in aggregators.items():
        print(f"aggregate_{name:<9s} (1024 x 4096, forward + backward) {seconds * 1000:7.1f} ms")
    print(f"ratio_vs_trl={ours / trl_time:.3f} balanced_vs_token={aggregators['balanced'] / aggregators['token']:.3f}")


if __name__ == "__main__":
    main()
