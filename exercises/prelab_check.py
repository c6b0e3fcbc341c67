"""Before the lab: does this install run the course? One line per check, in seconds.

    python -m exercises.prelab_check                      # the checks, in seconds
    python -m exercises.prelab_check --train-warm-ups     # the same, after training the session's warm-ups

From the repository root. It checks, in order: Python and every package requirements.txt names
(the course's install: pytest for the checker and the notebook's kernel included);
that the course imports (grpo_ba, verifier, toy_tasks); a forward and backward pass of the
three rules on docs/method.md §3's worked example, against the numbers worked out by hand
there; the verifier on three answers; each warm-up shipped in toy_tasks/warmups/ (its sha256
against the one registered in toy_tasks/designs.py, then one greedy answer of the toy model);
and that matplotlib can draw. Each line says `ok` or `FAIL` with what to do; the last line
says whether the install is ready. Exit code 0 when every check passes, 1 otherwise.
The notebook's line says how to run it (it is committed with its outputs, so it also reads
without running); the next says whether an editor to work in it is installed, or the one
command that installs one.

Then a note per warm-up the session loads (SESSION_WARMUPS): shipped, cached, or not cached
yet. With --train-warm-ups it first trains and caches each one that is neither, printing the
warm-up's progress and no GRPO result (docs/lab-session.md runs it once before the session, so
that the predictions of its step 3 are made before any run of that world is seen). It trains
through the very function a `python grpo_ba.py --design NAME --threads N` run loads its warm-up
with (toy_tasks.model.load_or_warmup_toy, into the same cache), with torch on the run's thread
count, so the cache key, which holds the floating-point path, is the one that run looks up.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import io
import os
import shutil
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INSTALL = "pip install -r requirements.txt -c requirements/lock.txt (from the repository root)"


def required_packages(path=os.path.join(ROOT, "requirements.txt")) -> tuple:
    """The import names of the packages a requirements file names (one per line, `#` comments)."""
    with open(path) as f:
        names = [line.split("#")[0].strip() for line in f]
    return tuple(name.split("[")[0].replace("-", "_")
                 for name in (n.split(";")[0].split("=")[0].split("<")[0].split(">")[0].strip()
                              for n in names if n and not n.startswith("-")) if name)


PACKAGES = required_packages()                    # torch ... pytest, ipykernel, nbclient

# docs/method.md §3's worked example, by hand: G = 4, rewards [1, 0, 1, 0], L = [2, 4, 1, 3]
WORKED_REWARDS, WORKED_LENGTHS = [1.0, 0.0, 1.0, 0.0], [2, 4, 1, 3]
BY_HAND = {"token": dict(J=0.4, w_pos=0.3, w_neg=-0.7),
           "sequence": dict(J=0.0, w_pos=0.5, w_neg=-0.5),
           "balanced": dict(J=0.0, w_pos=0.5, w_neg=-0.5)}
# (completion, gold, verdict): the toy's running sums, a wrong last sum, LaTeX
VERIFIER_CASES = [("63 66", "66", 1.0), ("57 60", "66", 0.0), ("\\boxed{\\frac{1}{2}}", "0.5", 1.0)]


class CheckFailed(Exception):
    """What went wrong and what to do: printed after FAIL."""


def check_python_and_packages() -> str:
    if sys.version_info < (3, 10):
        raise CheckFailed(f"Python {sys.version.split()[0]}; the course needs 3.10 or newer")
    missing = [name for name in PACKAGES if importlib.util.find_spec(name) is None]
    if missing:              # where it looked: this interpreter, which may not be the one installed into
        raise CheckFailed(f"missing {', '.join(missing)} in the Python at {sys.executable}: {INSTALL}")
    from importlib.metadata import PackageNotFoundError, version
    versions = []
    for name in PACKAGES:
        try:
            versions.append(f"{name} {version(name)}")
        except PackageNotFoundError:              # importable, but not installed by pip
            versions.append(name)
    return f"Python {sys.version.split()[0]}; " + ", ".join(versions)


def check_course_imports() -> str:
    if ROOT not in sys.path:                      # run from anywhere: the checkout this file is in
        sys.path.insert(0, ROOT)
    for module in ("grpo_ba", "verifier", "toy_tasks"):
        try:
            importlib.import_module(module)
        except Exception as err:                  # noqa: BLE001 - any import error is the answer
            if getattr(err, "name", None) == module:  # the course's own file is not there
                raise CheckFailed(f"import {module}: no {module} in {ROOT}; run the check from a whole "
                                  f"copy of the course") from None
            raise CheckFailed(f"import {module}: {type(err).__name__}: {err}; {INSTALL}") from None
    return "grpo_ba, verifier, toy_tasks"


def check_three_rules() -> str:
    """Forward: J of each rule at ratio 1. Backward: autograd's weight on each sign
    (grpo_ba.sign_weights) and a finite gradient through the clipped term."""
    import torch
    import grpo_ba
    advantages = grpo_ba.group_advantages(torch.tensor(WORKED_REWARDS), 4)       # (4,)
    mask = grpo_ba.mask_from_lengths(torch.tensor(WORKED_LENGTHS))               # (4, 4)
    found = []
    for rule, expected in BY_HAND.items():
        logp = torch.zeros(mask.shape, requires_grad=True)                        # ratio 1
        token_loss = grpo_ba.clipped_token_loss(logp, logp.detach(), advantages, mask)
        loss = grpo_ba.AGGREGATORS[rule](token_loss, mask, advantages, 4)
        loss.backward()
        w_pos, w_neg = grpo_ba.sign_weights(mask, advantages, 4, rule)
        got = dict(J=loss.item(), w_pos=w_pos.item(), w_neg=w_neg.item())
        got = {key: round(value, 6) + 0.0 for key, value in got.items()}     # no "-0.000"
        wrong = [f"{key} {got[key]:+.3f} (by hand {value:+.3f})" for key, value in expected.items()
                 if abs(got[key] - value) > 1e-5]
        if wrong or not torch.isfinite(logp.grad).all():
            raise CheckFailed(f"{rule}: " + ("; ".join(wrong) or "a gradient is not finite")
                              + " on docs/method.md §3's worked example")
        found.append(f"{rule} J {got['J']:+.1f}")
    return ", ".join(found) + " (docs/method.md §3's worked example)"


def check_verifier() -> str:
    from verifier import verify
    for completion, gold, verdict in VERIFIER_CASES:
        got = verify(completion, gold)
        if got != verdict:
            raise CheckFailed(f"verify({completion!r}, {gold!r}) gave {got}, not {verdict}")
    return f"{len(VERIFIER_CASES)} answers judged as they should be"


def shipped_warmups() -> list[tuple[str, int]]:
    """(design, seed) of every warm-up toy_tasks/designs.py registers as shipped."""
    from toy_tasks import designs
    return [(name, seed) for name, design in designs.DESIGNS.items()
            for seed in design.get("shipped", {})]


def check_shipped_warmups() -> str:
    """Each shipped file's sha256 against its registration (load_warmup_file refuses a
    mismatch), then the toy model's greedy answer to one prompt."""
    import torch
    from toy_tasks import designs
    from toy_tasks.model import load_warmup_file
    from verifier import verify
    found = shipped_warmups()
    if not found:
        raise CheckFailed("toy_tasks/designs.py registers no shipped warm-up")
    for name, seed in found:
        path, sha256 = designs.shipped_warmup(name, seed)
        try:
            policy, tokenizer = load_warmup_file(path, sha256)
        except Exception as err:                  # noqa: BLE001 - missing, changed, unreadable
            raise CheckFailed(f"design {name}, seed {seed}: {err}") from None
        prompt = tokenizer.bos_token + "57+6+3="
        ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
        with torch.no_grad():
            out = policy.generate(**ids, max_new_tokens=30, do_sample=False,
                                  pad_token_id=tokenizer.pad_token_id,
                                  eos_token_id=tokenizer.eos_token_id)
        answer = tokenizer.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
    verdict = "right" if verify(answer, "66") else "wrong"
    if "~" in answer:                                    # where a student first meets the ramble
        verdict += "; each ~ is a token of the toy's ramble, written after a slip"
    return (f"{len(found)} file(s), sha256 as registered; the policy of design {name} answers "
            f"57+6+3= with {answer!r} ({verdict})")


