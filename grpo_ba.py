"""grpo_ba.py -- GRPO with three loss-aggregation rules, side by side.

A reference implementation to read beside *Balanced Aggregation: Understanding and
Fixing Aggregation Bias in GRPO* (arXiv 2605.04077). The math, with its derivations, is
stated in docs/method.md; docstrings cite its sections ("docs/method.md §2").

    python grpo_ba.py                                  # demo: warm-up, then token / sequence / balanced (design demo)
    python grpo_ba.py --design loop-gap                # token aggregation's failure, 300 steps (docs/toy-designs.md)
    python grpo_ba.py --design loop-gap --sweep        # a whole design: its 5 seeds x 3 rules, paired report
    python grpo_ba.py --aggregator balanced --regime variance --steps 200
    python grpo_ba.py --sweep                          # the plain toy: 2 regimes x 3 rules x 5 seeds, figures + table
    python grpo_ba.py --regime-map --seeds 3           # which rule wins where on the (gap, spread) plane
    python grpo_ba.py --plot-only runs/sweep           # redraw figures from saved metrics
    python grpo_ba.py --preset qwen3-1.7b --model Qwen/Qwen3-1.7B --dataset data.jsonl   # one GPU

Choices where GRPO implementations disagree (docs/method.md §7; each pinned by a test in tests/):
 1. Advantages use the population std (divide by G), so a group of one gives 0, not NaN.
 2. A group whose rewards are all equal has A = 0: it contributes 0 loss and 0 gradient.
 3. The ratio is exp(logp - old_logp) with masked positions zeroed *before* exp, so a
    masked or padded token can never produce inf * 0 = NaN.
 4. The loss mask covers every sampled token up to and including the first EOS, even a
    PAD the policy sampled itself (otherwise the policy learns to emit PAD for free).
 5. Every rule is applied per group, then averaged over the P groups (docs/method.md §5).
 6. A response of zero length contributes nothing (its normaliser is clamped to 1).
 7. Balanced aggregation for non-binary rewards uses advantage mass (docs/method.md §4): the
    project's choice, as the paper's exact form is not public.
 8. The three rules are linear in the token terms, so J = sum_it c_it * l_it; the
    coefficients c_it = dJ/dl_it are taken once over whole groups, which makes
    micro-batching exact (the bug of verl issues 2776 and 7321 cannot happen).
 9. KL to a reference (k3 estimator) is off by default (beta = 0), as in DAPO / Dr. GRPO.
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
import os
import random
import signal
import sys
import threading
import time
from dataclasses import dataclass, field

import torch
from tqdm import tqdm

from plumbing import benchmarks, chat_template, lm_setup, lora, rollout_engines, run_io
from toy_tasks import GAP_SIGNS, REGIMES, SLIP_STYLES, designs, length_stats
from verifier import verify

# =====================================================================================
# 1. Group-relative advantages (docs/method.md §1)
# =====================================================================================


def group_advantages(rewards: torch.Tensor, group_size: int, scale: str = "std",
                     eps: float = 1e-6) -> torch.Tensor:
    """A_i = (r_i - mean(r)) / (std(r) + eps)   (scale="std", GRPO)
       A_i =  r_i - mean(r)                      (scale="none", Dr. GRPO)

    Mean and population std are taken over each contiguous group of G responses.
    rewards: (B,) with B = P * G  ->  advantages: (B,)
    """
    if rewards.ndim != 1 or rewards.numel() % group_size != 0:
        raise ValueError(f"rewards of shape {tuple(rewards.shape)} do not split into groups of {group_size}")
    r = rewards.float().view(-1, group_size)                      # (P, G)
    centred = r - r.mean(dim=1, keepdim=True)                     # sum_i A_i = 0 in every group
    if scale == "std":
        centred = centred / (r.std(dim=1, unbiased=False, keepdim=True) + eps)
    elif scale != "none":
        raise ValueError(f"unknown advantage scale {scale!r}; use 'std' or 'none'")
    return centred.view(-1)


# =====================================================================================
# 2. The clipped per-token term (docs/method.md §1)
# =====================================================================================


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """KL_it = k3 estimator of KL(pi_theta || pi_ref) per token: exp(q) - q - 1, q = ref_logp - logp.
    Always >= 0, and 0 where the two policies agree."""
    q = ref_logp - logp
    return torch.exp(q) - q - 1


def clipped_token_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
                       mask: torch.Tensor, eps_low: float = 0.2, eps_high: float = 0.28,
                       ref_logp: torch.Tensor | None = None, beta: float = 0.0) -> torch.Tensor:
    """l_it = -min(rho_it * A_i, clip(rho_it, 1 - eps_low, 1 + eps_high) * A_i) + beta * KL_it

    rho_it = exp(logp_it - old_logp_it);  KL_it = k3 = exp(q) - q - 1 with q = ref_logp - logp.
    logp, old_logp, ref_logp, mask: (B, T);  advantages: (B,)  ->  per-token loss (B, T),
    exactly 0 where mask is 0.
    """
    mask = mask.bool()
    # Zero masked log-ratios before exp: a padded position could otherwise give inf * 0 = NaN.
    log_ratio = torch.where(mask, logp - old_logp, torch.zeros_like(logp))
    ratio = torch.exp(log_ratio)                                            # (B, T)
    adv = advantages.to(logp.dtype)[:, None]                                # (B, 1)
    surrogate = torch.minimum(ratio * adv, torch.clamp(ratio, 1 - eps_low, 1 + eps_high) * adv)
    loss = -surrogate
    if ref_logp is not None and beta != 0.0:
        # masked positions get ref = logp (KL 0) before exp, for the same reason as the ratio
        loss = loss + beta * k3_kl(logp, torch.where(mask, ref_logp, logp))
    return torch.where(mask, loss, torch.zeros_like(loss))


# =====================================================================================
# 3. The three aggregation rules, side by side (docs/method.md §2, §4, §5)
#    Each: (per_token_loss (B,T), mask (B,T), advantages (B,), group_size G) -> scalar.
#    Rows come in contiguous groups of G; the rule is applied per group, then averaged.
# =====================================================================================


def _per_response_sums(per_token_loss, mask, group_size):
    """Row sums of the token terms and row lengths L_i, both shaped (P, G)."""
    mask = mask.to(per_token_loss.dtype)
    token_sums = (per_token_loss * mask).sum(dim=1).view(-1, group_size)   # sum_t l_it
    lengths = mask.sum(dim=1).view(-1, group_size)                          # L_i
    return token_sums, lengths


def aggregate_token(per_token_loss, mask, advantages, group_size):
    """J_tok = (1 / sum_i L_i) * sum_i sum_t l_it          (DAPO / Dr. GRPO token sums)

    Every token of the group weighs the same, so the side that writes more tokens
    gets more total weight (sign-length coupling, docs/method.md §3). Its trace: at rho = 1,
    l_it = -A_i and J_tok = -sum_i A_i L_i / sum_i L_i, not 0 unless lengths agree.
    """
    token_sums, lengths = _per_response_sums(per_token_loss, mask, group_size)   # (P, G)
    per_group = token_sums.sum(dim=1) / lengths.sum(dim=1).clamp(min=1)          # (P,)
    return per_group.mean()


def aggregate_sequence(per_token_loss, mask, advantages, group_size):
    """J_seq = (1/G) * sum_i (1/L_i) * sum_t l_it          (original GRPO)

    Every response weighs the same, so each token of a long response weighs less
    (sequence equal-weighting, docs/method.md §3).
    """
    token_sums, lengths = _per_response_sums(per_token_loss, mask, group_size)   # (P, G)
    per_group = (token_sums / lengths.clamp(min=1)).mean(dim=1)                  # (P,)
    return per_group.mean()


def aggregate_balanced(per_token_loss, mask, advantages, group_size):
    """Balanced Aggregation, advantage-mass form (docs/method.md §4; binary case §2):

        J_BA = sum_{s in +,-} (M_s / G) * (sum_{i in S_s} sum_t l_it) / (sum_{i in S_s} |A_i| L_i)
        M_s  = sum_{i in S_s} |A_i|

    With binary rewards this is (k/G) * token-mean over S+  +  ((G-k)/G) * token-mean over S-:
    token mean inside each sign, sequence-count weights between the signs.
    Responses with A_i = 0 belong to neither side and carry no weight.
    """
    token_sums, lengths = _per_response_sums(per_token_loss, mask, group_size)   # (P, G)
    adv = advantages.to(token_sums.dtype).view(-1, group_size)                   # (P, G)
    sides = torch.stack([adv > 0, adv < 0]).to(token_sums.dtype)                # S+, S-: (2, P, G)
    mass = (adv.abs() * sides).sum(dim=2)                                        # M_s: (2, P)
    numerator = (token_sums * sides).sum(dim=2)                                  # (2, P)
    denominator = (adv.abs() * lengths * sides).sum(dim=2)                       # (2, P)
    # An empty side, or one whose responses are all empty, contributes 0 (not 0/0).
    safe = torch.where(denominator > 0, denominator, torch.ones_like(denominator))
    per_side = torch.where(denominator > 0, mass / group_size * numerator / safe,
                           torch.zeros_like(numerator))                          # (2, P)
    return per_side.sum(dim=0).mean()


AGGREGATORS = {
    "token": aggregate_token,
    "sequence": aggregate_sequence,
    "balanced": aggregate_balanced,
}


def aggregator_function(aggregator):
    """A rule's name in AGGREGATORS, or a function with the aggregators' signature (a student's own)."""
    return AGGREGATORS[aggregator] if isinstance(aggregator, str) else aggregator


def aggregation_coefficients(mask, advantages, group_size, aggregator):
    """c_it = dJ/dl_it, shape (B, T): the weight each token term gets under a rule.

    Every rule is linear in l, so J = sum_it c_it * l_it exactly. The coefficients
    depend only on the mask and the advantages of *whole groups*; computing them once
    before splitting a batch into micro-batches keeps micro-batching exact.
    """
    probe = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device, requires_grad=True)
    with torch.enable_grad():
        value = aggregator_function(aggregator)(probe, mask, advantages.float(), group_size)
        (coefficients,) = torch.autograd.grad(value, probe)
    return coefficients * mask.to(coefficients.dtype)


