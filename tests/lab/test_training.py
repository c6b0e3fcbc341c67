"""End-to-end GRPO on the toy at tiny sizes: runs, determinism, resume, bad input."""
import json
import os
import subprocess
import sys

import pytest
import torch

import grpo_ba
from toy_tasks import designs
from grpo_ba import grpo_update, response_mask_from_eos
from grpo_ba_lab.lab_args import LabArgs
from grpo_ba_lab.lab_args import parse_args
from grpo_ba_lab.train import main, train

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tiny_args(out, cache_dir, **overrides):
    base = dict(aggregator="balanced", steps=2, group_size=4, prompts_per_step=4, max_new_tokens=28,
                eval_every=1, eval_prompts=8, warmup_steps=300, output_dir=str(out), cache_dir=cache_dir,
                threads=1)
    base.update(overrides)
    return LabArgs(**base)


def read_metrics(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


REQUIRED = {"step", "reward_mean", "len_mean", "len_std", "len_pos", "len_neg", "pg_loss", "pos_share",
            "clip_frac", "entropy", "grad_norm", "kl", "accuracy", "skipped_updates"}


@pytest.mark.parametrize("rule", ["token", "sequence", "balanced"])
def test_two_step_run_writes_args_and_metrics_for_each_rule(rule, tmp_path, cache_dir):
    out = train(tiny_args(tmp_path / rule, cache_dir, aggregator=rule), log=lambda *a: None)
    *metrics, final = read_metrics(out)
    assert [m["step"] for m in metrics] == [0, 1]                # then the policy after the last update:
    assert (final["step"], final["final_evaluation"], set(final)) == (2, True, {"step", "final_evaluation", "accuracy"})
    assert REQUIRED <= set(metrics[0])
    assert json.load(open(os.path.join(out, "args.json")))["aggregator"] == rule
    assert all(m["skipped_updates"] == 0 for m in metrics)
    assert any(m["pos_share"] is not None for m in metrics)
    assert all(m["pos_share"] == m[f"pos_share_{rule}"] for m in metrics)


def test_same_seed_gives_identical_metrics_and_a_different_seed_does_not(tmp_path, cache_dir):
    strip = lambda ms: [{k: v for k, v in m.items() if k != "step_time"} for m in ms]
    a = strip(read_metrics(train(tiny_args(tmp_path / "a", cache_dir, seed=3), log=lambda *a: None)))
    b = strip(read_metrics(train(tiny_args(tmp_path / "b", cache_dir, seed=3), log=lambda *a: None)))
    c = strip(read_metrics(train(tiny_args(tmp_path / "c", cache_dir, seed=4), log=lambda *a: None)))
    assert a == b
    assert a != c


def test_resume_reproduces_the_uninterrupted_run(tmp_path, cache_dir):
    strip = lambda ms: [{k: v for k, v in m.items() if k != "step_time"} for m in ms]
    full = read_metrics(train(tiny_args(tmp_path / "full", cache_dir, steps=4), log=lambda *a: None))
    # A run that "died" after step 1: its checkpoint (step 1) plus a half-finished step 2 line.
    mid = tmp_path / "mid"
    train(tiny_args(mid, cache_dir, steps=2), log=lambda *a: None)
    assert torch.load(mid / "checkpoint.pt", weights_only=False)["step"] == 1
    args_json = json.load(open(mid / "args.json"))
    args_json["steps"] = 4
    json.dump(args_json, open(mid / "args.json", "w"))
    with open(mid / "metrics.jsonl", "a") as f:
        f.write(json.dumps({**full[2], "reward_mean": -1.0}) + "\n")
    assert main(["--resume", str(mid)]) == 0
    assert strip(read_metrics(mid)) == strip(full)


def test_sigint_saves_a_checkpoint_and_leaves_valid_jsonl(tmp_path, cache_dir):
    out = tmp_path / "interrupted"
    code = (f"import os, signal, sys; sys.path.insert(0, {REPO!r}); import grpo_ba\n"
            f"from grpo_ba_lab import train as lab_train\n"
            f"orig = grpo_ba.step_diagnostics\n"
            f"def hook(*a, **k):\n    os.kill(os.getpid(), signal.SIGINT)\n    return orig(*a, **k)\n"
            f"grpo_ba.step_diagnostics = hook\n"
            f"sys.exit(lab_train.main(['--aggregator', 'token', '--steps', '5', '--group-size', '4', '--prompts-per-step', '2',"
            f" '--max-new-tokens', '28', '--eval-prompts', '8', '--warmup-steps', '300', '--threads', '1',"
            f" '--cache-dir', {cache_dir!r},"
            f" '--output-dir', {str(out)!r}]))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 130, result.stderr
    metrics = read_metrics(out)                                   # every line parses
    assert [m["step"] for m in metrics] == [0]
    assert torch.load(out / "checkpoint.pt", weights_only=False)["step"] == 0


def test_mask_covers_a_sampled_pad_and_stops_after_the_first_eos():
    eos, pad = 2, 0
    response = torch.tensor([[5, pad, 6, eos, pad, pad], [5, 6, 7, 8, 9, 9], [eos, pad, pad, pad, pad, pad]])
    mask, truncated = response_mask_from_eos(response, eos)
    assert mask.tolist() == [[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1], [1, 0, 0, 0, 0, 0]]
    assert truncated.tolist() == [False, True, False]


@pytest.mark.parametrize("case", ["all_right", "all_wrong", "empty", "all_truncated"])
@pytest.mark.parametrize("rule", ["token", "sequence", "balanced"])
def test_degenerate_batches_give_finite_updates(case, rule, tmp_path, cache_dir):
    from grpo_ba_lab.plumbing import lm_setup
    from toy_tasks import ToyWorld
    policy, tokenizer, _ = lm_setup.load_or_warmup_toy(cache_dir, ToyWorld("gap"), 300, 0, log=lambda *a: None)
    args = tiny_args(tmp_path, cache_dir, aggregator=rule)
    prompt = tokenizer(["<bos>12+3+4="] * 8, return_tensors="pt", add_special_tokens=False)
    T = args.max_new_tokens
    response = torch.full((8, T), tokenizer.convert_tokens_to_ids("~"))
    if case == "empty":
        response[:, 0] = tokenizer.eos_token_id
    if case in ("all_right", "all_wrong"):
        response[:, 5] = tokenizer.eos_token_id
    mask, truncated = response_mask_from_eos(response, tokenizer.eos_token_id)
    batch = grpo_ba.Rollout(torch.cat([prompt["input_ids"], response], 1), torch.cat([prompt["attention_mask"], mask], 1),
                            mask, [""] * 8, truncated)
    rewards = torch.tensor([1.0] * 8 if case == "all_right" else [0.0] * 8 if case != "empty" else [1.0, 0] * 4)
    before = [p.detach().clone() for p in policy.parameters()]
    stats = grpo_update(policy, None, torch.optim.AdamW(policy.parameters(), lr=1e-3, weight_decay=0.0), batch, rewards, args)
    assert all(v == v and abs(v) != float("inf") for v in stats.values())
    assert stats["skipped_updates"] == 0
    assert all(torch.isfinite(p).all() for p in policy.parameters())
    if case in ("all_right", "all_wrong"):                        # A = 0: nothing moves
        assert all(torch.equal(a, b) for a, b in zip(before, policy.parameters()))


def test_non_finite_gradients_skip_the_update_and_are_logged(tmp_path, cache_dir, monkeypatch):
    from grpo_ba_lab.plumbing import lm_setup
    from toy_tasks import ToyWorld
    policy, tokenizer, _ = lm_setup.load_or_warmup_toy(cache_dir, ToyWorld("gap"), 300, 0, log=lambda *a: None)
    args = tiny_args(tmp_path, cache_dir)
    prompt = tokenizer(["<bos>12+3+4="] * 4, return_tensors="pt", add_special_tokens=False)
    response = torch.tensor([[10, 11, 2] + [0] * 3] * 4)
    mask, truncated = response_mask_from_eos(response, 2)
    batch = grpo_ba.Rollout(torch.cat([prompt["input_ids"], response], 1), torch.cat([prompt["attention_mask"], mask], 1),
                            mask, [""] * 4, truncated)
    real = grpo_ba.clipped_token_loss
    monkeypatch.setattr(grpo_ba, "clipped_token_loss", lambda *a, **k: real(*a, **k) * float("nan"))
    before = [p.detach().clone() for p in policy.parameters()]
    stats = grpo_update(policy, None, torch.optim.AdamW(policy.parameters(), lr=1e-3, weight_decay=0.0), batch, torch.tensor([1.0, 0, 1, 0]), args)
    assert stats["skipped_updates"] == args.inner_updates
    assert all(torch.equal(a, b) for a, b in zip(before, policy.parameters()))


BAD_INPUTS = [
    (["--aggregator", "mean"], "invalid choice"),
    (["--aggregator", "token", "--group-size", "1"], "group-size"),
    (["--aggregator", "token", "--micro-batch-size", "7"], "does not divide"),
    (["--aggregator", "token", "--model", "/no/such/model", "--dataset", "x.jsonl"], "does not exist"),
    (["--aggregator", "token", "--model", "{tiny}", "--dataset", "/no/such.jsonl"], "does not exist"),
    (["--aggregator", "token", "--model", "{tiny}", "--dataset", "{data}", "--answer-column", "gold"], "no column"),
    (["--aggregator", "token", "--output-dir", "/proc/forbidden"], "cannot write"),
    (["--resume", "/no/such/run"], "No such file"),
]


@pytest.fixture(scope="module")
def bad_input_results(tmp_path_factory, tiny_model_dir):
    """`python -m grpo_ba_lab.train ARGV` for each of BAD_INPUTS, one after the other in one new
    interpreter (tests/commands_in_one_process.py), from a folder holding data.jsonl."""
    from commands_in_one_process import run_each
    folder = tmp_path_factory.mktemp("bad_input")
    (folder / "data.jsonl").write_text('{"prompt": "1+1", "answer": "2"}\n{"prompt": "2+2", "answer": "4"}\n'
                                       '{"prompt": "3+3", "answer": "6"}\n')
    argvs = [[a.replace("{tiny}", tiny_model_dir).replace("{data}", str(folder / "data.jsonl")) for a in argv]
             for argv, _ in BAD_INPUTS]
    return run_each("-m grpo_ba_lab.train", argvs, cwd=folder, env={**os.environ, "PYTHONPATH": REPO}, timeout=600)


@pytest.mark.parametrize("case", range(len(BAD_INPUTS)), ids=[m for _, m in BAD_INPUTS])
def test_bad_input_gives_one_line_error_and_exit_code_2(case, bad_input_results):
    message, result = BAD_INPUTS[case][1], bad_input_results[case]
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("python -m grpo_ba_lab.train: error:") and message in lines[0], result.stderr


def test_preset_sets_defaults_that_flags_override():
    args = parse_args(["--preset", "qwen3-1.7b", "--aggregator", "balanced", "--lr", "2e-6"])
    assert args.dtype == "bfloat16" and args.gradient_checkpointing and args.lr == 2e-6


def test_training_logprobs_match_the_sampling_distribution_under_left_padding(cache_dir):
    """The update must score a response with the distribution that sampled it: same
    positions under left padding, same temperature. A mismatch here fakes off-policy ratios."""
    from grpo_ba_lab.plumbing import lm_setup
    from toy_tasks import ToyWorld
    policy, tokenizer, _ = lm_setup.load_or_warmup_toy(cache_dir, ToyWorld("gap"), 300, 0, log=lambda *a: None)
    prompts = ["<bos>12+3+4=", "<bos>57+6+3=57", "<bos>9"]                      # different lengths: left padding
    encoded = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    torch.manual_seed(0)
    out = policy.generate(**encoded, do_sample=True, temperature=0.7, top_k=0, top_p=1.0, max_new_tokens=12,
                          pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                          output_logits=True, return_dict_in_generate=True)
    response = out.sequences[:, encoded["input_ids"].shape[1]:]
    mask, _ = response_mask_from_eos(response, tokenizer.eos_token_id)
    sampled = torch.stack(out.logits, 1).float().div(0.7).log_softmax(-1).gather(-1, response[..., None]).squeeze(-1)
    attention = torch.cat([encoded["attention_mask"], mask], 1)
    with torch.no_grad():
        logp, _ = grpo_ba.token_logprobs(policy, out.sequences, attention, response.shape[1], temperature=0.7)
    assert torch.allclose(logp[mask.bool()], sampled[mask.bool()], atol=1e-4)


TINY_FLAGS = ["--steps", "1", "--group-size", "4", "--prompts-per-step", "2", "--max-new-tokens", "28",
              "--eval-prompts", "4", "--warmup-steps", "300", "--threads", "1"]


def test_demo_runs_three_rules_from_the_same_weights_and_draws_the_report(tmp_path, cache_dir, capsys):
    # the demo's own toy and warm-up length: it starts from the shipped warm-up, nothing is trained first
    assert main(TINY_FLAGS + ["--warmup-steps", "1000", "--cache-dir", cache_dir, "--output-dir", str(tmp_path)]) == 0
    saved = json.loads((tmp_path / "balanced" / "args.json").read_text())
    assert (saved["design"], saved["eval_every"], designs.dense_eval(saved["design"])) == ("demo", 10, (0, 1))
    assert (tmp_path / "mechanism.png").exists() and (tmp_path / "bias_curves.png").exists()
    assert "python -m grpo_ba_lab.analysis.sweep --design strong-band" in capsys.readouterr().out   # demo's paired design
    firsts = {rule: read_metrics(tmp_path / rule)[0] for rule in ("token", "sequence", "balanced")}
    assert all(m["accuracy"] is not None for m in firsts.values())
    assert len({m["accuracy"] for m in firsts.values()}) == 1 and len({m["reward_mean"] for m in firsts.values()}) == 1


def test_sweep_covers_both_regimes_and_skips_finished_runs(tmp_path, cache_dir):
    from grpo_ba_lab.analysis import sweep
    # 20 warm-up steps: which runs a sweep trains, skips and tabulates does not depend on the
    # warm-up, and the variance toy's warm-up is this test's alone (300 steps: about 16 CPU s)
    argv = TINY_FLAGS + ["--warmup-steps", "20", "--seeds", "1", "--cache-dir", cache_dir, "--output-dir", str(tmp_path)]
    assert sweep.main(argv) == 0
    runs = sorted(p.name for p in tmp_path.iterdir() if p.is_dir())
    assert runs == sorted(f"{reg}-{rule}-s0" for reg in ("gap", "variance") for rule in ("token", "sequence", "balanced"))
    stamp = (tmp_path / "gap-token-s0" / "metrics.jsonl").stat().st_mtime_ns
    assert sweep.main(argv) == 0                                 # second call: nothing retrained
    assert (tmp_path / "gap-token-s0" / "metrics.jsonl").stat().st_mtime_ns == stamp
    assert "| variance | balanced | 1 |" in (tmp_path / "table.md").read_text()
    paired = (tmp_path / "paired_differences.md").read_text()       # one seed: differences, no intervals
    assert "1 seeds" in paired and "| variance | balanced - token |" in paired and "no interval" in paired
