"""grpo_ba_support/run.py -- what train() does beside the algorithm (`Run`), its files (outputs.md),
safe from Ctrl-C, a kill, a foreign file (robustness.md); a `RunError`: one line, exit 2."""
import contextlib
import dataclasses
import json
import math
import os
import pickle
import random
import signal
import sys
import threading
import time
import warnings

import torch

from grpo_ba_support import own_rule
from toy_tasks import designs


class RunError(ValueError):
    """A run directory or checkpoint that cannot be used: one line, exit code 2."""


class SetupError(ValueError):
    """What a run is built from (model, dataset, warm-up file, device) cannot be used."""


def _note(message):
    print(message, file=sys.stderr)


def pick_device(requested: str) -> torch.device:
    """'auto' -> cuda, then Apple's mps, then cpu; an explicit choice must be available."""
    missing = {"cuda": not torch.cuda.is_available() and "no CUDA device is available here",
               "mps": not torch.backends.mps.is_available()
               and "Apple's MPS backend is not available here"}
    if requested == "auto":
        return torch.device(next((name for name, why in missing.items() if not why), "cpu"))
    if missing.get(requested):
        raise RunError(f"--device {requested}: {missing[requested]} (try --device auto)")
    return torch.device(requested)


# The toy's default: 1 thread. The demo at 2 threads is 1.16x faster on an idle 2-core machine but
# 1.81x slower beside one busy process (assets/demo-threads/results.txt); same table at both.
TOY_THREADS = 1


def pick_threads(requested: int, real_model: bool) -> int:
    """--threads, or when 0 (auto): TOY_THREADS for the toy; for --model every core we may use."""
    if requested > 0 or not real_model:
        return requested if requested > 0 else TOY_THREADS
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def record_start(run_dir: str, start_step: int, warmup: dict | None, provenance=None, rule=None):
    """Append this start to run.json: step, machine variant, warm-up (None: a model), your rule."""
    from toy_tasks.model import machine_variant     # beside the warm-up cache key that uses it
    record = read_run_record(run_dir) if start_step > 0 else {"starts": []}
    start = {"step": start_step, "machine": machine_variant(), "warmup": warmup,
             **({"rule": rule} if rule else {})}
    record["starts"].append(start if provenance is None else {**start, "provenance": provenance})
    write_atomic(os.path.join(run_dir, "run.json"), json.dumps(record, indent=2))


def read_run_record(run_dir: str) -> dict:
    """run.json of a run ({'starts': []} for runs older than the record)."""
    if not os.path.exists(os.path.join(run_dir, "run.json")):
        return {"starts": []}
    with open(os.path.join(run_dir, "run.json")) as f:
        return json.load(f)


def autocast_dtype(device_type: str, dtype: str, log=_note) -> str:
    """`dtype` if autocast on this device computes in it, else "float32" with a one-line note
    (torch raises, bf16 on an old GPU, or warns and disables autocast, a dtype it lacks)."""
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
    return dtype if supported else "float32"


def prepare_output_dir(out: str, keep: bool = True) -> str:
    """Create `out`, writable, or fail in one line; keep=False: check, then remove what it made."""
    made = os.path.abspath(out)
    while not os.path.exists(os.path.dirname(made)) and os.path.dirname(made) != made:
        made = os.path.dirname(made)                 # the first folder that does not exist yet
    made = None if os.path.exists(made) else made
    try:
        os.makedirs(out, exist_ok=True)
        open(os.path.join(out, ".write_test"), "w").close()
        os.remove(os.path.join(out, ".write_test"))
    except OSError as err:
        raise ValueError(f"cannot write to output directory {out!r}: {err.strerror}") from None
    folder = os.path.abspath(out)
    while not keep and made and folder.startswith(made):   # only the empty folders this made
        try:
            os.rmdir(folder)
        except OSError:                             # not empty: another run writes there now
            break
        folder = os.path.dirname(folder)
    return out


def _json_line(metrics: dict) -> str:
    """One JSON object per line; NaN and inf (not JSON) become null."""
    return json.dumps({k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                       for k, v in metrics.items()}) + "\n"


def append_metrics(path: str, metrics: dict) -> str:
    """One line per step, synced (a power cut loses at most this line); -> it, for checkpoints."""
    line = _json_line(metrics)
    with open(path, "a") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())
    return line


