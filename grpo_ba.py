"""grpo_ba.py -- GRPO with three loss-aggregation rules, side by side.

A reference implementation to read beside *Balanced Aggregation: Understanding and
Fixing Aggregation Bias in GRPO* (arXiv 2605.04077), in the paper's order: 1 advantages,
2 the clipped term, 3 the three rules, 4 rollout, 5 the update, 6 diagnostics, 7 the
loop, 8 main. The math is derived in docs/method.md; docstrings cite its sections.

    python grpo_ba.py                              # demo: shipped warm-up, then each rule, 30 steps
    python grpo_ba.py --seed 7                     # the demo on another seed (its own warm-up)
    python grpo_ba.py --design long-right          # right answers are the long ones
    python grpo_ba.py --aggregator balanced --steps 200                       # one run
    python grpo_ba.py --aggregator my_rules.py:capped_token_mean              # your own rule
    python grpo_ba.py --preset qwen3-1.7b --dataset data.jsonl --aggregator balanced  # one GPU
    python grpo_ba.py --help                       # every flag (grpo_ba_support/args.py)
    python -m grpo_ba_plots runs/demo-s22          # redraw a run directory's figures

One step, sampling to optimizer.step(), is grpo_step: sample_groups, grpo_update, then
step_diagnostics (section 6: logged, never trained on; skip it on a first read); it reads
grpo_ba_support/task.py (stop ids), toy_tasks/arithmetic.py (forced starts, the reward) and,
where micro-batches split groups, grpo_ba_support/coefficients.py.
The lab (grpo_ba_lab/, docs/lab.md) builds on these functions, never the other way round.

Where this file departs from the paper's GRPO or GRPO implementations disagree (the code says
"choice N"; docs/method.md §7 has the long form, and a test in tests/ pins each):
 1. advantages divide by the population std (by G, not G - 1);
 2. a tied group's advantages are exactly 0;
 3. a masked position's ratio is 1 (zeroed before exp: never inf * 0);
 4. the loss mask holds every sampled token up to and with the first EOS, a sampled PAD too;
 5. each rule is applied per group, then averaged over the P groups (verl, TRL pool the batch);
 6. an empty response adds nothing, is on neither sign, and normalisers are clamped to 1;
 7. balanced for graded rewards weighs the signs by advantage mass (the project's form);
 8. the rule is called on whole groups; a micro-batch splitting one adds sum_it c_it l_it (dJ/dl);
 9. no KL to a reference by default (beta = 0), as DAPO and Dr. GRPO;
10. the dual clip (--clip-ratio-c) is off by default, as in TRL.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import math
import os
import random
import sys
from dataclasses import dataclass

import torch

import grpo_ba_support.run
import grpo_ba_support.task
from grpo_ba_support import coefficients, own_rule
# F401: UsageError and the graded form, unused here, are imported from grpo_ba by the lab and tests
from grpo_ba_support.args import Args, UsageError, check_args, parse_args, run_command  # noqa: F401
from grpo_ba_support.coefficients import aggregate_balanced_by_advantage_mass  # noqa: F401
from grpo_ba_support.run import Run
from toy_tasks import length_stats

# 1. Group-relative advantages (docs/method.md §1) =========================================
def group_advantages(rewards: torch.Tensor, group_size: int, scale: str = "std",
                     eps: float = 1e-6) -> torch.Tensor:
    """A_i = (r_i - mean(r)) / (std(r) + eps)   (scale="std", GRPO)
       A_i =  r_i - mean(r)                      (scale="none", Dr. GRPO)

    Mean and population std (choice 1) are taken over each contiguous group of G responses.
    rewards: (B,) with B = P * G  ->  advantages: (B,)
    """
    if rewards.ndim != 1 or rewards.numel() % group_size != 0:
        raise ValueError(f"rewards of shape {tuple(rewards.shape)} do not split into groups "
                         f"of {group_size}")
    r = rewards.float().view(-1, group_size)                      # (P, G)
    centred = r - r.mean(dim=1, keepdim=True)                     # sum_i A_i = 0 in every group
    if scale == "std":
        centred = centred / (r.std(dim=1, unbiased=False, keepdim=True) + eps)
    elif scale != "none":
        raise ValueError(f"unknown advantage scale {scale!r}; use 'std' or 'none'")
    # A tied group is exactly 0 (choice 2): the float32 mean of 0.7 repeated is not 0.7, and
    # dividing that rounding error by std + eps would make it an advantage of about 0.1.
    tied = (r == r[:, :1]).all(dim=1, keepdim=True)
    return torch.where(tied, torch.zeros_like(centred), centred).view(-1)


# 2. The clipped per-token term (docs/method.md §1) ========================================
def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """KL_it = k3 estimate of KL(pi_theta || pi_ref) per token (docs/method.md §1):
    exp(q) - q - 1, q = ref_logp - logp; >= 0, and 0 where the two policies agree."""
    q = ref_logp - logp
    return torch.exp(q) - q - 1


def policy_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """rho_it = exp(logp_it - old_logp_it): (B, T), 1 where mask is 0 (choice 3)."""
    return torch.exp(torch.where(mask.bool(), logp - old_logp, torch.zeros_like(logp)))


def clipped_tokens(ratio, advantages, eps_low, eps_high, clip_ratio_c=None) -> torch.Tensor:
    """(B, T) bool: the tokens whose l_it is clipped (no gradient), the dual clip's included."""
    adv = advantages[:, None]
    clipped = ((adv > 0) & (ratio > 1 + eps_high)) | ((adv < 0) & (ratio < 1 - eps_low))
    return clipped | ((adv < 0) & (ratio > clip_ratio_c)) if clip_ratio_c else clipped


