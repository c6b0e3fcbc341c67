"""A student's path works on a fresh machine (issue 65): from an empty home directory with no cache,
every command a course or lab page gives (the demo on seed 22 and on another seed, each course
design, the lab trainer, the exercises' checker, the pre-lab check, the notebook) exits as it
should, writes its outputs where it is told, caches warm-ups in the usual place (XDG_CACHE_HOME,
else ~/.cache/grpo_ba; GRPO_BA_CACHE overrides), says where, and leaves nothing else in the
working directory (before issue 65 a warm-up failed there, leaving a directory named `~`)."""
import os
import subprocess
import sys

import pytest

from toy_tasks import model as toy_model

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GRPO_BA = os.path.join(ROOT, "grpo_ba.py")
SHORT = ["--steps", "1", "--prompts-per-step", "2", "--group-size", "4", "--eval-every", "1000",
         "--eval-prompts", "4", "--max-new-tokens", "16", "--threads", "1"]
# Each command runs as typed, in a new process; only the warm-ups it trains are cut to 20 steps
# (a course design's are 600 to 1,000), so that the suite keeps its time.
SHORT_WARMUPS = ("import runpy, sys; from toy_tasks import designs; "
                 "[d['flags'].update(warmup_steps=20) for d in designs.DESIGNS.values()]; "
                 "designs.WARMUP_STEPS.update(gap=20, variance=20); sys.argv = sys.argv[1:]; "
                 "runpy.run_module(sys.argv[0][3:], run_name='__main__', alter_sys=True) "
                 "if sys.argv[0].startswith('-m ') else runpy.run_path(sys.argv[0], run_name='__main__')")