def write_atomic(path: str, text: str, write=None):
    """`path` := `text` (or what `write(file)` writes): a synced temp file renamed over it."""
    with open(path + ".tmp", "wb") as f:
        f.write(text.encode()) if write is None else write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)
    with contextlib.suppress(OSError):
        fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_jsonl(path: str, records: list[dict]):
    """Rewrite a JSONL file (metrics.jsonl, completions.jsonl) atomically, one line a record."""
    write_atomic(path, "".join(_json_line(r) for r in records))


def read_metrics(path: str, log=_note) -> list[dict]:
    """A run's metrics: a torn last line is dropped with a note, another bad line is a RunError."""
    with open(path, "rb") as f:
        lines = [(number, raw) for number, raw in enumerate(f.read().split(b"\n"), 1)
                 if raw.strip(b" \t\r\x00")]
    metrics = []
    for number, raw in lines:
        try:
            record = json.loads(raw.decode())
            if not isinstance(record, dict) or not isinstance(record.get("step"), int):
                raise ValueError("not a metrics record")
        except ValueError as err:          # so are JSONDecodeError and UnicodeDecodeError
            if number == lines[-1][0]:
                log(f"note: {path}: dropped its torn last line {number} "
                    "(a run killed while writing it)")
                break
            raise RunError(f"{path}: line {number} is not a metrics record "
                           f"({str(err).splitlines()[0][:80]}); fix or remove that line") from None
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


# Flags that change where or how fast a run runs, or what it prints, but not what it
# computes: a resumed run may take new values (another machine, another GPU).
MACHINE_FLAGS = ("threads", "device", "micro_batch_size", "gradient_checkpointing")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def resumed_args(run_dir: str, given: dict, defaults: dict, machine_flags=MACHINE_FLAGS) -> dict:
    """args.json of `run_dir` (defaults for what it lacks), then the flags typed, which must equal
    it (--steps, checked later, and machine flags may change)."""
    saved, path = read_args(run_dir), os.path.join(run_dir, "args.json")
    saved.pop("rule_sha256", None)                  # your rule's file: checked by Run
    unknown = sorted(set(saved) - set(defaults))
    if unknown:
        raise RunError(f"{path}: unknown setting {unknown[0]!r} (written by another version of "
                       f"grpo_ba.py?)")
    merged = {**defaults, **saved, "resume": run_dir, "output_dir": run_dir}
    for name, value in given.items():
        if name == "output_dir" and os.path.abspath(value) != os.path.abspath(run_dir):
            raise RunError(f"{_flag(name)} {value}: a resumed run writes into its own directory "
                           f"{run_dir!r}")
        if name in ("steps", *machine_flags):
            merged[name] = value
        elif name not in ("resume", "output_dir") and value != merged[name]:
            raise RunError(f"{_flag(name)} {value} differs from {merged[name]!r} in {path}; on "
                           f"resume only --steps and machine flags can change "
                           f"({', '.join(_flag(n) for n in machine_flags)})")
    return merged


CHECKPOINT_KEYS = ("step", "model", "optimizer", "torch_rng", "python_rng")   # + "metrics" now


def model_state(policy) -> dict:
    """A checkpoint's model: the state dict, or only its trainable tensors (LoRA adapters)."""
    state = policy.state_dict()
    trainable = {name for name, p in policy.named_parameters() if p.requires_grad}
    frozen = len(trainable) < len(list(policy.parameters()))
    return {name: t for name, t in state.items() if name in trainable} if frozen else state


def save_checkpoint(path, policy, optimizer, step, metrics_lines=()):
    """Model (or adapter), optimizer, RNG states, step and the metrics lines since the last
    checkpoint (they restore a file a power cut left behind): plain data, atomically."""
    state = {"step": step, "model": model_state(policy), "optimizer": optimizer.state_dict(),
             "torch_rng": torch.get_rng_state(),
             "python_rng": random.getstate(),                   # (int, tuple of ints, None)
             "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
             "metrics": list(metrics_lines)}
    write_atomic(path, "", write=lambda f: torch.save(state, f))