def clipped_token_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
                       mask: torch.Tensor, eps_low: float = 0.2, eps_high: float = 0.28,
                       ref_logp: torch.Tensor | None = None, beta: float = 0.0,
                       clip_ratio_c: float | None = None) -> torch.Tensor:
    """l_it = -min(rho_it * A_i, clip(rho_it, 1 - eps_low, 1 + eps_high) * A_i) + beta * KL_it
    rho_it = exp(logp_it - old_logp_it); KL_it = k3_kl, off by default (beta = 0, choice 9).
    logp, old_logp, ref_logp, mask: (B, T);  advantages: (B,) -> (B, T), 0 where mask is 0.
    Dual clip (choice 10; verl's clip_ratio_c = c > 1, arXiv 1912.09729): for A_i < 0, l_it =
    min(l_it, -A_i c), no gradient past c; the cap scales with A_i, as rescaled A_i need (§5)."""
    mask = mask.bool()
    ratio = policy_ratio(logp, old_logp, mask)                              # (B, T)
    adv = advantages.to(logp.dtype)[:, None]                                # (B, 1)
    loss = -torch.minimum(ratio * adv, torch.clamp(ratio, 1 - eps_low, 1 + eps_high) * adv)
    if clip_ratio_c:
        if not clip_ratio_c > 1.0:
            raise ValueError(f"clip_ratio_c (dual clip) must be above 1, got {clip_ratio_c}")
        loss = torch.where(adv < 0, torch.minimum(loss, -adv * clip_ratio_c), loss)   # A_i < 0 only
    if ref_logp is not None and beta != 0.0:
        # masked positions get ref = logp (KL 0) before exp, for the same reason as the ratio
        loss = loss + beta * k3_kl(logp, torch.where(mask, ref_logp, logp))
    return torch.where(mask, loss, torch.zeros_like(loss))


# 3. The three aggregation rules, side by side (docs/method.md §2, §4, §5) =================
#    Each: (per_token_loss (B,T), mask (B,T), advantages (B,), group_size G) -> J, a loss to
#    minimise (minus GRPO's objective). Rows come in contiguous groups of G; the rule is applied
#    per group, then averaged (choice 5); an empty response's normaliser is clamped to 1 (choice 6).
def _per_response_sums(per_token_loss, mask, group_size):
    """Row sums of the token terms and row lengths L_i, both shaped (P, G)."""
    mask = mask.to(per_token_loss.dtype)
    token_sums = (per_token_loss * mask).sum(dim=1).view(-1, group_size)   # sum_t l_it
    lengths = mask.sum(dim=1).view(-1, group_size)                          # L_i
    return token_sums, lengths


def aggregate_token(per_token_loss, mask, advantages, group_size):
    """J_tok = (1 / sum_i L_i) * sum_i sum_t l_it          (a token mean per group, as DAPO's)

    verl's `token-mean` and TRL's `dapo` take it over the whole batch (docs/method.md §5). Every
    token weighs the same, so the side writing more tokens gets more weight (sign-length coupling,
    docs/method.md §3): at rho = 1, J_tok = -sum_i A_i L_i / sum_i L_i, 0 only if lengths agree."""
    token_sums, lengths = _per_response_sums(per_token_loss, mask, group_size)   # (P, G)
    per_group = token_sums.sum(dim=1) / lengths.sum(dim=1).clamp(min=1)          # (P,)
    return per_group.mean()


