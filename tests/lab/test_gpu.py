"""The GPU path, end to end through grpo_ba.main: skipped on a machine without CUDA.

    python -m pytest -q tests/lab/test_gpu.py          # on a GPU machine (scripts/gpu_check.sh times a 1.7B step)
"""
import json

import pytest
import torch

import grpo_ba
from grpo_ba_lab.train import main

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def parity_verdict(completion, answer):
    """The tiny random model never answers right: score by the parity of the completion's
    characters (its length alone is often the same for all: on a GPU most samples hit
    --max-new-tokens), so both verdicts occur in a group of 8."""
    return float(sum(map(ord, completion)) % 2)


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join(json.dumps({"prompt": f"{i}+1", "answer": str(i + 1)}) for i in range(20)))
    return str(path)


def run_argv(model_dir, data, out, *extra):
    return ["--model", model_dir, "--dataset", data, "--aggregator", "balanced", "--group-size", "8",
            "--prompts-per-step", "2", "--max-new-tokens", "8", "--eval-prompts", "4", "--device", "cuda",
            "--dtype", "bfloat16", "--gradient-checkpointing", "--micro-batch-size", "4",
            "--output-dir", str(out), *extra]


def metrics_of(out):
    return [json.loads(line) for line in open(out / "metrics.jsonl")]


def test_bf16_training_on_cuda_learns_and_resumes(tmp_path, tiny_model_dir, data, monkeypatch):
    monkeypatch.setattr(grpo_ba, "verify", parity_verdict)          # non-zero advantages
    out = tmp_path / "run"
    assert main(run_argv(tiny_model_dir, data, out, "--steps", "2", "--beta", "0.1")) == 0
    assert main(["--resume", str(out), "--steps", "3"]) == 0
    metrics = metrics_of(out)
    assert [m["step"] for m in metrics] == [0, 1, 2]
    assert all(m["skipped_updates"] == 0 and m["grad_norm"] > 0 for m in metrics)
    assert all(m["pg_loss"] == m["pg_loss"] and m["kl"] == m["kl"] for m in metrics)    # finite, not NaN


def test_lora_with_checkpointing_on_cuda_gives_the_adapters_a_gradient(tmp_path, tiny_model_dir, data, monkeypatch):
    monkeypatch.setattr(grpo_ba, "verify", parity_verdict)
    out = tmp_path / "lora"
    assert main(run_argv(tiny_model_dir, data, out, "--steps", "2", "--lora-rank", "4")) == 0
    assert all(m["grad_norm"] > 0 and m["skipped_updates"] == 0 for m in metrics_of(out))
    saved = torch.load(out / "checkpoint.pt", weights_only=True)["model"]
    assert saved and all("lora_" in name for name in saved)


def test_the_toy_trains_on_cuda(tmp_path, cache_dir):
    out = tmp_path / "toy"
    assert main(["--aggregator", "token", "--steps", "2", "--group-size", "4", "--prompts-per-step", "4",
                 "--eval-every", "1", "--eval-prompts", "8", "--warmup-steps", "100", "--device", "cuda",
                 "--cache-dir", cache_dir, "--output-dir", str(out)]) == 0
    metrics = metrics_of(out)
    assert len(metrics) == 2 and all(0 <= m["accuracy"] <= 1 for m in metrics)


@pytest.mark.parametrize("engine", ["static", "paged"])
def test_one_step_with_each_fast_rollout_engine_on_cuda(tmp_path, tiny_model_dir, data, monkeypatch, engine):
    """The fast engines on CUDA (static: compiled into CUDA graphs), bf16 autocast, one step
    through main(); their greedy tokens equal generate's is tested on a CPU (test_rollout_engines.py)."""
    monkeypatch.setattr(grpo_ba, "verify", parity_verdict)
    out = tmp_path / engine
    assert main(run_argv(tiny_model_dir, data, out, "--steps", "1", "--rollout-engine", engine)) == 0
    metrics = metrics_of(out)
    assert len(metrics) == 1 and metrics[0]["skipped_updates"] == 0 and metrics[0]["grad_norm"] > 0
