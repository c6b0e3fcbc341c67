"""Every run draws its own picture: `python grpo_ba.py --aggregator RULE` writes its run's
mechanism.png as the demo does, and `python -m grpo_ba_plots RUN_DIR` redraws the figures of
any run directory from its files (one run, or the demo's three with its kept bias curves); a
directory without a run is one line and exit code 2."""
import json
import os
import shutil
import subprocess
import sys

import pytest

import grpo_ba
import grpo_ba_plots
from grpo_ba_support import task as grpo_ba_setup
from toy_tasks import model as toy_model

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def single_run(tmp_path_factory):
    """`python grpo_ba.py --aggregator token --steps 2 ...` with a random policy for the warm-up."""
    tokenizer, root = toy_model.char_tokenizer(), tmp_path_factory.mktemp("single")
    patch = pytest.MonkeyPatch()
    patch.setattr(toy_model, "warmup_toy_model",
                  lambda world, steps, seed, log: (toy_model.tiny_qwen3(tokenizer, seed=seed), tokenizer, 0.0))
    patch.setattr(grpo_ba_setup, "CACHE_DIR", str(root / "cache"))
    out = str(root / "run")
    try:
        assert grpo_ba.main(["--aggregator", "token", "--steps", "2", "--group-size", "4", "--prompts-per-step", "2",
                             "--eval-prompts", "8", "--max-new-tokens", "12", "--output-dir", out]) == 0
    finally:
        patch.undo()
    return out


def is_png(path):
    with open(path, "rb") as f:
        return f.read(8) == PNG


def test_a_single_course_run_draws_its_own_mechanism_figure(single_run, capsys):
    assert is_png(os.path.join(single_run, "mechanism.png"))
    assert not os.path.exists(os.path.join(single_run, "bias_curves.png"))     # the demo's, not a run's


@pytest.mark.slow                # runs a `python -m` subprocess
def test_python_m_grpo_ba_plots_redraws_a_single_run_from_its_files(single_run):
    os.remove(os.path.join(single_run, "mechanism.png"))
    result = subprocess.run([sys.executable, "-m", "grpo_ba_plots", single_run], cwd=REPO, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [os.path.join(single_run, "mechanism.png")]
    assert is_png(os.path.join(single_run, "mechanism.png"))


def test_the_redraw_of_a_demo_directory_draws_its_three_runs_and_its_kept_bias_curves(single_run, tmp_path):
    demo = tmp_path / "demo"
    for rule in ("token", "sequence", "balanced"):          # the demo's layout: one run per rule
        shutil.copytree(single_run, demo / rule)
        args = json.loads((demo / rule / "args.json").read_text())
        (demo / rule / "args.json").write_text(json.dumps({**args, "aggregator": rule}))
    curves = grpo_ba.bias_curves(ratios=[0.5, 1.0, 2.0], lengths=[2, 10, 20])
    grpo_ba_plots.bias_curves(curves, str(demo / "bias_curves.png"))
    os.remove(demo / "bias_curves.png")
    assert grpo_ba_plots.main([str(demo)]) == 0
    assert is_png(demo / "mechanism.png") and is_png(demo / "bias_curves.png")
    assert json.loads((demo / "bias_curves.json").read_text()) == json.loads(json.dumps(curves))


def test_a_directory_without_a_run_or_with_two_runs_of_a_rule_is_one_line_and_exit_code_2(single_run, tmp_path,
                                                                                           capsys):
    shutil.copytree(single_run, tmp_path / "sweep" / "a")
    shutil.copytree(single_run, tmp_path / "sweep" / "b")
    for directory, words in ((tmp_path, "no run"), (tmp_path / "sweep", "several token runs")):
        assert grpo_ba_plots.main([str(directory)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("grpo_ba_plots: error:") and words in err[0], err
