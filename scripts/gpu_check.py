"""GPU check: GRPO steps of grpo_ba.py on a model of Qwen3-1.7B's real shape, each
rollout engine side by side (grpo_ba_lab/plumbing/rollout_engines.py, docs/gpu-rollouts.md).

Random weights from the config (no hub access), the preset's batch (P x G = 8 x 8),
completions of about 1,000 tokens, the qwen3-1.7b preset (bf16, activation
checkpointing, SDPA, micro-batches). Per step and engine: step time, generated tokens
per second, the sampling share of the step, peak GPU memory, the fraction of the
memory-bandwidth limit (bytes of weights one decode step reads x decode steps / time,
against the GPU's bandwidth) and an MFU estimate; then one summary line per engine.

    bash scripts/gpu_check.sh                                 # on one GPU: every engine
    ENGINES=static bash scripts/gpu_check.sh --steps 3        # one engine
    python scripts/gpu_check.py --tiny                        # the same code path on a CPU, in seconds
"""
import argparse
import gc
import os
import sys
import time

import torch
from transformers import AutoModelForCausalLM, Qwen2Config, Qwen3Config

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import grpo_ba  # noqa: E402
from grpo_ba_lab import lab_args  # noqa: E402
from grpo_ba_lab.plumbing import rollout_engines  # noqa: E402

QWEN3_1_7B = dict(vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
                  num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
                  rope_theta=1_000_000.0, rms_norm_eps=1e-6, tie_word_embeddings=True)
QWEN2_5_MATH_7B = dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                       num_attention_heads=28, num_key_value_heads=4, max_position_embeddings=4096,
                       rope_theta=10_000.0, rms_norm_eps=1e-6, tie_word_embeddings=False)
SHAPES = {"qwen3-1.7b": (Qwen3Config, QWEN3_1_7B), "qwen2.5-math-7b": (Qwen2Config, QWEN2_5_MATH_7B)}
TINY = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=2048, tie_word_embeddings=True)
PEAK_BF16_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12}
BANDWIDTH = {"H200": 4.8e12, "H100 NVL": 3.9e12, "H100 PCIe": 2.0e12, "H100": 3.35e12, "A100-SXM4-80GB": 2.04e12,
             "A100 80GB PCIe": 1.94e12, "A100": 1.56e12, "L40S": 0.86e12, "L4": 0.3e12, "A10G": 0.6e12,
             "RTX 4090": 1.01e12, "RTX 3090": 0.94e12}     # bytes/s, datasheets; the first name found in the GPU's wins
GOAL_TOKENS_PER_S, GOAL_SHARE = 5000, 0.5                   # issue 26: at the 1.7B shape on an H200, P x G = 8 x 8