def mask_from_lengths(lengths: torch.Tensor, width: int | None = None) -> torch.Tensor:
    """(B,) response lengths -> (B, T) mask with ones on the first L_i positions."""
    width = int(lengths.max().item()) if width is None else width
    return (torch.arange(max(width, 1), device=lengths.device)[None, :] < lengths[:, None]).float()


def token_weights(mask, advantages, group_size, aggregator):
    """(B, T): the weight of each token in the ascent direction at ratio 1, i.e.
    -dJ/dlogp_it = A_i * c_it, measured by autograd through the real clipped term and
    the real aggregator (docs/method.md §3's table, token by token)."""
    advantages = advantages.float()
    logp = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device, requires_grad=True)
    with torch.enable_grad():
        token_loss = clipped_token_loss(logp, logp.detach(), advantages, mask)
        value = aggregator_function(aggregator)(token_loss, mask, advantages, group_size)
        (grad,) = torch.autograd.grad(value, logp)
    return -grad


def sign_weights(mask, advantages, group_size, aggregator):
    """(w_pos, w_neg): total gradient weight on the positive and the negative responses
    at ratio 1 (docs/method.md §3's table): token_weights summed over A_i > 0 and over A_i < 0.

    Sequence and balanced give +-sqrt(k(G-k))/G per group (binary rewards, std scaling);
    token gives a ratio |w_pos / w_neg| = Lbar+ / Lbar-.
    """
    per_response = token_weights(mask, advantages, group_size, aggregator).sum(dim=1)   # (B,)
    return per_response[advantages > 0].sum(), per_response[advantages < 0].sum()


def positive_share(mask, advantages, group_size, aggregator) -> float | None:
    """|w_pos| / (|w_pos| + |w_neg|) from sign_weights: the share of the rule's gradient
    weight on the positive responses (docs/method.md §3). 1/2 for sequence and balanced
    with binary rewards; Lbar+ / (Lbar+ + Lbar-) for token. None when no response has an
    advantage (every group tied)."""
    w_pos, w_neg = sign_weights(mask, advantages, group_size, aggregator)
    total = (w_pos.abs() + w_neg.abs()).item()
    return w_pos.abs().item() / total if total > 0 else None


# =====================================================================================
# 4. Arguments: one dataclass, every field's help becomes --help
# =====================================================================================


def _arg(default, help, section=None):  # noqa: A002
    """A field and its --help line. `section` marks the first field of a --help section:
    every field after it belongs to that section, up to the next marker."""
    return field(default=default, metadata={"help": help} if section is None else {"help": help, "section": section})


