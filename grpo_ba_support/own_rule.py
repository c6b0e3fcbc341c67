"""grpo_ba_support/own_rule.py -- your own rule, --aggregator FILE.py:FUNCTION (or the function),
trained and recorded as the three are; bad input: a RuleError, one line, exit 2 (code-tour.md)."""
import dataclasses
import hashlib
import importlib.util
import inspect
import math
import os
import re
import traceback

import torch

from grpo_ba_support.coefficients import rule_coefficients


def file_sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


SPEC = re.compile(r"(?P<path>.+\.py):(?P<name>[A-Za-z_]\w*)")
SIGNATURE = "(per_token_loss, mask, advantages, group_size)"
_LOADED = {}                  # spec -> (function, sha256 of its file or None): loaded once


class RuleError(ValueError):
    """A rule that cannot be trained: one line, exit code 2."""


def is_spec(text) -> bool:
    return isinstance(text, str) and SPEC.fullmatch(text) is not None


def name_of(aggregator) -> str:
    """What the log, the story and the figure call a rule: its name, or your function's."""
    if callable(aggregator):
        return getattr(aggregator, "__name__", "own rule")
    return SPEC.fullmatch(aggregator)["name"] if is_spec(aggregator) else str(aggregator)


def function(aggregator):
    """The function of FILE.py:FUNCTION (loaded once) or given; refused unless it takes four."""
    if callable(aggregator):
        return takes_four_arguments(aggregator, name_of(aggregator))
    if aggregator in _LOADED:
        return _LOADED[aggregator][0]
    if not is_spec(aggregator):
        raise RuleError(f"--aggregator {aggregator}: not a rule; give token, sequence, balanced, "
                        f"all, or your own as FILE.py:FUNCTION")
    path, name = SPEC.fullmatch(aggregator).group("path", "name")
    full = os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(full):
        raise RuleError(f"--aggregator {aggregator}: no file {full} (a path is read from the "
                        f"working directory, {os.getcwd()})")
    loader = importlib.util.spec_from_file_location(f"own_rule_{len(_LOADED)}", full)
    module = importlib.util.module_from_spec(loader)
    try:
        loader.loader.exec_module(module)
    except Exception as err:                        # noqa: BLE001 - any error in the file
        looked = (f"; modules are looked for in the working directory {os.getcwd()} and the "
                  f"installed packages" if isinstance(err, ImportError) else "")
        raise RuleError(f"--aggregator {aggregator}: importing {path} failed{_where(err, full)}: "
                        f"{type(err).__name__}: {_first_line(err)}{looked}") from None
    rule = getattr(module, name, None)
    if not callable(rule):
        raise RuleError(f"--aggregator {aggregator}: {full} has no function {name}")
    _LOADED[aggregator] = (rule, file_sha256(full))
    return takes_four_arguments(rule, aggregator)


def takes_four_arguments(rule, spec):
    """The rule, if it can be called as the three rules are; else a RuleError in one line."""
    try:
        inspect.signature(rule).bind(None, None, None, None)
    except (TypeError, ValueError):
        raise RuleError(f"--aggregator {spec}: {name_of(rule)} must take {SIGNATURE}") from None
    return rule


def _first_line(err) -> str:
    return (str(err).strip().splitlines() or [""])[0][:120]


def _where(err, path) -> str:
    """' at FILE:LINE' in the rule's own file, never grpo_ba.py (the course's answer); or ''."""
    lines = [frame.lineno for frame in traceback.extract_tb(err.__traceback__)
             if os.path.abspath(frame.filename) == os.path.abspath(path)]
    if isinstance(err, SyntaxError) and err.filename and os.path.abspath(err.filename) == path:
        lines.append(err.lineno)
    return f" at {os.path.relpath(path)}:{lines[-1]}" if lines else ""


