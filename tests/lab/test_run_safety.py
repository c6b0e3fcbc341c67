"""A run survives what happens to it on disk and on other machines: checkpoints that
would run code, truncated or foreign files, a torn metrics line, a resume with new
--steps or changed flags, and the device/threads/autocast choice of the machine."""
import dataclasses
import json
import os
import random
import shutil
import warnings

import pytest
import torch

import grpo_ba
from toy_tasks import model as toy_model
from grpo_ba_lab import lab_args
from grpo_ba_lab.analysis import report
from grpo_ba_support import run as grpo_ba_run
from grpo_ba_lab.plumbing import run_dirs
from grpo_ba_lab.lab_args import LabArgs
from grpo_ba_lab.train import main, train
from test_training import tiny_args as training_tiny_args

QUIET = dict(log=lambda *a: None)


def tiny_args(out, cache_dir, **overrides):
    """test_training's smallest toy run (the session shares its warm-up cache), shorter:
    enough for mixed rewards, so updates happen and a wrongly restored state shows."""
    return training_tiny_args(out, cache_dir, **{"max_new_tokens": 24, "eval_prompts": 4, **overrides})


def strip_times(metrics):
    return [{k: v for k, v in m.items() if k != "step_time"} for m in metrics]


def read(out):
    return grpo_ba_run.read_metrics(os.path.join(out, "metrics.jsonl"))


def one_error_line(capsys, *needles):
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("python -m grpo_ba_lab.train: error:"), err
    assert all(n in err[0] for n in needles), err[0]
    return err[0]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, cache_dir):
    """Metrics of an uninterrupted 4-step run: what every resumed run must reproduce."""
    out = train(tiny_args(tmp_path_factory.mktemp("full"), cache_dir, steps=4), **QUIET)
    metrics = strip_times(read(out))
    assert any(m["pos_share"] is not None for m in metrics)     # mixed rewards: the updates move weights
    return metrics


@pytest.fixture(scope="module")
def two_step_run(tmp_path_factory, cache_dir):
    return train(tiny_args(tmp_path_factory.mktemp("two") / "run", cache_dir), **QUIET)


@pytest.fixture
def finished_run(two_step_run, tmp_path):
    """A copy of a finished 2-step run: args.json, metrics.jsonl, the checkpoint of its last step."""
    return str(shutil.copytree(two_step_run, tmp_path / "run"))


