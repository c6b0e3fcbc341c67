"""grpo_ba_lab/plumbing/run_io.py -- a run on disk and on this machine: its directory, metrics.jsonl,
checkpoints, and the device and threads it runs with.

Nothing here is the algorithm; it is what makes a run survive Ctrl-C, a hard kill and
a file handed over by someone else:
- metrics are appended one JSON line per step; a kill during the append leaves a torn
  *last* line, which readers drop with a note (a bad line elsewhere is an error);
- checkpoints are written to a temporary file, synced and renamed, and hold only what
  `torch.load(weights_only=True)` accepts (tensors, state dicts, numbers, strings,
  tuples, lists, dicts), so loading one never runs code from it;
- a checkpoint also keeps the metrics lines of the steps it covers since the previous
  one, so a metrics file left behind its checkpoint (a power cut tore or lost its last
  line) is restored from it, by a resume and by the sweep's and regime map's skip logic;
- a resume checks everything (checkpoint, model shapes, metrics) before it changes
  anything in the run directory, then drops the metrics lines written after the
  checkpoint so the file reads as if the run had never stopped.
Every problem is a `RunError`: one line naming the file, exit code 2 in grpo_ba.main.
"""
from __future__ import annotations

import glob
import json
import math
import os
import pickle
import random
import sys
import warnings

import torch


class RunError(ValueError):
    """A run directory or checkpoint that cannot be used: one line, exit code 2."""


def _note(message):
    print(message, file=sys.stderr)


# ------------------------------------------------------------------ where a run runs

def pick_device(requested: str) -> torch.device:
    """'auto' -> cuda, then Apple's mps, then cpu; an explicit choice must be available."""
    cuda, mps = torch.cuda.is_available(), torch.backends.mps.is_available()
    if requested == "auto":
        return torch.device("cuda" if cuda else "mps" if mps else "cpu")
    if requested == "cuda" and not cuda:
        raise RunError("--device cuda: no CUDA device is available here (try --device auto)")
    if requested == "mps" and not mps:
        raise RunError("--device mps: Apple's MPS backend is not available here (try --device auto)")
    return torch.device(requested)


TOY_THREADS = 2      # measured best for the toy on an idle 2-core machine (docs/robustness.md)


def pick_threads(requested: int, real_model: bool) -> int:
    """--threads, or when 0 (auto): the toy's measured best, and for --model every core
    this process may use."""
    if requested > 0:
        return requested
    if not real_model:
        return TOY_THREADS
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo, else platform), e.g. 'AMD EPYC 7B13'."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform
    return platform.processor() or platform.machine()


def machine_variant() -> dict:
    """What sets this process's floating-point path: the CPU, the kernels torch chose
    (`ATEN_CPU_CAPABILITY` forces them), the threads and torch's version. The toy's long
    trainings are chaotic in it (docs/toy-designs.md), so every run records it."""
    return {"cpu_model": cpu_model(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "aten_cpu_capability": os.environ.get("ATEN_CPU_CAPABILITY", ""),
            "threads": torch.get_num_threads(), "torch": torch.__version__}


def record_start(run_dir: str, start_step: int, warmup: dict | None, provenance: dict | None = None):
    """Append this start (or resume) of a run to run.json: the step it starts at, the
    machine variant, what else produced it (run_config.provenance: versions, commit,
    device) and the warm-up it starts from (None: a model loaded as it is)."""
    record = read_run_record(run_dir) if start_step > 0 else {"starts": []}
    start = {"step": start_step, "machine": machine_variant(), "warmup": warmup}
    if provenance is not None:
        start["provenance"] = provenance
    record["starts"].append(start)
    write_atomic(os.path.join(run_dir, "run.json"), json.dumps(record, indent=2))


def read_run_record(run_dir: str) -> dict:
    """run.json of a run ({'starts': []} for runs older than the record)."""
    path = os.path.join(run_dir, "run.json")
    if not os.path.exists(path):
        return {"starts": []}
    with open(path) as f:
        return json.load(f)


def autocast_dtype(device_type: str, dtype: str, log=_note) -> str:
    """`dtype` ("bfloat16", "float16") if autocast on this device computes in it, else
    "float32" with a one-line note. torch either raises (bf16 on an old GPU) or warns
    and disables autocast (a dtype the device lacks)."""
    if dtype == "float32":
        return dtype
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            torch.autocast(device_type, dtype=getattr(torch, dtype))
            supported = not any("not supported" in str(w.message) for w in caught)
        except (RuntimeError, ValueError):
            supported = False
    if not supported:
        log(f"note: {device_type} autocast does not support {dtype} here; computing in float32")
        return "float32"
    return dtype


# ------------------------------------------------------------------ the run directory

def prepare_output_dir(out: str) -> str:
    """Create `out` and make sure it can be written, or fail with one clear line."""
    try:
        os.makedirs(out, exist_ok=True)
        probe = os.path.join(out, ".write_test")
        open(probe, "w").close()
        os.remove(probe)
    except OSError as err:
        raise ValueError(f"cannot write to output directory {out!r}: {err.strerror}") from None
    return out


def _json_line(metrics: dict) -> str:
    """One JSON object per line; NaN and inf (not JSON) become null."""
    clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in metrics.items()}
    return json.dumps(clean) + "\n"