def main():
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_argument("--tiny", action="store_true", help="a tiny model on the CPU: checks the code path only")
    cli.add_argument("--steps", type=int, default=2, help="steps per engine; the summary is the last (the first may compile)")
    cli.add_argument("--new-tokens", type=int, default=1000)
    cli.add_argument("--engines", default=",".join(rollout_engines.ENGINES),
                     help="comma-separated rollout engines, run one after the other on the same model")
    cli.add_argument("--batch", default="", help="P x G, e.g. 2x8 (default: the preset's, 8x8)")
    cli.add_argument("--bandwidth", type=float, default=0.0, help="the GPU's memory bandwidth in TB/s (default: by its name)")
    cli.add_argument("--aggregator", default="balanced", choices=list(grpo_ba.AGGREGATORS))
    cli.add_argument("--random-responses", action="store_true",
                     help="skip sampling: random response tokens of full length (times and sizes the update alone)")
    cli.add_argument("--shape", default="qwen3-1.7b", choices=list(SHAPES),
                     help="model shape and --preset of the same name (qwen2.5-math-7b: LoRA adapters over a bf16 base)")
    opts = cli.parse_args()
    device = "cuda" if torch.cuda.is_available() and not opts.tiny else "cpu"
    argv = ["--preset", opts.shape, "--aggregator", opts.aggregator, "--max-new-tokens", str(opts.new_tokens)]
    if opts.batch:
        prompts_per_step, group_size = opts.batch.lower().split("x")
        argv += ["--prompts-per-step", prompts_per_step, "--group-size", group_size]
    if opts.tiny:
        argv += ["--max-new-tokens", str(min(opts.new_tokens, 32))]
    args = lab_args.parse_args(argv)
    engines = ["none"] if opts.random_responses else opts.engines.split(",")
    for engine in engines:
        if engine not in (*rollout_engines.ENGINES, "none"):
            cli.error(f"unknown engine {engine!r}: one of {', '.join(rollout_engines.ENGINES)}")
    config_class, shape = SHAPES[opts.shape]
    config = config_class(**(TINY if opts.tiny else shape), pad_token_id=0, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    with torch.device(device):                     # random weights made on the GPU: seconds, not minutes
        policy = AutoModelForCausalLM.from_config(config, dtype=torch.float32,   # master weights; compute in --dtype
                                                  attn_implementation=args.attn_implementation)
    n_params = sum(p.numel() for p in policy.parameters())
    getattr(policy, "activation_checkpointing_enable", policy.gradient_checkpointing_enable)()   # as lm_setup.build
    if args.lora_rank:                             # the 7B preset: adapters train, the base is frozen in bf16 (as train())
        from grpo_ba_lab.plumbing import lora
        policy = lora.add_adapters(policy, args, device)
    trainable = [p for p in policy.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=args.lr, weight_decay=0.0)
    B = args.prompts_per_step * args.group_size
    name = torch.cuda.get_device_name() if device == "cuda" else ""
    peak_flops = next((v for k, v in PEAK_BF16_FLOPS.items() if k in name), None)
    bandwidth = opts.bandwidth * 1e12 or next((v for k, v in BANDWIDTH.items() if k in name), None)
    with grpo_ba.autocast(args, device):                 # the bytes a decode step reads, at the dtype it reads them
        step_bytes = rollout_engines.weight_bytes_per_step(policy)
    rollout_engines.release()                            # built only to count: each engine starts from nothing
    weights = (f"{sum(p.numel() for p in trainable) / 1e6:,.1f}M trainable LoRA parameters (rank {args.lora_rank}) "
               f"over a frozen {args.dtype} base" if args.lora_rank else "float32 weights")
    print(f"device {device} ({name or 'cpu'}, {f'{bandwidth / 1e12:.2f} TB/s' if bandwidth else 'bandwidth unknown: --bandwidth'}), "
          f"shape {opts.shape}, {n_params / 1e6:,.1f}M parameters, {weights}, {args.dtype} compute, "
          f"batch {args.prompts_per_step}x{args.group_size}, micro-batch {args.micro_batch_size}, up to {args.max_new_tokens} "
          f"new tokens, rule {args.aggregator}, engines {', '.join(engines)}; a decode step reads {step_bytes / 1e9:.2f} GB of weights")
    summary = {}
    for engine in engines:
        try:
            summary[engine] = run_engine(engine, policy, optimizer, args, config, opts, device, n_params, step_bytes,
                                         bandwidth, peak_flops)
        except Exception as error:                       # one engine failing must not hide the others' numbers
            summary[engine] = f"FAILED: {type(error).__name__}: {str(error).splitlines()[0][:300] if str(error) else ''}"
            print(f"engine {engine}: {summary[engine]}")
        rollout_engines.release()                        # free this engine's sampler, compiled graphs and cache
        if device == "cuda":
            torch._dynamo.reset()
            gc.collect()
            torch.cuda.empty_cache()
    print(f"summary, last step of each engine (goal at the 1.7B shape on an H200, 8x8: >= {GOAL_TOKENS_PER_S:,} "
          f"generated tokens/s and sampling <= {GOAL_SHARE:.0%} of the step):")
    for engine, line in summary.items():
        print(f"  {engine:>8}: {line}")


def run_engine(engine, policy, optimizer, args, config, opts, device, n_params, step_bytes, bandwidth, peak_flops) -> str:
    B = args.prompts_per_step * args.group_size
    for step in range(opts.steps):
        if device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        prompts = torch.randint(3, config.vocab_size, (args.prompts_per_step, 64), device=device)
        prompts = prompts.repeat_interleave(args.group_size, dim=0)                     # groups are contiguous
        start = time.time()
        policy.eval()
        if engine == "none":
            response = torch.randint(3, config.vocab_size, (B, args.max_new_tokens), device=device)
            sequences = torch.cat([prompts, response], dim=1)
        else:                                            # as grpo_ba.rollout; random weights end (id 2) about never
            with torch.no_grad(), grpo_ba.autocast(args, device):
                encoded = dict(input_ids=prompts, attention_mask=torch.ones_like(prompts))
                sequences = rollout_engines.sample(policy, encoded, args.max_new_tokens, 0, [2], engine,
                                                   do_sample=True, temperature=1.0, top_k=0, top_p=1.0)
        if device == "cuda":
            torch.cuda.synchronize()
        gen_time = time.time() - start
        response = sequences[:, prompts.shape[1]:]
        mask, truncated = grpo_ba.response_mask_from_eos(response, eos_id=2)
        batch = grpo_ba.Rollout(sequences, torch.cat([torch.ones_like(prompts), mask], 1), mask, [""] * B, truncated)
        rewards = (torch.arange(B, device=device) % 3 == 0).float()                      # some right, some wrong
        policy.train()
        update_start = time.time()
        stats = grpo_ba.grpo_update(policy, None, optimizer, batch, rewards, args)
        if device == "cuda":
            torch.cuda.synchronize()
        update_time, step_time = time.time() - update_start, time.time() - start
        tokens = int(mask.sum())
        context = sequences.numel()
        # FLOPs: 2N per generated token, 2N per token for the old-logp pass, 6N (+2N recompute) per trained
        # token; under LoRA the frozen base needs no weight gradients: 4N (+2N recompute)
        generated = 0 if engine == "none" else tokens
        flops = 2 * n_params * generated + (2 + (6 if args.lora_rank else 8) * args.inner_updates) * n_params * context
        peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else float("nan")
        mfu = f"{flops / step_time / peak_flops:.1%}" if peak_flops else "n/a"
        # decode steps = the response width (one forward per new token); weights only, the KV cache's reads not counted
        limit = f"{step_bytes * response.shape[1] / gen_time / bandwidth:.1%}" if bandwidth and generated else "n/a"
        speed = f"{tokens / gen_time:,.0f}" if generated else "no"
        line = (f"{speed} generated tokens/s, sampling {gen_time / step_time:.0%} of the step "
                f"({step_time:.1f}s: sampling {gen_time:.1f}s, update {update_time:.1f}s), peak memory {peak:.1f} GiB, "
                f"{limit} of the bandwidth limit, MFU {mfu}")
        print(f"engine {engine}, step {step}: {line}, {tokens:,} tokens, pg_loss {stats['pg_loss']:+.4f}, "
              f"grad_norm {stats['grad_norm']:.3f}, skipped {stats['skipped_updates']}", flush=True)
    goal = generated and tokens / gen_time >= GOAL_TOKENS_PER_S and gen_time / step_time <= GOAL_SHARE
    return line + (", goal met" if goal else ", goal not met" if generated else "")


if __name__ == "__main__":
    main()