def test_the_cache_follows_grpo_ba_cache_then_xdg_cache_home_then_the_home_directory(monkeypatch, tmp_path):
    monkeypatch.delenv("GRPO_BA_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert toy_model.default_cache_dir() == str(tmp_path / "home" / ".cache" / "grpo_ba")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert toy_model.default_cache_dir() == str(tmp_path / "xdg" / "grpo_ba")
    monkeypatch.setenv("GRPO_BA_CACHE", "~/mine")
    assert toy_model.default_cache_dir() == str(tmp_path / "home" / "mine")        # expanded, never a `~` dir


def test_a_warm_up_is_trained_into_a_cache_that_does_not_exist_yet_and_says_where(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(toy_model, "warmup_toy_model", lambda world, steps, seed, log: (
        toy_model.tiny_qwen3(toy_model.char_tokenizer()), None, 0.0))
    said = []
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    toy_model.load_or_warmup_toy("~/.cache/grpo_ba", toy_model.ToyWorld("gap"), 20, 0, log=said.append)
    cache = tmp_path / "home" / ".cache" / "grpo_ba"
    assert [p.name for p in cache.iterdir() if p.is_dir()][0].startswith("warmup-")
    assert f"cached in {cache}" in said[0] and "GRPO_BA_CACHE" in said[0]
    assert sorted(os.listdir(tmp_path)) == ["home"]                                # no `~` beside it


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """An empty home, a working directory, and the environment of a new user (no cache set)."""
    home, work = tmp_path_factory.mktemp("home"), tmp_path_factory.mktemp("work")
    env = {k: v for k, v in os.environ.items() if k not in ("GRPO_BA_CACHE", "XDG_CACHE_HOME", "PYTEST_XDIST_WORKER")}
    env.update(HOME=str(home), PYTHONPATH=ROOT, MPLBACKEND="Agg")
    return home, work, env


def run(fresh, command, timeout=900):
    home, work, env = fresh
    before = set(os.listdir(work))
    result = subprocess.run([sys.executable, "-c", SHORT_WARMUPS, *command], cwd=work, env=env,
                            capture_output=True, text=True, timeout=timeout)
    return result, set(os.listdir(work)) - before


COURSE_RUNS = {                         # what each page runs, and the one directory it may write
    "demo-s22": [GRPO_BA, *SHORT],                                                   # README
    "demo-s7": [GRPO_BA, "--seed", "7", *SHORT],                                     # the story's next step
    "long-right": [GRPO_BA, "--design", "long-right", "--aggregator", "token", *SHORT],   # docs/lab-session.md
    "plain": [GRPO_BA, "--design", "plain", "--aggregator", "balanced", *SHORT],     # docs/code-tour.md
    "lab-long-right": ["-m grpo_ba_lab.train", "--design", "long-right", "--aggregator", "token", *SHORT],
    "lab-gap": ["-m grpo_ba_lab.train", "--aggregator", "token", "--gap-size", "9", *SHORT],   # docs/lab.md
}


@pytest.mark.slow
@pytest.mark.parametrize("name", COURSE_RUNS)
def test_each_training_command_runs_from_an_empty_home_and_writes_only_its_output_directory(fresh, name):
    home, work, _ = fresh
    result, new = run(fresh, [*COURSE_RUNS[name], "--output-dir", name])
    assert result.returncode == 0, result.stdout[-1500:] + result.stderr[-1500:]
    assert new == {name}, new                                      # nothing else in the working directory
    assert any(f.endswith("metrics.jsonl") for _, _, files in os.walk(work / name) for f in files)
    if not name.startswith("lab-"):                                # the course draws every run
        assert any(f == "mechanism.png" for _, _, files in os.walk(work / name) for f in files)
    if name != "demo-s22":                                         # the shipped warm-up needs no cache
        cache = home / ".cache" / "grpo_ba"
        assert cache.is_dir() and any(p.name.startswith("warmup-") for p in cache.iterdir())
        said = result.stdout + result.stderr
        assert f"cached in {cache}" in said or f"from {cache}" in said, said[-1500:]


@pytest.mark.slow
@pytest.mark.parametrize("command, code, says", [
    (["-m exercises.prelab_check"], 0, "READY for the lab"),
    (["-m exercises.check"], 1, "not implemented yet"),        # the stubs, before a student writes them
])
def test_the_exercises_commands_run_from_an_empty_home(fresh, command, code, says):
    result, new = run(fresh, command)
    assert result.returncode == code and says in result.stdout, result.stdout[-1500:] + result.stderr[-1500:]
    assert new == set()


@pytest.mark.slow
def test_the_notebook_runs_from_an_empty_home(fresh):
    result, new = run(fresh, ["-m jupyter", "execute", os.path.join(ROOT, "exercises", "balanced_aggregation_lab.ipynb")])
    assert result.returncode == 0, result.stdout[-1500:] + result.stderr[-1500:]
    assert new == set()


@pytest.mark.slow
def test_the_warm_ups_the_prelab_check_trains_are_the_ones_the_sessions_run_loads(tmp_path):
    """docs/lab-session.md, before the session: `python -m exercises.prelab_check --train-warm-ups`
    from an empty home trains design long-right's warm-up; step 3's run then loads it."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("GRPO_BA_CACHE", "XDG_CACHE_HOME", "PYTEST_XDIST_WORKER")}
    env.update(HOME=str(home), PYTHONPATH=ROOT, MPLBACKEND="Agg")
    trained, _ = run((home, work, env), ["-m exercises.prelab_check", "--train-warm-ups"])
    said = trained.stdout + trained.stderr
    assert trained.returncode == 0 and trained.stdout.rstrip().splitlines()[-1].startswith("READY"), said[-1500:]
    assert "train design long-right, seed 80: warm-up step" in said and "long-right, seed 80: trained now" in said
    loaded, new = run((home, work, env), [*COURSE_RUNS["long-right"], "--output-dir", "long-right"])
    said = loaded.stdout + loaded.stderr
    assert loaded.returncode == 0, said[-1500:]
    assert f"warm-up: loading cached policy from {home / '.cache' / 'grpo_ba'}" in said, said[-1500:]
    assert "warm-up: training" not in said and new == {"long-right"}
