"""grpo_ba_support/args.py -- grpo_ba.py's command line: `Args`, a flag and --help line a field,
args.json its asdict; `parse_args`'s defaults: docs/code-tour.md. The lab subclasses Args."""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import textwrap
from dataclasses import dataclass, field

from grpo_ba_support import own_rule
from grpo_ba_support import run as grpo_ba_run
from toy_tasks import designs

RULES = ("token", "sequence", "balanced")        # = grpo_ba.AGGREGATORS (a test keeps them equal)


def arg(default, help, section=None):  # noqa: A002
    """A field and its --help line; `section` opens a --help section at this field."""
    return field(default=default, metadata={"help": help, "section": section})


PRESETS = {
    "qwen3-1.7b": dict(dtype="bfloat16", gradient_checkpointing=True, micro_batch_size=4,
                       max_new_tokens=1024, lr=1e-6, group_size=8, prompts_per_step=8,
                       inner_updates=1, eval_every=50, eval_prompts=64, model="Qwen/Qwen3-1.7B"),
}
# What each preset's GPU memory is known from, as --help says it: the committed log, not a hope.
PRESET_MEMORY = {
    "qwen3-1.7b": "peak 40.2 GiB in scripts/gpu_check.py's 2 steps (random weights, 8x8, 1000 "
                  "new tokens, sampling with generate) on a 141 GB H200 "
                  "(assets/gpu-check-2026-12-04/); grpo_ba.py itself and 80 GB cards: unmeasured",
}


def preset_help(presets=PRESETS) -> str:
    """--preset's help: what each preset sets, and what its memory is known from."""
    return "; ".join(f"{name}: " + ", ".join(f"--{k.replace('_', '-')}" + f" {v}" * (v is not True)
                                             for k, v in flags.items())
                     + f"; memory: {PRESET_MEMORY.get(name, 'unmeasured')}"
                     for name, flags in presets.items())


@dataclass
class Args:
    aggregator: str = arg("all", "the rule (docs/method.md §2); all: the demo, the three rules "
                                 "from the same weights and seed; FILE.py:FUNCTION: your own "
                                 "(docs/code-tour.md)", section="the run")
    design: str = arg(designs.AUTO, "toy design: its world, warm-up and settings "
                                    "(toy_tasks/designs.py); auto: demo on the toy")
    steps: int = arg(100, "GRPO steps")
    seed: int = arg(0, "seed of the RL run (sampling, prompt order); a seed whose warm-up is not "
                       "shipped (the demo ships 22's) trains one first, cached: "
                       f"{designs.warmup_steps(designs.DEMO)} supervised steps in the demo's "
                       "world, which can take longer than the GRPO steps")
    output_dir: str = arg("", "where args.json, metrics.jsonl and checkpoint.pt go")
    resume: str = arg("", "continue the run in this directory (--steps may grow)")
    group_size: int = arg(8, "G: responses per prompt", section="GRPO (docs/method.md §1)")
    prompts_per_step: int = arg(16, "P: prompts per step; a batch holds P * G responses")
    inner_updates: int = arg(2, "mu: optimizer steps per batch (the first at ratio 1)")
    lr: float = arg(1e-4, "AdamW learning rate")
    eps_low: float = arg(0.2, "clip range below 1 for the ratio")
    eps_high: float = arg(0.28, "clip range above 1 (DAPO's clip-higher)")
    beta: float = arg(0.0, "weight of the k3 KL to the frozen start policy")   # off: choice 9
    clip_ratio_c: float = arg(0.0, "dual clip of A < 0 tokens at ratio c (verl: 3; 0: off)")
    adv_scale: str = arg("std", "advantages: std (GRPO) or none (Dr. GRPO)")
    max_grad_norm: float = arg(1.0, "gradient-norm clip")
    temperature: float = arg(1.0, "rollout sampling temperature")
    max_new_tokens: int = arg(40, "longest response; longer ones are cut and stay in the loss")
    micro_batch_size: int = arg(0, "rows per forward/backward (0: the whole batch); the same "
                                "gradient, also where it splits a group (choice 8)")
    eval_every: int = arg(10, "greedy held-out accuracy, then a checkpoint, every N steps",
                          section="evaluation and checkpoints")
    eval_prompts: int = arg(200, "held-out prompts per evaluation")
    preset: str = arg("", "one-GPU settings as defaults (PRESETS in grpo_ba_support/args.py; "
                          "give it --aggregator and --dataset); "
                          + preset_help(),
                      section="a real model (docs/real-models-gpu.md)")
    model: str = arg("", "hub id or local directory (default: the toy model)")
    dataset: str = arg("", "prompts and answers: hub id or .jsonl/.json/.parquet")
    device: str = arg("auto", "auto: cuda, then mps, then cpu", section="the machine")
    threads: int = arg(0, "CPU threads (0: 1 for the toy, measured in assets/demo-threads/; "
                                "every core with --model)")
    dtype: str = arg("float32", "autocast dtype; weights and AdamW stay float32")
    gradient_checkpointing: bool = arg(False, "trade compute for memory in the backward pass")