def aggregate_sequence(per_token_loss, mask, advantages, group_size):
    """J_seq = (1/G) * sum_i (1/L_i) * sum_t l_it          (original GRPO)

    Every response weighs the same, so a long answer's tokens count less: each gets 1/L_i
    (sequence equal-weighting, docs/method.md §3)."""
    token_sums, lengths = _per_response_sums(per_token_loss, mask, group_size)   # (P, G)
    per_group = (token_sums / lengths.clamp(min=1)).mean(dim=1)                  # (P,)
    return per_group.mean()


# Balanced Aggregation, the paper's form for binary rewards (docs/method.md §2):
#   J_BA = (k/G) * (token mean of l over S+)  +  ((G-k)/G) * (token mean of l over S-)
def aggregate_balanced(per_token_loss, mask, advantages, group_size):
    """A token mean inside each sign, sequence-count weights between the signs: k of G answers
    right (S+, A_i > 0), G - k wrong (S-, A_i < 0); no tokens, neither side (choice 6). Graded
    rewards: aggregate_balanced_by_advantage_mass (docs/method.md §4, choice 7), equal on 0/1."""
    token_sums, lengths = _per_response_sums(per_token_loss, mask, group_size)   # (P, G)
    adv = advantages.view(-1, group_size)                                        # (P, G)
    J = 0.0
    for sign in (1, -1):                                                         # S+, then S-
        side = ((adv * sign > 0) & (lengths > 0)).to(token_sums.dtype)           # (P, G)
        token_mean = (token_sums * side).sum(dim=1) / (lengths * side).sum(dim=1).clamp(min=1)
        J = J + side.sum(dim=1) / group_size * token_mean                        # k/G * mean
    return J.mean()


AGGREGATORS = {"token": aggregate_token, "sequence": aggregate_sequence,
               "balanced": aggregate_balanced}


def aggregator_function(aggregator):
    """A rule's name in AGGREGATORS, or your own: a function with their signature, or its
    FILE.py:FUNCTION (--aggregator my_rules.py:capped_token_mean; grpo_ba_support/own_rule.py)."""
    return AGGREGATORS[aggregator] if aggregator in AGGREGATORS else own_rule.function(aggregator)


# 4. Rollout: sample G responses per prompt, mask them, score them =========================
@dataclass
class Rollout:
    sequences: torch.Tensor       # (B, S_prompt + T) prompt (left-padded) then response
    attention: torch.Tensor       # (B, S_prompt + T)
    response_mask: torch.Tensor   # (B, T) 1 on every sampled token up to and with the first EOS
    completions: list             # B strings: forced prefix + decoded response
    truncated: torch.Tensor       # (B,) True where no EOS came before max_new_tokens


def response_mask_from_eos(response: torch.Tensor, eos_id) -> tuple[torch.Tensor, torch.Tensor]:
    """Mask every position up to and including the first EOS (one id or every stop id), whatever
    was sampled (a PAD the policy sampled is *in* the loss; choice 4). (B, T) -> (B, T), (B,)"""
    is_eos = torch.isin(response, torch.as_tensor(eos_id, device=response.device))
    has_eos = is_eos.any(dim=1)
    no_eos = torch.full_like(has_eos, response.shape[1], dtype=torch.long)
    first_eos = torch.where(has_eos, is_eos.float().argmax(dim=1), no_eos)
    positions = torch.arange(response.shape[1], device=response.device)[None, :]
    return (positions <= first_eos[:, None]).long(), ~has_eos


def autocast(args, device_type):
    """Compute in --dtype; weights and AdamW stay float32 (bf16 rounds away updates at lr 1e-6)."""
    dtype = getattr(torch, args.dtype)                      # float32, bfloat16 or float16
    return torch.autocast(device_type, dtype=dtype, enabled=dtype != torch.float32)


def generate(policy, encoded, max_new_tokens, pad_id, stop_ids, **sampling) -> torch.Tensor:
    """The reference sampler, Hugging Face's generate: (B, S_prompt) -> (B, S_prompt + T).
    train(sample=...) takes any function with this signature (the lab's other engines)."""
    return policy.generate(**encoded, max_new_tokens=max_new_tokens, **sampling,
                           pad_token_id=pad_id, eos_token_id=stop_ids)