def append_metrics(path: str, metrics: dict) -> str:
    """One line per step, synced: a power cut loses at most the line being written.
    Returns the line, for the next checkpoint to keep."""
    line = _json_line(metrics)
    with open(path, "a") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())
    return line


def _sync_directory(path: str):
    """A rename reaches the disk with its directory's entry: sync that too (POSIX)."""
    try:
        fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    except OSError:                                # e.g. Windows: directories cannot be opened
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomic(path: str, text: str):
    """Replace `path` by `text` atomically (temp file, sync, rename): a kill keeps the old file."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _sync_directory(path)


def write_jsonl(path: str, records: list[dict]):
    """Rewrite a JSONL file (metrics.jsonl, completions.jsonl) atomically, a line per record."""
    write_atomic(path, "".join(_json_line(r) for r in records))


def read_metrics(path: str, log=_note) -> list[dict]:
    """The metrics of a run, one dict per line. A torn last line (a kill during the
    append) is dropped with a note; a bad line anywhere else is a RunError naming it."""
    with open(path, "rb") as f:
        lines = [(number, raw) for number, raw in enumerate(f.read().split(b"\n"), 1) if raw.strip(b" \t\r\x00")]
    metrics = []
    for number, raw in lines:
        try:
            record = json.loads(raw.decode())
            if not isinstance(record, dict) or not isinstance(record.get("step"), int):
                raise ValueError("not a metrics record")
        except ValueError as err:                  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            if number == lines[-1][0]:
                log(f"note: {path}: dropped its torn last line {number} (a run killed while writing it)")
                break
            raise RunError(f"{path}: line {number} is not a metrics record ({str(err).splitlines()[0][:80]}); "
                           f"fix or remove that line") from None
        metrics.append(record)
    return metrics


def read_args(run_dir: str) -> dict:
    """args.json of a run directory, or a RunError naming the file."""
    path = os.path.join(run_dir, "args.json")
    try:
        with open(path) as f:
            saved = json.load(f)
    except OSError as err:
        raise RunError(f"cannot resume from {run_dir!r}: {path}: {err.strerror}") from None
    except ValueError as err:
        raise RunError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(saved, dict):
        raise RunError(f"{path}: not the settings of a run (expected one JSON object)")
    return saved


def write_args(run_dir: str, args: dict):
    write_atomic(os.path.join(run_dir, "args.json"), json.dumps(args, indent=2))


# Flags that change where or how fast a run runs, or what it prints, but not what it
# computes: a resumed run may take new values (another machine, another GPU).
MACHINE_FLAGS = ("threads", "device", "cache_dir", "micro_batch_size", "gradient_checkpointing",
                 "attn_implementation", "rollout_engine", "log_every", "save_every", "report_to",
                 "completions")      # and what a run reports: never what it computes


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def resumed_args(run_dir: str, given: dict, defaults: dict) -> dict:
    """The settings of a resumed run: args.json of `run_dir` (a setting it lacks takes
    its default), then the flags the user typed (`given`). --steps extends or shortens
    the run (checked against the checkpoint later); machine flags may change; any other
    flag must equal the saved value."""
    saved = read_args(run_dir)
    unknown = sorted(set(saved) - set(defaults))
    if unknown:
        raise RunError(f"{os.path.join(run_dir, 'args.json')}: unknown setting {unknown[0]!r} "
                       f"(written by another version of grpo_ba.py?)")
    merged = {**defaults, **saved, "resume": run_dir, "output_dir": run_dir}
    for name, value in given.items():
        flag = _flag(name)
        if name == "output_dir":
            if os.path.abspath(value) != os.path.abspath(run_dir):
                raise RunError(f"{flag} {value}: a resumed run writes into its own directory {run_dir!r}")
        elif name in ("steps", *MACHINE_FLAGS):
            merged[name] = value
        elif name != "resume" and value != merged[name]:
            raise RunError(f"{flag} {value} differs from {merged[name]!r} in {os.path.join(run_dir, 'args.json')}; "
                           f"on resume only --steps and machine flags can change ({', '.join(_flag(n) for n in MACHINE_FLAGS)})")
    return merged


# ------------------------------------------------------------------ checkpoints

CHECKPOINT_KEYS = ("step", "model", "optimizer", "torch_rng", "python_rng")   # and "metrics" since this version


def model_state(policy) -> dict:
    """What a checkpoint keeps of the model: its state dict, or only the trainable tensors
    when part of it is frozen (LoRA adapters: megabytes, not the base model's weights)."""
    state = policy.state_dict()
    trainable = {name for name, p in policy.named_parameters() if p.requires_grad}
    if len(trainable) == len(list(policy.parameters())):
        return state
    return {name: tensor for name, tensor in state.items() if name in trainable}


def save_checkpoint(path, policy, optimizer, step, metrics_lines=()):
    """Model (or adapter) and optimizer state dicts, RNG states, the step and the metrics
    lines written since the previous checkpoint (JSON text, as in metrics.jsonl), as plain
    data and tensors only; written atomically (temp file, sync, rename). The metrics file
    is synced line by line before this, so it is never behind a checkpoint it precedes;
    should a power cut still leave it behind, the lines kept here restore it."""
    state = {"step": step, "model": model_state(policy), "optimizer": optimizer.state_dict(),
             "torch_rng": torch.get_rng_state(), "python_rng": random.getstate(),   # (int, tuple of ints, None)
             "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
             "metrics": list(metrics_lines)}
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _sync_directory(path)


def _restore_from_checkpoint(metrics: list[dict], state: dict, metrics_path: str, ckpt_path: str, log) -> list[dict]:
    """`metrics` with the steps up to the checkpoint's that the file lacks (a torn or lost
    last line) taken back from the lines the checkpoint kept; one note if any were."""
    have = {m["step"] for m in metrics}
    kept = state.get("metrics") or []              # older checkpoints kept none
    restored = []
    for line in kept:
        try:
            record = json.loads(line)
        except (TypeError, ValueError):
            raise RunError(f"{ckpt_path}: its kept metrics line is not JSON") from None
        last = state["step"] + (1 if isinstance(record, dict) and record.get("final_evaluation") else 0)   # after the update
        if isinstance(record, dict) and record.get("step") not in have and record.get("step", -1) <= last:
            restored.append(record)
    if not restored:
        return metrics
    steps = [m["step"] for m in restored]
    log(f"note: {metrics_path} was behind its checkpoint; restored step(s) "
        f"{steps[:5]}{'...' if len(steps) > 5 else ''} from {os.path.basename(ckpt_path)}")
    return sorted(metrics + restored, key=lambda m: m["step"])


def read_checkpoint(path, device) -> dict:
    """Load a checkpoint with weights_only=True (no code from the file ever runs) and
    check that it is one of ours; RunError naming the file otherwise."""
    try:
        state = torch.load(path, map_location=device, weights_only=True)
    except FileNotFoundError:
        raise RunError(f"no checkpoint to resume from: {path} does not exist") from None
    except pickle.UnpicklingError as err:
        if "weights_only" in str(err) or "Weights only" in str(err):
            raise RunError(f"{path}: refused, it holds objects other than tensors and plain data "
                           f"(loading it could run code)") from None
        raise RunError(f"{path}: cannot be read, corrupt or not a checkpoint ({_first_line(err)})") from None
    except Exception as err:                       # truncated zip, empty file, bad magic number, ...
        raise RunError(f"{path}: cannot be read, corrupt or truncated ({_first_line(err)})") from None
    if not isinstance(state, dict) or not all(k in state for k in CHECKPOINT_KEYS):
        raise RunError(f"{path}: not a grpo_ba checkpoint (expected the entries {', '.join(CHECKPOINT_KEYS)})")
    if not isinstance(state["step"], int) or state["step"] < 0:
        raise RunError(f"{path}: not a grpo_ba checkpoint (its step is {state['step']!r})")
    return state


def _first_line(err) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0][:120]