def _restore_from_checkpoint(metrics: list[dict], state: dict, metrics_path: str,
                             ckpt_path: str, log) -> list[dict]:
    """`metrics` plus the lines to its step the file lost, from those the checkpoint kept."""
    have, restored = {m["step"] for m in metrics}, []
    for line in state.get("metrics") or []:        # older checkpoints kept none
        try:
            record = json.loads(line)
        except (TypeError, ValueError):
            raise RunError(f"{ckpt_path}: its kept metrics line is not JSON") from None
        if not isinstance(record, dict):
            continue
        # a final evaluation (after the last update) is numbered one step on
        last = state["step"] + (1 if record.get("final_evaluation") else 0)
        if record.get("step") not in have and record.get("step", -1) <= last:
            restored.append(record)
    if restored:
        steps = [m["step"] for m in restored]
        log(f"note: {metrics_path} was behind its checkpoint; restored step(s) "
            f"{steps[:5]}{'...' if len(steps) > 5 else ''} from {os.path.basename(ckpt_path)}")
    return sorted(metrics + restored, key=lambda m: m["step"]) if restored else metrics


def read_checkpoint(path, device) -> dict:
    """Load a checkpoint with weights_only=True (no code from it ever runs), check it is ours."""
    try:
        state = torch.load(path, map_location=device, weights_only=True)
    except FileNotFoundError:
        raise RunError(f"no checkpoint to resume from: {path} does not exist") from None
    except pickle.UnpicklingError as err:
        if "weights_only" in str(err) or "Weights only" in str(err):
            raise RunError(f"{path}: refused, it holds objects other than tensors and plain data "
                           f"(loading it could run code)") from None
        raise RunError(f"{path}: cannot be read, corrupt or not a checkpoint "
                       f"({_first_line(err)})") from None
    except Exception as err:              # truncated zip, empty file, bad magic number, ...
        raise RunError(f"{path}: cannot be read, corrupt or truncated "
                       f"({_first_line(err)})") from None
    if not isinstance(state, dict) or not all(k in state for k in CHECKPOINT_KEYS):
        raise RunError(f"{path}: not a grpo_ba checkpoint "
                       f"(expected the entries {', '.join(CHECKPOINT_KEYS)})")
    if not isinstance(state["step"], int) or state["step"] < 0:
        raise RunError(f"{path}: not a grpo_ba checkpoint (its step is {state['step']!r})")
    return state


def _first_line(err) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0][:120]


def _check_fits(path, state, policy, optimizer):
    """The checkpoint's tensors have this policy's names and shapes, and its optimizer's."""
    expected, saved = model_state(policy), state["model"]
    if not isinstance(saved, dict):
        raise RunError(f"{path}: its 'model' entry is not a state dict")
    missing, unexpected = sorted(set(expected) - set(saved)), sorted(set(saved) - set(expected))
    if missing or unexpected:
        raise RunError(f"{path}: does not fit this model: {len(missing)} tensors missing, "
                       f"{len(unexpected)} unexpected (first: {(missing or unexpected)[0]}); was "
                       f"it written for another model or adapter?")
    for name, tensor in expected.items():
        if not isinstance(saved[name], torch.Tensor) or saved[name].shape != tensor.shape:
            shape = (tuple(saved[name].shape) if isinstance(saved[name], torch.Tensor)
                     else type(saved[name]).__name__)
            raise RunError(f"{path}: does not fit this model: {name} has shape {shape}, "
                           f"the model {tuple(tensor.shape)}")
    opt = state["optimizer"]
    params = [p for group in optimizer.param_groups for p in group["params"]]
    saved_ids = ([i for group in opt.get("param_groups", []) for i in group.get("params", [])]
                 if isinstance(opt, dict) else None)
    if saved_ids is None or len(saved_ids) != len(params):
        raise RunError(f"{path}: its optimizer state is for {len(saved_ids or [])} parameters, "
                       f"this model has {len(params)}")
    for index, param in zip(saved_ids, params):    # Adam's moments have their parameter's shape
        for key, value in opt.get("state", {}).get(index, {}).items():
            if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape != param.shape:
                raise RunError(f"{path}: its optimizer state '{key}' has shape {tuple(value.shape)}"
                               f" for a parameter of shape {tuple(param.shape)}")