def check_figures() -> str:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(2, 2))
    ax.plot([0, 1], [0.5, 0.5])
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return f"a {buffer.tell()}-byte PNG drawn"


CHECKS = [("packages", check_python_and_packages), ("course imports", check_course_imports),
          ("the three rules", check_three_rules), ("the verifier", check_verifier),
          ("shipped warm-up", check_shipped_warmups), ("figures", check_figures)]


# The warm-ups the session's commands load (docs/lab-session.md, steps 2 and 3): design, seed
# and the --threads they run with (a cached warm-up's key holds its floating-point path).
SESSION_WARMUPS = (("demo", 22, 1), ("long-right", 80, 1))
TRAIN_COMMAND = "python -m exercises.prelab_check --train-warm-ups"


@contextlib.contextmanager
def session_threads(n: int):
    """torch on the session's --threads n, as its run sets it: the warm-up cache's key holds it."""
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def session_warmup_path(name: str, seed: int, threads: int) -> str:
    """Where the session's run of design `name` with `--threads threads` looks its warm-up up."""
    from grpo_ba_support import task
    from toy_tasks import designs
    from toy_tasks.model import warmup_cache_dir
    with session_threads(threads):
        return warmup_cache_dir(task.CACHE_DIR, designs.world(name), designs.warmup_steps(name), seed)


