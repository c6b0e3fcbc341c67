"""GPU check: a few GRPO steps of grpo_ba.py on a model of Qwen3-1.7B's real shape.

Random weights from the config (no hub access), G = 8, completions of about 1,000
tokens, the qwen3-1.7b preset (bf16, activation checkpointing, SDPA, micro-batches).
Prints step time, generated tokens per second, peak GPU memory and an MFU estimate.

    bash scripts/gpu_check.sh                 # on one GPU
    python scripts/gpu_check.py --tiny        # the same code path on a CPU, in seconds
"""
import argparse
import os
import sys
import time

import torch
from transformers import AutoModelForCausalLM, Qwen2Config, Qwen3Config

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import grpo_ba  # noqa: E402

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


def main():
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_argument("--tiny", action="store_true", help="a tiny model on the CPU: checks the code path only")
    cli.add_argument("--steps", type=int, default=3)
    cli.add_argument("--new-tokens", type=int, default=1000)
    cli.add_argument("--aggregator", default="balanced", choices=list(grpo_ba.AGGREGATORS))
    cli.add_argument("--random-responses", action="store_true",
                     help="skip sampling: random response tokens of full length (times and sizes the update alone)")
    cli.add_argument("--shape", default="qwen3-1.7b", choices=list(SHAPES),
                     help="model shape and --preset of the same name (qwen2.5-math-7b: LoRA adapters over a bf16 base)")
    opts = cli.parse_args()
    device = "cuda" if torch.cuda.is_available() and not opts.tiny else "cpu"
    argv = ["--preset", opts.shape, "--aggregator", opts.aggregator, "--max-new-tokens", str(opts.new_tokens),
            "--prompts-per-step", "2", "--group-size", "8", "--micro-batch-size", "4"]
    if opts.tiny:
        argv += ["--max-new-tokens", str(min(opts.new_tokens, 32))]
    args = grpo_ba.parse_args(argv)
    config_class, shape = SHAPES[opts.shape]
    config = config_class(**(TINY if opts.tiny else shape), pad_token_id=0, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    with torch.device(device):                     # random weights made on the GPU: seconds, not minutes
        policy = AutoModelForCausalLM.from_config(config, dtype=torch.float32,   # master weights; compute in --dtype
                                                  attn_implementation=args.attn_implementation)
    n_params = sum(p.numel() for p in policy.parameters())
    getattr(policy, "activation_checkpointing_enable", policy.gradient_checkpointing_enable)()   # as lm_setup.build
    if args.lora_rank:                             # the 7B preset: adapters train, the base is frozen in bf16 (as train())
        from plumbing import lora
        policy = lora.add_adapters(policy, args, device)
    trainable = [p for p in policy.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=args.lr, weight_decay=0.0)
    B = args.prompts_per_step * args.group_size
    weights = (f"{sum(p.numel() for p in trainable) / 1e6:,.1f}M trainable LoRA parameters (rank {args.lora_rank}) "
               f"over a frozen {args.dtype} base" if args.lora_rank else "float32 weights")
    print(f"device {device} ({torch.cuda.get_device_name() if device == 'cuda' else 'cpu'}), shape {opts.shape}, "
          f"{n_params / 1e6:,.1f}M parameters, {weights}, {args.dtype} compute, batch {args.prompts_per_step}x{args.group_size}, "
          f"micro-batch {args.micro_batch_size}, up to {args.max_new_tokens} new tokens, rule {args.aggregator}")
    for step in range(opts.steps):
        if device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        prompts = torch.randint(3, config.vocab_size, (args.prompts_per_step, 64), device=device)
        prompts = prompts.repeat_interleave(args.group_size, dim=0)                     # groups are contiguous
        start = time.time()
        policy.eval()
        if opts.random_responses:
            response = torch.randint(3, config.vocab_size, (B, args.max_new_tokens), device=device)
            sequences = torch.cat([prompts, response], dim=1)
        else:
            with torch.no_grad(), grpo_ba.autocast(args, device):   # random weights: min_new_tokens keeps EOS away
                sequences = policy.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts), do_sample=True,
                                            top_k=0, top_p=1.0, max_new_tokens=args.max_new_tokens,
                                            min_new_tokens=args.max_new_tokens, pad_token_id=0, eos_token_id=2)
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
        generated = 0 if opts.random_responses else tokens
        flops = 2 * n_params * generated + (2 + (6 if args.lora_rank else 8) * args.inner_updates) * n_params * context
        peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else float("nan")
        name = torch.cuda.get_device_name() if device == "cuda" else ""
        peak_flops = next((v for k, v in PEAK_BF16_FLOPS.items() if k in name), None)
        mfu = f"{flops / step_time / peak_flops:.1%}" if peak_flops else "n/a"
        print(f"step {step}: {step_time:.1f}s (generate {gen_time:.1f}s, update {update_time:.1f}s), "
              f"{'no' if opts.random_responses else f'{tokens / gen_time:.0f}'} generated tokens/s, peak memory {peak:.1f} GiB, MFU {mfu}, "
              f"pg_loss {stats['pg_loss']:+.4f}, grad_norm {stats['grad_norm']:.3f}, skipped {stats['skipped_updates']}")


if __name__ == "__main__":
    main()
