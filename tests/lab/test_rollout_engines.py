"""The fast rollout engines (grpo_ba_lab/plumbing/rollout_engines.py) sample what `generate` samples.

On a CPU, with a tiny random Qwen3 whose weights are scaled up (peaked, varied outputs:
some responses end at a stop id, some run to the budget, so stop ids and loss masks are
exercised, in seconds, without the toy's warm-up) and prompts of different lengths
(left padding):
- greedy: every engine returns generate's tokens, exactly, laid out as generate lays them;
- temperature: the update's log-probs (grpo_ba.token_logprobs) equal the sampler's own,
  so the first inner update sees ratio 1 whichever engine sampled;
- the sampler's cast weights are exact (autocast makes the same casts) and follow the policy.
The compiled CUDA-graph path runs in tests/lab/test_gpu.py; here the static engine runs eagerly,
and once compiled without CUDA graphs.
    python -m pytest -q tests/lab/test_rollout_engines.py
"""
import functools

import pytest
import torch

import grpo_ba
from grpo_ba_lab import lab_args
from grpo_ba_lab.plumbing import rollout_engines
from toy_tasks import model as toy_model

from conftest import forced_kernels

FAST = ("static", "paged")
PROMPTS = ["<bos>12+3+4=", "<bos>57+6+3=57", "<bos>9", "<bos>8+8=", "<bos>3+45+6+7=", "<bos>2"]


def peaked_tiny_qwen3(tokenizer, seed=1, scale=8.0):
    """tiny_qwen3 with every weight but the norms' times `scale`: greedy and sampled
    responses of lengths 1 to the budget with this seed and these stop ids (checked below)."""
    policy = toy_model.tiny_qwen3(tokenizer, seed=seed).eval()
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "norm" not in name:
                p.mul_(scale)
    return policy


@pytest.fixture(scope="module")
def toy():
    torch.set_num_threads(1)
    tokenizer = toy_model.char_tokenizer()
    return peaked_tiny_qwen3(tokenizer), tokenizer


def encode(tokenizer, prompts=PROMPTS):
    return tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)


def stops(tokenizer):
    return [tokenizer.eos_token_id, *tokenizer.convert_tokens_to_ids(["=", "~"])]    # several, as a chat model has


def run(policy, tokenizer, engine, encoded, seed=0, max_new_tokens=24, **sampling):
    torch.manual_seed(seed)
    with torch.no_grad():
        return rollout_engines.sample(policy, encoded, max_new_tokens, tokenizer.pad_token_id, stops(tokenizer),
                                      engine, **(sampling or dict(do_sample=False)))


def test_the_greedy_reference_ends_early_under_left_padding(toy):
    """The claims below are only as good as the batch: rows of different prompt lengths,
    some ending at a stop id before the budget (then PAD), as in training."""
    policy, tokenizer = toy
    encoded = encode(tokenizer)
    out = run(policy, tokenizer, "generate", encoded)
    response = out[:, encoded["input_ids"].shape[1]:]
    mask, truncated = grpo_ba.response_mask_from_eos(response, stops(tokenizer))
    assert (encoded["attention_mask"][:, 0] == 0).any()                          # left padding
    assert (~truncated).any() and truncated.any()                                # some ended early, some did not
    assert len(set(mask.sum(1).tolist())) > 2                                    # at different lengths
    assert (response[mask == 0] == tokenizer.pad_token_id).all()                 # PAD after the end


@pytest.mark.parametrize("engine", FAST)
def test_greedy_tokens_equal_generates(toy, engine):
    policy, tokenizer = toy
    encoded = encode(tokenizer)
    reference = run(policy, tokenizer, "generate", encoded)
    out = run(policy, tokenizer, engine, encoded)
    assert out.shape == reference.shape and torch.equal(out, reference)