@torch.no_grad()
def rollout(policy, tokenizer, prompt_texts, forced_prefixes, args, temperature=None,
            sample=generate) -> Rollout:
    """Continue each `prompt + forced prefix`; the forced text is prompt, not response.
    Sampled at `temperature` (default: --temperature); temperature 0 is greedy."""
    encoded = tokenizer([p + f for p, f in zip(prompt_texts, forced_prefixes)], return_tensors="pt",
                        padding=True, add_special_tokens=False).to(policy.device)
    temperature = args.temperature if temperature is None else temperature
    sampling = (dict(do_sample=False) if temperature == 0 else
                dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0))
    stop_ids = grpo_ba_support.task.stop_token_ids(tokenizer,
                                                   getattr(policy, "generation_config", None))
    with autocast(args, policy.device.type):
        sequences = sample(policy, encoded, args.max_new_tokens, tokenizer.pad_token_id,
                           stop_ids, **sampling)
    response = sequences[:, encoded["input_ids"].shape[1]:]                              # (B, T)
    mask, truncated = response_mask_from_eos(response, stop_ids)
    completions = [f + tokenizer.decode(r[m.bool()], skip_special_tokens=True)
                   for f, r, m in zip(forced_prefixes, response, mask)]
    attention = torch.cat([encoded["attention_mask"], mask], dim=1)
    return Rollout(sequences, attention, mask, completions, truncated)


def token_logprobs(model, sequences, attention, n_response, temperature=1.0, with_entropy=False):
    """log pi(o_t | q, o_<t) of the last n_response tokens, (B, T), and their entropy; positions
    from the attention mask, as in generation (the first inner update: ratio exactly 1)."""
    positions = (attention.cumsum(dim=1) - 1).clamp(min=0)
    logits = model(input_ids=sequences, attention_mask=attention, position_ids=positions,
                   logits_to_keep=n_response + 1).logits[:, :-1]                        # (B, T, V)
    logp_all = torch.log_softmax(logits.float() / temperature, dim=-1)
    logp = logp_all.gather(-1, sequences[:, -n_response:, None]).squeeze(-1)            # (B, T)
    entropy = -(logp_all.exp() * logp_all).sum(-1).detach() if with_entropy else None
    return logp, entropy


# 5. The update: mu inner steps of the clipped objective, aggregated by the chosen rule ====
def micro_batches(batch_size, micro_batch_size) -> list[slice]:
    """The rows of each micro-batch (--micro-batch-size; 0: the whole batch at once)."""
    size = micro_batch_size or batch_size
    return [slice(i, min(i + size, batch_size)) for i in range(0, batch_size, size)]


def grpo_update(policy, reference, optimizer, batch: Rollout, rewards, args) -> dict:
    """Advantages -> mu inner updates, each a step on J = rule(l, mask, A, G), the rule called
    on whole groups. pi_old is the first update's own log-probs, detached (ratio exactly 1, one
    forward pass fewer). Non-finite loss or gradients skip the step. -> what it logs."""
    T, device = batch.response_mask.shape[1], batch.response_mask.device
    mask = batch.response_mask.float()                                              # (B, T)
    if getattr(args, "truncated", "keep") == "mask":   # a lab flag (the course's Args has none):
        mask = mask * (~batch.truncated).to(mask)[:, None]   # DAPO's overlong filter, A kept
    advantages = group_advantages(rewards, args.group_size, args.adv_scale).to(device)   # A_i: (B,)
    B, G, rule = mask.shape[0], args.group_size, aggregator_function(args.aggregator)
    chunks = micro_batches(B, args.micro_batch_size)
    split_c = coefficients.coefficients_for_split_groups(rule, mask, advantages, G, chunks)

    ref_logp = None                                                         # log pi_ref: (B, T)
    if reference is not None:
        with torch.no_grad(), autocast(args, device.type):
            ref_logp = torch.cat([token_logprobs(reference, batch.sequences[rows],
                                                 batch.attention[rows], T, args.temperature)[0]
                                  for rows in chunks])
    old_logp = torch.zeros_like(mask)                                       # set by update 0
    stats = dict(pg_loss=0.0, entropy=0.0, kl=0.0, clip_frac=0.0, grad_norm=0.0, skipped_updates=0)
    for inner in range(args.inner_updates):                                         # mu
        optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for rows in chunks:
            with autocast(args, device.type):                                       # forward only
                logp, entropy = token_logprobs(policy, batch.sequences[rows],
                                               batch.attention[rows], T, args.temperature,
                                               with_entropy=inner == 0)
            if inner == 0:
                old_logp[rows] = logp.detach()               # pi_old = pi_theta, before a step
            ref = None if ref_logp is None else ref_logp[rows]
            token_loss = clipped_token_loss(logp, old_logp[rows], advantages[rows], mask[rows],
                                            args.eps_low, args.eps_high, ref, args.beta,
                                            args.clip_ratio_c)
            fraction = (rows.stop - rows.start) / B   # of the groups: J is their mean (choice 5)
            if split_c is None:                       # whole groups: the rule meets the loss
                loss = rule(token_loss, mask[rows], advantages[rows], G) * fraction
            else:                                     # part of a group (choice 8)
                loss = (split_c[rows] * token_loss).sum()   # c_it: its part of dJ/dl
            loss.backward()                           # J: summed over the micro-batches
            total += loss.item()
            add_update_statistics(stats, loss, token_loss, rule, split_c, fraction, rows, logp,
                                  old_logp, ref, entropy, advantages, mask, inner, args)
        grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), args.max_grad_norm)
        if inner == 0:
            stats["grad_norm"] = grad_norm.item()
        if math.isfinite(total) and torch.isfinite(grad_norm):
            optimizer.step()
        else:
            stats["skipped_updates"] += 1
            optimizer.zero_grad(set_to_none=True)
    n_tokens = mask.sum().clamp(min=1).item()
    return {**stats, **{key: stats[key] / n_tokens for key in ("entropy", "kl", "clip_frac")}}


