"""--config FILE and provenance in run.json (grpo_ba_lab/plumbing/run_config.py)."""
import dataclasses
import json
import os
import subprocess

import pytest
import torch

import grpo_ba
from grpo_ba_lab import lab_args
from grpo_ba_lab.plumbing import run_config
from grpo_ba_lab.plumbing.run_config import ConfigError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def args_class():
    return type(lab_args.parse_args([]))          # Args, wherever it is defined


def test_a_runs_args_json_reproduces_its_settings(tmp_path):
    original = lab_args.parse_args(["--aggregator", "balanced", "--group-size", "4", "--lr", "3e-5", "--beta", "0.05",
                                   "--eval-dataset", "a.jsonl", "b.jsonl",
                                   "--gradient-checkpointing", "--steps", "7", "--design", "plain"])
    (tmp_path / "args.json").write_text(json.dumps(dataclasses.asdict(original), indent=2))   # as train() writes it
    settings = run_config.read_config(str(tmp_path / "args.json"), args_class())
    assert settings.keys() == {f.name for f in dataclasses.fields(original)}
    reproduced = dataclasses.replace(args_class()(), **settings)
    # equal as args.json records them (argparse gives lists where Args' defaults are tuples)
    assert json.dumps(dataclasses.asdict(reproduced)) == json.dumps(dataclasses.asdict(original))
    assert reproduced.group_size == 4 and reproduced.lr == 3e-5 and reproduced.gradient_checkpointing
    assert settings["eval_dataset"] == ["a.jsonl", "b.jsonl"] and isinstance(settings["lr"], float)


def test_yaml_keys_may_be_written_as_flags_or_fields(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("# a TRL-style config\naggregator: balanced\ngroup-size: 4\n--prompts-per-step: 2\n"
                    "lr: 1e-5            # PyYAML reads this as a string\nbeta: 0\nmodel: Qwen/Qwen3-1.7B\n"
                    "eval_dataset: [math.jsonl]\ngradient_checkpointing: true\n")
    settings = run_config.read_config(str(path), args_class())
    assert settings == {"aggregator": "balanced", "group_size": 4, "prompts_per_step": 2, "lr": 1e-5, "beta": 0.0,
                        "model": "Qwen/Qwen3-1.7B", "eval_dataset": ["math.jsonl"], "gradient_checkpointing": True}
    args = dataclasses.replace(args_class()(), **settings)
    assert (args.group_size, args.lr, args.aggregator) == (4, 1e-5, "balanced")


@pytest.mark.parametrize("name, text, words", [
    ("c.yaml", "group-size: 4\ngroup_sise: 8\n", "unknown setting 'group_sise' (did you mean group-size?)"),
    ("c.yaml", "zzz: 1\n", "unknown setting 'zzz' (python grpo_ba.py --help lists them)"),
    ("c.json", '{"group_size": 4, "group-size": 8}', "'group-size' and 'group_size' set the same setting"),
    ("c.json", '{"steps": 2.5}', "'steps' must be a whole number, got 2.5"),
    ("c.json", '{"steps": true}', "'steps' must be a whole number"),
    ("c.json", '{"lr": "fast"}', "'lr' must be a number"),
    ("c.json", '{"skip_bad_rows": "yes"}', "'skip_bad_rows' must be true or false"),
    ("c.json", '{"eval_dataset": {"a": 1}}', "'eval_dataset' must be a list of values"),
    ("c.json", '["steps", 3]', "expected one mapping of settings"),
    ("c.json", '{"steps": 3,}', "not valid JSON (line 1"),
    ("c.yaml", "steps: [1\n", "not valid YAML"),
    ("missing.yaml", None, "No such file"),
])
def test_a_bad_config_is_refused_in_one_line_naming_the_file(tmp_path, name, text, words):
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        run_config.read_config(str(path), args_class())
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"--config {path}") and words in message, message
    assert isinstance(caught.value, ValueError)              # grpo_ba.main: one line, exit code 2


def test_an_empty_config_sets_nothing(tmp_path):
    (tmp_path / "empty.yaml").write_text("# nothing yet\n")
    assert run_config.read_config(str(tmp_path / "empty.yaml"), {"steps": 100}) == {}


def git(*argv):
    return subprocess.run(["git", "-C", ROOT, *argv], capture_output=True, text=True).stdout.strip()


def test_provenance_names_versions_commit_and_device_and_leaves_the_cpu_to_the_machine_variant():
    record = run_config.provenance(torch.device("cpu"))
    json.dumps(record)                                          # JSON-ready
    assert record["packages"]["transformers"] and record["python"].count(".") == 2
    assert record["device"] == "cpu" and record["accelerator"] is None
    assert "torch" not in record["packages"] and "cpu" not in record    # toy_tasks.model.machine_variant's facts
    if not git("rev-parse", "HEAD"):
        pytest.skip("not a git checkout")
    assert record["git"]["commit"] == git("rev-parse", "HEAD")
    assert record["git"]["dirty"] == bool(git("status", "--porcelain", "--untracked-files=no"))


def test_outside_a_checkout_the_commit_is_none(tmp_path, monkeypatch):
    monkeypatch.setattr(run_config, "ROOT", str(tmp_path))       # as installed in site-packages
    assert run_config.git_state() == {"commit": None, "dirty": None}


def test_write_provenance_records_each_start_in_run_json_with_each_fact_once(tmp_path):
    path = run_config.write_provenance(str(tmp_path), "cpu", 0, None)
    assert path == str(tmp_path / "run.json") and sorted(os.listdir(tmp_path)) == ["run.json"]
    run_config.write_provenance(str(tmp_path), "cpu", 3, None)          # a resume adds its own start
    starts = json.load(open(path))["starts"]
    assert [s["step"] for s in starts] == [0, 3]
    start = starts[1]
    assert start["provenance"]["device"] == "cpu" and start["provenance"]["packages"]["transformers"]
    machine = start["machine"]
    assert machine["cpu_capability"] == torch.backends.cpu.get_cpu_capability() and machine["cpu_model"]
    assert machine["threads"] == torch.get_num_threads() and machine["torch"] == torch.__version__
    leaves = {}

    def walk(node, prefix=""):
        for key, value in node.items():
            if isinstance(value, dict):
                walk(value, prefix + key + "/")
            else:
                leaves.setdefault(key, []).append(prefix + key)
    walk(start)
    for fact in ("cpu_model", "cpu_capability", "threads", "torch", "device"):
        assert len(leaves.get(fact, [])) <= 1, leaves[fact]             # one place per fact