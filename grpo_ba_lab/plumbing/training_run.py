"""grpo_ba_lab/plumbing/training_run.py -- the bookkeeping around grpo_ba.train()'s loop.

What a run does besides the algorithm, so that train() reads as the loop itself:
- before the model loads: the device and threads, an unwritable output directory and a
  bad checkpoint to resume from fail first (nothing is trained for nothing);
- `begin`: a new run writes args.json, data_report.json and an empty metrics.jsonl; a
  resumed one checks its checkpoint against the model, then continues from it; both
  record the start in run.json (machine, provenance, warm-up) and open --report-to;
- `steps`: the progress bar over the steps still to run;
- `on_rollout`: with --completions, each step's responses to completions.jsonl;
- `record`: one metrics line per step (synced), the same dict to --report-to, the log
  lines, checkpoints; after the last step the final policy in Hugging Face format
  (RUN_DIR/model, grpo_ba_lab/plumbing/export.py);
- `ctrl_c_saves`: a first Ctrl-C finishes the step, saves a checkpoint and stops;
  a second stops at once; the reporter is closed however the loop ends;
- `finish`: the run's summary: last accuracy, wall time, where its outputs are.
The files themselves are grpo_ba_lab/plumbing/run_io.py's (docs/outputs.md lists them).
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import threading
import time

import torch
from tqdm import tqdm

from grpo_ba_lab.plumbing import completions, export, report_to, run_config, run_io


class TrainingRun:
    def __init__(self, args, log=print):
        """Pick the device and threads, then fail early: an unwritable directory (the toy:
        before its warm-up) or a checkpoint that cannot be read."""
        self.device = run_io.pick_device(args.device)    # a missing device: before any directory
        if not args.model:
            run_io.prepare_output_dir(args.output_dir)
        if self.device.type == "cpu":
            torch.set_num_threads(run_io.pick_threads(args.threads, real_model=bool(args.model)))
            # Adam's tiny second moments are denormal: 10x slower sqrt
            torch.set_flush_denormal(True)
        self.args, self.log, self.out = args, log, args.output_dir
        self.checkpoint_path = os.path.join(self.out, "checkpoint.pt")
        self.metrics_path = os.path.join(self.out, "metrics.jsonl")
        self.saved, self.started, self.final = None, time.time(), None
        self.reporter = report_to.Reporter()              # --report-to none until `begin`
        self.on_rollout, self.tokenizer = None, None
        self.completions_path = os.path.join(self.out, "completions.jsonl")
        if args.resume:
            self.saved = run_io.read_checkpoint(self.checkpoint_path, self.device)
        self.interrupted, self.since_checkpoint = False, []   # lines the next checkpoint keeps

    def begin(self, policy, optimizer, task, tokenizer=None):
        """Write the run directory, or restore the checkpoint of a resumed run (every check
        passes before the directory changes). -> args computing in a dtype this device
        supports (args.json keeps the dtype requested)."""
        args, out = self.args, run_io.prepare_output_dir(self.out)   # after the data checks
        start, kept_completions = 0, []          # a resumed run redoes the steps from `start`
        if args.resume:
            if args.completions:                 # read (and checked) before anything changes
                kept_completions = completions.lines_before(self.completions_path,
                                                            self.saved["step"] + 1)
            start = run_io.restore_checkpoint(self.saved, self.checkpoint_path, policy, optimizer,
                                              self.metrics_path, args.steps, self.log)
            self.saved = None
            run_io.write_args(out, dataclasses.asdict(dataclasses.replace(args, resume="")))
            self.log(f"resuming {out} at step {start} of {args.steps}" if start < args.steps else
                     f"{out} has finished its {args.steps} steps; extend it with "
                     f"--resume {out} --steps {args.steps + 100}")
        else:
            run_io.write_args(out, dataclasses.asdict(args))
            if task.data_report is not None:           # rows read, used, left out and why
                task.data_report.save(os.path.join(out, "data_report.json"))
            open(self.metrics_path, "w").close()
        # run.json: the machine, the provenance (versions, commit, device), the warm-up
        run_config.write_provenance(out, self.device, start, task.warmup)
        if args.completions:
            run_io.write_jsonl(self.completions_path, kept_completions)
            self.on_rollout = self._write_completions
        self.reporter = report_to.open(args.report_to, out, dataclasses.asdict(args), start)
        dtype = run_io.autocast_dtype(self.device.type, args.dtype, self.log)
        self.args, self.requested_dtype = dataclasses.replace(args, dtype=dtype), args.dtype
        self.start, self.tokenizer = start, tokenizer
        return self.args

    def _write_completions(self, prompts, batch, rewards):
        """grpo_step's on_rollout: the step's responses to completions.jsonl."""
        completions.append_completions(self.completions_path, self.step, prompts, batch.completions,
                                       rewards, batch.response_mask.sum(dim=1))

    def steps(self):
        """The steps still to run, under a progress bar; each step's clock starts here."""
        args = self.args
        self.bar = tqdm(range(self.start, args.steps), desc=f"{args.aggregator:>8s}",
                        initial=self.start, total=args.steps, dynamic_ncols=True, disable=None)
        for step in self.bar:
            self.step_start, self.step = time.time(), step
            yield step

    def record(self, step, metrics, final, policy, optimizer) -> dict:
        """Append the step's metrics line (synced before any checkpoint) and, after the last
        step, the `final` evaluation's; log; checkpoint every --save-every steps, at the
        last step (it keeps the final line too) and on Ctrl-C (then stop)."""
        args = self.args
        metrics = {"step": step, **metrics, "step_time": time.time() - self.step_start}
        self.since_checkpoint.append(run_io.append_metrics(self.metrics_path, metrics))
        self.reporter.log(metrics)                     # the same dicts as metrics.jsonl
        if final is not None:
            self.since_checkpoint.append(run_io.append_metrics(self.metrics_path, final))
            self.reporter.log(final)
            self.final = final
        m = metrics
        if step == self.start:
            self.log(f"step-{step} rollouts: wrong/right mean length {m['wrong_over_right']:.2f} "
                     f"(right {m['len_right']:.1f}, wrong {m['len_wrong']:.1f}), "
                     f"std/mean {m['std_over_mean']:.2f}, reward {m['reward_mean']:.2f}")
        if step % args.log_every == 0 or step == args.steps - 1:
            acc = f" acc {m['accuracy']:.2f}" if "accuracy" in m else ""
            self.bar.write(f"[{args.aggregator}] step {step:4d} reward {m['reward_mean']:.2f}{acc} "
                           f"len +{_fmt(m['len_pos'])} -{_fmt(m['len_neg'])} "
                           f"pg_loss {m['pg_loss']:+.4f} pos_share {_fmt(m['pos_share'], 2)} "
                           f"({m['step_time']:.2f}s/step)")
        last = step == args.steps - 1
        if self.interrupted or (args.save_every and (step + 1) % args.save_every == 0) or last:
            run_io.save_checkpoint(self.checkpoint_path, policy, optimizer, step,
                                   self.since_checkpoint)
            self.since_checkpoint = []
        if last and self.tokenizer is not None:        # the final policy, as other tools load it
            self.export(policy)
        if self.interrupted:
            self.log(f"interrupted: checkpoint of step {step} saved; "
                     f"continue with --resume {self.out}")
            raise KeyboardInterrupt                # stops a demo or sweep too, not just this run
        return metrics

    @contextlib.contextmanager
    def ctrl_c_saves(self):
        """First Ctrl-C: finish the step, save, stop (see `record`); second: stop now.
        Signals can be caught in the main thread only; elsewhere Ctrl-C is left as it is."""
        def on_sigint(*_):
            if self.interrupted:
                raise KeyboardInterrupt
            self.interrupted = True
        in_main_thread = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGINT, on_sigint) if in_main_thread else None
        try:
            yield
        finally:
            self.reporter.close()
            if in_main_thread:
                signal.signal(signal.SIGINT, previous)

    def export(self, policy) -> str:
        """RUN_DIR/model: the policy in Hugging Face format (a PEFT adapter under LoRA),
        its tokenizer and a model card saying what trained it (grpo_ba_lab/plumbing/export.py)."""
        saved = dataclasses.asdict(dataclasses.replace(self.args, dtype=self.requested_dtype))
        card = export.run_card(saved, run_io.read_metrics(self.metrics_path, self.log),
                               command=f"python grpo_ba.py --config {self.out}/args.json")
        return export.save_policy(policy, self.tokenizer, os.path.join(self.out, "model"), card)

    def finish(self) -> str:
        """Log the run's summary (last held-out accuracy, wall time, its outputs); -> RUN_DIR."""
        out, minutes = self.out, (time.time() - self.started) / 60
        accuracy = f"accuracy {self.final['accuracy']:.3f} after step {self.args.steps}, " \
            if self.final else ""
        outputs = [name for name in ("metrics.jsonl", "model", "tensorboard", "completions.jsonl")
                   if os.path.exists(os.path.join(out, name))]
        self.log(f"[{self.args.aggregator}] done: {accuracy}{minutes:.1f} min; in {out}: "
                 + ", ".join(n + "/" if os.path.isdir(os.path.join(out, n)) else n for n in outputs)
                 + " (docs/outputs.md)")
        return out


def eval_progress(chunks, n_prompts: int):
    """The held-out evaluation's rollout batches, under a progress bar when there are
    several and it lasts (shown after 5 s): a tiny evaluation stays quiet."""
    if len(chunks) < 2:
        return chunks
    return tqdm(chunks, desc=f"evaluating {n_prompts} prompts", unit="batch", leave=False,
                delay=5, dynamic_ncols=True, disable=None)


def _fmt(value, digits=1):
    return "n/a" if value is None else f"{value:.{digits}f}"