@dataclass
class Args:
    # ---- what to run
    aggregator: str = _arg("all", "token | sequence | balanced (docs/method.md §2); 'all' runs the demo: the three rules from the same weights and seed", section="what to run")
    design: str = _arg(designs.AUTO, "toy design whose flags become the defaults, typed flags still win (toy_tasks/designs.py, "
                                     "docs/toy-designs.md); plain: none, the defaults shown here; auto: demo for the demo "
                                     "(no --aggregator, --sweep, --regime-map, --model), plain otherwise")
    regime: str = _arg("gap", "toy regime: 'gap' (right and wrong answers differ in length) or 'variance' (lengths spread, no gap)")
    gap_sign: str = _arg("wrong-long", "toy gap direction: 'wrong-long' (forced slips, then rambling) or 'right-long' (forced re-checks)")
    gap_size: int = _arg(18, "toy: mean ramble length in tokens, i.e. the size of the length gap")
    spread_size: int = _arg(0, "toy, regime gap: half of all responses, right or wrong, ramble this many tokens (the length spread; 0: none)")
    slip_style: str = _arg("ramble", "toy: what a ramble writes: 'ramble' (the token ~, never in a right answer) or 'loop' (the sum just written, repeated: digits a right answer needs; toy_tasks)")
    force_frac: float = _arg(0.3, "toy: fraction of RL responses whose start the environment forces (regime gap)")
    steps: int = _arg(100, "GRPO steps")
    seed: int = _arg(0, "seed of the RL run (sampling, prompt order); the warm-up has its own seed")
    output_dir: str = _arg("", "where args.json, metrics.jsonl and checkpoints go (default: runs/<mode>)")
    diagnose: str = _arg("", "ROLLOUTS.jsonl ({group, reward, length} per line): report your run's aggregation bias, train nothing")
    # ---- GRPO (docs/method.md §1)
    group_size: int = _arg(8, "G: responses per prompt", section="GRPO (docs/method.md §1)")
    prompts_per_step: int = _arg(16, "P: prompts per step; the batch holds P * G responses")
    inner_updates: int = _arg(2, "mu: optimizer steps on each batch (the first is on-policy, ratio 1)")
    lr: float = _arg(1e-4, "AdamW learning rate of the RL phase (3e-4 erases part of the toy's arithmetic: docs/results-toy.md, \"Why greedy accuracy used to fall\")")
    eps_low: float = _arg(0.2, "clip range below 1 for the ratio")
    eps_high: float = _arg(0.28, "clip range above 1 for the ratio (DAPO clip-higher; 0.2 is GRPO)")
    beta: float = _arg(0.0, "weight of the k3 KL to a frozen reference policy (0: no reference is kept)")
    adv_scale: str = _arg("std", "advantage scaling: 'std' (GRPO) or 'none' (Dr. GRPO)")
    max_grad_norm: float = _arg(1.0, "gradient-norm clip")
    temperature: float = _arg(1.0, "sampling temperature of the rollouts")
    max_new_tokens: int = _arg(40, "longest response; longer ones are cut (and stay in the loss)")
    micro_batch_size: int = _arg(0, "rows per forward/backward pass (0: the whole batch); exact for every rule")
    # ---- evaluation, logging, checkpoints
    eval_every: int = _arg(10, "accuracy on held-out prompts (or --eval-dataset) every N steps (step 0 included)", section="evaluation, logging and checkpoints")
    eval_dense_until: int = _arg(0, "also evaluate every --eval-dense-every steps up to this step (0: no dense start)")
    eval_dense_every: int = _arg(2, "the dense start's evaluation interval, up to --eval-dense-until")
    eval_prompts: int = _arg(200, "held-out prompts per evaluation (without --eval-dataset)")
    eval_dataset: tuple = _arg((), "benchmarks to evaluate on instead of held-out prompts: hub ids or local .json/.jsonl/.parquet, "
                                   "several after one flag; each logged as accuracy_<name>, `accuracy` is their mean")
    eval_split: str = _arg("test", "split of a hub --eval-dataset")
    eval_prompt_column: str = _arg("", "prompt column of --eval-dataset (empty: --prompt-column)")
    eval_answer_column: str = _arg("", "answer column of --eval-dataset (empty: --answer-column)")
    eval_samples: int = _arg(1, "K: samples per prompt; accuracy is avg@K, the mean verdict over all K samples")
    eval_temperature: float = _arg(0.0, "sampling temperature of evaluation (0: greedy, so K = 1 is greedy accuracy)")
    log_every: int = _arg(10, "print a one-line summary every N steps")
    save_every: int = _arg(0, "write a checkpoint every N steps (0: only on Ctrl-C); the last step always writes one")
    resume: str = _arg("", "continue the run saved in this directory (its args.json and checkpoint.pt); --steps extends "
                           "or shortens it, machine flags (--threads, --device, ...) may change, any other flag must match")
    # ---- the toy model
    warmup_steps: int = _arg(0, "toy: supervised warm-up steps, cached by settings (0: 600 for regime gap, 1000 for variance)", section="the toy model")
    warmup_seed: int = _arg(0, "toy: seed of the warm-up, shared by every rule; -1: the run's --seed, each seed its own "
                               "warm-up (the designs' choice)")
    warmup_from_scratch: bool = _arg(False, "toy: train the warm-up (or take it from the cache) even where a design ships one")
    cache_dir: str = _arg("~/.cache/grpo_ba", "where warmed-up toy policies and converted .gguf models are cached")
    threads: int = _arg(0, "CPU threads for torch (0: the toy's measured best, 2; with --model every available core)")
    # ---- sweep and plots (analysis/plots.py)
    sweep: bool = _arg(False, "run both regimes x three rules x --seeds seeds, then figures and table; with --design: the design's "
                              "seeds x three rules, then also its paired report", section="sweep and plots (analysis/plots.py)")
    seeds: int = _arg(5, "seeds per (regime, rule) in --sweep (with --design: the design's own seeds); rules are compared paired by seed (analysis/paired_stats.py)")
    variant: str = _arg("", "--design --sweep: run only the seeds of this machine variant (toy_tasks/designs.py; empty: all)")
    regime_map: bool = _arg(False, "map which rule wins where: --map-gap-sizes x --map-spread-sizes toy cells x three rules x --seeds seeds, "
                                   "then regime_map.png and regime_map.md (analysis/regime_map.py); run it again to go on after a stop")
    map_gap_sizes: tuple = _arg(("0", "9", "18"), "--regime-map: the cells' --gap-size values (0: no gap)")
    map_spread_sizes: tuple = _arg(("0", "8", "16"), "--regime-map: the cells' --spread-size values (0: no extra spread)")
    workers: int = _arg(0, "--regime-map: runs trained at a time, one thread each (0: one per CPU core)")
    plot_only: str = _arg("", "redraw the figures and the table (or a regime map) from the metrics under this directory")
    figures_dir: str = _arg("", "where figures and table.md go (default: the runs directory)")
    # ---- scale-up (one GPU)
    model: str = _arg("", "Hugging Face causal LM (hub id or local dir) or a .gguf file (converted once into --cache-dir); empty: the toy model", section="scale-up (one GPU)")
    dataset: str = _arg("", "hub id or local .json/.jsonl/.parquet with prompts and answers (with --model)")
    dataset_split: str = _arg("train", "split of a hub dataset")
    prompt_column: str = _arg("prompt", "column with the prompt (a string or chat messages); dots reach inside")
    answer_column: str = _arg("answer", "column with the gold answer, e.g. 'reward_model.ground_truth'; a list = several acceptable answers")
    skip_bad_rows: bool = _arg(False, "drop dataset rows that cannot be used (one line per kind; counts in data_report.json) instead of refusing the file")
    max_prompt_tokens: int = _arg(0, "longest prompt in tokens after the chat template; longer rows are refused, never truncated (0: model context minus --max-new-tokens)")
    preset: str = _arg("", "one-GPU settings as new defaults (explicit flags still override)")
    dtype: str = _arg("float32", "compute dtype (autocast): float32 | bfloat16 | float16; weights and AdamW stay float32")
    gradient_checkpointing: bool = _arg(False, "trade compute for memory in the backward pass")
    attn_implementation: str = _arg("sdpa", "sdpa | eager | flash_attention_2 (if installed)")
    rollout_engine: str = _arg("generate", "how rollouts are sampled: generate (transformers' generate, the reference) | static "
                                           "(static KV cache, decode step compiled into CUDA graphs on CUDA) | paged (continuous "
                                           "batching); same tokens, faster on a GPU (plumbing/rollout_engines.py, docs/gpu-rollouts.md)")
    device: str = _arg("auto", "auto (cuda, then mps, then cpu) | cpu | cuda | mps")
    lora_rank: int = _arg(0, "R: train LoRA adapters of rank R instead of all weights (plumbing/lora.py; needs peft); 0: all weights")
    lora_alpha: float = _arg(0.0, "LoRA scale: adapters add (alpha / R) * B A x (0: alpha = R)")
    lora_target_modules: str = _arg("all-linear", "layers that get adapters: comma-separated module names (q_proj,v_proj), or all-linear: every linear layer but the output head")


