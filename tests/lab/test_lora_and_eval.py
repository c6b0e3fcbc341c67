"""Benchmark evaluation (--eval-dataset, avg@K) and LoRA adapters (--lora-rank) on a tiny model."""
import json
import sys

import pytest
import torch

import grpo_ba
from grpo_ba_lab import lab_args
from grpo_ba_support import args as grpo_ba_args
from grpo_ba_support import task as grpo_ba_setup
from grpo_ba_lab.plumbing import lm_setup, lora
from grpo_ba_lab.train import main


def parity_verdict(completion, answer):
    """A stand-in verifier: the tiny random model never answers right, so score by the
    parity of the completion's length, which differs between samples of one prompt."""
    return float(len(completion) % 2)


def write_jsonl(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return str(path)


@pytest.fixture
def data(tmp_path):
    return write_jsonl(tmp_path / "train.jsonl", [{"prompt": f"{i}+1", "answer": str(i + 1)} for i in range(20)])


def tiny_run(model_dir, dataset, out, *extra):
    return ["--model", model_dir, "--dataset", dataset, "--aggregator", "balanced", "--group-size", "4",
            "--prompts-per-step", "2", "--max-new-tokens", "8", "--threads", "1",
            "--output-dir", str(out), *extra]


def read_metrics(out):
    return [json.loads(line) for line in open(out / "metrics.jsonl")]


def test_eval_accuracy_is_the_mean_of_every_sample_verdict_per_benchmark(tmp_path, tiny_model_dir, data, monkeypatch):
    math = write_jsonl(tmp_path / "math.jsonl", [{"q": f"{i}+2", "a": str(i + 2)} for i in range(6)])
    aime = write_jsonl(tmp_path / "aime.jsonl", [{"q": f"{i}*3", "a": str(i * 3)} for i in range(5)])
    verdicts, in_eval = [], []                     # verdicts: one list per evaluate() call, in call order
    original_evaluate = grpo_ba.evaluate

    def recording_evaluate(*args, **kwargs):
        verdicts.append([])
        in_eval.append(True)
        try:
            return original_evaluate(*args, **kwargs)
        finally:
            in_eval.pop()

    def recording_verify(completion, answer):
        verdict = parity_verdict(completion, answer)
        if in_eval:
            verdicts[-1].append((answer, verdict))
        return verdict
    monkeypatch.setattr(grpo_ba, "evaluate", recording_evaluate)
    monkeypatch.setattr(grpo_ba, "verify", recording_verify)
    out = tmp_path / "run"
    assert main(tiny_run(tiny_model_dir, data, out, "--steps", "1", "--eval-dataset", math, aime,
                         "--eval-prompt-column", "q", "--eval-answer-column", "a",
                         "--eval-samples", "2", "--eval-temperature", "1.0")) == 0
    metrics, final = read_metrics(out)
    assert [len(v) for v in verdicts] == [12, 10, 12, 10]     # every prompt, K = 2 samples; again after the update
    assert final["final_evaluation"] and set(final) >= {"accuracy_math", "accuracy_aime"}
    per_file = {}
    for name, recorded in zip(("accuracy_math", "accuracy_aime"), verdicts):
        mean = sum(v for _, v in recorded) / len(recorded)
        assert metrics[name] == pytest.approx(mean)
        per_file[name] = mean
    # The case discriminates: samples of one prompt disagree, so avg@2 differs from
    # the first sample's accuracy and from pass@2.
    math_pairs = [(verdicts[0][i][1], verdicts[0][i + 1][1]) for i in range(0, 12, 2)]
    assert all(verdicts[0][i][0] == verdicts[0][i + 1][0] for i in range(0, 12, 2))
    assert any(a != b for a, b in math_pairs)
    assert metrics["accuracy_math"] != pytest.approx(sum(a for a, _ in math_pairs) / 6)
    assert metrics["accuracy_math"] != pytest.approx(sum(max(a, b) for a, b in math_pairs) / 6)
    assert metrics["accuracy"] == pytest.approx((per_file["accuracy_math"] + per_file["accuracy_aime"]) / 2)


def test_greedy_evaluation_is_the_default_and_repeats_exactly(tiny_model_dir, data, monkeypatch):
    args = lab_args.parse_args(["--aggregator", "balanced", "--max-new-tokens", "8"])
    assert (args.eval_samples, args.eval_temperature) == (1, 0.0)
    policy, tokenizer = grpo_ba_setup.load_model(tiny_model_dir), grpo_ba_setup.load_tokenizer(tiny_model_dir)
    rows, _ = lm_setup.load_prompt_dataset(data, "prompt", "answer", heldout=0)
    task = grpo_ba_setup.Task(rows, rows, lambda p: grpo_ba_setup.format_prompt(tokenizer, p), lambda p, rng: "")
    seen, original = [], grpo_ba.rollout
    monkeypatch.setattr(grpo_ba, "rollout", lambda *a, **k: seen.append(original(*a, **k)) or seen[-1])
    for seed in (0, 1):                            # greedy: the sampling seed cannot matter
        torch.manual_seed(seed)
        grpo_ba.evaluate(policy, tokenizer, task, rows[:6], args)
    assert seen[0].completions == seen[1].completions and len(seen[0].completions) == 6


def test_two_benchmarks_with_one_name_are_refused_in_one_line(tmp_path, tiny_model_dir, data, capsys):
    (tmp_path / "a").mkdir()
    one = write_jsonl(tmp_path / "bench.jsonl", [{"prompt": "1+1", "answer": "2"}] * 3)
    two = write_jsonl(tmp_path / "a" / "bench.jsonl", [{"prompt": "1+1", "answer": "2"}] * 3)
    assert main(tiny_run(tiny_model_dir, data, tmp_path / "run", "--steps", "1", "--eval-dataset", one, two)) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "accuracy_bench" in err


def test_a_lora_step_changes_only_adapter_weights_and_the_reference_is_the_base(tmp_path, tiny_model_dir, data, monkeypatch):
    monkeypatch.setattr(grpo_ba, "verify", parity_verdict)          # non-zero advantages
    changed, frozen_moved, references = set(), set(), []
    original_update = grpo_ba.grpo_update

    def watching_update(policy, reference, *args):
        before = {name: p.detach().clone() for name, p in policy.named_parameters()}
        stats = original_update(policy, reference, *args)
        for name, p in policy.named_parameters():
            if not torch.equal(before[name], p.detach()):
                (changed if "lora_" in name else frozen_moved).add(name)
        references.append(reference)
        return stats
    monkeypatch.setattr(grpo_ba, "grpo_update", watching_update)
    out = tmp_path / "lora"
    assert main(tiny_run(tiny_model_dir, data, out, "--steps", "1", "--lora-rank", "4", "--beta", "0.1",
                         "--inner-updates", "2")) == 0
    assert not frozen_moved
    assert any("lora_B" in name for name in changed) and any("lora_A" in name for name in changed)
    (reference,) = references                      # the policy itself with adapters off: no second copy
    assert isinstance(reference, lora.ReferenceWithoutAdapters)
    saved = torch.load(out / "checkpoint.pt", weights_only=True)["model"]
    assert saved and all("lora_" in name for name in saved)          # the checkpoint holds adapters only


def test_the_reference_without_adapters_is_the_base_model(tiny_model_dir):
    args = lab_args.parse_args(["--aggregator", "balanced", "--lora-rank", "4"])
    policy = lora.add_adapters(grpo_ba_setup.load_model(tiny_model_dir), args, "cpu")
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.normal_()                        # adapters that have learnt something
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    base = grpo_ba_setup.load_model(tiny_model_dir)(input_ids=ids).logits
    assert torch.equal(lora.ReferenceWithoutAdapters(policy)(input_ids=ids).logits, base)
    assert not torch.allclose(policy(input_ids=ids).logits, base)


def test_bf16_lora_keeps_float32_adapters_over_a_bf16_frozen_base(tiny_model_dir):
    args = lab_args.parse_args(["--aggregator", "balanced", "--lora-rank", "4", "--dtype", "bfloat16"])
    policy = lora.add_adapters(grpo_ba_setup.load_model(tiny_model_dir), args, "cpu")
    trainable = [p for p in policy.parameters() if p.requires_grad]
    assert trainable and all(p.dtype == torch.float32 for p in trainable)
    assert all(p.dtype == torch.bfloat16 for p in policy.parameters() if not p.requires_grad)
    with grpo_ba.autocast(args, "cpu"):
        policy(input_ids=torch.tensor([[5, 6, 7]])).logits.float().sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in trainable)


