"""Time every command of docs/lab-session.md, in its order, in a fresh student copy from a
fresh home, on this machine's AVX2 kernels and one thread: the page's table of each command's
time.

    python scripts/time_lab_plan.py            # from the repository root; minutes

It writes the copy (`python -m exercises.student_copy`, timed too) into a new temporary
directory, sets HOME to a new empty directory, ATEN_CPU_CAPABILITY=avx2 and one thread
(OMP_NUM_THREADS=MKL_NUM_THREADS=1), and runs each command the page gives, in the page's order,
from the copy's root. Where the page says the students have written the exercise functions, it
puts grpo_ba.py's own back into the copy's exercises/math_core.py first (the plan's in-class
check runs once before they are written and once after: see SOLUTIONS_AFTER). Each command's
wall time goes to:

- assets/lab-plan-times/log.txt: the machine (CPU model, cores, torch and its CPU capability),
  then per command its exit code, wall time and the last lines of its output;
- assets/lab-plan-times/times.md: the table, with the machine in its first line;
- docs/lab-session.md: the same table, between its `lab-plan-times` markers.

Meant for the slowest 2-core CPU the course expects (docs/install.md names it); run it on an
otherwise idle machine. tests/course/test_lab_plan.py walks the same commands with the same
code (`walk`) and checks what each prints. The install line (`pip install ...`) is not run.
The warm-up that step 3 loads is trained before the session by its own command
(`python -m exercises.prelab_check --train-warm-ups`), so that command's row holds the warm-up's
time and step 3's runs hold only their GRPO steps.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(REPO, "docs", "lab-session.md")
OUT = os.path.join(REPO, "assets", "lab-plan-times")
BEGIN, END = "<!-- lab-plan-times: begin -->", "<!-- lab-plan-times: end -->"
COPY_COMMAND = "python -m exercises.student_copy DIR"
IN_CLASS = ("group_advantages", "aggregate_sequence", "aggregate_token")
AFTER_CLASS = ("aggregate_balanced", "sign_weights")
TIMED_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
COMMAND = re.compile(r"^ {4,}((?:python|jupyter) .*)$")


def when(section: str, step: str) -> str:
    """A short name for the part of the plan a `## ` section (and a **Step N** in it) is."""
    if section.startswith("The students' copy"):
        return "the instructor, before"
    if section.startswith("Before the session"):
        return "before the session"
    if section.startswith("Predict, then run"):
        return f"predict-then-run, {step.lower()}" if step else "predict-then-run"
    minutes = re.search(r"minutes (\d+-\d+)", section)
    if minutes:
        return f"minutes {minutes.group(1)}"
    if section.startswith("After the session"):
        return "after the session"
    return section


def plan_commands(text: str) -> list[tuple[str, str]]:
    """[(when, command)] of every command line of the page (an indented code line that starts
    with `python` or `jupyter`), in the page's order, with the part of the plan it belongs to."""
    section, step, found = "", "", []
    for line in text.splitlines():
        if line.startswith("## "):
            section, step = line[3:].strip(), ""
        if line.startswith("**Step "):
            step = line[2:].split(",")[0].split("**")[0].strip()
        match = COMMAND.match(line)
        if match:
            found.append((when(section, step), match.group(1).strip()))
    return found


def solutions_to_write(command: str, checks_seen: int) -> tuple:
    """The exercise functions the plan says are written before `command` runs, given how many
    `exercises.check` commands ran before it: the in-class check runs first on the stubs, and
    again once the three are written (this walk runs it twice); the check after the session
    needs all five."""
    if command.startswith("python -m exercises.check "):            # the in-class check
        return IN_CLASS if checks_seen >= 1 else ()
    if command == "python -m exercises.check" or "math_core.py:" in command:
        return IN_CLASS + AFTER_CLASS
    return ()


def write_solutions(copy: str, functions) -> None:
    """The student has written `functions`: grpo_ba.py's own, imported over the copy's stubs."""
    if not functions:
        return
    path = os.path.join(copy, "exercises", "math_core.py")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    marker = "# written by the student (tests/course/test_lab_plan.py's stand-in)"
    text = text.split("\n" + marker, 1)[0]
    with open(path, "w", encoding="utf-8") as f:
        f.write(text + f"\n{marker}\nfrom grpo_ba import {', '.join(functions)}  # noqa: E402,F401\n")


def argv_of(command: str, copy: str) -> list[str]:
    argv = shlex.split(command)
    if argv[0] == "python":
        argv[0] = sys.executable
    elif argv[0] == "jupyter":
        argv[0] = os.path.join(os.path.dirname(sys.executable), "jupyter")
    return [copy if word == "DIR" else word for word in argv]


