"""grpo_ba_lab/plumbing/training_run.py -- what a lab run reports besides the course's files:
loggers that grpo_ba.train(loggers=...) calls at each moment of a run (grpo_ba_run.RunLogger).

- Provenance: run.json's start also records the versions, the commit and the device;
- DataReport: data_report.json, what the data checks read, used, left out and why;
- Tracker: the metrics lines to TensorBoard, trackio or wandb (--report-to);
- Completions: each step's responses to completions.jsonl (--completions; diagnose reads it);
- Export: after the last step, RUN_DIR/model in Hugging Face format with a model card.
"""
from __future__ import annotations

import dataclasses
import json
import os

from grpo_ba_support import run as grpo_ba_run
from grpo_ba_lab.plumbing import completions, export, report_to, run_config
from grpo_ba_support.run import RunLogger


class Provenance(RunLogger):
    def begin(self, run, start, task):
        record = grpo_ba_run.read_run_record(run.out)
        record["starts"][-1]["provenance"] = run_config.provenance(run.device)
        grpo_ba_run.write_atomic(os.path.join(run.out, "run.json"), json.dumps(record, indent=2))


class DataReport(RunLogger):
    def begin(self, run, start, task):
        if task.data_report is not None and start == 0:      # rows read, used, left out and why
            task.data_report.save(os.path.join(run.out, "data_report.json"))


class Tracker(RunLogger):
    def __init__(self):
        self.reporter = report_to.Reporter()                # none until the run begins

    def begin(self, run, start, task):
        self.reporter = report_to.open(run.args.report_to, run.out, dataclasses.asdict(run.args),
                                       start)

    def log(self, metrics):
        self.reporter.log(metrics)                          # the same dicts as metrics.jsonl

    def close(self):
        self.reporter.close()


class Completions(RunLogger):
    def begin(self, run, start, task):
        self.path = os.path.join(run.out, "completions.jsonl")
        kept = completions.lines_before(self.path, start) if run.args.resume else []
        grpo_ba_run.write_jsonl(self.path, kept)

    def rollout(self, step, prompts, batch, rewards):
        completions.append_completions(self.path, step, prompts, batch.completions, rewards,
                                       batch.response_mask.sum(dim=1))


class Export(RunLogger):
    def finish(self, run, policy, tokenizer):
        """RUN_DIR/model: the policy in Hugging Face format (a PEFT adapter under LoRA), its
        tokenizer and a model card saying what trained it (grpo_ba_lab/plumbing/export.py)."""
        saved = dataclasses.asdict(dataclasses.replace(run.args, dtype=run.requested_dtype))
        metrics = grpo_ba_run.read_metrics(run.metrics_path, run.log)
        args_json = os.path.join(os.path.abspath(run.out), "args.json")   # shown relative to model/
        command = f"python -m grpo_ba_lab.train --config {args_json}"
        card = export.run_card(saved, metrics, command=command)
        export.save_policy(policy, tokenizer, os.path.join(run.out, "model"), card)


def loggers(args) -> list:
    """The loggers a lab run's settings ask for."""
    chosen = [Provenance(), DataReport(), Tracker(), Export()]
    return chosen + ([Completions()] if args.completions else [])