def _check_fits(path, state, policy, optimizer):
    """The checkpoint's tensors have the names and shapes of this policy (whatever its
    state_dict holds: full weights or LoRA adapters) and of its optimizer's state."""
    expected = model_state(policy)
    saved = state["model"]
    if not isinstance(saved, dict):
        raise RunError(f"{path}: its 'model' entry is not a state dict")
    missing, unexpected = sorted(set(expected) - set(saved)), sorted(set(saved) - set(expected))
    if missing or unexpected:
        name = missing[0] if missing else unexpected[0]
        raise RunError(f"{path}: does not fit this model: {len(missing)} tensors missing, {len(unexpected)} unexpected "
                       f"(first: {name}); was it written for another model or adapter?")
    for name, tensor in expected.items():
        if not isinstance(saved[name], torch.Tensor) or saved[name].shape != tensor.shape:
            shape = tuple(saved[name].shape) if isinstance(saved[name], torch.Tensor) else type(saved[name]).__name__
            raise RunError(f"{path}: does not fit this model: {name} has shape {shape}, the model {tuple(tensor.shape)}")
    opt = state["optimizer"]
    params = [p for group in optimizer.param_groups for p in group["params"]]
    saved_ids = [i for group in opt.get("param_groups", []) for i in group.get("params", [])] if isinstance(opt, dict) else None
    if saved_ids is None or len(saved_ids) != len(params):
        raise RunError(f"{path}: its optimizer state is for {len(saved_ids or [])} parameters, this model has {len(params)}")
    for index, param in zip(saved_ids, params):    # Adam's moments have their parameter's shape
        for key, value in opt.get("state", {}).get(index, {}).items():
            if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape != param.shape:
                raise RunError(f"{path}: its optimizer state '{key}' has shape {tuple(value.shape)} "
                               f"for a parameter of shape {tuple(param.shape)}")