PRESETS = {
    "qwen3-1.7b": dict(dtype="bfloat16", gradient_checkpointing=True, attn_implementation="sdpa",
                       micro_batch_size=4, max_new_tokens=1024, lr=1e-6, group_size=8,
                       prompts_per_step=8, inner_updates=1, eval_every=50, eval_prompts=64,
                       temperature=1.0, save_every=50, model="Qwen/Qwen3-1.7B"),
    # The paper's 7B model on one 80 GB GPU: LoRA adapters over a frozen bf16 base (plumbing/lora.py).
    # Its context is 4096 tokens: 3072 new, so prompts may have up to 1024. LoRA's best lr
    # sits about 10x above full fine-tuning's (1e-6 in the preset above).
    "qwen2.5-math-7b": dict(dtype="bfloat16", gradient_checkpointing=True, attn_implementation="sdpa",
                            micro_batch_size=4, max_new_tokens=3072, lr=1e-5, group_size=8,
                            prompts_per_step=8, inner_updates=1, eval_every=50, eval_prompts=64,
                            temperature=1.0, save_every=50, model="Qwen/Qwen2.5-Math-7B",
                            lora_rank=32, lora_alpha=64, lora_target_modules="all-linear"),
}
WARMUP_STEPS = {"gap": 600, "variance": 1000}    # greedy held-out accuracy 0.5-0.6 at step 0 (toy_tasks)
CHOICES = {"aggregator": ("all", *AGGREGATORS), "regime": REGIMES,
           "gap_sign": GAP_SIGNS, "slip_style": SLIP_STYLES, "adv_scale": ("std", "none"),
           "dtype": ("float32", "bfloat16", "float16"), "device": ("auto", "cpu", "cuda", "mps"),
           "preset": ("", *PRESETS), "rollout_engine": rollout_engines.ENGINES,
           "design": (designs.AUTO, designs.NO_DESIGN, *designs.DESIGNS), "variant": ("", *designs.VARIANTS)}


