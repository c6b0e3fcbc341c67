"""What a run does to its directory (issue 75): a run stopped before step 0 (Ctrl-C during the
warm-up) leaves no folder behind; a run started into a directory that holds an earlier run says,
before anything else, that it replaces it (and how to continue that one instead), and replaces it
(the earlier checkpoint is gone before the first step, never resumed by mistake); the summary
gives the GRPO time apart from what came before step 0."""
import os

import pytest

import grpo_ba
from grpo_ba_support import task as setup
from toy_tasks import ToyWorld
from toy_tasks import model as toy_model

SHORT = ["--aggregator", "token", "--steps", "1", "--prompts-per-step", "2", "--group-size", "4",
         "--eval-prompts", "4", "--eval-every", "1000", "--max-new-tokens", "8", "--threads", "1"]


def tiny_build(args, log=print):
    tokenizer = toy_model.char_tokenizer()
    return toy_model.tiny_qwen3(tokenizer), tokenizer, setup.toy_task(ToyWorld(), tokenizer)


def test_ctrl_c_before_step_0_leaves_no_folder_behind(tmp_path):
    out = tmp_path / "runs" / "demo-s23" / "token"
    def interrupted_warmup(args, log=print):
        assert not (tmp_path / "runs").exists()          # checked, not made: nothing to leave
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        grpo_ba.train(grpo_ba.parse_args([*SHORT, "--output-dir", str(out)]), build=interrupted_warmup)
    assert os.listdir(tmp_path) == []


def test_a_bad_output_directory_still_fails_before_the_warm_up(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="cannot write to output directory"):
        grpo_ba.train(grpo_ba.parse_args([*SHORT, "--output-dir", str(tmp_path / "file" / "run")]),
                      build=lambda args, log: pytest.fail("built before the directory was checked"))


def test_a_rerun_into_a_run_directory_says_it_replaces_it_and_does(tmp_path, capsys, monkeypatch):
    out = str(tmp_path / "run")
    args = grpo_ba.parse_args([*SHORT, "--output-dir", out])
    grpo_ba.train(args, log=lambda *a: None, build=tiny_build)
    first = capsys.readouterr()
    assert "replaces" not in first.err and os.path.exists(os.path.join(out, "checkpoint.pt"))
    said = []
    def stopped_in_step_0(*a, **k):                      # after begin(): the directory is the new run's
        said.append(sorted(os.listdir(out)))
        raise RuntimeError("stopped")
    monkeypatch.setattr(grpo_ba, "grpo_step", stopped_in_step_0)
    with pytest.raises(RuntimeError):
        grpo_ba.train(args, log=lambda *a: None, build=tiny_build)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"note: {out} holds an earlier run; this run replaces it" in err
    assert f"--resume {out}" in err
    assert "checkpoint.pt" not in said[0] and os.path.getsize(os.path.join(out, "metrics.jsonl")) == 0


def test_the_summary_gives_the_grpo_time_apart_from_the_warm_up(tmp_path):
    lines = []
    grpo_ba.train(grpo_ba.parse_args([*SHORT, "--output-dir", str(tmp_path / "run")]), log=lines.append,
                  build=tiny_build)
    assert " min of GRPO" in lines[-1] and lines[-1].startswith("[token] done: ")


def test_loading_and_sampling_a_toy_policy_leaves_nothing_in_the_temporary_folder(tmp_path):
    """torch makes its compile cache's folder when a model first loads (/tmp/torchinductor_USER,
    empty, after every run): it goes beside the warm-ups instead."""
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    (tmp_path / "tmp").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    env.update(TMPDIR=str(tmp_path / "tmp"), GRPO_BA_CACHE=str(tmp_path / "cache"), PYTHONPATH=root)
    code = ("import grpo_ba\nfrom toy_tasks import model as m\nt = m.char_tokenizer()\np = m.tiny_qwen3(t)\n"
            "p.generate(**t(['<bos>12+3+4='], return_tensors='pt', add_special_tokens=False), max_new_tokens=2,"
            " do_sample=False, pad_token_id=t.pad_token_id)\nimport tempfile; print(tempfile.gettempdir())\n")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == str(tmp_path / "tmp")                   # the check looks where torch would
    assert os.listdir(tmp_path / "tmp") == []
    assert os.listdir(tmp_path / "cache") == ["torchinductor"]


def test_a_long_warm_up_is_said_apart_from_the_grpo_minutes(tmp_path, monkeypatch):
    import time
    from grpo_ba_support import run as run_files
    clock = {"now": time.time()}
    monkeypatch.setattr(run_files.time, "time", lambda: clock["now"])
    def slow_warmup(args, log=print):                    # 3 minutes pass before step 0
        clock["now"] += 180
        return tiny_build(args, log)
    lines = []
    grpo_ba.train(grpo_ba.parse_args([*SHORT, "--output-dir", str(tmp_path / "run")]), log=lines.append,
                  build=slow_warmup)
    assert "0.0 min of GRPO (+3.0 min before step 0: warm-up, loading)" in lines[-1], lines[-1]
