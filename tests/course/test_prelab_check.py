"""The pre-lab check says READY on a working install and names what is broken otherwise:
a changed shipped warm-up, a wrong rule, a missing package, a verifier that misjudges. With
--train-warm-ups it trains the session's warm-ups under the key its runs look up, and its note
names that command, as docs/lab-session.md does."""
import os
import shutil
import subprocess
import sys

import pytest

from exercises import prelab_check

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_in_process(argv=()):
    lines = []
    code = prelab_check.main(argv, out=lines.append)
    return code, {line.split(":")[0]: line for line in lines}, lines


@pytest.mark.slow
def test_prelab_check_says_ready_on_this_install():
    result = subprocess.run([sys.executable, "-m", "exercises.prelab_check"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    for name, _ in prelab_check.CHECKS:
        assert f"ok    {name}: " in result.stdout, name
    assert lines[-1].startswith("READY for the lab")


def test_prelab_check_refuses_a_changed_shipped_warmup(tmp_path, monkeypatch):
    from toy_tasks import designs
    (name, seed), *_ = prelab_check.shipped_warmups()
    path, sha256 = designs.shipped_warmup(name, seed)
    changed = tmp_path / os.path.basename(path)
    shutil.copy(path, changed)
    with open(changed, "r+b") as f:                  # one byte of the weights, flipped
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 0xFF]))
    monkeypatch.setattr(designs, "shipped_warmup", lambda n, s: (str(changed), sha256))
    code, by_check, lines = run_in_process()
    assert code == 1
    assert by_check["FAIL  shipped warm-up"].count("sha256") == 1
    assert lines[-1].startswith("NOT READY: 1 check(s) failed (shipped warm-up)")


def test_prelab_check_catches_a_rule_that_gives_the_wrong_numbers(monkeypatch):
    import grpo_ba
    monkeypatch.setitem(grpo_ba.AGGREGATORS, "token", grpo_ba.aggregate_sequence)
    code, by_check, _ = run_in_process()
    assert code == 1
    assert "token: J +0.000 (by hand +0.400)" in by_check["FAIL  the three rules"]


def test_prelab_check_names_a_missing_package_and_the_install_command(monkeypatch):
    monkeypatch.setattr(prelab_check, "PACKAGES", prelab_check.PACKAGES + ("no_such_package_x",))
    code, by_check, _ = run_in_process()
    assert code == 1
    line = by_check["FAIL  packages"]
    assert "missing no_such_package_x" in line and "pip install -r requirements.txt" in line
    assert f"in the Python at {sys.executable}" in line                 # where it looked


def test_a_missing_course_file_says_where_the_check_looked(monkeypatch):
    import importlib
    real = importlib.import_module

    def without_verifier(name, *args):
        if name == "verifier":
            raise ModuleNotFoundError("No module named 'verifier'", name="verifier")
        return real(name, *args)
    monkeypatch.setattr(prelab_check.importlib, "import_module", without_verifier)
    with pytest.raises(prelab_check.CheckFailed) as failed:
        prelab_check.check_course_imports()
    assert str(failed.value) == f"import verifier: no verifier in {ROOT}; run the check from a whole copy of the course"


def test_prelab_check_catches_a_verifier_that_misjudges(monkeypatch):
    monkeypatch.setattr(prelab_check, "VERIFIER_CASES", [("57 60", "66", 1.0)])
    code, by_check, _ = run_in_process()
    assert code == 1
    assert "verify('57 60', '66') gave 0.0, not 1.0" in by_check["FAIL  the verifier"]


def test_prelab_check_covers_every_warm_up_the_session_loads_shipped_cached_or_to_train(tmp_path, monkeypatch):
    import torch
    from grpo_ba_support import task
    from toy_tasks import designs
    from toy_tasks.model import warmup_cache_dir
    monkeypatch.setattr(task, "CACHE_DIR", str(tmp_path))
    lines = prelab_check.caches_note()
    assert len(lines) == len(prelab_check.SESSION_WARMUPS)
    assert "demo, seed 22: shipped" in lines[0] and "long-right, seed 80: not cached yet" in lines[1]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)                                  # the session's --threads 1
    path = warmup_cache_dir(str(tmp_path), designs.world("long-right"), designs.warmup_steps("long-right"), 80)
    torch.set_num_threads(threads)
    os.makedirs(path)
    open(os.path.join(path, "warmup.json"), "w").close()
    assert "long-right, seed 80: cached in" in prelab_check.caches_note()[1]


def test_the_flag_to_train_the_warm_ups_parses_and_the_note_names_it_as_the_page_does(tmp_path, monkeypatch):
    from grpo_ba_support import task
    assert prelab_check.parse_args(["--train-warm-ups"]).train_warm_ups is True
    assert prelab_check.parse_args([]).train_warm_ups is False
    with pytest.raises(SystemExit):
        prelab_check.parse_args(["--train-warmups"])                   # a typo is an error, not a no-op
    monkeypatch.setattr(task, "CACHE_DIR", str(tmp_path))
    note = prelab_check.caches_note()[1]
    assert note.endswith(f"not cached yet; run `{prelab_check.TRAIN_COMMAND}` once before the session "
                         "(600 warm-up steps)"), note
    assert "step 3 command" not in note
    with open(os.path.join(ROOT, "docs", "lab-session.md"), encoding="utf-8") as f:
        page = f.read()
    before = page.split("## Before the session", 1)[1].split("\n## ", 1)[0]
    assert f"\n       {prelab_check.TRAIN_COMMAND}\n" in before           # the command the note names
    assert "python grpo_ba.py" not in before                            # no GRPO result before the session
    assert note in page                                                 # the output shown is the note's wording