class UsageError(ValueError):
    """Bad input: reported as one line on stderr with exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):                       # one line, not usage + error
        raise UsageError(message)


def _build_parser() -> _Parser:
    parser = _Parser(description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    group = parser
    for f in dataclasses.fields(Args):
        if "section" in f.metadata:                  # this field opens a --help section
            group = parser.add_argument_group(f.metadata["section"])
        flag = "--" + f.name.replace("_", "-")
        if f.type in ("bool", bool):
            group.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default, help=f.metadata["help"])
        else:
            kind = {"int": int, "float": float, "str": str, "tuple": str}[f.type if isinstance(f.type, str) else f.type.__name__]
            text = f.metadata["help"]
            shown = {"preset": PRESETS, "design": {n: d["flags"] for n, d in designs.DESIGNS.items()}}.get(f.name, {})
            if shown:                                # show every value a preset or a design sets
                text += "; " + "; ".join(f"{name}: " + ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in values.items())
                                         for name, values in shown.items())
            group.add_argument(flag, type=kind, default=f.default, choices=CHOICES.get(f.name), help=text,
                                nargs="+" if kind is str and f.type in ("tuple", tuple) else None)   # several values
    return parser


def parse_args(argv=None) -> Args:
    parser = _build_parser()
    known, _ = parser.parse_known_args(argv)
    parser.set_defaults(**PRESETS.get(known.preset, {}))    # preset values are defaults; flags win
    design = chosen_design(known)
    parser.set_defaults(**designs.design_flags(design))     # and so are a toy design's
    return dataclasses.replace(Args(**vars(parser.parse_args(argv))), design=design)


def chosen_design(flags) -> str:
    """The toy design a command line runs: --design as typed, or for 'auto' the demo's
    design when it runs the demo on the toy, none otherwise."""
    if flags.design != designs.AUTO:
        return flags.design
    demo = flags.aggregator == "all" and not (flags.sweep or flags.regime_map or flags.model or flags.plot_only
                                              or flags.resume or flags.diagnose or flags.preset)
    return designs.DEMO if demo else designs.NO_DESIGN


def given_flags(argv=None) -> dict:
    """Only the flags typed on the command line, parsed: {name: value}. A flag typed
    with its default value counts as given; defaults and preset values do not."""
    not_given = object()                           # not a string: argparse would parse a string default
    parser = _build_parser()
    parser.set_defaults(**{f.name: not_given for f in dataclasses.fields(Args)})
    return {name: value for name, value in vars(parser.parse_args(argv)).items() if value is not not_given}


def check_args(args: Args):
    """Refuse, with one clear line, what would fail later or silently do the wrong thing."""
    if args.group_size < 2:
        raise UsageError(f"--group-size must be at least 2 (got {args.group_size}): a group of one has no relative advantage")
    if args.regime_map and args.model:
        raise UsageError("--regime-map maps the toy's knobs; it cannot run with --model")
    if args.workers < 0:
        raise UsageError("--workers must be at least 1, or 0 for one per CPU core")
    for name in ("steps", "prompts_per_step", "inner_updates", "max_new_tokens", "eval_prompts", "eval_samples", "seeds"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
    batch = args.group_size * args.prompts_per_step
    if args.micro_batch_size and (args.micro_batch_size < 0 or batch % args.micro_batch_size):
        raise UsageError(f"--micro-batch-size {args.micro_batch_size} does not divide the batch of {batch} responses")
    if args.max_prompt_tokens < 0:
        raise UsageError("--max-prompt-tokens must be positive, or 0 for the model's context minus --max-new-tokens")
    if args.eval_temperature < 0 or args.lora_rank < 0 or args.lora_alpha < 0:
        raise UsageError("--eval-temperature, --lora-rank and --lora-alpha cannot be negative")
    if args.dataset and not args.model:
        raise UsageError("--dataset needs --model (the toy model only knows the toy tasks)")
    designed = args.design in designs.DESIGNS
    if designed and (args.model or args.regime_map):
        raise UsageError(f"--design {args.design} sets the toy's knobs; it cannot run with "
                         f"{'--model' if args.model else '--regime-map'} (add --design plain)")
    if not args.model:
        try:                                       # the toy's own checks, before anything is written
            lm_setup.toy_world(args)
        except ValueError as err:                  # naming the design's knobs when they are the cause
            knobs = designs.knobs_at_fault(args.design, args, lm_setup.toy_world) if designed else ""
            raise UsageError(err if not knobs else f"{err} (design {args.design} sets {knobs}: add --design plain)") from None


# =====================================================================================
# 5. Rollout: sample G responses per prompt, mask them, score them
# =====================================================================================


@dataclass
class Rollout:
    sequences: torch.Tensor       # (B, S_prompt + T) prompt (left-padded) then response
    attention: torch.Tensor       # (B, S_prompt + T)
    response_mask: torch.Tensor   # (B, T) 1 on every sampled token up to and including the first EOS
    completions: list             # B strings: forced prefix + decoded response
    truncated: torch.Tensor       # (B,) True where no EOS came before max_new_tokens


def response_mask_from_eos(response: torch.Tensor, eos_id) -> tuple[torch.Tensor, torch.Tensor]:
    """Mask every position up to and including the first EOS, whatever token was sampled
    there (a PAD the policy sampled itself is *in* the loss; choice 4). eos_id: one id or a
    list (every stop id: EOS, end of turn). (B, T) -> (B, T), (B,)"""
    is_eos = torch.isin(response, torch.as_tensor(eos_id, device=response.device))
    has_eos = is_eos.any(dim=1)
    first_eos = torch.where(has_eos, is_eos.float().argmax(dim=1), torch.full_like(has_eos, response.shape[1], dtype=torch.long))
    positions = torch.arange(response.shape[1], device=response.device)[None, :]
    return (positions <= first_eos[:, None]).long(), ~has_eos


def autocast(args, device_type):
    """Compute in --dtype, keep weights and optimizer state in float32: bf16 weights
    would round away most updates at lr ~1e-6 (bf16 keeps 8 bits of mantissa)."""
    dtype = lm_setup.DTYPES[args.dtype]
    return torch.autocast(device_type, dtype=dtype, enabled=dtype != torch.float32)


@torch.no_grad()
def rollout(policy, tokenizer, prompt_texts, forced_prefixes, args, temperature=None) -> Rollout:
    """Continue each `prompt + forced prefix`; the forced text is prompt, not response.
    Sampled at `temperature` (default: --temperature); temperature 0 is greedy."""
    encoded = tokenizer([p + f for p, f in zip(prompt_texts, forced_prefixes)], return_tensors="pt",
                        padding=True, add_special_tokens=False).to(policy.device)
    temperature = args.temperature if temperature is None else temperature
    sampling = dict(do_sample=False) if temperature == 0 else dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0)
    stop_ids = chat_template.stop_token_ids(tokenizer, getattr(policy, "generation_config", None))   # EOS, end of turn
    with autocast(args, policy.device.type):
        if args.rollout_engine == "generate":      # the reference
            sequences = policy.generate(**encoded, max_new_tokens=args.max_new_tokens,
                                        pad_token_id=tokenizer.pad_token_id, eos_token_id=stop_ids, **sampling)
        else:                                      # the same tokens, faster on a GPU (docs/gpu-rollouts.md)
            sequences = rollout_engines.sample(policy, encoded, args.max_new_tokens, tokenizer.pad_token_id, stop_ids,
                                               args.rollout_engine, **sampling)
    response = sequences[:, encoded["input_ids"].shape[1]:]                              # (B, T)
    mask, truncated = response_mask_from_eos(response, stop_ids)
    completions = [f + tokenizer.decode(r[m.bool()], skip_special_tokens=True)
                   for f, r, m in zip(forced_prefixes, response, mask)]
    return Rollout(sequences, torch.cat([encoded["attention_mask"], mask], dim=1), mask, completions, truncated)


def token_logprobs(model, sequences, attention, n_response, temperature=1.0, with_entropy=False):
    """log pi(o_t | q, o_<t) of the last n_response tokens, (B, T); and their entropy.

    Positions come from the attention mask, as in generation, so the first inner update
    sees ratio exactly 1. Only the response positions' logits are materialised.
    """
    positions = (attention.cumsum(dim=1) - 1).clamp(min=0)
    logits = model(input_ids=sequences, attention_mask=attention, position_ids=positions,
                   logits_to_keep=n_response + 1).logits[:, :-1]                        # (B, T, V)
    logp_all = torch.log_softmax(logits.float() / temperature, dim=-1)
    logp = logp_all.gather(-1, sequences[:, -n_response:, None]).squeeze(-1)            # (B, T)
    entropy = -(logp_all.exp() * logp_all).sum(-1).detach() if with_entropy else None
    return logp, entropy


# =====================================================================================
# 6. The update: mu inner steps of the clipped objective, aggregated by the chosen rule
# =====================================================================================


def micro_batches(batch_size, micro_batch_size):
    size = micro_batch_size or batch_size
    return [slice(i, i + size) for i in range(0, batch_size, size)]


def grpo_update(policy, reference, optimizer, batch: Rollout, rewards, args) -> dict:
    """Advantages -> coefficients c_it of the rule over whole groups -> mu inner updates.

    Each inner update accumulates sum_it c_it * l_it over micro-batches, which equals
    J_rule of the full batch exactly (choice 8). The old log-probs are the first inner
    update's own log-probs, detached: the policy has not moved yet, so they are the
    rollout policy's, and the first update sees ratio exactly 1 for one forward pass
    fewer. Non-finite loss or gradients skip the optimizer step (`skipped_updates`).
    """
    G, T = args.group_size, batch.response_mask.shape[1]
    mask = batch.response_mask.float()                                                    # (B, T)
    advantages = group_advantages(rewards, G, args.adv_scale).to(mask.device)            # (B,)
    coefficients = aggregation_coefficients(mask, advantages, G, args.aggregator)        # (B, T)
    chunks = micro_batches(mask.shape[0], args.micro_batch_size)
    old_logp = torch.zeros_like(mask)                                                     # filled by inner update 0
    ref_logp = None
    if reference is not None:
        with torch.no_grad():
            with autocast(args, mask.device.type):
                ref_logp = torch.cat([token_logprobs(reference, batch.sequences[c], batch.attention[c], T, args.temperature)[0] for c in chunks])
    stats = {"pg_loss": 0.0, "entropy": 0.0, "kl": 0.0, "clip_frac": 0.0, "grad_norm": 0.0, "skipped_updates": 0}
    n_tokens = mask.sum().clamp(min=1)
    for inner in range(args.inner_updates):
        optimizer.zero_grad(set_to_none=True)
        total, clipped = 0.0, 0.0
        for c in chunks:
            with autocast(args, mask.device.type):                                        # forward only
                logp, entropy = token_logprobs(policy, batch.sequences[c], batch.attention[c], T, args.temperature, with_entropy=inner == 0)
            if inner == 0:
                old_logp[c] = logp.detach()                                               # pi_old = pi_theta before any step
            token_loss = clipped_token_loss(logp, old_logp[c], advantages[c], mask[c], args.eps_low, args.eps_high,
                                            None if ref_logp is None else ref_logp[c], args.beta)
            loss = (coefficients[c] * token_loss).sum()                                   # this chunk's share of J
            loss.backward()
            total += loss.item()
            with torch.no_grad():
                ratio = torch.exp(torch.where(mask[c] > 0, logp - old_logp[c], torch.zeros_like(logp)))
                adv = advantages[c][:, None]
                clipped += (mask[c] * (((adv > 0) & (ratio > 1 + args.eps_high)) | ((adv < 0) & (ratio < 1 - args.eps_low))).float()).sum().item()
                # drift from the reference (beta > 0) or from the rollout policy
                kl = k3_kl(logp, old_logp[c] if ref_logp is None else ref_logp[c]) * mask[c]
                if inner == 0:                                   # pg_loss: J without its beta * KL part
                    kl_part = args.beta * (coefficients[c] * kl).sum().item() if ref_logp is not None else 0.0
                    stats["pg_loss"] += loss.item() - kl_part
                    stats["entropy"] += ((entropy * mask[c]).sum() / n_tokens).item()
                if inner == args.inner_updates - 1:
                    stats["kl"] += (kl.sum() / n_tokens).item()
        grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), args.max_grad_norm)
        if not (math.isfinite(total) and torch.isfinite(grad_norm)):
            stats["skipped_updates"] += 1
            optimizer.zero_grad(set_to_none=True)
        else:
            optimizer.step()
        stats["clip_frac"] += clipped / n_tokens.item() / args.inner_updates
        if inner == 0:
            stats["grad_norm"] = grad_norm.item()
    return stats


# =====================================================================================
# 7. Diagnostics: what each step logs (docs/metrics.md)
# =====================================================================================


def step_diagnostics(rewards, mask, args) -> dict:
    """Lengths by reward and by sign of advantage, and the sign weights of all three rules."""
    lengths = mask.sum(1).float()                                                         # L_i: (B,)
    advantages = group_advantages(rewards, args.group_size, args.adv_scale)
    pos, neg = advantages > 0, advantages < 0
    out = {"reward_mean": rewards.mean().item(), **length_stats(lengths, rewards),
           "len_pos": lengths[pos].mean().item() if pos.any() else None,
           "len_neg": lengths[neg].mean().item() if neg.any() else None}
    for rule in AGGREGATORS:
        out[f"pos_share_{rule}"] = positive_share(mask.float(), advantages, args.group_size, rule)
    out["pos_share"] = out.get(f"pos_share_{args.aggregator}")
    return out


# =====================================================================================
# 8. The training loop: rollout -> reward -> update, logged, checkpointed, resumable
# =====================================================================================


def evaluate(policy, tokenizer, task, rows, args) -> float:
    """avg@K = (1 / (N K)) * sum_n sum_k verify(o_nk, answer_n): K = --eval-samples samples
    per prompt at --eval-temperature (K = 1 at temperature 0: greedy accuracy), nothing forced."""
    K = args.eval_samples
    prompts = [task.prompt_text(r["prompt"]) for r in rows for _ in range(K)]
    answers = [r["answer"] for r in rows for _ in range(K)]
    size = args.prompts_per_step * args.group_size if args.micro_batch_size else len(prompts)   # a rollout's batch fits
    verdicts = []
    policy.eval()
    for i in range(0, len(prompts), size):
        batch = rollout(policy, tokenizer, prompts[i:i + size], [""] * len(prompts[i:i + size]), args, args.eval_temperature)
        verdicts += [verify(c, a) for c, a in zip(batch.completions, answers[i:i + size])]
    return sum(verdicts) / len(verdicts)


def step_rows(task, step_seed: int, args) -> list:
    """The P prompt rows of a step, drawn from its seed: a resumed run draws the same."""
    generator = torch.Generator().manual_seed(step_seed)
    return [task.train[i] for i in torch.randint(len(task.train), (args.prompts_per_step,), generator=generator).tolist()]


def sample_groups(policy, tokenizer, task, rows, rng, args):
    """G rollouts of each of the P rows (groups contiguous) and their rewards (B,);
    `rng` draws the environment's forced prefixes. -> (Rollout, rewards, forced prefixes)."""
    G = args.group_size
    prompts = [r["prompt"] for r in rows for _ in range(G)]
    answers = [r["answer"] for r in rows for _ in range(G)]
    forced = [task.forced_prefix(p, rng) for p in prompts]
    policy.eval()
    batch = rollout(policy, tokenizer, [task.prompt_text(p) for p in prompts], forced, args)
    rewards = torch.tensor([verify(c, a) for c, a in zip(batch.completions, answers)])      # (B,)
    return batch, rewards, forced


