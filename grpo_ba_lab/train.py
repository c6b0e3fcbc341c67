"""python -m grpo_ba_lab.train -- grpo_ba.py's training with the lab's extras plugged in.

    python -m grpo_ba_lab.train --aggregator balanced --regime variance --steps 200
    python -m grpo_ba_lab.train --preset qwen2.5-math-7b --dataset data.jsonl   # LoRA on one GPU
    python -m grpo_ba_lab.train --model m.gguf --dataset d.jsonl --report-to tensorboard
    python -m grpo_ba_lab.train --help            # the course's flags, then the lab's

The loop is grpo_ba.train's, unchanged; the lab only fills its seams: `build` (the toy world
from --regime/--gap-size/..., a .gguf model, LoRA adapters, data checked row by row),
`sample` (--rollout-engine), `scores` (--eval-dataset benchmarks, avg@K) and `loggers`
(run.json provenance, data_report.json, --report-to, --completions, RUN_DIR/model).
With --aggregator all it runs the course's demo through these seams.
"""
from __future__ import annotations

import dataclasses
import functools
import sys

import grpo_ba
from grpo_ba_support import own_rule
from grpo_ba_support import run as grpo_ba_run
from grpo_ba_support.args import run_command
from grpo_ba_lab import lab_args
from grpo_ba_lab.plumbing import benchmarks, lm_setup, lora, rollout_engines, training_run


def train(args: lab_args.LabArgs, log=print) -> str:
    """One run of grpo_ba.train with the lab's settings; returns its directory."""
    eval_sets = {}

    def build(args, log):
        policy, tokenizer, task = lm_setup.build(args, log, grpo_ba.greedy_accuracy)
        if args.lora_rank:                                    # adapters over a frozen base
            device = grpo_ba_run.pick_device(args.device)
            policy = lora.add_adapters(policy, args, device.type)
            task = dataclasses.replace(task, reference=lora.ReferenceWithoutAdapters(policy))
        eval_sets.update(benchmarks.eval_sets(args, task))    # every benchmark row, checked now
        return policy, tokenizer, task

    def scores(policy, tokenizer, task, args, sample):
        return {name: grpo_ba.evaluate(policy, tokenizer, task, rows, args, sample,
                                       args.eval_samples, args.eval_temperature)
                for name, rows in eval_sets.items()}

    sample = (grpo_ba.generate if args.rollout_engine == "generate" else
              functools.partial(rollout_engines.sample, engine=args.rollout_engine))
    return grpo_ba.train(args, log, build=build, sample=sample, scores=scores,
                         loggers=training_run.loggers(args))


def main(argv=None) -> int:
    """One run, a resumed run, or with --aggregator all the demo's three rules."""
    prog = "python -m grpo_ba_lab.train"

    def command():
        args = lab_args.parse_args(argv, prog=prog)
        lab_args.check_args(args)
        if args.aggregator == "all":
            grpo_ba.demo(args, train_one=train)
        else:
            default_dir = f"runs/{args.regime}-{own_rule.name_of(args.aggregator)}-s{args.seed}"
            train(dataclasses.replace(args, output_dir=args.output_dir or default_dir))
    return run_command(prog, command)


if __name__ == "__main__":
    sys.exit(main())