def restore_checkpoint(state, path, policy, optimizer, metrics_path, steps, log=_note) -> int:
    """Check the state against policy, optimizer, metrics, --steps; load it. -> the next step."""
    _check_fits(path, state, policy, optimizer)
    metrics = read_metrics(metrics_path, log)      # a bad middle line stops here, file untouched
    metrics = _restore_from_checkpoint(metrics, state, metrics_path, path, log)
    start = state["step"] + 1
    if steps < start:
        raise RunError(f"--steps {steps} is not above the last finished step {start - 1} of "
                       f"{os.path.dirname(path) or '.'} (checkpoint at step {start - 1}); "
                       f"give --steps {start + 1} or more to extend it")
    # the final evaluation stays only if no step is left: an extended run evaluates anew
    kept = [m for m in metrics
            if m["step"] < start or (m.get("final_evaluation") and m["step"] == start == steps)]
    lost = sorted(set(range(start)) - {m["step"] for m in kept})
    if lost:
        log(f"note: {metrics_path} has no line for step(s) "
            f"{lost[:5]}{'...' if len(lost) > 5 else ''} before the checkpoint of step "
            f"{start - 1}; continuing without them")
    try:
        policy.load_state_dict(state["model"], strict=False)  # LoRA: adapters only; names checked
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["torch_rng"].cpu())
        random.setstate(state["python_rng"])
    except (RuntimeError, ValueError, TypeError) as err:
        raise RunError(f"{path}: cannot be loaded into this run ({_first_line(err)})") from None
    if state.get("cuda_rng") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda_rng"]])
    write_jsonl(metrics_path, kept)
    return start


class RunLogger:
    """What a run reports besides its files and log, each at its moment (the lab's: plumbing/)."""
    def begin(self, run, start: int, task): pass                # the run directory is written
    def rollout(self, step: int, prompts, batch, rewards): pass  # what the policy wrote
    def log(self, metrics: dict): pass                          # each metrics line, as written
    def finish(self, run, policy, tokenizer): pass              # after the last step
    def close(self): pass                                       # however the run ends


