"""grpo_ba_lab/plumbing/rollout_engines.py -- how grpo_ba.rollout() samples: one call, three engines.

`sample(policy, encoded, ...)` takes what `policy.generate` takes and returns what it
returns: (B, S + T) sequences, the left-padded prompt then the response, PAD after a
row's first stop token, T the longest response. Only the speed differs:

- generate  transformers' `generate` as it comes: a KV cache that grows each step and one
            Python-launched forward per token. The readable reference, and the default.
- static    `generate` with a static KV cache (`cache_implementation="static"`), so every
            decode step has the same shapes, and on CUDA the decode forward compiled by
            `torch.compile` in mode "reduce-overhead" (CUDA graphs: the whole step is one
            launch). The first call compiles (its time not measured); later calls reuse it.
- paged     transformers' continuous batching (`generate_batch`): a paged KV cache
            without padding, rows that end leave the batch, CUDA graphs on CUDA. Runs in
            a background thread, on a sampler wholly in --dtype (its cache has one dtype):
            under bf16 it samples from a bf16 model, close to but not bit-identical with
            the autocast policy (as vLLM does); in float32 it is exact.

Both fast engines sample from a *sampler*: a copy of the policy's modules that shares
every parameter with it, except that under autocast (--dtype bfloat16) each nn.Linear
holds the low-precision copy of its weight that autocast would make anyway, refreshed
from the policy at every call (the paged engine casts every weight: see above). The arithmetic is the same as `generate` under autocast
(autocast casts a Linear's weight to the same bf16 values), but a compiled step reads
2 bytes per weight instead of casting 4-byte weights at every token. Embeddings, norms
and buffers stay as they are, shared. See docs/gpu-rollouts.md.
"""
from __future__ import annotations

import copy
import math
import weakref

import torch

ENGINES = ("generate", "static", "paged")
_samplers = weakref.WeakKeyDictionary()      # policy -> {(dtype, whole): (sampler, [(cast tensor, policy tensor)])}


def sample(policy, encoded, max_new_tokens, pad_id, stop_ids, engine="generate", compile=None, **sampling):
    """Sample a response for each row of `encoded` (input_ids, attention_mask: left-padded).

    sampling: do_sample, temperature, top_k, top_p, as for `generate`. compile: compile
    the static engine's decode step (default: on CUDA only). Returns (B, S + T) tokens.
    """
    if engine == "generate":
        return policy.generate(**encoded, max_new_tokens=max_new_tokens, pad_token_id=pad_id,
                               eos_token_id=stop_ids, **sampling)
    if engine == "static":
        return sampler_for(policy).generate(**encoded, max_new_tokens=max_new_tokens, pad_token_id=pad_id,
                                            eos_token_id=stop_ids, cache_implementation="static",
                                            **static_compile(policy, compile), **sampling)
    if engine == "paged":
        return paged_generate(sampler_for(policy, whole=True), encoded, max_new_tokens, pad_id, stop_ids, **sampling)
    raise ValueError(f"unknown rollout engine {engine!r}: one of {', '.join(ENGINES)}")


# ------------------------------------------------------------------ the sampler


def autocast_dtype(device_type):
    """The dtype autocast computes in on this thread, or None when autocast is off."""
    return torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else None


@torch.no_grad()
def sampler_for(policy, whole=False):
    """The policy's sampler for the current autocast dtype, its cast weights refreshed.
    whole: cast every floating parameter, not only nn.Linear's (a model in one dtype,
    as continuous batching needs: its cache holds keys and values in the model's dtype)."""
    dtype = autocast_dtype(policy.device.type)
    samplers = _samplers.setdefault(policy, {})
    if (dtype, whole) not in samplers:
        memo = {id(p): p for p in policy.parameters()}         # share every parameter: nothing is copied
        sampler = copy.deepcopy(policy, memo).eval()
        casts = {}                                              # id(policy tensor) -> (cast, policy tensor): ties stay tied
        for module in sampler.modules() if dtype is not None else ():
            if whole or isinstance(module, torch.nn.Linear):
                for name, source in list(module.named_parameters(recurse=False)):
                    if source.is_floating_point() and source.element_size() > torch.finfo(dtype).bits // 8:
                        if id(source) not in casts:
                            casts[id(source)] = (torch.nn.Parameter(source.detach().to(dtype), requires_grad=False), source)
                        setattr(module, name, casts[id(source)][0])   # this module only: the policy keeps its own
        samplers[(dtype, whole)] = (sampler, list(casts.values()))
    sampler, pairs = samplers[(dtype, whole)]
    for cast, source in pairs:                                  # the policy's current weights
        cast.copy_(source)
    return sampler