class _Rules(tuple):
    """--aggregator's choices as --help shows them; any FILE.py:FUNCTION (own_rule.py) too."""
    def __contains__(self, value):
        return tuple.__contains__(self, value) or own_rule.is_spec(value)


CHOICES = {"aggregator": _Rules(("all", *RULES, "FILE.py:FUNCTION")), "adv_scale": ("std", "none"),
           "dtype": ("float32", "bfloat16", "float16"), "device": ("auto", "cpu", "cuda", "mps"),
           "design": (designs.AUTO, designs.NO_DESIGN, *designs.course_designs())}
# Keys of a --config file that are not settings: where a run goes is typed (a run's
# args.json names its own directory, which a rerun must not overwrite), and so is --resume.
NOT_SETTINGS = ("output_dir", "resume", "config", "rule_sha256")   # the last: your rule's file
METAVARS = {"output_dir": "DIR", "resume": "DIR", "preset": "NAME", "model": "NAME",
            "dataset": "FILE"}


class UsageError(ValueError):
    """Bad input: reported as one line on stderr with exit code 2."""


def run_command(prog: str, body, interrupted: str = "interrupted") -> int:
    """body()'s exit code (None: 0); 2 on a ValueError or OSError (`prog: error: ...`); 130: ^C."""
    try:
        return body() or 0
    except KeyboardInterrupt:
        print(f"{prog}: {interrupted}", file=sys.stderr)
        return 130
    except (ValueError, OSError) as err:
        for line in str(err).splitlines() or [""]:
            print(f"{prog}: error: {line}", file=sys.stderr)
        return 2


class _Formatter(argparse.HelpFormatter):
    def _split_lines(self, text, width):          # a flag or a path never breaks at its hyphen
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


class _Parser(argparse.ArgumentParser):
    def error(self, message):                       # one line, not usage + error
        raise UsageError(message)


def build_parser(cls=Args, prog="grpo_ba.py", description="", choices=CHOICES, epilog=None,
                 design=designs.NO_DESIGN):
    """--config, then a flag per field of `cls`, defaults SUPPRESS (the namespace: the flags typed);
    --help shows the defaults of a run with no flag, `design`'s where it sets them."""
    fields = {f.name: f.default for f in dataclasses.fields(cls)}
    run = {**fields, **{k: v for k, v in designs.design_flags(design).items() if k in fields}}
    changed = [f"--{k.replace('_', '-')} {fields[k]}" for k in fields if run[k] != fields[k]]
    if changed:
        description = (f"{description} Defaults shown: a run with no flag, design {design} "
                       f"(toy_tasks/designs.py); --design plain or --model starts from "
                       f"{', '.join(changed)}.").strip()
    parser = _Parser(prog=prog, description=description, epilog=epilog, allow_abbrev=False,
                     argument_default=argparse.SUPPRESS,
                     formatter_class=lambda prog: _Formatter(prog, max_help_position=30, width=100))
    parser.add_argument("--config", metavar="FILE", help="settings from a JSON file (a run's "
                        "args.json works); typed flags win")
    group = parser
    for f in dataclasses.fields(cls):
        if f.metadata.get("section"):
            group = parser.add_argument_group(f.metadata["section"])
        flag, text = "--" + f.name.replace("_", "-"), f.metadata["help"]
        value = run[f.name]             # 0 and 0.0 are shown: `0.0 in (False,)` would hide them
        shown = f" (default: {value})" if value is not False and value not in ("", ()) else ""
        if f.type in ("bool", bool):
            group.add_argument(flag, action=argparse.BooleanOptionalAction, help=text)
        elif f.type in ("tuple", tuple):
            group.add_argument(flag, nargs="+", metavar="TEXT", help=text)
        else:
            kind = {"int": int, "float": float, "str": str}[str(f.type)]
            metavar = (None if f.name in choices else
                       METAVARS.get(f.name, {int: "N", float: "X"}.get(kind, "TEXT")))
            group.add_argument(flag, type=kind, choices=choices.get(f.name), help=text + shown,
                               metavar=metavar)
    return parser


def read_config(path: str, cls=Args) -> dict:
    """{field: value} of a JSON --config file: `cls`'s fields only, unknown keys refused."""
    try:
        with open(path) as f:
            settings = json.load(f)
    except ValueError as err:
        raise UsageError(f"--config {path}: not valid JSON ({err})") from None
    if not isinstance(settings, dict):
        raise UsageError(f"--config {path}: expected one JSON object of settings")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(settings) - names - set(NOT_SETTINGS))
    if unknown:
        raise UsageError(f"--config {path}: unknown setting {unknown[0]!r}")
    return {k: tuple(v) if isinstance(v, list) else v for k, v in settings.items() if k in names}