def spec_of(rule) -> str:
    """FILE.py:FUNCTION of a top-level function (resume reloads it), else its name (a cell's)."""
    path, name = inspect.getsourcefile(rule) if inspect.isfunction(rule) else None, name_of(rule)
    module = inspect.getmodule(rule)
    if path and os.path.isfile(path) and getattr(module, name, None) is rule:
        inside = not os.path.relpath(path).startswith("..")          # below the working directory
        spec = f"{os.path.relpath(path) if inside else path}:{name}"
        _LOADED.setdefault(spec, (rule, file_sha256(path)))
        return spec
    _LOADED.setdefault(name, (rule, None))
    return name


def settled(args, saved_sha256=None):
    """args with your rule as its spec, loaded and checked before any file; resumed: same file."""
    aggregator = args.aggregator
    if aggregator in ("all", "token", "sequence", "balanced"):
        return args
    spec = spec_of(aggregator) if callable(aggregator) else aggregator
    check(function(spec), spec, args.group_size, args.micro_batch_size)
    if saved_sha256 and record(spec) and record(spec)["sha256"] != saved_sha256:
        raise RuleError(f"--aggregator {spec}: the file changed since the run started (sha256 "
                        f"{record(spec)['sha256'][:12]}..., recorded {saved_sha256[:12]}...); "
                        f"put the file back as it was to resume, or train the new rule as a new "
                        f"run (another --output-dir, no --resume)")
    return dataclasses.replace(args, aggregator=spec)


def record(aggregator) -> dict | None:
    """What args.json's rule_sha256 and run.json keep of your rule (None: one of the three)."""
    return ({"spec": aggregator, "name": name_of(aggregator), "sha256": _LOADED[aggregator][1]}
            if aggregator in _LOADED else None)


def check(rule, spec, group_size, micro_batch_size=0):
    """Call the rule once on a test batch (two groups of G, binary rewards, random l): a finite
    scalar with a gradient in l, and linear in l if micro-batches split groups (exact share)."""
    takes_four_arguments(rule, spec)
    generator = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 9, (2 * group_size,), generator=generator)
    mask = (torch.arange(8)[None, :] < lengths[:, None]).float()                # (B, T)
    rewards = torch.tensor([1.0, 0.0] * group_size)
    centred = (rewards.view(2, -1) - rewards.view(2, -1).mean(1, keepdim=True)).view(-1)
    advantages = centred / centred.abs().max()
    loss = (torch.randn(mask.shape, generator=generator) * mask).requires_grad_()
    try:
        value = rule(loss, mask, advantages, group_size)
    except Exception as err:                        # noqa: BLE001 - the rule's own error
        path = inspect.getsourcefile(rule) if inspect.isfunction(rule) else None
        where = _where(err, path) if path else ""
        raise RuleError(f"--aggregator {spec}: {name_of(rule)} failed{where} on the test batch "
                        f"it is called on before training (two groups of {group_size}, random "
                        f"token terms): {type(err).__name__}: {_first_line(err)}") from None
    if not isinstance(value, torch.Tensor) or value.numel() != 1:
        shape = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
        raise RuleError(f"--aggregator {spec}: {name_of(rule)} returned {shape}, not a scalar")
    if not math.isfinite(value.item()):
        raise RuleError(f"--aggregator {spec}: {name_of(rule)} returned {value.item()} on the "
                        f"test batch it is called on before training, not a finite number")
    grad = (torch.autograd.grad(value.reshape(()), loss, allow_unused=True)[0]
            if value.requires_grad else None)
    if grad is None:
        raise RuleError(f"--aggregator {spec}: {name_of(rule)} has no gradient in per_token_loss")
    if micro_batch_size and micro_batch_size % group_size:
        coefficients = rule_coefficients(rule, mask, advantages, group_size)        # (B, T)
        if not torch.isclose(value, (coefficients * loss).sum(), rtol=1e-4, atol=1e-6):
            raise RuleError(f"--aggregator {spec}: --micro-batch-size {micro_batch_size} splits "
                            f"groups of {group_size}, exact for a rule linear in l only, and "
                            f"{name_of(rule)} is not; use a multiple of {group_size}")