def walk(workdir: str, env: dict | None = None, log=print, timeout: int = 3600) -> list[dict]:
    """Run the page's commands in order: the copy first (from the repository, into
    `workdir`/copy), then each command from the copy's root, with HOME a new empty directory.
    -> [{"section", "command", "returncode", "seconds", "output", "written"}], one per command."""
    copy = os.path.join(workdir, "copy")
    home = os.path.join(workdir, "home")
    os.makedirs(home)
    env = {key: value for key, value in {**os.environ, **(env or {})}.items()     # no cache, no
           if key not in ("XDG_CACHE_HOME", "PYTHONPATH") and not key.startswith("GRPO_BA")}  # overrides
    env["HOME"] = home
    with open(PAGE, encoding="utf-8") as f:
        commands = plan_commands(f.read())
    results, checks_seen = [], 0
    for section, command in commands:
        cwd = REPO if command == COPY_COMMAND else copy
        runs = 2 if command.startswith("python -m exercises.check ") else 1   # stubs, then written
        for attempt in range(runs):
            written = solutions_to_write(command, checks_seen)
            write_solutions(copy, written)
            started = time.monotonic()
            done = subprocess.run(argv_of(command, copy), cwd=cwd, env=env, capture_output=True,
                                  text=True, timeout=timeout)
            seconds = time.monotonic() - started
            if "exercises.check" in command:
                checks_seen += 1
            results.append({"section": section, "command": command, "returncode": done.returncode,
                            "seconds": seconds, "output": done.stdout + done.stderr, "written": written})
            log(f"{done.returncode:3d} {seconds:7.1f} s  {command}"
                + (f"   (written: {', '.join(written)})" if written else ""))
    return results


def machine(env: dict) -> str:
    """CPU model, cores, Python, torch and the CPU capability torch uses under `env`."""
    model = "unknown CPU"
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        model = names[0] if names else model
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__, "
                            "torch.backends.cpu.get_cpu_capability(), torch.get_num_threads())"],
                           env={**os.environ, **env}, capture_output=True, text=True)
    version, capability, threads = (probe.stdout.split() + ["?", "?", "?"])[:3]
    return (f"{model}, {os.cpu_count()} cores, {platform.system()} {platform.machine()}, Python "
            f"{platform.python_version()}, torch {version} (CPU capability {capability}, {threads} thread(s))")


def table(results: list[dict], where: str, when: str) -> str:
    lines = [f"Measured by `python scripts/time_lab_plan.py` on {when}: {where}; "
             f"{', '.join(f'{k}={v}' for k, v in TIMED_ENV.items())}; a fresh copy, a fresh home. "
             "One run each.", "",
             "| # | when | command | wall time |", "|---|---|---|---|"]
    for k, r in enumerate(results, 1):
        note = f" (exit {r['returncode']})" if r["returncode"] else ""
        written = f" (with {', '.join(r['written'])} written)" if r["written"] else ""
        lines.append(f"| {k} | {r['section']} | `{r['command']}`{written} | {r['seconds']:.1f} s{note} |")
    return "\n".join(lines)


def put_on_page(text: str, block: str) -> str:
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[:start] + "\n" + block + "\n" + text[end:]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/time_lab_plan.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=OUT, help="where times.md and log.txt go (default: %(default)s)")
    parser.add_argument("--no-page", action="store_true", help="leave docs/lab-session.md as it is")
    args = parser.parse_args(argv)
    where = machine(TIMED_ENV)
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"machine: {where}")
    with tempfile.TemporaryDirectory(prefix="lab-plan-") as workdir:
        results = walk(workdir, env=TIMED_ENV)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "log.txt"), "w", encoding="utf-8") as f:
        f.write(f"machine: {where}\nwhen: {when}\nenv: {TIMED_ENV}\n\n")
        for r in results:
            tail = "\n".join(r["output"].rstrip().splitlines()[-15:])
            f.write(f"$ {r['command']}\n# section: {r['section']}; written: {list(r['written'])}; "
                    f"exit {r['returncode']}; {r['seconds']:.1f} s\n{tail}\n\n")
    block = table(results, where, when)
    with open(os.path.join(args.out, "times.md"), "w", encoding="utf-8") as f:
        f.write(block + "\n")
    if not args.no_page:
        with open(PAGE, encoding="utf-8") as f:
            text = f.read()
        with open(PAGE, "w", encoding="utf-8") as f:
            f.write(put_on_page(text, block))
    print(block)
    failed = [r for r in results if r["returncode"] and not (
        r["command"].startswith("python -m exercises.check ") and not r["written"])]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