def grpo_step(policy, reference, optimizer, tokenizer, task, rows, rng, args, eval_sets=None) -> dict:
    """One step on P prompt rows: G rollouts each, rewards, diagnostics, the update;
    first, if given, avg@K on each eval set {metric name: rows} and `accuracy`, their mean."""
    batch, rewards, forced = sample_groups(policy, tokenizer, task, rows, rng, args)
    metrics = step_diagnostics(rewards, batch.response_mask.cpu(), args)
    if eval_sets:
        scores = {name: evaluate(policy, tokenizer, task, eval_rows, args) for name, eval_rows in eval_sets.items()}
        metrics.update(scores, accuracy=sum(scores.values()) / len(scores))
    policy.train()
    metrics.update(grpo_update(policy, reference, optimizer, batch, rewards.to(policy.device), args))
    metrics.update(truncated_frac=batch.truncated.float().mean().item(),
                   forced_frac=sum(bool(f) for f in forced) / len(forced))
    return metrics


def is_eval_step(step: int, args) -> bool:
    """Step 0, every --eval-every steps, and every --eval-dense-every steps up to
    --eval-dense-until (an early-dense schedule: rules that separate early are seen). An
    evaluation at step s measures the policy before that step's update; the last one,
    after the last update, is logged as step --steps (final_evaluation)."""
    dense = args.eval_dense_until > 0 and step <= args.eval_dense_until and step % max(1, args.eval_dense_every) == 0
    return dense or step % args.eval_every == 0