@pytest.fixture
def fake_run(tmp_path, cache_dir):
    """A run directory with a real checkpoint of a small model, for refusals that come
    before any model is built."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "args.json").write_text(json.dumps(dataclasses.asdict(tiny_args(run, cache_dir))))
    (run / "metrics.jsonl").write_text('{"step": 0}\n')
    model = torch.nn.Linear(3, 2)
    grpo_ba_run.save_checkpoint(str(run / "checkpoint.pt"), model, torch.optim.AdamW(model.parameters()), step=0)
    return str(run)


def snapshot(run_dir):
    return {name: open(os.path.join(run_dir, name), "rb").read() for name in ("args.json", "metrics.jsonl")}


# ------------------------------------------------------------------ checkpoints never run code

class _WouldCreateAFile:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):                          # unpickling calls open(path, "w")
        return (open, (self.path, "w"))


def test_resume_refuses_a_checkpoint_whose_pickle_would_run_code(fake_run, tmp_path, capsys):
    sentinel = tmp_path / "sentinel"
    torch.save({"step": 0, "model": _WouldCreateAFile(str(sentinel))}, os.path.join(fake_run, "checkpoint.pt"))
    before = snapshot(fake_run)
    assert main(["--resume", fake_run]) == 2
    one_error_line(capsys, "checkpoint.pt", "refused")
    assert not sentinel.exists()
    assert snapshot(fake_run) == before


def test_checkpoint_holds_only_what_weights_only_loading_accepts(tmp_path):
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(4, 3)).sum().backward()
    optimizer.step()
    random.seed(7)
    expected_next = random.random()
    random.seed(7)
    grpo_ba_run.save_checkpoint(str(tmp_path / "checkpoint.pt"), model, optimizer, step=5)
    random.seed(0)
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=True)   # raises on anything else
    assert state["step"] == 5
    random.setstate(state["python_rng"])
    assert random.random() == expected_next


@pytest.mark.parametrize("damage", ["truncated", "empty", "text", "foreign_state_dict"])
def test_resume_refuses_a_damaged_or_foreign_checkpoint_and_changes_nothing(damage, fake_run, capsys):
    path = os.path.join(fake_run, "checkpoint.pt")
    data = open(path, "rb").read()
    if damage == "truncated":
        open(path, "wb").write(data[: len(data) // 2])
    elif damage == "empty":
        open(path, "wb").close()
    elif damage == "text":
        open(path, "w").write("not a checkpoint\n")
    else:                                          # a plain model state dict, as other tools write
        torch.save(torch.load(path, weights_only=True)["model"], path)
    before = snapshot(fake_run)
    assert main(["--resume", fake_run, "--steps", "4"]) == 2
    one_error_line(capsys, path)
    assert snapshot(fake_run) == before


def test_resume_refuses_a_checkpoint_of_a_differently_shaped_model(fake_run, capsys):
    path = os.path.join(fake_run, "checkpoint.pt")
    other = toy_model.tiny_qwen3(toy_model.char_tokenizer(), hidden=32)     # the toy's warm-up model has 64
    grpo_ba_run.save_checkpoint(path, other, torch.optim.AdamW(other.parameters()), step=0)
    before = snapshot(fake_run)
    assert main(["--resume", fake_run, "--steps", "4"]) == 2
    one_error_line(capsys, path, "does not fit this model")
    assert snapshot(fake_run) == before


def test_lora_adapter_checkpoints_are_checked_like_full_weights(tmp_path):
    """The check compares whatever policy.state_dict() holds, so a PEFT policy's
    adapters (and their rank) are checked too."""
    peft = pytest.importorskip("peft")

    def lora_policy(rank):
        base = toy_model.tiny_qwen3(toy_model.char_tokenizer())
        return peft.get_peft_model(base, peft.LoraConfig(r=rank, target_modules=["q_proj", "v_proj"]))
    saved = lora_policy(4)
    path = str(tmp_path / "checkpoint.pt")
    grpo_ba_run.save_checkpoint(path, saved, torch.optim.AdamW(saved.parameters()), step=0)
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"step": 0}\n')
    same, other = lora_policy(4), lora_policy(8)
    state = grpo_ba_run.read_checkpoint(path, "cpu")
    assert grpo_ba_run.restore_checkpoint(state, path, same, torch.optim.AdamW(same.parameters()), str(metrics), 3) == 1
    with pytest.raises(grpo_ba_run.RunError, match="lora_A"):
        grpo_ba_run.restore_checkpoint(state, path, other, torch.optim.AdamW(other.parameters()), str(metrics), 3)


# ------------------------------------------------------------------ a torn metrics line

def test_a_torn_last_line_is_dropped_with_a_note_naming_the_file(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"step": 0, "r": 1}\n{"step": 1, "r": 2}\n{"step": 2, "r"')
    notes = []
    assert [m["step"] for m in grpo_ba_run.read_metrics(str(path), notes.append)] == [0, 1]
    assert len(notes) == 1 and str(path) in notes[0]


def test_a_corrupt_middle_line_is_an_error_naming_the_file_and_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 0}\n{"step": 1, "r": \n{"step": 2}\n')
    with pytest.raises(grpo_ba_run.RunError, match=f"{path}: line 2"):
        grpo_ba_run.read_metrics(str(path))
    with pytest.raises(grpo_ba_run.RunError, match="line 2"):      # the sweep stops rather than retrain over it
        run_dirs.run_status(str(tmp_path), 3)


def test_resume_after_a_torn_last_line_equals_the_uninterrupted_run(finished_run, uninterrupted, capsys):
    with open(os.path.join(finished_run, "metrics.jsonl"), "a") as f:   # killed while appending step 2
        f.write(json.dumps(uninterrupted[1])[:40])
    assert main(["--resume", finished_run, "--steps", "4"]) == 0
    printed = capsys.readouterr()
    assert "torn last line" in printed.out + printed.err and "metrics.jsonl" in printed.out + printed.err
    assert strip_times(read(finished_run)) == uninterrupted


# ------------------------------------------------------------------ a power cut after the last checkpoint

def _cut_power(run_dir, how):
    """The metrics file as a power cut may leave it after the checkpoint of the last step:
    its last line torn, or missing. Returns the file as the finished run wrote it."""
    path = os.path.join(run_dir, "metrics.jsonl")
    whole = open(path).read()
    lines = whole.splitlines(keepends=True)
    kept = "".join(lines[:-1]) + (lines[-1][:25] if how == "torn" else "")
    with open(path, "w") as f:
        f.write(kept)
    return whole


@pytest.mark.parametrize("how", ["torn", "missing"])
def test_resume_restores_last_metrics_lines_a_power_cut_lost_from_the_checkpoint(finished_run, how, capsys):
    whole = _cut_power(finished_run, how)
    assert len(read(finished_run)) == 2                       # the evaluation after the last update is gone
    assert main(["--resume", finished_run]) == 0               # same --steps: nothing left to train
    printed = capsys.readouterr()
    restored = [line for line in (printed.out + printed.err).splitlines() if "restored step(s) [2]" in line]
    assert len(restored) == 1 and "metrics.jsonl" in restored[0], printed
    assert open(os.path.join(finished_run, "metrics.jsonl")).read() == whole   # as the run wrote it, step_time included


@pytest.mark.parametrize("how", ["torn", "missing"])
def test_sweep_skip_logic_repairs_a_metrics_file_behind_its_checkpoint_instead_of_retraining(finished_run, how):
    whole = _cut_power(finished_run, how)
    notes = []
    assert run_dirs.run_status(finished_run, 2, notes.append) == "finished"
    assert open(os.path.join(finished_run, "metrics.jsonl")).read() == whole
    assert any("restored step(s) [2]" in n for n in notes)
    assert run_dirs.run_status(finished_run, 3, notes.append) == "resume"      # one step short: resume, not retrain
    os.remove(os.path.join(finished_run, "checkpoint.pt"))
    assert run_dirs.run_status(finished_run, 3) == "train"


def test_each_checkpoint_keeps_the_metrics_lines_since_the_previous_one(tmp_path, cache_dir):
    out = train(tiny_args(tmp_path / "run", cache_dir, steps=3, eval_every=2), **QUIET)
    lines = open(os.path.join(out, "metrics.jsonl")).read().splitlines(keepends=True)
    state = torch.load(os.path.join(out, "checkpoint.pt"), weights_only=True)
    assert state["step"] == 2 and state["metrics"] == lines[2:]      # step 2 and the evaluation after it
    assert len(lines) == 4 and json.loads(lines[-1])["final_evaluation"]


def _fake_run(run_dir, metrics_text):
    os.makedirs(run_dir)
    with open(os.path.join(run_dir, "args.json"), "w") as f:
        json.dump(dataclasses.asdict(LabArgs(regime="gap", aggregator="balanced", output_dir=str(run_dir))), f)
    with open(os.path.join(run_dir, "metrics.jsonl"), "w") as f:
        f.write(metrics_text)


@pytest.mark.slow                   # draws or redraws figures: the full suite runs it
def test_the_report_draws_a_run_with_a_torn_last_line_and_refuses_a_corrupt_middle(tmp_path, capsys):
    line = lambda step: json.dumps({"step": step, "accuracy": 0.5, "reward_mean": 0.5, "len_pos": 5, "len_neg": 9,
                                    "pg_loss": 0.01, "pos_share": 0.5})
    _fake_run(tmp_path / "runs" / "gap-balanced-s0", f"{line(0)}\n{line(1)}\n{line(2)[:30]}")
    assert report.main([str(tmp_path / "runs")]) == 0
    assert (tmp_path / "runs" / "table.md").exists()
    _fake_run(tmp_path / "bad" / "gap-balanced-s0", f"{line(0)}\n{line(1)[:30]}\n{line(2)}\n")
    capsys.readouterr()
    assert report.main([str(tmp_path / "bad")]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("grpo_ba_lab.analysis.report: error:"), err
    assert "metrics.jsonl" in err[0] and "line 2" in err[0]


# ------------------------------------------------------------------ resume as users expect

def test_extending_a_finished_run_from_2_to_4_steps_equals_an_uninterrupted_4_step_run(finished_run, uninterrupted):
    assert main(["--resume", finished_run, "--steps", "4"]) == 0
    assert strip_times(read(finished_run)) == uninterrupted
    assert json.load(open(os.path.join(finished_run, "args.json")))["steps"] == 4   # a later --resume continues to 4


def test_shortening_an_unfinished_run_stops_at_the_new_step_count(finished_run, uninterrupted):
    args_path = os.path.join(finished_run, "args.json")
    saved = json.load(open(args_path))
    json.dump({**saved, "steps": 10}, open(args_path, "w"))    # as if a 10-step run died after step 1
    assert main(["--resume", finished_run, "--steps", "3"]) == 0
    lines = strip_times(read(finished_run))
    assert lines[:3] == uninterrupted[:3]                       # then the policy after step 2's update, which
    assert lines[3:] == [{"step": 3, "final_evaluation": True,  # the 4-step run evaluated before step 3's
                          "accuracy": uninterrupted[3]["accuracy"]}]


def test_steps_not_above_the_last_finished_step_is_refused(finished_run, capsys):
    before = snapshot(finished_run)
    assert main(["--resume", finished_run, "--steps", "1"]) == 2
    one_error_line(capsys, "--steps 1", "last finished step 1")
    assert snapshot(finished_run) == before


@pytest.mark.parametrize("flag, value", [("--lr", "1e-3"), ("--aggregator", "token"), ("--group-size", "8"),
                                         ("--regime", "variance"), ("--seed", "1")])
def test_a_changed_flag_on_resume_is_refused_in_one_line_naming_it(flag, value, tmp_path, cache_dir, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "args.json").write_text(json.dumps(dataclasses.asdict(tiny_args(run, cache_dir))))
    assert main(["--resume", str(run), flag, value]) == 2
    one_error_line(capsys, flag, "args.json")


def test_flags_typed_with_the_saved_value_and_machine_flags_are_accepted(tmp_path):
    defaults = {f.name: f.default for f in dataclasses.fields(grpo_ba.Args)}
    saved = {**defaults, "aggregator": "token", "lr": 3e-4, "steps": 2, "threads": 1}
    (tmp_path / "args.json").write_text(json.dumps(saved))
    argv = ["--resume", str(tmp_path), "--aggregator", "token", "--lr", "0.0003", "--steps", "6",
            "--threads", "4", "--device", "cpu", "--output-dir", str(tmp_path)]
    merged = grpo_ba.parse_args(argv)                           # the course's own command line
    assert (merged.steps, merged.threads, merged.device, merged.aggregator) == (6, 4, "cpu", "token")
    with pytest.raises(grpo_ba_run.RunError, match="--output-dir"):
        grpo_ba.parse_args(["--resume", str(tmp_path), "--output-dir", str(tmp_path / "elsewhere")])
    with pytest.raises(grpo_ba_run.RunError, match="--lr"):
        grpo_ba.parse_args(["--resume", str(tmp_path), "--lr", "0.1"])


def test_an_args_json_with_a_setting_this_version_lacks_is_refused_by_name(tmp_path):
    old = {f.name: f.default for f in dataclasses.fields(grpo_ba.Args)}
    old.update(aggregator="token", steps=2, output_dir=str(tmp_path), sweep=False)
    (tmp_path / "args.json").write_text(json.dumps(old))
    with pytest.raises(grpo_ba_run.RunError, match="unknown setting 'sweep'"):
        grpo_ba.parse_args(["--resume", str(tmp_path), "--steps", "4"])
    del old["sweep"]
    (tmp_path / "args.json").write_text(json.dumps(old))
    args = grpo_ba.parse_args(["--resume", str(tmp_path), "--steps", "4"])
    assert (args.aggregator, args.steps, args.output_dir) == ("token", 4, str(tmp_path))


# ------------------------------------------------------------------ device, threads, autocast

@pytest.mark.parametrize("cuda, mps, expected", [(True, True, "cuda"), (False, True, "mps"), (False, False, "cpu")])
def test_auto_device_prefers_cuda_then_mps_then_cpu(cuda, mps, expected, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)
    assert grpo_ba_run.pick_device("auto").type == expected
    assert grpo_ba_run.pick_device("cpu").type == "cpu"


def test_an_unavailable_device_is_a_one_line_error(monkeypatch):
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert lab_args.parse_args(["--device", "mps"]).device == "mps"
    with pytest.raises(grpo_ba_run.RunError, match="--device mps"):
        grpo_ba_run.pick_device("mps")


def test_thread_default_is_the_toy_best_or_every_core_and_an_explicit_value_wins(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    assert lab_args.parse_args([]).threads == 0                  # 0: choose by mode
    assert grpo_ba_run.pick_threads(0, real_model=False) == grpo_ba_run.TOY_THREADS
    assert grpo_ba_run.pick_threads(0, real_model=True) == 8
    assert grpo_ba_run.pick_threads(3, real_model=True) == 3 and grpo_ba_run.pick_threads(3, real_model=False) == 3


def test_autocast_falls_back_to_float32_with_a_note_where_the_device_lacks_it(monkeypatch):
    assert grpo_ba_run.autocast_dtype("cpu", "bfloat16", log=pytest.fail) == "bfloat16"   # this torch's CPU has it
    real = torch.autocast

    def warns(device_type, dtype=None, **kw):      # what torch does for a dtype the device lacks
        warnings.warn(f"In {device_type} autocast, but the target dtype is not supported. Disabling autocast.")
        return real(device_type, dtype=dtype, enabled=False)

    def raises(device_type, dtype=None, **kw):     # what torch does for bf16 on a pre-Ampere GPU
        raise RuntimeError("Current CUDA Device does not support bfloat16. Please switch dtype to float16.")
    for fake in (warns, raises):
        monkeypatch.setattr(torch, "autocast", fake)
        notes = []
        assert grpo_ba_run.autocast_dtype("cpu", "float16", notes.append) == "float32"
        assert len(notes) == 1 and "float16" in notes[0]


# ------------------------------------------------------------------ the summary table

def test_the_table_prints_a_spread_only_with_two_or_more_seeds():
    from grpo_ba_lab.analysis import plots
    run = lambda acc: [{"step": 0, "accuracy": acc, "reward_mean": 0.5, "len_pos": 5.0, "len_neg": 9.0, "pg_loss": 0.01}]
    one_seed = plots.summary_table({("gap", "balanced"): [run(0.9)]})
    two_seeds = plots.summary_table({("gap", "balanced"): [run(0.9), run(0.8)]})
    assert "+-" not in one_seed.splitlines()[-1] and "0.900" in one_seed
    assert "+-" in two_seeds.splitlines()[-1]