@forced_kernels
def test_compiled_static_engine_gives_generates_greedy_tokens(toy):
    """torch.compile of the decode step (on a CPU: inductor without CUDA graphs, ~30 s)."""
    policy, tokenizer = toy
    encoded = encode(tokenizer)
    reference = run(policy, tokenizer, "generate", encoded)
    torch.manual_seed(0)
    with torch.no_grad():
        out = rollout_engines.sample(policy, encoded, 24, tokenizer.pad_token_id, stops(tokenizer), "static",
                                     compile=True, do_sample=False)
    assert torch.equal(out, reference)


def sampled_with_logprobs(policy, tokenizer, engine, encoded, temperature):
    """(sequences, the sampler's log-probs of its own tokens at `temperature`)."""
    sampling = dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0)
    torch.manual_seed(1)
    with torch.no_grad():
        if engine == "paged":
            return rollout_engines.sample(policy, encoded, 24, tokenizer.pad_token_id, stops(tokenizer), engine,
                                          return_logprobs=True, **sampling)
        out = rollout_engines.sample(policy, encoded, 24, tokenizer.pad_token_id, stops(tokenizer), engine,
                                     output_logits=True, return_dict_in_generate=True, **sampling)
    response = out.sequences[:, encoded["input_ids"].shape[1]:]
    logp = torch.stack(out.logits, 1).float().div(temperature).log_softmax(-1)
    return out.sequences, logp.gather(-1, response[..., None]).squeeze(-1)


@pytest.mark.parametrize("engine", ("generate", *FAST))
def test_training_logprobs_equal_the_samplers_under_temperature(toy, engine):
    """Ratio 1 on the first inner update: token_logprobs, with positions from the attention
    mask as in grpo_update, scores each sampled token as the engine's sampler did."""
    policy, tokenizer = toy
    encoded = encode(tokenizer)
    sequences, sampled = sampled_with_logprobs(policy, tokenizer, engine, encoded, temperature=0.7)
    response = sequences[:, encoded["input_ids"].shape[1]:]
    mask, truncated = grpo_ba.response_mask_from_eos(response, stops(tokenizer))
    assert (~truncated).any(), "no row ended: the stop ids were not exercised"
    attention = torch.cat([encoded["attention_mask"], mask], 1)
    with torch.no_grad():
        logp, _ = grpo_ba.token_logprobs(policy, sequences, attention, response.shape[1], temperature=0.7)
    keep = mask.bool()
    assert torch.allclose(logp[keep], sampled[keep], atol=1e-4), (logp[keep] - sampled[keep]).abs().max()


def test_the_sampler_shares_the_policy_and_casts_exactly_what_autocast_casts(toy):
    """Under bf16 autocast the sampler's Linear weights are bf16 copies and everything else
    is the policy's own tensor; generate on either gives the same logits, bit for bit."""
    policy, tokenizer = toy
    encoded = encode(tokenizer)
    n_params = sum(p.numel() for p in policy.parameters())
    kw = dict(max_new_tokens=12, pad_token_id=tokenizer.pad_token_id, eos_token_id=stops(tokenizer), do_sample=False,
              output_logits=True, return_dict_in_generate=True)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        sampler = rollout_engines.sampler_for(policy)
        reference, out = policy.generate(**encoded, **kw), sampler.generate(**encoded, **kw)
    assert torch.equal(out.sequences, reference.sequences)
    assert all(torch.equal(a, b) for a, b in zip(out.logits, reference.logits))
    assert sum(p.numel() for p in policy.parameters()) == n_params             # not registered on the policy
    assert all(p.dtype == torch.float32 for p in policy.parameters())            # the policy keeps float32
    assert sampler.lm_head.weight.dtype == torch.bfloat16
    assert sampler.model.embed_tokens.weight is policy.model.embed_tokens.weight
    assert sampler.model.norm.weight is policy.model.norm.weight
    with torch.no_grad():                                                        # float32: nothing is cast
        assert rollout_engines.sampler_for(policy).lm_head.weight is policy.lm_head.weight


