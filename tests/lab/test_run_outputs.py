"""What a run leaves for the tools people already use (issue 32): RUN_DIR/model in Hugging
Face format, --report-to tensorboard, --completions, --config RUN/args.json, provenance in
run.json, the summary line; and bad input that fails before anything is written."""
import dataclasses
import json
import os
import subprocess
import sys

import pytest
import torch

import grpo_ba
from grpo_ba_lab import lab_args
from grpo_ba_lab.analysis import diagnose
from grpo_ba import token_logprobs
from grpo_ba_lab.lab_args import LabArgs
from grpo_ba_lab.lab_args import parse_args
from grpo_ba_lab.train import main, train
from grpo_ba_lab.plumbing import lm_setup, report_to
from toy_tasks import model as toy_model
from grpo_ba_support import task as grpo_ba_setup
from grpo_ba_support import run as grpo_ba_run
from grpo_ba_lab.plumbing.training_run import Export

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def exported_policies(monkeypatch):
    """The policy objects the Export logger saves, captured as the trainer held them."""
    seen = []
    original = Export.finish

    def recording(self, run, policy, tokenizer):
        seen.append(policy)
        return original(self, run, policy, tokenizer)
    monkeypatch.setattr(Export, "finish", recording)
    return seen


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory, cache_dir):
    """One tiny toy run with --report-to tensorboard and --completions: (run dir, policy, log)."""
    out = str(tmp_path_factory.mktemp("toy") / "run")
    args = parse_args(["--aggregator", "balanced", "--steps", "2", "--group-size", "4", "--prompts-per-step", "4",
                       "--max-new-tokens", "28", "--eval-every", "1", "--eval-prompts", "8", "--warmup-steps", "300",
                       "--output-dir", out, "--cache-dir", cache_dir, "--threads", "1",
                       "--report-to", "tensorboard", "--completions"])      # as grpo_ba.main parses it
    lines = []
    with pytest.MonkeyPatch.context() as monkeypatch:
        policies = exported_policies(monkeypatch)
        train(args, log=lines.append)
    assert len(policies) == 1
    return out, policies[0], lines


