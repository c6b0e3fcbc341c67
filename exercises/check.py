"""Check the exercises against the project's own claims.

    python -m exercises.check                         # exercises/math_core.py, every function
    python -m exercises.check aggregate_token         # only these functions
    python -m exercises.check --solution              # the same claims against grpo_ba (all pass)
    python -m exercises.check --module my_answers     # exercises/my_answers.py, a copy of math_core.py
    python -m exercises.check --module exercises.my_answers   # the same; any importable module works

The claims are the tests of tests/course/test_math_core.py tagged `@checks(function)`; this
script runs them with pytest, with GRPO_BA_MATH_CORE naming the module under test, and
prints per function "passed" or the claims that failed and why, each cause once, and where in
the module under test it arose (never a line of grpo_ba.py, the solution); under a failed
comparison, what the student's code gave and what the claim expected, one line each (values
only: never the solution's code, nor where it lives). A function whose
signature the claims cannot call is reported in one line, and its claims are not run. Exit
code 0 when every checked function passes, 1 while any fails, 2 for bad usage. From inside
exercises/ it runs too (exercises/exercises/ stands in for the package there).
"""
from __future__ import annotations

import argparse
import importlib
import inspect
import linecache
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLAIMS = os.path.join(ROOT, "tests", "course", "test_math_core.py")
FUNCTIONS = ("group_advantages", "aggregate_sequence", "aggregate_token", "aggregate_balanced", "sign_weights")
STUBS, SOLUTION = "exercises.math_core", "grpo_ba"


class ClaimCollector:
    """pytest plugin: keeps the claims about the wanted functions, records each outcome."""

    def __init__(self, functions, module_file=None):
        self.module_file = module_file                       # the only file a reason may point into
        self.results = {name: [] for name in functions}     # function -> [(claim, passed, why)]
        self.functions_of = {}                               # test node id -> functions it checks
        self.outcome = {}                                    # test node id -> (passed, why)
        self.values = {}                                     # test node id -> (got, expected), in words
        self.compared = None                                 # the running claim's failed comparison

    def pytest_collection_modifyitems(self, session, config, items):
        kept, dropped = [], []
        for item in items:
            params = item.callspec.params if hasattr(item, "callspec") else {}
            names = [tag.format(**params) for tag in getattr(getattr(item, "function", None), "checks", ())]
            names = [n for n in names if n in self.results]
            if names:
                self.functions_of[item.nodeid] = names
                kept.append(item)
            else:
                dropped.append(item)
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept

    def pytest_runtest_logstart(self, nodeid, location):
        self.compared = None

    def pytest_assertrepr_compare(self, config, op, left, right):
        """A claim's `assert got OP expected` failed: keep both sides (pytest's message stays)."""
        self.compared = (op, left, right)

    def recording(self, name, function):
        """torch.allclose or torch.equal, keeping (got, expected) when it answers False."""
        def compare(got, expected, *args, **kwargs):
            same = function(got, expected, *args, **kwargs)
            if not same:
                self.compared = (name, got, expected)
            return same
        return compare

    def pytest_runtest_logreport(self, report):
        if report.nodeid not in self.functions_of:
            return
        if report.failed:
            self.outcome[report.nodeid] = (False, _why(report, self.module_file))
            if report.when == "call" and self.compared and _failed_assertion(report):
                self.values[report.nodeid] = got_and_expected(*self.compared)
        elif report.when == "call" and report.nodeid not in self.outcome:
            self.outcome[report.nodeid] = (True, "")

    def pytest_sessionfinish(self, session):
        for nodeid, names in self.functions_of.items():
            passed, why = self.outcome.get(nodeid, (False, "did not run"))
            claim = nodeid.split("::", 1)[-1]
            for name in names:
                self.results[name].append((claim, passed, why, self.values.get(nodeid)))


def _failed_assertion(report) -> bool:
    """Whether `report` failed on an assertion of the claims file, not on an exception."""
    crash = getattr(report.longrepr, "reprcrash", None)
    return (crash is not None and os.path.abspath(crash.path) == CLAIMS
            and crash.message.lstrip().startswith(("assert", "AssertionError")))


def _words(value, limit: int = 90) -> str:
    """A value as a student reads it: numbers to 6 digits, a tensor as its numbers."""
    import torch
    if isinstance(value, torch.Tensor):
        value = value.detach()
        value = value.item() if value.numel() == 1 else value.tolist()
    if type(value).__name__.startswith("Approx") and hasattr(value, "expected"):     # pytest.approx(x)
        tolerance = getattr(value, "tolerance", None)                              # a scalar's
        return _words(value.expected, limit) + (f" (within {tolerance:.2g})" if tolerance is not None else
                                                 " (approximately)")
    if isinstance(value, float):
        text = f"{value:.6g}"
    elif isinstance(value, (list, tuple)):
        inner = ", ".join(_words(v, limit) for v in value)
        text = f"[{inner}]" if isinstance(value, list) else f"({inner})"
    else:
        text = repr(value)                              # pytest.approx: `0.4 ± 1.0e-07`
    return text if len(text) <= limit else text[:limit - 3] + "..."