def release():
    """Drop every sampler (their cast weights, compiled steps and caches go with them)."""
    _samplers.clear()


def weight_bytes_per_step(policy) -> int:
    """Bytes of weights one decode step reads: every parameter at the dtype the step reads
    it in (the sampler's), except embedding tables, of which a step reads one row per sequence."""
    sampler = sampler_for(policy)
    embeddings = {id(m.weight) for m in sampler.modules() if isinstance(m, torch.nn.Embedding)}
    return sum(p.numel() * p.element_size() for p in sampler.parameters() if id(p) not in embeddings)


# ------------------------------------------------------------------ static: compile options


def static_compile(policy, compile=None) -> dict:
    """generate's compile options: CUDA graphs on CUDA; `compile=True` on a CPU compiles
    without them (for tests), `compile=False` runs the static cache eagerly."""
    from transformers import CompileConfig
    on_cuda = policy.device.type == "cuda"
    if compile is False or (compile is None and not on_cuda):
        return dict(disable_compile=True)
    config = CompileConfig(mode="reduce-overhead" if on_cuda else "default")    # transformers' default on CUDA
    config._compile_all_devices = True                              # let generate compile on a CPU too
    return dict(compile_config=config)


# ------------------------------------------------------------------ paged: continuous batching


def paged_generate(sampler, encoded, max_new_tokens, pad_id, stop_ids, do_sample=True, return_logprobs=False, **processors):
    """Continuous batching over the unpadded prompts, then laid out as generate's output.
    return_logprobs: also the sampler's log-probs of the sampled tokens (B, T), 0 after the end."""
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig
    ids, mask = encoded["input_ids"], encoded["attention_mask"].bool()
    prompts = [row[keep].tolist() for row, keep in zip(ids, mask)]
    rows, prompt_width, page = len(prompts), max(map(len, prompts)), 256
    config = ContinuousBatchingConfig(                              # sized for this batch: no preemption
        page_size=page, num_blocks=rows * math.ceil((prompt_width + max_new_tokens) / page) + 1,
        max_batch_tokens=rows * (prompt_width + 1),                 # every prompt prefilled in one forward
        max_requests_per_batch=rows, return_logprobs=return_logprobs,
        seed=int(torch.randint(2**31 - 1, ())))                     # from the caller's seed: a run stays reproducible
    generation = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=do_sample, eos_token_id=list(stop_ids),
                                  pad_token_id=pad_id, **processors)
    with torch.autocast(sampler.device.type, enabled=False):       # the sampler is in one dtype already
        results = list(sampler.generate_batch(prompts, generation_config=generation, continuous_batching_config=config,
                                              max_new_tokens=max_new_tokens).values())
    if len(results) != rows or any(r.error is not None for r in results):
        raise RuntimeError(f"continuous batching failed: {[r.error for r in results if r.error][:1] or 'missing rows'}")
    assert all(r.prompt_ids == p for r, p in zip(results, prompts)), "continuous batching reordered the rows"
    width = max(len(r.generated_tokens) for r in results)
    response = torch.full((rows, width), pad_id, dtype=ids.dtype)
    logprobs = torch.zeros(rows, width)
    for row, r in enumerate(results):
        response[row, :len(r.generated_tokens)] = torch.tensor(r.generated_tokens, dtype=ids.dtype)
        logprobs[row, :len(r.logprobs)] = torch.tensor(r.logprobs)
    sequences = torch.cat([ids, response.to(ids.device)], dim=1)
    return (sequences, logprobs.to(ids.device)) if return_logprobs else sequences