def logprobs(model, tokenizer, texts=("12+7=19", "3*4=12~~~", "8-5=")):
    tokenizer.padding_side = "left"
    batch = tokenizer(list(texts), return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():
        return token_logprobs(model, batch["input_ids"], batch["attention_mask"], 4)[0]


def test_a_toy_runs_model_dir_reloads_with_transformers_and_gives_the_trainers_logprobs(toy_run):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    out, policy, _ = toy_run
    model_dir = os.path.join(out, "model")
    assert {"config.json", "model.safetensors", "README.md"} <= set(os.listdir(model_dir))
    reloaded = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    theirs, ours = logprobs(reloaded, tokenizer), logprobs(policy.eval(), tokenizer)
    torch.testing.assert_close(theirs, ours, rtol=0, atol=0)
    final = grpo_ba_run.read_metrics(os.path.join(out, "metrics.jsonl"))[-1]
    card = open(os.path.join(model_dir, "README.md")).read()
    assert final["final_evaluation"] and f"{final['accuracy']:.4g}" in card and "balanced" in card
    assert "python -m grpo_ba_lab.train --config ../args.json" in card   # run from model/, trains it again
    size = sum(os.path.getsize(os.path.join(model_dir, f)) for f in os.listdir(model_dir))
    assert size < 5_000_000                                         # the toy's export stays small


def test_a_lora_runs_model_dir_is_an_adapter_peft_reloads_with_the_trainers_logprobs(tmp_path, tiny_model_dir,
                                                                                       monkeypatch):
    peft = pytest.importorskip("peft", reason="LoRA is optional: pip install -r requirements/trl.txt")
    from transformers import AutoModelForCausalLM
    data = tmp_path / "train.jsonl"
    data.write_text("\n".join(json.dumps({"prompt": f"{i}+1", "answer": str(i + 1)}) for i in range(20)))
    out = tmp_path / "lora"
    policies = exported_policies(monkeypatch)
    monkeypatch.setattr(grpo_ba, "verify", lambda completion, answer: float(len(completion) % 2))   # mixed rewards
    assert main(["--model", tiny_model_dir, "--dataset", str(data), "--aggregator", "balanced",
                 "--group-size", "4", "--prompts-per-step", "2", "--max-new-tokens", "8", "--threads", "1",
                 "--steps", "1", "--lr", "1e-2", "--lora-rank", "4", "--eval-prompts", "2",
                 "--output-dir", str(out)]) == 0
    files = set(os.listdir(out / "model"))
    assert {"adapter_config.json", "adapter_model.safetensors"} <= files and "model.safetensors" not in files
    tokenizer = grpo_ba_setup.load_tokenizer(str(out / "model"))
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    untrained = logprobs(base, tokenizer)
    reloaded = peft.PeftModel.from_pretrained(base, str(out / "model"))
    torch.testing.assert_close(logprobs(reloaded, tokenizer), logprobs(policies[0].eval(), tokenizer),
                               rtol=0, atol=0)
    assert not torch.allclose(logprobs(reloaded, tokenizer), untrained)   # the adapters were trained


def test_tensorboard_holds_the_numbers_of_metrics_jsonl_final_evaluation_included(toy_run):
    pytest.importorskip("tensorboard", reason="pip install tensorboard (requirements/dev.txt)")
    from test_report_to import event_scalars
    out, _, _ = toy_run
    logged = event_scalars(os.path.join(out, "tensorboard"))
    expected = {}
    for record in grpo_ba_run.read_metrics(os.path.join(out, "metrics.jsonl")):
        for key, value in report_to.scalars(record).items():
            expected.setdefault(key, {})[record["step"]] = value
    assert sorted(expected["accuracy"]) == [0, 1, 2]                # step 2: the final evaluation
    assert logged.keys() == expected.keys()
    for key, by_step in expected.items():
        assert logged[key] == pytest.approx(by_step, rel=1e-6), key


def test_completions_jsonl_of_a_run_round_trips_through_the_step_by_step_diagnosis(toy_run):
    out, _, _ = toy_run
    path = os.path.join(out, "completions.jsonl")
    rows = [json.loads(line) for line in open(path)]
    assert len(rows) == 2 * 4 * 4 and {r["step"] for r in rows} == {0, 1}
    assert set(rows[0]) == {"prompt", "completion", "reward", "length", "group", "step"}
    metrics = grpo_ba_run.read_metrics(os.path.join(out, "metrics.jsonl"))
    steps = diagnose.diagnose_steps(path)
    assert [s["step"] for s in steps] == [0, 1]
    for s, m in zip(steps, metrics):                     # the diagnosis sees what the trainer saw
        for rule in ("token", "sequence", "balanced"):
            if m[f"pos_share_{rule}"] is None:
                continue
            assert s[f"pos_share_{rule}"] == pytest.approx(m[f"pos_share_{rule}"], abs=1e-6), rule
        for key in ("len_pos", "len_neg"):
            assert s[key] == pytest.approx(m[key]) if m[key] is not None else True
    done = subprocess.run([sys.executable, "-m", "grpo_ba_lab.analysis.diagnose", path], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "step by step" in done.stdout


def test_a_resumed_run_keeps_the_completions_of_the_steps_before_its_checkpoint(tmp_path, cache_dir):
    base = dict(aggregator="balanced", group_size=4, prompts_per_step=4, max_new_tokens=28, eval_every=1,
                eval_prompts=4, warmup_steps=300, cache_dir=cache_dir, threads=1, completions=True)
    out = str(tmp_path / "run")
    train(LabArgs(steps=2, output_dir=out, **base), log=lambda *a: None)
    path = os.path.join(out, "completions.jsonl")
    with open(path, "a") as f:                        # as if step 2 had been written when a kill came
        f.write(json.dumps({"prompt": "x", "completion": "y", "reward": 0.0, "length": 1,
                            "group": "step2-prompt0", "step": 2}) + "\n")
    assert main(["--resume", out, "--steps", "3", "--threads", "1", "--cache-dir", cache_dir]) == 0
    steps = [json.loads(line)["step"] for line in open(path)]
    assert steps == [0] * 16 + [1] * 16 + [2] * 16 and "y" not in [json.loads(line)["completion"]
                                                                   for line in open(path)][-16:]


def test_config_with_a_runs_args_json_reproduces_the_runs_settings(toy_run, tmp_path):
    out, _, _ = toy_run
    saved = grpo_ba_run.read_args(out)
    again = parse_args(["--config", os.path.join(out, "args.json"), "--output-dir", str(tmp_path / "again")])
    assert json.loads(json.dumps(dataclasses.asdict(again))) == {**saved, "output_dir": str(tmp_path / "again")}
    assert again.report_to == "tensorboard" and again.completions and again.warmup_steps == 300


def test_config_sits_below_typed_flags_and_above_design_and_preset_and_ignores_non_settings(tmp_path):
    original = parse_args(["--aggregator", "token", "--design", "loop-gap", "--lr", "3e-5", "--eval-dataset",
                           "a.jsonl", "b.jsonl", "--output-dir", "runs/x"])
    saved = {**dataclasses.asdict(original), "resume": "runs/x"}             # a run's args.json
    (tmp_path / "args.json").write_text(json.dumps(saved))
    config = ["--config", str(tmp_path / "args.json")]
    assert dataclasses.replace(parse_args(config), output_dir="runs/x") == dataclasses.replace(original)
    assert parse_args(config).output_dir == "" and parse_args(config).resume == ""
    assert parse_args([*config, "--lr", "1e-3"]).lr == 1e-3                  # typed flags win
    (tmp_path / "run.yaml").write_text("design: loop-gap\ngap-size: 7\nlr: 2e-4\n")
    typed = parse_args(["--config", str(tmp_path / "run.yaml"), "--aggregator", "balanced"])
    assert (typed.gap_size, typed.lr) == (7, 2e-4)                          # above the design's gap size
    designed = parse_args(["--design", "loop-gap", "--aggregator", "balanced"])
    assert typed.slip_style == designed.slip_style and designed.gap_size != 7
    (tmp_path / "preset.yaml").write_text("preset: qwen3-1.7b\nlr: 5e-6\n")
    preset = parse_args(["--config", str(tmp_path / "preset.yaml"), "--aggregator", "balanced"])
    assert (preset.lr, preset.max_new_tokens, preset.dtype) == (5e-6, 1024, "bfloat16")


def test_each_start_records_versions_commit_and_device_once_in_run_json(toy_run):
    out, _, _ = toy_run
    assert not os.path.exists(os.path.join(out, "provenance.json"))       # one record, not two
    (start,) = grpo_ba_run.read_run_record(out)["starts"]
    assert start["provenance"]["device"] == "cpu" and start["provenance"]["packages"]["transformers"]
    assert start["machine"]["cpu_model"] and start["machine"]["threads"] == 1
    assert start["warmup"] is not None
    commit = subprocess.run(["git", "-C", REPO, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    if commit and os.path.realpath(REPO) == os.path.realpath(
            subprocess.run(["git", "-C", REPO, "rev-parse", "--show-toplevel"], capture_output=True,
                           text=True).stdout.strip()):
        assert start["provenance"]["git"]["commit"] == commit


def test_a_run_ends_with_a_summary_naming_accuracy_and_its_outputs(toy_run):
    out, _, lines = toy_run
    summary = lines[-1]
    final = grpo_ba_run.read_metrics(os.path.join(out, "metrics.jsonl"))[-1]
    assert summary.startswith("[balanced] done: ") and f"accuracy {final['accuracy']:.3f}" in summary
    for name in ("metrics.jsonl", "model/", "tensorboard/", "completions.jsonl"):
        assert name in summary, name


def test_the_warmup_log_says_how_long_is_left(tmp_path):
    lines = []
    world = lm_setup.toy_world(parse_args(["--aggregator", "balanced"]))
    toy_model.warmup_toy_model(world, 5, 0, batch_size=4, log=lines.append)
    assert lines and all("left)" in line for line in lines)


def test_a_missing_device_fails_in_one_line_before_any_directory(tmp_path, capsys):
    for device, available in (("cuda", torch.cuda.is_available()), ("mps", torch.backends.mps.is_available())):
        if available:
            continue
        out = tmp_path / f"run-{device}"
        assert main(["--aggregator", "balanced", "--device", device, "--output-dir", str(out)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"--device {device}" in err[0]
        assert not out.exists()


def test_a_sweep_of_one_rule_is_refused_in_one_line(tmp_path, capsys):
    from grpo_ba_lab.analysis import sweep
    assert sweep.main(["--aggregator", "token", "--output-dir", str(tmp_path / "sweep")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--aggregator token" in err[0] and "grpo_ba_lab.train" in err[0]
    assert not (tmp_path / "sweep").exists()


def test_multi_run_progress_counts_runs_and_estimates_time_left():
    from grpo_ba_lab.analysis.sweep import Progress
    lines = []
    progress = Progress(3, lines.append)
    progress.next("a", skipped=True)
    progress.next("b")
    progress.started -= 120                          # the run took two minutes
    progress.done()
    progress.next("c")
    assert lines[0] == "[1/3] a (done before)" and lines[1] == "[2/3] b"
    assert lines[2] == "[3/3] c, about 2 min left"


def test_report_to_and_completions_may_change_on_resume_but_the_dual_clip_may_not():
    assert {"report_to", "completions"} <= set(lab_args.MACHINE_FLAGS) and "clip_ratio_c" not in lab_args.MACHINE_FLAGS


def test_clip_ratio_c_reaches_the_clipped_term_of_the_update(monkeypatch):
    seen = []
    original = grpo_ba.clipped_token_loss

    def recording(*args, **kwargs):
        seen.append(args[8] if len(args) > 8 else kwargs.get("clip_ratio_c"))
        return original(*args, **kwargs)
    monkeypatch.setattr(grpo_ba, "clipped_token_loss", recording)
    args = parse_args(["--aggregator", "balanced", "--clip-ratio-c", "3", "--group-size", "2",
                       "--prompts-per-step", "1", "--inner-updates", "1"])
    policy = torch.nn.Linear(1, 1)
    batch = grpo_ba.Rollout(torch.zeros(2, 3, dtype=torch.long), torch.ones(2, 3), torch.ones(2, 2), ["", ""],
                            torch.zeros(2, dtype=torch.bool))
    monkeypatch.setattr(grpo_ba, "token_logprobs",
                        lambda *a, **k: (policy.weight.sum() * torch.zeros(2, 2), torch.zeros(2, 2)))
    grpo_ba.grpo_update(policy, None, torch.optim.SGD(policy.parameters(), lr=0.1), batch,
                        torch.tensor([1.0, 0.0]), args)
    assert seen == [3.0]


def test_clip_ratio_c_at_or_below_one_is_refused():
    with pytest.raises(grpo_ba.UsageError, match="--clip-ratio-c"):
        lab_args.check_args(parse_args(["--aggregator", "balanced", "--clip-ratio-c", "0.5"]))