def page_warmups():
    """(design, warm-up seed, --threads) of every GRPO run docs/lab-session.md gives."""
    import shlex

    import grpo_ba
    from toy_tasks import designs
    with open(os.path.join(ROOT, "docs", "lab-session.md"), encoding="utf-8") as f:
        commands = [line.strip() for line in f if line.strip().startswith("python grpo_ba.py")]
    found = set()
    for command in commands:
        args = grpo_ba.parse_args([a for a in shlex.split(command)[2:]])
        found.add((args.design, designs.warmup_seed(args.design, args.seed), args.threads))
    return found


def test_the_session_warm_ups_are_those_the_pages_runs_load():
    assert set(prelab_check.SESSION_WARMUPS) == page_warmups()


def test_training_the_warm_ups_caches_the_one_the_session_run_then_loads(tmp_path, monkeypatch):
    """--train-warm-ups trains through load_or_warmup_toy, under the key grpo_ba.py's run of the
    page's step 3 looks up (its design, seed and --threads 1); here the training itself is a stand-in."""
    import shlex

    import torch

    import grpo_ba
    from grpo_ba_support import task
    from toy_tasks import model as toy_model
    monkeypatch.setattr(task, "CACHE_DIR", str(tmp_path))
    trained = []
    def stand_in(world, steps, seed, log):
        trained.append((steps, seed, torch.get_num_threads()))
        log(f"warm-up step     0/{steps}  loss 9.999  (0s, about 0s left)")
        return toy_model.tiny_qwen3(toy_model.char_tokenizer()), None, 0.0
    monkeypatch.setattr(toy_model, "warmup_toy_model", stand_in)
    code, _, lines = run_in_process(["--train-warm-ups"])
    assert code == 0 and lines[-1].startswith("READY for the lab"), lines
    assert trained == [(600, 80, 1)]                                   # long-right's, on the session's thread
    assert any(line.startswith("train design long-right, seed 80: warm-up step") for line in lines), lines
    assert any("long-right, seed 80: trained now" in line for line in lines), lines
    assert "long-right, seed 80: cached in" in prelab_check.caches_note()[1]      # and no training again
    with open(os.path.join(ROOT, "docs", "lab-session.md"), encoding="utf-8") as f:
        step3 = next(line.strip() for line in f if line.strip().startswith("python grpo_ba.py --design long-right"))
    args = grpo_ba.parse_args(shlex.split(step3)[2:])
    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)                                # what grpo_ba's Run sets first
    said = []
    try:
        task.build(args, log=said.append)
    finally:
        torch.set_num_threads(threads)
    assert any(line.startswith("warm-up: loading cached policy from") for line in said), said
    assert len(trained) == 1


@pytest.mark.parametrize("installed, said", [
    ({"jupyterlab"}, "note  notebook editor: JupyterLab is installed; open the notebook with `jupyter lab`"),
    ({"notebook"}, "note  notebook editor: Jupyter Notebook is installed; open the notebook with `jupyter notebook`"),
    ({"code"}, "note  notebook editor: VS Code is installed (`code .`)"),
    (set(), "note  notebook editor: none installed (no JupyterLab, Jupyter Notebook or VS Code); get one now, "
            "while there is network: pip install jupyterlab")])
def test_the_check_says_whether_a_notebook_editor_is_installed_and_the_one_command_to_get_one(installed, said,
                                                                                           monkeypatch):
    import importlib.util
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: (
        object() if name in installed else None) if name in ("jupyterlab", "notebook") else find_spec(name, *a))
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/code" if name in installed else None)
    monkeypatch.setattr(prelab_check, "CHECKS", [])                    # the notes alone, in seconds
    monkeypatch.setattr(prelab_check, "caches_note", lambda train, out: [])
    code, _, lines = run_in_process()
    assert code == 0 and lines[-2].startswith(said) and lines[-1].startswith("READY")
    with open(os.path.join(ROOT, "docs", "lab-session.md"), encoding="utf-8") as f:
        page = f.read()
    assert prelab_check.EDITOR_INSTALL in page                          # the page gives the same command


def test_the_ramble_is_explained_where_a_student_first_meets_it():
    """The shipped warm-up's answer to 57+6+3= is a slip and its `~` ramble: the first `~` a student
    sees (issue 75). The line says what the `~` are, and so does the page that shows the line."""
    said = prelab_check.check_shipped_warmups()
    answer = said.split(" with ", 1)[1]
    assert "~" in answer and "each ~ is a token of the toy's ramble, written after a slip" in answer, said
    session = " ".join(open(os.path.join(ROOT, "docs", "lab-session.md"), encoding="utf-8").read().split())
    first = session.index("~~~")
    assert "its `~` are the toy's ramble" in session[:first]