def final_evaluation(policy, tokenizer, task, eval_sets, args) -> dict:
    """The metrics line of the evaluation after the last update: step = --steps."""
    scores = {name: evaluate(policy, tokenizer, task, rows, args) for name, rows in eval_sets.items()}
    return {"step": args.steps, "final_evaluation": True, **scores, "accuracy": sum(scores.values()) / len(scores)}


def seed_step(seed: int, step: int) -> int:
    """Every step reseeds from (seed, step): a resumed run samples what the original would."""
    step_seed = (seed * 1_000_003 + step) % (2**63)
    torch.manual_seed(step_seed)
    return step_seed


def train(args: Args, log=print) -> str:
    """One GRPO run with one rule. Writes args.json, metrics.jsonl (one object per step)
    and checkpoint.pt; returns the output directory."""
    if not args.model:                     # the toy: an unwritable directory fails before the warm-up
        run_io.prepare_output_dir(args.output_dir)
    device = run_io.pick_device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(run_io.pick_threads(args.threads, real_model=bool(args.model)))
        torch.set_flush_denormal(True)     # Adam's tiny second moments are denormal: 10x slower sqrt
    ckpt_path = os.path.join(args.output_dir, "checkpoint.pt")
    saved = run_io.read_checkpoint(ckpt_path, device) if args.resume else None   # a bad file fails before the model loads
    policy, tokenizer, task = lm_setup.build(args, WARMUP_STEPS, log)   # checks every --dataset row first
    if args.lora_rank:                             # train adapters only, over a frozen base
        policy = lora.add_adapters(policy, args, device.type)
    eval_sets = benchmarks.eval_sets(args, task)                         # and every --eval-dataset row
    out = run_io.prepare_output_dir(args.output_dir)                     # so bad data writes nothing
    policy.to(device)
    reference = None
    if args.beta > 0:                              # pi_ref = the starting policy, frozen
        reference = lora.ReferenceWithoutAdapters(policy) if args.lora_rank else copy.deepcopy(policy).eval().requires_grad_(False)
    optimizer = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=args.lr, weight_decay=0.0)
    metrics_path = os.path.join(out, "metrics.jsonl")
    start = 0
    if args.resume:                                # every check passes before the directory changes
        start = run_io.restore_checkpoint(saved, ckpt_path, policy, optimizer, metrics_path, args.steps, log)
        del saved
        run_io.write_args(out, dataclasses.asdict(dataclasses.replace(args, resume="")))   # a new --steps, machine flags
        log(f"resuming {out} at step {start} of {args.steps}" if start < args.steps else
            f"{out} has finished its {args.steps} steps; extend it with --resume {out} --steps {args.steps + 100}")
    else:
        with open(os.path.join(out, "args.json"), "w") as f:
            json.dump(dataclasses.asdict(args), f, indent=2)
        if task.data_report is not None:           # rows read, used, left out and why
            task.data_report.save(os.path.join(out, "data_report.json"))
        open(metrics_path, "w").close()
    run_io.record_start(out, start, task.warmup)  # run.json: the machine variant and the warm-up of this start
    args = dataclasses.replace(args, dtype=run_io.autocast_dtype(device.type, args.dtype, log))   # args.json keeps the request

    interrupted, since_checkpoint = [], []          # metrics lines the next checkpoint keeps

    def on_sigint(*_):                             # first Ctrl-C: finish the step, save, stop
        if interrupted:
            raise KeyboardInterrupt                # second Ctrl-C: stop now
        interrupted.append(True)
    in_main_thread = threading.current_thread() is threading.main_thread()   # signals work there only
    previous_handler = signal.signal(signal.SIGINT, on_sigint) if in_main_thread else None
    try:
        bar = tqdm(range(start, args.steps), desc=f"{args.aggregator:>8s}", initial=start, total=args.steps,
                   dynamic_ncols=True, disable=None)
        for step in bar:
            step_start = time.time()
            step_seed = seed_step(args.seed, step)
            rows = step_rows(task, step_seed, args)
            evaluate_now = is_eval_step(step, args)
            metrics = {"step": step, **grpo_step(policy, reference, optimizer, tokenizer, task, rows,
                                                 random.Random(step_seed), args, eval_sets if evaluate_now else None)}
            metrics["step_time"] = time.time() - step_start
            since_checkpoint.append(run_io.append_metrics(metrics_path, metrics))   # synced before any checkpoint
            if step == args.steps - 1:             # the policy after the last update, kept by the last checkpoint
                since_checkpoint.append(run_io.append_metrics(
                    metrics_path, final_evaluation(policy, tokenizer, task, eval_sets, args)))
            if step == start:
                log(f"step-{step} rollouts: wrong/right mean length {metrics['wrong_over_right']:.2f} "
                    f"(right {metrics['len_right']:.1f}, wrong {metrics['len_wrong']:.1f}), "
                    f"std/mean {metrics['std_over_mean']:.2f}, reward {metrics['reward_mean']:.2f}")
            if step % args.log_every == 0 or step == args.steps - 1:
                acc = f" acc {metrics['accuracy']:.2f}" if "accuracy" in metrics else ""
                bar.write(f"[{args.aggregator}] step {step:4d} reward {metrics['reward_mean']:.2f}{acc} "
                          f"len +{_fmt(metrics['len_pos'])} -{_fmt(metrics['len_neg'])} "
                          f"pg_loss {metrics['pg_loss']:+.4f} pos_share {_fmt(metrics['pos_share'], 2)} "
                          f"({metrics['step_time']:.2f}s/step)")
            if interrupted or (args.save_every and (step + 1) % args.save_every == 0) or step == args.steps - 1:
                run_io.save_checkpoint(ckpt_path, policy, optimizer, step, since_checkpoint)   # keeps the lines too
                since_checkpoint = []
            if interrupted:
                log(f"interrupted: checkpoint of step {step} saved; continue with --resume {out}")
                raise KeyboardInterrupt            # stops a demo or sweep too, not just this run
    finally:
        if in_main_thread:
            signal.signal(signal.SIGINT, previous_handler)
    return out