@torch.no_grad()
def add_update_statistics(stats, loss, token_loss, rule, split_c, fraction, rows, logp, old_logp,
                          ref_logp, entropy, advantages, mask, inner, args):
    """Adds a micro-batch's part of what the update logs (docs/metrics.md) to `stats`, as token
    sums: at the first inner update pg_loss = J of the token terms without beta * KL, and the
    entropy; at the last the k3 KL to pi_ref (beta > 0) or pi_old; clip_frac, mean over mu."""
    old_logp, advantages, mask = old_logp[rows], advantages[rows], mask[rows]
    ratio = policy_ratio(logp, old_logp, mask)                                      # rho_it
    clipped = clipped_tokens(ratio, advantages, args.eps_low, args.eps_high, args.clip_ratio_c)
    kl = k3_kl(logp, old_logp if ref_logp is None else ref_logp) * mask
    if inner == 0:                               # J of the clipped terms alone (beta = 0: loss)
        beta = args.beta if ref_logp is not None else 0.0
        terms = token_loss - beta * kl                          # as grpo_update's loss, no KL
        pg_loss = loss if not beta else (rule(terms, mask, advantages, args.group_size) * fraction
                                         if split_c is None else (split_c[rows] * terms).sum())
        stats["pg_loss"] += pg_loss.item()
        stats["entropy"] += (entropy * mask).sum().item()
    if inner == args.inner_updates - 1:
        stats["kl"] += kl.sum().item()
    stats["clip_frac"] += (mask * clipped.float()).sum().item() / args.inner_updates


# 6. Diagnostics: each rule's gradient weight on each sign; what a step logs (docs/metrics.md) ===
#    Two words kept apart: c_it = dJ/dl_it, a rule's coefficient of one token term, and
#    w_it = A_i c_it, a token's gradient weight (token_weights); a "share" is only ever the
#    right answers' share of the gradient weight, |W+| / (|W+| + |W-|) (positive_share).
def mask_from_lengths(lengths: torch.Tensor, width: int | None = None) -> torch.Tensor:
    """(B,) response lengths -> (B, T) mask with ones on the first L_i positions."""
    width = int(lengths.max().item()) if width is None else width
    return (torch.arange(max(width, 1), device=lengths.device)[None, :] < lengths[:, None]).float()


def token_weights(mask, advantages, group_size, aggregator):
    """w_it, (B, T): each token's gradient weight in the ascent direction at ratio 1,
    -dJ/dlogp_it = A_i * c_it, measured by autograd through the real clipped term and
    the real aggregator (docs/method.md §3's table, token by token)."""
    advantages = advantages.float()
    logp = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device, requires_grad=True)
    with torch.enable_grad():
        token_loss = clipped_token_loss(logp, logp.detach(), advantages, mask)
        J = aggregator_function(aggregator)(token_loss, mask, advantages, group_size)
        (grad,) = torch.autograd.grad(J, logp)
    return -grad