def course_design(chosen: dict) -> str:
    """--design auto on grpo_ba.py's command line: the demo's design on the toy, none on a model."""
    return designs.NO_DESIGN if chosen["model"] or chosen["preset"] else designs.DEMO


def parse_args(argv=None, cls=Args, prog="grpo_ba.py", presets=PRESETS, choices=CHOICES,
               config_reader=read_config, machine_flags=grpo_ba_run.MACHINE_FLAGS,
               auto_design=course_design, rule_required_with_model=False, **parser_kw):
    """A command line -> `cls`: fields', --preset, --design, --config, typed, the later winning
    (--resume: args.json, resumed_args); rule_required_with_model: --model needs --aggregator."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser_kw.setdefault("epilog", "the lab, in the course repository (docs/lab.md), builds on "
                         "these: python -m grpo_ba_lab.train (LoRA, the toy's knobs), "
                         "grpo_ba_lab.analysis.sweep (paired seeds) ..." if cls is Args else None)
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    typed = vars(build_parser(cls, prog, choices=choices, design=auto_design(defaults),
                              **parser_kw).parse_args(argv))
    config = config_reader(typed.pop("config"), cls) if "config" in typed else {}
    if typed.get("resume"):
        return cls(**grpo_ba_run.resumed_args(typed["resume"], typed, defaults, machine_flags))
    chosen = {**defaults, **config, **typed}           # which preset and design are asked for
    if chosen["preset"] and chosen["preset"] not in presets:
        raise UsageError(f"unknown --preset {chosen['preset']!r}; "
                         f"the presets: {', '.join(presets)}")
    preset = presets.get(chosen["preset"], {})
    if rule_required_with_model and (chosen["model"] or chosen["preset"]) and not any(
            "aggregator" in source for source in (config, typed)):   # not the demo's 3 on a 1.7B
        raise UsageError(f"{'--preset ' + chosen['preset'] if chosen['preset'] else '--model'} "
                         f"trains one rule: add --aggregator token, sequence or balanced "
                         f"(--aggregator all runs the demo's three, each --steps long)")
    design = auto_design(chosen) if chosen["design"] == designs.AUTO else chosen["design"]
    from_design = {k: v for k, v in designs.design_flags(design).items() if k in defaults}
    return cls(**{**defaults, **preset, **from_design, **config, **typed, "design": design})


def check_args(args):
    """Refuse, with one clear line, what would fail later or silently do the wrong thing."""
    if args.group_size < 2:
        raise UsageError(f"--group-size must be at least 2 (got {args.group_size}): "
                         f"a group of one has no relative advantage")
    for name in ("steps", "prompts_per_step", "inner_updates", "max_new_tokens", "eval_prompts",
                 "eval_every"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
    for name, value in (("lr", args.lr), ("temperature", args.temperature),
                        ("max_grad_norm", args.max_grad_norm)):   # -1 flips gradients, 0 zeroes
        if not value > 0:          # temperature 0 divides the logits by 0 (greedy is eval's)
            raise UsageError(f"--{name.replace('_', '-')} must be above 0 (got {value})")
    if args.eps_low < 0 or args.eps_high < 0:
        raise UsageError(f"--eps-low and --eps-high are clip ranges, 0 or more "
                         f"(got {args.eps_low}, {args.eps_high})")
    for flag, value, zero in (("--threads", args.threads, "auto"),
                              ("--beta", args.beta, "no KL"),     # below 0: away from pi_ref
                              ("--micro-batch-size", args.micro_batch_size, "the whole batch")):
        if value < 0:
            raise UsageError(f"{flag} must be 0 ({zero}) or more (got {value})")
    batch = args.group_size * args.prompts_per_step
    if args.micro_batch_size and batch % args.micro_batch_size:
        raise UsageError(f"--micro-batch-size {args.micro_batch_size} does not divide "
                         f"the batch of {batch} responses")
    if args.clip_ratio_c and not args.clip_ratio_c > 1:
        raise UsageError(f"--clip-ratio-c must be above 1, or 0 for no dual clip "
                         f"(got {args.clip_ratio_c})")
    grpo_ba_run.pick_device(args.device)          # a device this machine lacks: before any file
    if args.dataset and not args.model:
        raise UsageError("--dataset needs --model (the toy model only knows the toy tasks)")
    if args.model and not args.dataset:          # before the demo's first line, or a download
        raise UsageError("--model needs --dataset (a hub id or a local .json/.jsonl/.parquet file)")
    if args.model and args.design in designs.DESIGNS:
        raise UsageError(f"--design {args.design} sets the toy's world; it cannot run with "
                         f"--model (drop --design)")
    if os.path.splitext(args.dataset or "")[1] in (".json", ".jsonl", ".parquet") \
            and not os.path.isfile(args.dataset):  # before the model downloads
        raise UsageError(f"--dataset {args.dataset} does not exist (looked from {os.getcwd()})")