def test_resume_after_a_lora_checkpoint_equals_the_uninterrupted_run(tmp_path, tiny_model_dir, data, monkeypatch):
    monkeypatch.setattr(grpo_ba, "verify", parity_verdict)          # learning happens, so a lost state would show
    strip = lambda ms: [{k: v for k, v in m.items() if k != "step_time"} for m in ms]
    lora_flags = ("--lora-rank", "4", "--inner-updates", "2", "--eval-every", "1", "--eval-prompts", "2")
    assert main(tiny_run(tiny_model_dir, data, tmp_path / "full", "--steps", "3", *lora_flags)) == 0
    mid = tmp_path / "mid"
    assert main(tiny_run(tiny_model_dir, data, mid, "--steps", "2", *lora_flags)) == 0
    saved_args = json.loads((mid / "args.json").read_text())
    (mid / "args.json").write_text(json.dumps({**saved_args, "steps": 3}))   # continue to step 3
    assert main(["--resume", str(mid)]) == 0
    full = read_metrics(tmp_path / "full")
    assert strip(read_metrics(mid)) == strip(full)
    assert any(m["grad_norm"] > 0 for m in full)


def test_lora_without_peft_is_one_line_and_exit_code_2(tmp_path, tiny_model_dir, data, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "peft", None)                   # import peft -> ImportError
    assert main(tiny_run(tiny_model_dir, data, tmp_path / "run", "--steps", "1", "--lora-rank", "4")) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "peft" in err and "pip install" in err


def test_the_7b_preset_trains_lora_adapters_and_flags_still_override():
    args = lab_args.parse_args(["--preset", "qwen2.5-math-7b", "--aggregator", "balanced"])
    assert (args.model, args.lora_rank, args.dtype) == ("Qwen/Qwen2.5-Math-7B", 32, "bfloat16")
    assert args.max_new_tokens <= 4096 - 512                          # the model's context, with room for the prompt
    assert lab_args.parse_args(["--preset", "qwen2.5-math-7b", "--lora-rank", "8"]).lora_rank == 8


def test_the_lab_qwen3_preset_samples_with_the_static_engine_the_course_preset_has_no_engine():
    """docs/gpu-rollouts.md: static was the fastest engine measured on an H200 at this shape."""
    assert lab_args.parse_args(["--preset", "qwen3-1.7b"]).rollout_engine == "static"
    assert lab_args.parse_args(["--preset", "qwen3-1.7b", "--rollout-engine", "generate"]).rollout_engine == "generate"
    assert lab_args.parse_args([]).rollout_engine == "generate"          # no preset: the reference
    assert "rollout_engine" not in grpo_ba_args.PRESETS["qwen3-1.7b"]