def _fmt(value, digits=1):
    return "n/a" if value is None else f"{value:.{digits}f}"


# =====================================================================================
# 9. Entry points: one run, the demo (three rules), the sweep, plots
# =====================================================================================


def run_demo(args: Args, log=print) -> str:
    """The three rules from the same starting weights and seed (the warmed-up toy, or
    --model as loaded), one run directory each; returns their parent directory (main()
    draws its figures and table)."""
    label = run_io.run_label(dataclasses.asdict(args))                  # the toy's regime, or the model's name
    if args.model:
        base = args.output_dir or os.path.join("runs", label)
    else:                                   # a design's demo is seed 0 of its --sweep, in the same place
        named = args.design in designs.DESIGNS and args.design != designs.DEMO
        base = args.output_dir or (f"runs/{args.design}" if named else "runs/demo")
    for rule in AGGREGATORS:
        train(dataclasses.replace(args, aggregator=rule, output_dir=os.path.join(base, f"{label}-{rule}-s{args.seed}")), log)
    return base


def run_sweep(args: Args, log=print) -> str:
    """Both regimes x three rules x --seeds seeds, or with --design that design's seeds x
    three rules, one run after another (the two vCPUs behave like one core); returns the
    sweep's directory (main() draws its figures and table)."""
    if args.design in designs.DESIGNS:            # each seed on its machine variant, a process each
        from analysis import toy_consequences
        return toy_consequences.run_design(args, log)
    base = args.output_dir or "runs/sweep"
    plan = [(regime, seed) for regime in ("gap", "variance") for seed in range(args.seeds)]
    for regime, seed in plan:
        for rule in AGGREGATORS:
            out = os.path.join(base, f"{regime}-{rule}-s{seed}")
            status = run_io.run_status(out, args.steps, log)         # restores lines a power cut lost
            if status == "finished":
                log(f"skip {out}: already complete")
                continue
            train(dataclasses.replace(args, aggregator=rule, regime=regime, seed=seed, output_dir=out,
                                      resume=out if status == "resume" else ""), log)
    return base


def main(argv=None) -> int:
    try:
        args = parse_args(argv)
        check_args(args)
        if args.diagnose:                          # measures a rollouts file; trains nothing
            from analysis import diagnose
            diagnose.run(args.diagnose, args.adv_scale)
            return 0
        if args.resume:                            # one run, continued: its args.json, then the flags typed
            defaults = {f.name: f.default for f in dataclasses.fields(Args)}
            args = Args(**run_io.resumed_args(args.resume, given_flags(argv), defaults))
            check_args(args)
            train(args)
        elif args.regime_map and not args.plot_only:
            from analysis import regime_map
            regime_map.run_map(args)
        elif args.plot_only or args.sweep or args.aggregator == "all":
            from analysis import plots, regime_map, toy_consequences
            if args.plot_only and os.path.exists(os.path.join(args.plot_only, regime_map.INDEX_FILE)):
                regime_map.report(args.plot_only, args.figures_dir or None)
                return 0
            base = args.plot_only or (run_sweep(args) if args.sweep else run_demo(args))   # --plot-only trains nothing
            if args.sweep and args.variant:            # a part of a design: its report waits for the rest
                print(f"variant {args.variant} of design {args.design} done; when every variant is, "
                      f"`python grpo_ba.py --plot-only {base}` writes the report")
                return 0
            plots.report(base, args.figures_dir or None)
            design = toy_consequences.saved_design(base)     # a design's runs: its paired report, mechanism figure
            one_seed = [args.seed] if design and not (args.sweep or args.plot_only) else None   # the demo
            if design:
                toy_consequences.report(base, args.figures_dir or base, title=f"Design {design}:", seeds=one_seed)
            if one_seed:
                print(f"One seed ranks nothing: `python grpo_ba.py --design {design} --sweep` trains its "
                      f"{len(designs.registered_seeds(design))} seeds and compares the rules paired (docs/toy-designs.md).")
        else:
            args.output_dir = args.output_dir or f"runs/{args.regime}-{args.aggregator}-s{args.seed}"
            train(args)
        return 0
    except KeyboardInterrupt:
        print("grpo_ba.py: interrupted", file=sys.stderr)
        return 130
    except (UsageError, OSError, json.JSONDecodeError) as err:
        print(f"grpo_ba.py: error: {err}", file=sys.stderr)
        return 2
    except ValueError as err:                      # SetupError and bad toy settings
        for line in str(err).splitlines() or [""]:  # a bad dataset: one line per kind of problem
            print(f"grpo_ba.py: error: {line}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