def sign_weights(mask, advantages, group_size, aggregator):
    """(W+, W-): token_weights summed over A_i > 0 and A_i < 0 (docs/method.md §3). Binary, std:
    sequence, balanced +-sqrt(k(G-k))/G per group; token |W+ / W-| = Lbar+ / Lbar-."""
    per_response = token_weights(mask, advantages, group_size, aggregator).sum(dim=1)   # (B,)
    return per_response[advantages > 0].sum(), per_response[advantages < 0].sum()


def positive_share(mask, advantages, group_size, aggregator) -> float | None:
    """|W+| / (|W+| + |W-|), the right answers' share of the gradient weight (the log's
    pos_share; docs/method.md §3): 1/2 for sequence and balanced (binary rewards), token's
    Lbar+ / (Lbar+ + Lbar-); None if all groups tie."""
    w_pos, w_neg = sign_weights(mask, advantages, group_size, aggregator)
    total = (w_pos.abs() + w_neg.abs()).item()
    return w_pos.abs().item() / total if total > 0 else None


def bias_curves(group_size=8, right=4, wrong_length=10, ratios=None, lengths=None) -> dict:
    """The two biases in one binary group (docs/method.md §3) by the real rules, for
    grpo_ba_plots.bias_curves. share: the right answers' share of the gradient weight against
    Lbar+/Lbar- (sign-length coupling; 1/2: unbiased). relative_weight: an L-token right answer's
    token weight w_it over a wrong_length-token one's (sequence equal-weighting: wrong_length/L)."""
    rewards = torch.tensor([1.0] * right + [0.0] * (group_size - right))
    advantages = group_advantages(rewards, group_size)
    def group(length, n):                         # (G, T): the first n answers of `length`
        return mask_from_lengths(torch.tensor([length] * n + [wrong_length] * (group_size - n)))
    def relative(rule, length):                   # answer 0 (right, `length`) over answer 1
        weights = token_weights(group(length, 1), advantages, group_size, rule)
        return (weights[0, 0] / weights[1, 0]).item()
    ratios, lengths = ratios or [r / 10 for r in range(2, 41)], lengths or list(range(2, 41))
    on_right = {rule: [positive_share(group(round(r * wrong_length), right), advantages,
                                      group_size, rule) for r in ratios] for rule in AGGREGATORS}
    weight = {rule: [relative(rule, n) for n in lengths] for rule in AGGREGATORS}
    return {"ratios": ratios, "lengths": lengths, "reference_length": wrong_length,
            "share": on_right, "relative_weight": weight}


def long_right_weight(mask, advantages, group_size, aggregator) -> float | None:
    """Sequence equal-weighting, measured (docs/method.md §3): in each group whose right answers
    (A_i > 0) differ in length, the longest's token weight w_it over the shortest's; the mean over
    those groups. Sequence: L_short / L_long < 1; token, balanced: 1. None: no such group."""
    lengths = mask.sum(1)                                                           # L_i: (B,)
    per_token = token_weights(mask, advantages, group_size, aggregator).sum(1) / lengths.clamp(1)
    ratios = []
    for L, w, right in zip(*(x.view(-1, group_size) for x in (lengths, per_token, advantages > 0))):
        if right.any() and L[right].max() > L[right].min() and w[right][L[right].argmin()] != 0:
            ratios.append(w[right][L[right].argmax()] / w[right][L[right].argmin()])
    return torch.stack(ratios).mean().item() if ratios else None


def step_diagnostics(rewards, mask, args) -> dict:
    """Lengths by reward and by sign of advantage; of all three rules, the two biases: the right
    answers' share of the gradient weight (sign-length coupling), the long right answer's token
    weight (sequence equal-weighting). Rewards are 0 or 1 here: balanced is aggregate_balanced."""
    lengths = mask.sum(1).float()                                                  # L_i: (B,)
    advantages = group_advantages(rewards, args.group_size, args.adv_scale)
    pos, neg = advantages > 0, advantages < 0
    out = {"reward_mean": rewards.mean().item(), **length_stats(lengths, rewards),
           "len_pos": lengths[pos].mean().item() if pos.any() else None,
           "len_neg": lengths[neg].mean().item() if neg.any() else None}
    for rule in AGGREGATORS:                      # every rule, each step, for the logs only
        out[f"pos_share_{rule}"] = positive_share(mask.float(), advantages, args.group_size, rule)
        out[f"long_right_weight_{rule}"] = long_right_weight(mask.float(), advantages,
                                                             args.group_size, rule)
    rule = args.aggregator                        # the run's: one of the three, or your own
    for key, measure in (("pos_share", positive_share), ("long_right_weight", long_right_weight)):
        out[key] = (out[f"{key}_{rule}"] if rule in AGGREGATORS else
                    measure(mask.float(), advantages, args.group_size, rule))
    return out