def got_and_expected(op: str, got, expected) -> tuple[str, str]:
    """(what the student's code gave, what the claim expected), in words, of a failed comparison;
    a tensor of more than 6 numbers at its first entry that differs."""
    import torch
    tensors = isinstance(got, torch.Tensor) and isinstance(expected, torch.Tensor)
    if tensors and got.shape == expected.shape and got.numel() > 6:
        differ = ~torch.isclose(got.detach().double(), expected.detach().double(), atol=1e-6, equal_nan=True)
        if differ.any():
            at = tuple(int(i) for i in differ.nonzero()[0])
            where = f" at [{', '.join(map(str, at))}] of a {tuple(got.shape)} tensor"
            return _words(got[at]) + where, _words(expected[at]) + where
    said = {"allclose": "", "equal": "", "==": "", "!=": "anything but "}.get(op, f"{op} ") + _words(expected)
    if tensors and got.shape != expected.shape:
        return f"{_words(got)} (shape {tuple(got.shape)})", f"{said} (shape {tuple(expected.shape)})"
    return _words(got), said


def _why(report, module_file=None) -> str:
    """One line that says what went wrong: the failed assertion's line of the claims, or the
    exception raised and the deepest line of `module_file` (the module under test) it passed
    through; a line of any other file, grpo_ba.py's solution above all, is never named."""
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is None:
        return str(report.longrepr).strip().splitlines()[-1][:200]
    message = next((line for line in crash.message.splitlines() if line.strip()), "failed")
    if message.startswith(("assert", "AssertionError")) and os.path.abspath(crash.path) == CLAIMS:
        message = linecache.getline(crash.path, crash.lineno).strip() or message
    entries = getattr(getattr(report.longrepr, "reprtraceback", None), "reprentries", [])
    places = [entry.reprfileloc for entry in entries if getattr(entry, "reprfileloc", None)]
    mine = [loc for loc in places if module_file and os.path.abspath(loc.path) == module_file]
    if mine and os.path.abspath(crash.path) != CLAIMS:
        inside = module_file.startswith(os.path.join(ROOT, ""))
        message += f"  ({os.path.relpath(module_file, ROOT) if inside else module_file}:{mine[-1].lineno})"
    return message[:200]


def plain_signature(function) -> str:
    """`(a, b, scale='std')`: the parameters, without annotations."""
    signature = inspect.signature(function)
    return str(signature.replace(parameters=[p.replace(annotation=p.empty) for p in signature.parameters.values()],
                                 return_annotation=signature.empty))


def call_problem(module, name: str) -> str | None:
    """Why the claims cannot call `module.name` as they call the stub's (the reference's
    parameters: the required ones by position, the others by name), or None."""
    function, reference = getattr(module, name, None), getattr(importlib.import_module(SOLUTION), name)
    if not callable(function):
        return f"missing: {module.__name__} has no function {name} (restore its stub, {STUBS}'s)"
    wanted = inspect.signature(reference).parameters.values()
    try:
        inspect.signature(function).bind(*[p.name for p in wanted if p.default is p.empty],
                                         **{p.name: p.default for p in wanted if p.default is not p.empty})
    except (TypeError, ValueError) as err:
        return (f"wrong signature: yours is {name}{plain_signature(function)}, the claims call "
                f"{name}{plain_signature(reference)} ({err})")
    return None


def run_claims(module: str, functions=FUNCTIONS, module_file=None) -> dict:
    """{function: [(claim, passed, why, (got, expected) or None)]} for the claims about
    `functions` in `module`."""
    import pytest
    import torch
    os.environ["GRPO_BA_MATH_CORE"] = module
    collector = ClaimCollector(functions, module_file)
    originals = {"allclose": torch.allclose, "equal": torch.equal}    # the claims compare tensors with these
    for name, function in originals.items():
        setattr(torch, name, collector.recording(name, function))
    try:
        exit_code = pytest.main(["-p", "no:cacheprovider", "-p", "no:terminal", "-W", "ignore", f"--rootdir={ROOT}",
                                 CLAIMS], plugins=[collector])
    finally:
        for name, function in originals.items():
            setattr(torch, name, function)
    if exit_code not in (0, 1, 5):                 # 5: no claims collected, reported per function
        raise RuntimeError(f"pytest could not run {CLAIMS} (exit code {int(exit_code)})")
    return collector.results


