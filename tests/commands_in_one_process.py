"""Several command lines of one entry point, run one after the other in one new interpreter.

A test of a command's refusal (exit code 2, one stderr line, nothing written) runs
`python grpo_ba.py ...` or `python -m grpo_ba_lab.train ...` in a process of its own, and most of
that process's 3-5 CPU seconds is importing torch and transformers before the refusal. Where
several tests check refusals of the same command, run_each starts one interpreter for all of
them: each command line runs as `python SCRIPT ARGS` / `python -m MODULE ARGS` runs it (runpy,
as __main__, sys.argv set), with its own exit code and its own stdout and stderr, captured at
the file descriptors (so a library writing to fd 2 is caught too), and warnings already shown
by an earlier command line shown again. What a shared interpreter cannot show is output printed
once while importing: that lands in the first command line's stderr, so the first test still
fails on it.
"""
import json
import os
import subprocess
import sys
import tempfile

_DRIVER = r'''
import json, os, runpy, sys, tempfile, traceback, warnings
spec = json.loads(sys.argv[1])
initial_filters = list(warnings.filters)
results = []
for argv in spec["argvs"]:
    warnings.resetwarnings()                     # a new registry: warnings shown before show again
    warnings.filters[:] = initial_filters
    captured = [tempfile.TemporaryFile("w+b") for _ in range(2)]
    sys.stdout.flush(), sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    os.dup2(captured[0].fileno(), 1), os.dup2(captured[1].fileno(), 2)
    try:
        target = spec["target"]
        try:
            if target.startswith("-m "):
                sys.argv = [target[3:], *argv]
                runpy.run_module(target[3:], run_name="__main__", alter_sys=True)
            else:
                sys.argv = [target, *argv]
                sys.path[0] = os.path.dirname(os.path.abspath(target))    # as `python SCRIPT` sets it
                runpy.run_path(target, run_name="__main__")
            code = 0
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
        except BaseException:                    # as the interpreter would end: a traceback, exit code 1
            traceback.print_exc()
            code = 1
    finally:
        sys.stdout.flush(), sys.stderr.flush()
        os.dup2(saved[0], 1), os.dup2(saved[1], 2)
        [os.close(fd) for fd in saved]
    out, err = [(f.seek(0), f.read().decode(errors="replace"))[1] for f in captured]
    results.append({"returncode": code, "stdout": out, "stderr": err})
with open(spec["results"], "w") as f:
    json.dump(results, f)
'''


def run_each(target: str, argvs: list[list[str]], cwd, env=None, timeout=600) -> list[subprocess.CompletedProcess]:
    """One CompletedProcess (returncode, stdout, stderr) per command line `python TARGET *argv`,
    all run in one new interpreter in `cwd` with `env`. TARGET: a script's path, or "-m MODULE"."""
    with tempfile.TemporaryDirectory() as tmp:
        results = os.path.join(tmp, "results.json")
        spec = json.dumps({"target": target, "argvs": [list(map(str, a)) for a in argvs], "results": results})
        driver = subprocess.run([sys.executable, "-c", _DRIVER, spec], cwd=cwd, env=env, capture_output=True,
                                text=True, timeout=timeout)
        assert driver.returncode == 0 and os.path.exists(results), driver.stdout[-2000:] + driver.stderr[-3000:]
        with open(results) as f:
            return [subprocess.CompletedProcess([target, *argv], r["returncode"], r["stdout"], r["stderr"])
                    for argv, r in zip(argvs, json.load(f))]