def aggregation_coefficients(mask, advantages, group_size, aggregator):
    """c_it = dJ/dl_it, (B, T), as the lab's TRL and verl plug-ins take it on graded rewards (off
    the course's path, whose rewards are 0 or 1): "balanced" by advantage mass (§4, choice 7)."""
    return coefficients.rule_coefficients(rule_for_any_rewards(aggregator), mask, advantages,
                                          group_size)


def rule_for_any_rewards(aggregator):
    """The plug-ins' rules: "balanced" by advantage mass, aggregate_balanced on 0/1 rewards."""
    return (coefficients.aggregate_balanced_by_advantage_mass if aggregator == "balanced" else
            aggregator_function(aggregator))


# 7. The training loop: rollout -> reward -> update, logged, checkpointed, resumable =======
def verify(completion: str, gold) -> float:
    """A dataset's reward, verifier.verify: 1.0 or 0.0 (imported when used: it needs sympy)."""
    import verifier
    return verifier.verify(completion, gold)


def evaluate(policy, tokenizer, task, rows, args, sample=generate, samples=1,
             temperature=0.0) -> float:
    """avg@K = (1 / (N K)) * sum_n sum_k score(o_nk, answer_n) (the task's score, else verify):
    K `samples` a prompt at `temperature` (K = 1 at 0: the course's greedy accuracy), no forcing."""
    prompts = [task.prompt_text(r["prompt"]) for r in rows for _ in range(samples)]
    answers = [r["answer"] for r in rows for _ in range(samples)]
    # a rollout's batch fits in memory (--micro-batch-size only splits the update)
    size = args.prompts_per_step * args.group_size if args.micro_batch_size else len(prompts)
    verdicts, score = [], task.score or verify
    policy.eval()
    for i in range(0, len(prompts), size):
        chunk = prompts[i:i + size]
        batch = rollout(policy, tokenizer, chunk, [""] * len(chunk), args, temperature, sample)
        verdicts += [score(c, a) for c, a in zip(batch.completions, answers[i:i + size])]
    return sum(verdicts) / len(verdicts)


def greedy_accuracy(policy, tokenizer, task, args, sample=generate) -> dict:
    """The course's score: greedy accuracy on the first --eval-prompts held-out prompts."""
    return {"accuracy": evaluate(policy, tokenizer, task, task.heldout[:args.eval_prompts], args,
                                 sample)}


def step_rows(task, step_seed: int, args) -> list:
    """The P prompt rows of a step, drawn from its seed: a resumed run draws the same."""
    generator = torch.Generator().manual_seed(step_seed)
    picks = torch.randint(len(task.train), (args.prompts_per_step,), generator=generator)
    return [task.train[i] for i in picks.tolist()]


def sample_groups(policy, tokenizer, task, rows, rng, args, sample=generate):
    """G rollouts of each of the P rows (groups contiguous) and their rewards (B,);
    `rng` draws the environment's forced prefixes. -> (Rollout, rewards, forced prefixes)."""
    G = args.group_size
    prompts = [r["prompt"] for r in rows for _ in range(G)]
    answers = [r["answer"] for r in rows for _ in range(G)]
    forced = [task.forced_prefix(p, rng) for p in prompts]
    policy.eval()
    batch = rollout(policy, tokenizer, [task.prompt_text(p) for p in prompts], forced, args,
                    sample=sample)
    score = task.score or verify                  # the toy's: its exact sum; a dataset's: verify
    rewards = torch.tensor([score(c, a) for c, a in zip(batch.completions, answers)])      # (B,)
    return batch, rewards, forced


def grpo_step(policy, reference, optimizer, tokenizer, task, rows, rng, args, scores=None,
              on_rollout=None, sample=generate) -> dict:
    """One step on P prompt rows: G rollouts each, rewards, the update, then what it logs: given,
    scores(policy) -> {metric: accuracy} before the update; on_rollout sees what was written."""
    batch, rewards, forced = sample_groups(policy, tokenizer, task, rows, rng, args, sample)
    if on_rollout is not None:
        on_rollout([task.prompt_text(r["prompt"]) for r in rows], batch, rewards)
    metrics = {}
    if scores is not None:                        # the policy that sampled, before it moves
        measured = scores(policy)
        metrics.update(measured, accuracy=sum(measured.values()) / len(measured))
    policy.train()
    update = grpo_update(policy, reference, optimizer, batch, rewards.to(policy.device), args)
    metrics.update(update, **step_diagnostics(rewards, batch.response_mask.cpu(), args),
                   truncated_frac=batch.truncated.float().mean().item(),
                   forced_frac=sum(bool(f) for f in forced) / len(forced))
    return metrics