def restore_checkpoint(state, path, policy, optimizer, metrics_path, steps, log=_note) -> int:
    """Check the checkpoint read by `read_checkpoint` against this policy, optimizer,
    metrics and the requested number of steps, then load it and drop the metrics lines
    written after it. Nothing is changed before every check has passed. Returns the
    first step still to run."""
    _check_fits(path, state, policy, optimizer)
    metrics = read_metrics(metrics_path, log)      # a bad middle line stops us here, file untouched
    metrics = _restore_from_checkpoint(metrics, state, metrics_path, path, log)
    start = state["step"] + 1
    if steps < start:
        raise RunError(f"--steps {steps} is not above the last finished step {start - 1} of {os.path.dirname(path) or '.'} "
                       f"(checkpoint at step {start - 1}); give --steps {start + 1} or more to extend it")
    # the evaluation after the last update stays only if no step is left: an extended run evaluates anew
    kept = [m for m in metrics if m["step"] < start or (m.get("final_evaluation") and m["step"] == start == steps)]
    lost = sorted(set(range(start)) - {m["step"] for m in kept})
    if lost:
        log(f"note: {metrics_path} has no line for step(s) {lost[:5]}{'...' if len(lost) > 5 else ''} "
            f"before the checkpoint of step {start - 1}; continuing without them")
    try:
        policy.load_state_dict(state["model"], strict=False)   # names checked by _check_fits; adapters only under LoRA
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["torch_rng"].cpu())
        random.setstate(state["python_rng"])
    except (RuntimeError, ValueError, TypeError) as err:
        raise RunError(f"{path}: cannot be loaded into this run ({_first_line(err)})") from None
    if state.get("cuda_rng") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda_rng"]])
    write_jsonl(metrics_path, kept)
    return start