def report(results: dict) -> tuple[str, bool]:
    """Per function: passed (n claims), the failed claims with why, or (a str) why its claims did
    not run; under a failed comparison, what the student's code gave and what the claim expected
    (of its first claim, when several share the cause). -> (text, all passed)."""
    lines, all_passed = [], True
    for name, claims in results.items():
        if isinstance(claims, str):                  # not run: why the claims cannot call it
            lines.append(f"{name:20s} {claims}")
            all_passed = False
            continue
        failed = [(claim, why, values[0] if values else None)
                  for claim, passed, why, *values in claims if not passed]
        if not claims:
            lines.append(f"{name:20s} no claims found")
            all_passed = False
        elif not failed:
            lines.append(f"{name:20s} passed ({len(claims)} claim{'s' * (len(claims) != 1)})")
        elif all(why.startswith("NotImplementedError") for _, why, _ in failed) and len(failed) == len(claims):
            all_passed = False
            lines.append(f"{name:20s} not implemented yet ({len(claims)} claims to pass)")
        else:
            all_passed = False
            lines.append(f"{name:20s} FAILED {len(failed)} of {len(claims)} claims")
            by_why = {}                                  # one cause, told once
            for claim, why, values in failed:
                by_why.setdefault(why, []).append((claim, values))
            for why, told in by_why.items():
                lines.append(f"    {told[0][0]}: {why}" if len(told) == 1 else
                             f"    {len(told)} claims ({told[0][0]}, ...): {why}")
                if told[0][1]:
                    got, expected = told[0][1]
                    lines += [f"        got:      {got}", f"        expected: {expected}"]
    return "\n".join(lines), all_passed


def resolve_module(name: str, root: str = ROOT) -> str:
    """The module --module names: an importable name as it is (from `root` too), a bare name of a
    file in exercises/ as `exercises.NAME` (a copy of math_core.py placed beside it), and a path to
    a .py file in `root` as its dotted name (exercises/my_answers.py: exercises.my_answers)."""
    if name.endswith(".py"):
        path = os.path.relpath(os.path.abspath(name), root)
        return name if path.startswith("..") else path[:-3].replace(os.sep, ".")
    course = os.path.join(root, *name.split("."))           # a module of the course wins
    if "." not in name and not (os.path.exists(course + ".py") or os.path.isdir(course)) \
            and os.path.exists(os.path.join(root, "exercises", name + ".py")):
        return "exercises." + name
    return name                                          # as given: importable, or a clear import error


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m exercises.check", description=__doc__.split("\n\n")[0])
    parser.add_argument("functions", nargs="*", metavar="FUNCTION", help="check only these: " + ", ".join(FUNCTIONS))
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--solution", action="store_true", help=f"check {SOLUTION} (the reference) instead of the stubs")
    which.add_argument("--module", default=STUBS, help="the module under test: a dotted name, a file of exercises/ "
                       "by its bare name (my_answers: exercises/my_answers.py) or a .py path (default: %(default)s)")
    args = parser.parse_args(argv)
    unknown = [f for f in args.functions if f not in FUNCTIONS]
    if unknown:
        print(f"exercises.check: error: unknown function {unknown[0]!r}; choose from {', '.join(FUNCTIONS)}", file=sys.stderr)
        return 2
    if args.module.endswith(".py") and not os.path.exists(args.module):
        print(f"exercises.check: error: no file {args.module} (looked for {os.path.abspath(args.module)}); "
              f"copy exercises/math_core.py there, or name another file", file=sys.stderr)
        return 2
    if not os.path.exists(CLAIMS):
        print(f"exercises.check: error: the claims file is missing (looked for {CLAIMS}); copy "
              f"tests/course/test_math_core.py back from the course repository", file=sys.stderr)
        return 2
    module = SOLUTION if args.solution else resolve_module(args.module)
    sys.path.insert(0, ROOT)
    try:
        imported = importlib.import_module(module)
    except ModuleNotFoundError as err:          # the module itself, or a package it needs
        looked = [os.path.join(ROOT, *module.split(".")) + ".py"]
        looked += [os.path.join(ROOT, "exercises", module + ".py")] * ("." not in module)
        if module.startswith(str(err.name)) and not any(map(os.path.exists, looked)):
            print(f"cannot import {module}: no file {' or '.join(looked)}; copy exercises/math_core.py to "
                  f"{os.path.relpath(looked[-1], ROOT)}, or name another file with --module")
        else:
            print(f"cannot import {module}: {err}; if the course installs it, install the course from {ROOT}: "
                  f"pip install -r requirements.txt -c requirements/lock.txt")
        return 1
    except Exception as err:                    # a student's syntax error is a failure, not a crash
        print(f"cannot import {module}: {type(err).__name__}: {err}")
        return 1
    print(f"checking {module} against the claims of tests/course/test_math_core.py")
    wanted = args.functions or FUNCTIONS
    uncallable = {name: call_problem(imported, name) for name in wanted}
    try:
        results = run_claims(module, [name for name in wanted if not uncallable[name]],
                             os.path.abspath(imported.__file__))
    except RuntimeError as err:
        print(f"exercises.check: error: {err}", file=sys.stderr)
        return 2
    text, all_passed = report({name: uncallable[name] or results[name] for name in wanted})
    print(text)
    return 0 if all_passed else 1


if __name__ == "__main__":
    sys.exit(main())