def train(args: Args, log=print, build=grpo_ba_support.task.build, sample=generate, scores=None,
          loggers=()) -> str:
    """One GRPO run with one rule, a grpo_step per step; writes args.json, metrics.jsonl and
    checkpoint.pt to args.output_dir (docs/outputs.md) and returns it. The lab's seams: build(args,
    log) -> (policy, tokenizer, task); sample, as generate; scores(policy, tokenizer, task, args,
    sample) -> {metric: accuracy}, as greedy_accuracy; loggers (grpo_ba_support.run.RunLogger)."""
    run = Run(args, log, loggers)                 # device, threads; a bad directory fails now
    policy, tokenizer, task = build(args, log)
    policy.to(run.device)
    reference = None                              # pi_ref when beta > 0: the start policy, frozen
    if args.beta > 0:                             # (or the task's own: LoRA's base model)
        reference = task.reference or copy.deepcopy(policy).eval().requires_grad_(False)
    optimizer = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=args.lr,
                                  weight_decay=0.0)
    args = run.begin(policy, optimizer, task)     # args.json, or --resume's checkpoint
    scores = functools.partial(scores or greedy_accuracy, tokenizer=tokenizer, task=task,
                               args=args, sample=sample)
    with run.ctrl_c_saves():                      # Ctrl-C: finish the step, save, stop
        for step, step_seed, evaluates in run.steps():   # reseeded from (seed, step)
            rows = step_rows(task, step_seed, args)
            metrics = grpo_step(policy, reference, optimizer, tokenizer, task, rows,
                                random.Random(step_seed), args, scores if evaluates else None,
                                run.on_rollout, sample)
            final = None                          # after the last update: the policy it leaves
            if step == args.steps - 1:
                measured = scores(policy)
                final = {"step": args.steps, "final_evaluation": True, **measured,
                         "accuracy": sum(measured.values()) / len(measured)}
            run.record(step, metrics, final, policy, optimizer)   # metrics, log, checkpoint
    return run.finish(policy, tokenizer)          # the summary: accuracy, time, outputs


# 8. main: one run, a resumed run, or the demo =============================================
def demo(args: Args, log=print, train_one=None, terminal=None) -> str:
    """`python grpo_ba.py`: the three rules from the same weights and seed, one run each (by
    `train_one`, a line on the `terminal` shows its steps), what each did and two figures."""
    import grpo_ba_plots                          # matplotlib: imported when a figure is drawn
    train_one = train_one or train
    base = args.output_dir or f"runs/{args.design}-s{args.seed}"
    runs = {}
    for k, rule in enumerate(AGGREGATORS, 1):
        out = os.path.join(base, rule)
        log(f"[{k}/{len(AGGREGATORS)}] {rule}: {args.steps} GRPO steps in {out}")
        progress = grpo_ba_plots.Progress(args.steps, terminal, log)   # its log: a warm-up's lines
        train_one(dataclasses.replace(args, aggregator=rule, output_dir=out), log=progress)
        runs[rule] = grpo_ba_support.run.read_metrics(os.path.join(out, "metrics.jsonl"))
    figures = (grpo_ba_plots.mechanism_figure(runs, os.path.join(base, "mechanism.png"),
                                              f"design {args.design}, seed {args.seed}", args),
               grpo_ba_plots.bias_curves(bias_curves(), os.path.join(base, "bias_curves.png")))
    for line in grpo_ba_plots.story(runs, args, figures):
        log(line)
    return base


def main(argv=None) -> int:
    """One run and its figure (--aggregator RULE), a run continued (--resume DIR), or the demo."""
    def command():
        args = parse_args(argv, rule_required_with_model=True)   # a 1.7B model: one rule, named
        check_args(args)
        if args.aggregator == "all":
            demo(args)
            return
        import grpo_ba_plots                      # matplotlib: imported when a figure is drawn
        rule = own_rule.name_of(args.aggregator)
        out = train(dataclasses.replace(args, output_dir=args.output_dir
                                        or f"runs/{args.design}-{rule}-s{args.seed}"))
        print("\n".join(grpo_ba_plots.run_story(out, args)))    # its figure and story
    return run_command("grpo_ba.py", command)


if __name__ == "__main__":
    sys.exit(main())
