"""grpo_ba_lab/plumbing/run_config.py -- a run's settings from a file, and where a run ran.

    settings = read_config("run.yaml", Args)     # --config FILE: JSON or YAML, flat
    write_provenance(run_dir, device)            # run.json: what produced the run

`read_config` reads a JSON object (a run's own args.json works as one) or a YAML
mapping. Keys may be written as flags (`group-size`, `--group-size`) or as fields
(`group_size`); each becomes an Args field name. An unknown key, or a value of the
wrong kind, is refused in one line naming the file and the key. It returns only the
keys the file sets, so the caller decides what wins: the usual order is Args' defaults,
then a --preset or --design, then the file, then the flags typed.

`provenance` says what produced a run: library versions, the git commit of this code
(None outside a checkout, with a flag for uncommitted changes), the device and its
accelerator. The CPU model, torch's CPU capability, the threads and torch's version are
toy_tasks.model.machine_variant's; `write_provenance` records both, once per start, in run.json.

--config ignores the keys that are not settings (`output_dir`, `resume`, `config`:
where a run goes is typed, and a run's args.json names its own directory) and the
settings that are not fields (grpo_ba_args.NOT_SETTINGS): `read_config(...,
ignore=...)`.
"""
from __future__ import annotations

import dataclasses
import datetime
import difflib
import importlib.metadata
import json
import os
import platform
import subprocess

from grpo_ba_support.run import SetupError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # the checkout this code sits in
PACKAGES = ("grpo-ba", "transformers", "tokenizers", "safetensors", "accelerate", "datasets", "numpy",
            "sympy", "peft", "trl", "verl", "vllm", "flash-attn")


class ConfigError(SetupError):
    """A --config file that cannot be used: one line, exit code 2."""


# ------------------------------------------------------------------ --config FILE

def _defaults(fields) -> dict:
    """{name: default} of a dataclass (class or instance) or a dict of defaults."""
    if dataclasses.is_dataclass(fields):
        return {f.name: f.default for f in dataclasses.fields(fields)}
    return dict(fields)


def _load(path: str):
    try:
        with open(os.path.expanduser(path)) as f:
            text = f.read()
    except OSError as err:
        raise ConfigError(f"--config {path}: {err.strerror}") from None
    if path.lower().endswith(".json"):
        try:
            return json.loads(text)
        except json.JSONDecodeError as err:
            raise ConfigError(f"--config {path}: not valid JSON (line {err.lineno}: {err.msg})") from None
    try:
        import yaml
    except ImportError:
        raise ConfigError(f"--config {path}: a YAML file needs PyYAML: pip install pyyaml (or give a .json file)") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark else ""
        raise ConfigError(f"--config {path}: not valid YAML ({where}{getattr(err, 'problem', None) or err})") from None


def _field_name(key) -> str:
    return str(key).lstrip("-").replace("-", "_")


def _converted(value, default, where: str):
    """The value in the kind its field holds (the default's type), or a ConfigError."""
    def wrong(kind):
        return ConfigError(f"{where} must be {kind}, got {json.dumps(value, default=str)}")
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise wrong("true or false")
        return value
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise wrong("a whole number")
        return value
    if isinstance(default, float):
        if isinstance(value, str):                   # PyYAML reads 1e-4 (no dot) as a string
            try:
                return float(value)
            except ValueError:
                raise wrong("a number") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise wrong("a number")
        return float(value)
    if isinstance(default, tuple):                   # several values after one flag: a list, as argparse gives
        values = [value] if isinstance(value, str) else value
        if not isinstance(values, (list, tuple)) or not all(isinstance(v, (str, int, float)) and not isinstance(v, bool)
                                                            for v in values):
            raise wrong("a list of values")
        return [str(v) for v in values]
    if isinstance(default, str):
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise wrong("a string")
        return str(value)                            # YAML reads `model: 7` as a number
    return value


def read_config(path: str, fields, ignore=()) -> dict:
    """{Args field name: value} of the settings `path` sets. `fields`: the Args
    dataclass (or a dict of defaults), which names the settings and their kinds;
    keys named in `ignore` (as fields) are skipped."""
    defaults = _defaults(fields)
    data = _load(path)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: expected one mapping of settings (key: value), got a {type(data).__name__}")
    settings, seen = {}, {}
    for key, value in data.items():
        name = _field_name(key)
        if name in ignore:
            continue
        if name not in defaults:
            close = difflib.get_close_matches(name, defaults, n=1)
            hint = f" (did you mean {close[0].replace('_', '-')}?)" if close else " (python grpo_ba.py --help lists them)"
            raise ConfigError(f"--config {path}: unknown setting {key!r}{hint}")
        if name in seen:
            raise ConfigError(f"--config {path}: {key!r} and {seen[name]!r} set the same setting")
        seen[name] = key
        settings[name] = _converted(value, defaults[name], f"--config {path}: {key!r}")
    return settings


# ------------------------------------------------------------------ provenance

def _version(name: str):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _git(*argv) -> str | None:
    try:
        done = subprocess.run(["git", "-C", ROOT, *argv], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_state() -> dict:
    """{"commit": sha or None, "dirty": bool or None}: the checkout this code runs from
    (None when installed, or when git is missing). dirty: tracked files differ from the commit."""
    top = _git("rev-parse", "--show-toplevel")
    if not top or os.path.realpath(top) != os.path.realpath(ROOT):   # not a checkout of its own (site-packages)
        return {"commit": None, "dirty": None}
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {"commit": _git("rev-parse", "HEAD"), "dirty": None if status is None else bool(status)}


def provenance(device) -> dict:
    """What produced a run besides the machine variant, as one JSON-ready dict: the
    machine variant (CPU model, torch's CPU capability, threads, torch's version) is
    toy_tasks.model.machine_variant's, recorded beside it in run.json, never twice. `device`: the
    torch.device (or its name) the run trains on."""
    import torch
    device = torch.device(device)
    accelerator = None
    if device.type == "cuda" and torch.cuda.is_available():
        index = device.index if device.index is not None else torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        accelerator = {"name": props.name, "memory_gib": round(props.total_memory / 2**30, 1),
                       "capability": f"{props.major}.{props.minor}", "count": torch.cuda.device_count()}
    return {
        "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "git": git_state(),
        "python": platform.python_version(),
        "packages": {name: _version(name) for name in PACKAGES},
        "torch_cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "device": str(device),
        "accelerator": accelerator,
        "cpu_cores": os.cpu_count(),
        "platform": platform.platform(),
    }


def write_provenance(run_dir: str, device, start_step: int = 0, warmup: dict | None = None) -> str:
    """Record this start (or resume) of a run in RUN_DIR/run.json: the step it starts
    at, the machine variant, this provenance and the warm-up (grpo_ba_run.record_start).
    Each start gets its own: a resumed run may run other code on another machine.
    Returns run.json's path."""
    from grpo_ba_support import run as grpo_ba_run
    grpo_ba_run.record_start(run_dir, start_step, warmup, provenance(device))
    return os.path.join(run_dir, "run.json")