def test_the_sampler_follows_the_policys_updates(toy):
    policy, tokenizer = toy
    policy = peaked_tiny_qwen3(tokenizer, seed=3)                                # a policy of its own, to change
    encoded = encode(tokenizer)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        rollout_engines.sampler_for(policy)                                      # built, then the policy moves
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        reference = run(policy, tokenizer, "generate", encoded, max_new_tokens=8)
        out = run(policy, tokenizer, "static", encoded, max_new_tokens=8)
    assert torch.equal(out, reference)
    assert rollout_engines.weight_bytes_per_step(policy) < sum(p.numel() * 4 for p in policy.parameters())


def test_the_paged_engine_samples_under_bf16_autocast_from_a_bf16_sampler(toy):
    """Continuous batching keeps keys and values in one dtype: under autocast it samples
    from a sampler wholly in bf16 (close to the autocast policy, not bit-identical)."""
    policy, tokenizer = toy
    encoded = encode(tokenizer)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = run(policy, tokenizer, "paged", encoded, do_sample=True, temperature=1.0, top_k=0, top_p=1.0)
        sampler = rollout_engines.sampler_for(policy, whole=True)
    assert out.shape[0] == len(PROMPTS) and torch.equal(out[:, :encoded["input_ids"].shape[1]], encoded["input_ids"])
    assert all(p.dtype == torch.bfloat16 for p in sampler.parameters())
    assert sampler.lm_head.weight is sampler.model.embed_tokens.weight           # tied weights stay tied


def test_an_unknown_engine_is_refused(toy):
    policy, tokenizer = toy
    with pytest.raises(ValueError, match="unknown rollout engine"):
        run(policy, tokenizer, "vllm", encode(tokenizer))


@pytest.mark.parametrize("engine", FAST)
def test_rollout_with_the_flag_gives_generates_batch(toy, engine):
    """grpo_ba.rollout with --rollout-engine: the same sequences, masks and completions."""
    policy, tokenizer = toy
    prompts = [p.removeprefix("<bos>") for p in PROMPTS]
    args = lab_args.parse_args(["--max-new-tokens", "24"])
    samplers = (grpo_ba.generate, functools.partial(rollout_engines.sample, engine=engine))   # as the lab passes it
    batches = [grpo_ba.rollout(policy, tokenizer, prompts, ["<bos>"] * len(prompts), args, temperature=0, sample=sample)
               for sample in samplers]
    reference, batch = batches
    assert torch.equal(batch.sequences, reference.sequences) and torch.equal(batch.attention, reference.attention)
    assert torch.equal(batch.response_mask, reference.response_mask) and batch.completions == reference.completions


def test_lora_adapters_sample_as_generate_under_bf16_autocast(toy):
    """LoRA (peft) over a frozen bf16 base, as the 7B preset: the sampler shares the base
    and casts only the float32 adapters; the static engine gives generate's greedy tokens."""
    pytest.importorskip("peft")
    from grpo_ba_lab.plumbing import lora
    _, tokenizer = toy
    args = lab_args.parse_args(["--lora-rank", "4", "--dtype", "bfloat16"])
    policy = lora.add_adapters(peaked_tiny_qwen3(tokenizer, seed=1), args, "cpu").eval()
    with torch.no_grad():                                                        # B = 0 at start: give the adapters a say
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    encoded = encode(tokenizer)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        reference = run(policy, tokenizer, "generate", encoded)
        out = run(policy, tokenizer, "static", encoded)
        sampler = rollout_engines.sampler_for(policy)
    assert torch.equal(out, reference)
    frozen = [p for p in policy.parameters() if not p.requires_grad]
    assert frozen and all(p.dtype == torch.bfloat16 for p in frozen)
    assert {id(p) for p in frozen} <= {id(p) for p in sampler.parameters()}    # the base is shared, not copied