class Run:
    """The bookkeeping around train()'s loop; a bad directory or checkpoint fails when created."""
    def __init__(self, args, log=print, loggers=()):
        resumed = args.resume and os.path.exists(os.path.join(args.resume, "args.json"))
        saved = read_args(args.resume).get("rule_sha256") if resumed else None
        args = own_rule.settled(args, saved)      # your own rule: loaded, checked, its file too
        self.device = pick_device(args.device)    # a missing device: before any directory
        if not args.model:                         # a bad directory fails now, none made yet
            prepare_output_dir(args.output_dir, keep=False)
        self.replaces = not args.resume and any(os.path.exists(os.path.join(
            args.output_dir, name)) for name in ("args.json", "metrics.jsonl", "checkpoint.pt"))
        if self.replaces:                          # said before the warm-up, done at begin()
            _note(f"note: {args.output_dir} holds an earlier run; this run replaces it (to "
                  f"continue that one instead: --resume {args.output_dir})")
        if self.device.type == "cpu":
            torch.set_num_threads(pick_threads(args.threads, real_model=bool(args.model)))
            torch.set_flush_denormal(True)         # Adam's tiny second moments: 10x slower sqrt
        self.args, self.log, self.out = args, log, args.output_dir
        self.loggers = list(loggers) + ([log] if isinstance(log, RunLogger) else [])  # Progress
        self.checkpoint_path, self.metrics_path = (os.path.join(self.out, name)
                                                   for name in ("checkpoint.pt", "metrics.jsonl"))
        self.saved = read_checkpoint(self.checkpoint_path, self.device) if args.resume else None
        self.started, self.final, self.interrupted = time.time(), None, False
        self.since_checkpoint = []                 # metrics lines the next checkpoint keeps

    def begin(self, policy, optimizer, task):
        """Write args.json, metrics.jsonl, run.json, or resume. -> args, a dtype that works."""
        args, out, self.start = self.args, prepare_output_dir(self.out), 0
        self.grpo_started = time.time()            # what came before: the warm-up, the model
        if self.replaces and os.path.exists(self.checkpoint_path):
            os.remove(self.checkpoint_path)         # the earlier run's: never resumed by mistake
        if args.resume:
            self.start = restore_checkpoint(self.saved, self.checkpoint_path, policy, optimizer,
                                            self.metrics_path, args.steps, self.log)
            self.saved = None
        rule = own_rule.record(args.aggregator)   # your own rule: its file's sha256 beside it
        settings = {**dataclasses.asdict(dataclasses.replace(args, resume="")),
                    **({"rule_sha256": rule["sha256"]} if rule and rule["sha256"] else {})}
        write_atomic(os.path.join(out, "args.json"), json.dumps(settings, indent=2))
        if not args.resume:
            open(self.metrics_path, "w").close()
        else:
            self.log(f"resuming {out} at step {self.start} of {args.steps}"
                     if self.start < args.steps else f"{out} has finished its {args.steps} "
                     f"steps; extend it with --resume {out} --steps {args.steps + 100}")
        record_start(out, self.start, task.warmup, rule=rule)
        for logger in self.loggers:
            logger.begin(self, self.start, task)
        self.requested_dtype, device = args.dtype, self.device.type
        self.args = dataclasses.replace(args, dtype=autocast_dtype(device, args.dtype, self.log))
        return self.args

    def steps(self):
        """(step, its seed, whether it evaluates first) of the steps to run, torch reseeded."""
        dense_until, dense_every = designs.dense_eval(self.args.design)
        for step in range(self.start, self.args.steps):
            self.step, self.step_start = step, time.time()
            yield (step, seed_step(self.args.seed, step),
                   evaluates(step, self.args.eval_every, dense_until, dense_every))

    def on_rollout(self, prompts, batch, rewards):
        for logger in self.loggers:
            logger.rollout(self.step, prompts, batch, rewards)

    def record(self, step, metrics, final, policy, optimizer) -> dict:
        """Append the step's (and `final`) metrics; log; checkpoint (--eval-every, last, Ctrl-C)."""
        args, m = self.args, {"step": step, **metrics, "step_time": time.time() - self.step_start}
        for line in (m, final) if final is not None else (m,):
            self.since_checkpoint.append(append_metrics(self.metrics_path, line))
            for logger in self.loggers:
                logger.log(line)
        self.final, last = final or self.final, step == args.steps - 1
        if "accuracy" in m or last:
            acc = f" acc {m['accuracy']:.3f}" if "accuracy" in m else ""
            self.log(f"[{own_rule.name_of(args.aggregator)}] step {step:4d} "
                     f"reward {m['reward_mean']:.2f}{acc} "
                     f"len right {_fmt(m['len_right'])} wrong {_fmt(m['len_wrong'])} "
                     f"pos_share {_fmt(m['pos_share'], 2)} ({m['step_time']:.2f} s/step)")
        if self.interrupted or (step + 1) % args.eval_every == 0 or last:
            save_checkpoint(self.checkpoint_path, policy, optimizer, step, self.since_checkpoint)
            self.since_checkpoint = []
        if self.interrupted:
            self.log(f"interrupted: checkpoint of step {step} saved; "
                     f"continue with --resume {self.out}")
            raise KeyboardInterrupt                # stops a demo or a sweep too
        return m

    @contextlib.contextmanager
    def ctrl_c_saves(self):
        """First Ctrl-C: finish the step, save, stop (`record`); second: stop now (main thread)."""
        def on_sigint(*_):
            if self.interrupted:
                raise KeyboardInterrupt
            self.interrupted = True
        in_main_thread = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGINT, on_sigint) if in_main_thread else None
        try:
            yield
        finally:
            for logger in self.loggers:
                logger.close()
            if in_main_thread:
                signal.signal(signal.SIGINT, previous)

    def finish(self, policy, tokenizer) -> str:
        """The loggers' last word, then the run's summary line; -> RUN_DIR."""
        if self.start < self.args.steps:
            for logger in self.loggers:
                logger.finish(self, policy, tokenizer)
        accuracy = (f"accuracy {self.final['accuracy']:.3f} after step {self.args.steps}, "
                    if self.final else "")
        outputs = [name + ("/" if os.path.isdir(os.path.join(self.out, name)) else "")
                   for name in sorted(os.listdir(self.out)) if not name.startswith(".")]
        minutes, before = (time.time() - self.grpo_started) / 60, self.grpo_started - self.started
        warmup = f" (+{before / 60:.1f} min before step 0: warm-up, loading)" if before > 30 else ""
        self.log(f"[{own_rule.name_of(self.args.aggregator)}] done: {accuracy}{minutes:.1f} min "
                 f"of GRPO{warmup}; in {self.out}: {', '.join(outputs)} (docs/outputs.md)")
        return self.out


def seed_step(seed: int, step: int) -> int:
    """Reseed torch from (seed, step), -> that seed: a resumed run samples as the original did."""
    step_seed = (seed * 1_000_003 + step) % (2**63)
    torch.manual_seed(step_seed)
    return step_seed


def evaluates(step: int, every: int, dense_until: int = 0, dense_every: int = 1) -> bool:
    return step % every == 0 or (step <= dense_until and step % dense_every == 0)


def _fmt(value, digits=1):
    return "n/a" if value is None else f"{value:.{digits}f}"