def train_warmup(name: str, seed: int, threads: int, out=print) -> str:
    """Train and cache design `name`'s warm-up as the session's run would (the same function,
    cache, seed and thread count), printing its progress. -> the cache path."""
    from grpo_ba_support import task
    from toy_tasks import designs
    from toy_tasks.model import load_or_warmup_toy
    with session_threads(threads):
        _, _, record = load_or_warmup_toy(task.CACHE_DIR, designs.world(name), designs.warmup_steps(name), seed,
                                          log=lambda line: out(f"train design {name}, seed {seed}: {line}"))
    return record["path"]


def caches_note(train: bool = False, out=print) -> list[str]:
    """One line per warm-up the session loads: shipped (checked above), cached, or to train once
    before the session with TRAIN_COMMAND. A note, not a failure: a fresh install has no cache
    yet, and docs/lab-session.md says to fill it. With `train`, each warm-up that is neither
    shipped nor cached is trained first (its progress goes to `out`)."""
    from toy_tasks import designs
    lines = []
    for name, seed, threads in SESSION_WARMUPS:
        if designs.shipped_warmup(name, seed):
            lines.append(f"note  cache: design {name}, seed {seed}: shipped (checked above)")
            continue
        path = session_warmup_path(name, seed, threads)
        if train and not os.path.exists(os.path.join(path, "warmup.json")):
            started = time.time()
            path = train_warmup(name, seed, threads, out)
            lines.append(f"note  cache: design {name}, seed {seed}: trained now ({time.time() - started:.0f} s), "
                         f"cached in {path}")
        elif os.path.exists(os.path.join(path, "warmup.json")):
            lines.append(f"note  cache: design {name}, seed {seed}: cached in {path}")
        else:
            lines.append(f"note  cache: design {name}, seed {seed}: not cached yet; run `{TRAIN_COMMAND}` once "
                         f"before the session ({designs.warmup_steps(name)} warm-up steps)")
    return lines


def notebook_note() -> str:
    if importlib.util.find_spec("ipykernel") and importlib.util.find_spec("nbclient"):
        return ("note  notebook: its kernel is installed; check that it runs top to bottom: "
                "jupyter execute exercises/balanced_aggregation_lab.ipynb")
    return f"note  notebook: no Jupyter kernel ({INSTALL}); it is committed with its outputs, so it reads without running"


EDITOR_INSTALL = "pip install jupyterlab"


def editor_note() -> str:
    """Whether an editor to work in the notebook is installed (minutes 0-40 are spent in it), and
    else the one command that gets one: it needs the network, so before the session."""
    if importlib.util.find_spec("jupyterlab"):
        found = "JupyterLab is installed; open the notebook with `jupyter lab` from the course's root"
    elif importlib.util.find_spec("notebook"):
        found = "Jupyter Notebook is installed; open the notebook with `jupyter notebook` from the course's root"
    elif shutil.which("code"):
        found = "VS Code is installed (`code .`); its Jupyter extension opens the notebook with this kernel"
    else:
        return (f"note  notebook editor: none installed (no JupyterLab, Jupyter Notebook or VS Code); "
                f"get one now, while there is network: {EDITOR_INSTALL}")
    return f"note  notebook editor: {found}"


def parse_args(argv=()) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m exercises.prelab_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--train-warm-ups", action="store_true",
                        help="first train and cache each warm-up the lab session loads that is neither shipped nor "
                             "cached yet (minutes; it prints the warm-up's progress, no GRPO result)")
    return parser.parse_args(argv)


def main(argv=(), out=print) -> int:
    args = parse_args(argv)
    started = time.time()
    failed = []
    for name, check in CHECKS:
        try:
            out(f"ok    {name}: {check()}")
        except CheckFailed as err:
            failed.append(name)
            out(f"FAIL  {name}: {err}")
        except Exception as err:                  # noqa: BLE001 - a broken install fails anyhow
            failed.append(name)
            out(f"FAIL  {name}: {type(err).__name__}: {err}")
    train = args.train_warm_ups and not failed
    for line in caches_note(train=train, out=out) if "course imports" not in failed else []:
        out(line)
    out(notebook_note())
    out(editor_note())
    seconds = time.time() - started
    if failed:
        out(f"NOT READY: {len(failed)} check(s) failed ({', '.join(failed)}); fix them and run "
            f"`python -m exercises.prelab_check` again ({seconds:.0f} s)")
        return 1
    out(f"READY for the lab: every check passed ({seconds:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