def repair_metrics(out: str, log=_note) -> list[dict]:
    """The metrics of run directory `out`, after restoring from its checkpoint the lines
    a power cut tore or lost (the file is rewritten only then). A bad middle line is a
    RunError; no metrics file is an OSError."""
    metrics_path, ckpt_path = os.path.join(out, "metrics.jsonl"), os.path.join(out, "checkpoint.pt")
    metrics = read_metrics(metrics_path, log)
    if not os.path.exists(ckpt_path):
        return metrics
    try:                                           # mmap: the kept lines, not gigabytes of weights
        state = torch.load(ckpt_path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as err:
        raise RunError(f"{ckpt_path}: cannot be read, corrupt or truncated ({_first_line(err)})") from None
    if not isinstance(state, dict) or not isinstance(state.get("step"), int):
        raise RunError(f"{ckpt_path}: not a grpo_ba checkpoint")
    repaired = _restore_from_checkpoint(metrics, state, metrics_path, ckpt_path, log)
    if len(repaired) != len(metrics):
        write_jsonl(metrics_path, repaired)
    return repaired


def step_lines(metrics: list[dict]) -> tuple[list[dict], list[dict]]:
    """(the lines of training steps, the final-evaluation lines) of a run's metrics: the
    evaluation after the last update is logged as step --steps and is not a step."""
    return ([m for m in metrics if not m.get("final_evaluation")],
            [m for m in metrics if m.get("final_evaluation")])


def run_status(out: str, steps: int, log=_note) -> str:
    """What a sweep or the regime map does with run directory `out`: "finished" (it holds
    `steps` lines of metrics and the evaluation after step `steps`, after restoring any its
    checkpoint kept), "resume" (a
    checkpoint to continue from) or "train" (nothing usable yet). A bad middle line is a
    RunError rather than a silent retrain over the run."""
    try:
        metrics = repair_metrics(out, log)
    except OSError:
        return "train"
    if is_finished(out, metrics, steps):
        return "finished"
    return "resume" if os.path.exists(os.path.join(out, "checkpoint.pt")) else "train"


def is_finished(run_dir: str, metrics: list[dict], steps: int) -> bool:
    """Has the run in `run_dir` done its `steps` steps? Its evaluation after the last update
    (logged as step `steps`, after the last step's line) says so. What the sweeps skip and
    what a design's report accepts. A run without run.json is from before that evaluation
    was logged: `steps` step lines finish it."""
    trained, finals = step_lines(metrics)
    if any(m["step"] == steps for m in finals):
        return True
    return not os.path.exists(os.path.join(run_dir, "run.json")) and len(trained) >= steps


def saved_args(runs_dir: str):
    """(run directory, args.json as a dict) of every run under runs_dir."""
    for args_path in sorted(glob.glob(os.path.join(runs_dir, "**", "args.json"), recursive=True)):
        with open(args_path) as f:
            yield os.path.dirname(args_path), json.load(f)


def saved_runs(runs_dir: str):
    """(run directory, args.json as a dict, metrics) of every run under runs_dir that has
    logged a step."""
    for run_dir, args in saved_args(runs_dir):
        metrics = read_metrics(os.path.join(run_dir, "metrics.jsonl"))
        if metrics:
            yield run_dir, args, metrics


def run_label(args: dict) -> str:
    """What a run is about, for its directory, figure and table row: the toy's regime,
    or the model's name ("Qwen3-1.7B", "SmolLM2-135M-Instruct.Q4_1" for a .gguf file)."""
    if not args.get("model"):
        return args["regime"]
    name = os.path.basename(os.path.normpath(os.path.expanduser(args["model"])))
    return name[:-len(".gguf")] if name.lower().endswith(".gguf") else name
