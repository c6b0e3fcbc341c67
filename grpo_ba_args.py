"""grpo_ba_args.py -- the command line of grpo_ba.py: every training flag, presets, designs.

One dataclass, `Args`: each field is a flag, its help line is its --help line, and a
run's args.json is `dataclasses.asdict(args)`. Defaults come in layers, the later
winning: the field's default, then a --preset (one-GPU settings), then a toy --design
(toy_tasks/designs.py), then a --config FILE (JSON or YAML; a run's args.json works),
then the flags typed.

    from grpo_ba_args import Args, parse_args
    args = parse_args(["--aggregator", "balanced", "--steps", "50"])

The studies (python -m grpo_ba_lab.analysis.sweep, grpo_ba_lab.analysis.regime_map) take the
same training flags plus their own, through `parse_command`.
"""
from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
import textwrap
from dataclasses import dataclass, field

from grpo_ba_lab.plumbing import lm_setup, report_to, rollout_engines, run_config, run_io
from toy_tasks import GAP_SIGNS, REGIMES, SLIP_STYLES, designs

RULES = ("token", "sequence", "balanced")        # = grpo_ba.AGGREGATORS (a test keeps them equal)
# greedy held-out accuracy 0.5-0.6 at step 0 (toy_tasks)
WARMUP_STEPS = {"gap": 600, "variance": 1000}


def arg(default, help, section=None):  # noqa: A002
    """A field and its --help line. `section` opens a --help section: every field after
    it belongs to that section, up to the next one."""
    metadata = {"help": help, **({"section": section} if section else {})}
    return field(default=default, metadata=metadata)


@dataclass
class Args:
    # ---- the run
    aggregator: str = arg("all", "the rule (docs/method.md §2); all: the demo, the three rules "
                                 "from the same weights and seed", section="the run")
    design: str = arg(designs.AUTO, "toy design whose flags become the defaults "
                                    "(docs/toy-designs.md): auto is demo for the demo, plain "
                                    "otherwise; plain sets none")
    steps: int = arg(100, "GRPO steps")
    seed: int = arg(0, "seed of the RL run (sampling, prompt order)")
    output_dir: str = arg("", "where args.json, metrics.jsonl and checkpoint.pt go "
                              "(default: runs/<regime>-<rule>-s<seed>)")
    resume: str = arg("", "continue the run in this directory; --steps and machine flags may "
                          "change, any other flag must match its args.json")
    # ---- GRPO
    group_size: int = arg(8, "G: responses per prompt", section="GRPO (docs/method.md §1)")
    prompts_per_step: int = arg(16, "P: prompts per step; a batch holds P * G responses")
    inner_updates: int = arg(2, "mu: optimizer steps per batch (the first at ratio 1)")
    lr: float = arg(1e-4, "AdamW learning rate (docs/results-toy.md on 3e-4)")
    eps_low: float = arg(0.2, "clip range below 1 for the ratio")
    eps_high: float = arg(0.28, "clip range above 1 (DAPO's clip-higher)")
    beta: float = arg(0.0, "weight of the k3 KL to the frozen start policy (0: none kept)")
    clip_ratio_c: float = arg(0.0, "c: dual clip of A < 0 tokens at ratio c (verl: 3; 0: off)")
    adv_scale: str = arg("std", "advantages: std (GRPO) or none (Dr. GRPO)")
    max_grad_norm: float = arg(1.0, "gradient-norm clip")
    temperature: float = arg(1.0, "rollout sampling temperature")
    max_new_tokens: int = arg(40, "longest response; longer ones are cut and stay in the loss")
    micro_batch_size: int = arg(0, "rows per forward/backward (0: the whole batch); exact")
    # ---- the toy task
    regime: str = arg("gap", "gap: right and wrong answers differ in length; variance: lengths "
                             "spread, no gap", section="the toy task (toy_tasks/)")
    gap_sign: str = arg("wrong-long", "wrong-long (forced slips, then rambling) or right-long "
                                      "(forced re-checks)")
    gap_size: int = arg(18, "mean ramble length in tokens: the length gap")
    spread_size: int = arg(0, "regime gap: half of all responses ramble this many tokens (0: none)")
    slip_style: str = arg("ramble", "what a ramble writes: ramble (the token ~) or loop (the sum "
                                    "just written, repeated)")
    force_frac: float = arg(0.3, "fraction of responses whose start the environment forces")
    warmup_steps: int = arg(0, "supervised warm-up steps, cached (0: 600 for gap, 1000 for "
                               "variance)")
    warmup_seed: int = arg(0, "seed of the warm-up, shared by every rule; -1: the run's --seed, "
                              "each seed its own warm-up (the designs' choice)")
    warmup_from_scratch: bool = arg(False, "train the warm-up (or take it from the cache) even "
                                           "where a design ships one")
    # ---- evaluation, logging, checkpoints
    eval_every: int = arg(10, "held-out accuracy every N steps, step 0 and the last included",
                          section="evaluation, logging and checkpoints")
    eval_dense_until: int = arg(0, "also evaluate every --eval-dense-every steps up to this step")
    eval_dense_every: int = arg(2, "the dense start's interval")
    eval_prompts: int = arg(200, "held-out prompts per evaluation (without --eval-dataset)")
    eval_dataset: tuple = arg((), "benchmarks instead of held-out prompts (hub ids or files); "
                                  "each logs accuracy_<name>, accuracy is their mean")
    eval_split: str = arg("test", "split of a hub --eval-dataset")
    eval_prompt_column: str = arg("", "prompt column of --eval-dataset (default: --prompt-column)")
    eval_answer_column: str = arg("", "answer column of --eval-dataset (default: --answer-column)")
    eval_samples: int = arg(1, "K samples per prompt: avg@K")
    eval_temperature: float = arg(0.0, "eval temperature (0: greedy)")
    log_every: int = arg(10, "a one-line summary every N steps")
    save_every: int = arg(0, "a checkpoint every N steps (0: on Ctrl-C and at the end only)")
    report_to: str = arg("none", "also log the metrics to tensorboard, trackio or wandb")
    completions: bool = arg(False, "responses to completions.jsonl (diagnose)")
    # ---- a real model
    model: str = arg("", "hub id, local directory or .gguf file (default: the toy model)",
                     section="a real model (docs/real-models-gpu.md)")
    dataset: str = arg("", "prompts and answers: hub id or .json/.jsonl/.parquet")
    dataset_split: str = arg("train", "split of a hub dataset")
    prompt_column: str = arg("prompt", "prompt column (text or chat messages); dots reach inside")
    answer_column: str = arg("answer", "gold answer column; a list = several acceptable answers")
    skip_bad_rows: bool = arg(False, "drop unusable rows (counted in data_report.json), not refuse")
    max_prompt_tokens: int = arg(0, "longest prompt; longer rows are refused (0: context minus "
                                    "--max-new-tokens)")
    preset: str = arg("", "one-GPU settings as defaults; typed flags win (grpo_ba_args.PRESETS)")
    lora_rank: int = arg(0, "R: train LoRA adapters of rank R over a frozen base (0: all weights)")
    lora_alpha: float = arg(0.0, "LoRA scale alpha / R (0: alpha = R)")
    lora_target_modules: str = arg("all-linear", "comma-separated module names, or all-linear")
    # ---- the machine: where and how fast, never what is computed
    device: str = arg("auto", "auto: cuda, then mps, then cpu", section="the machine")
    threads: int = arg(0, "CPU threads (0: 2 for the toy, every core with --model)")
    dtype: str = arg("float32", "autocast dtype; weights and AdamW stay float32")
    gradient_checkpointing: bool = arg(False, "trade compute for memory in the backward pass")
    attn_implementation: str = arg("sdpa", "sdpa | eager | flash_attention_2 (if installed)")
    rollout_engine: str = arg("generate", "generate (the reference) | static | paged: the same "
                                          "tokens, faster on a GPU (docs/gpu-rollouts.md)")
    cache_dir: str = arg("~/.cache/grpo_ba", "warmed-up toy policies and converted .gguf models")


PRESETS = {
    "qwen3-1.7b": dict(dtype="bfloat16", gradient_checkpointing=True, attn_implementation="sdpa",
                       micro_batch_size=4, max_new_tokens=1024, lr=1e-6, group_size=8,
                       prompts_per_step=8, inner_updates=1, eval_every=50, eval_prompts=64,
                       temperature=1.0, save_every=50, model="Qwen/Qwen3-1.7B"),
    # The paper's 7B model on one 80 GB GPU: LoRA adapters over a frozen bf16 base
    # (grpo_ba_lab/plumbing/lora.py). Its context is 4096 tokens: 3072 new, so prompts may have
    # up to 1024. LoRA's best lr sits about 10x above full fine-tuning's (1e-6 in the preset above).
    "qwen2.5-math-7b": dict(dtype="bfloat16", gradient_checkpointing=True,
                            attn_implementation="sdpa", micro_batch_size=4, max_new_tokens=3072,
                            lr=1e-5, group_size=8, prompts_per_step=8, inner_updates=1,
                            eval_every=50, eval_prompts=64, temperature=1.0, save_every=50,
                            model="Qwen/Qwen2.5-Math-7B", lora_rank=32, lora_alpha=64,
                            lora_target_modules="all-linear"),
}
CHOICES = {"aggregator": ("all", *RULES), "regime": REGIMES,
           "gap_sign": GAP_SIGNS, "slip_style": SLIP_STYLES, "adv_scale": ("std", "none"),
           "dtype": ("float32", "bfloat16", "float16"), "device": ("auto", "cpu", "cuda", "mps"),
           "preset": ("", *PRESETS), "rollout_engine": rollout_engines.ENGINES,
           "report_to": report_to.BACKENDS,
           "design": (designs.AUTO, designs.NO_DESIGN, *designs.DESIGNS),
           "variant": ("", *designs.VARIANTS)}

# Flags that left grpo_ba.py for a study's own command: each answers with that command.
MOVED = {
    "diagnose": "python -m grpo_ba_lab.analysis.diagnose ROLLOUTS.jsonl",
    "plot_only": "python -m grpo_ba_lab.analysis.report RUNS_DIR",
    "figures_dir": "python -m grpo_ba_lab.analysis.report RUNS_DIR --figures-dir DIR",
    "sweep": "python -m grpo_ba_lab.analysis.sweep [--design NAME] [flags]",
    "seeds": "python -m grpo_ba_lab.analysis.sweep --seeds N (or ...analysis.regime_map --seeds N)",
    "variant": "python -m grpo_ba_lab.analysis.sweep --design NAME --variant NAME",
    "regime_map": "python -m grpo_ba_lab.analysis.regime_map [flags]",
    "map_gap_sizes": "python -m grpo_ba_lab.analysis.regime_map --map-gap-sizes ...",
    "map_spread_sizes": "python -m grpo_ba_lab.analysis.regime_map --map-spread-sizes ...",
    "workers": "python -m grpo_ba_lab.analysis.regime_map --workers N",
}


class UsageError(ValueError):
    """Bad input: reported as one line on stderr with exit code 2."""


def run_command(prog: str, body, interrupted: str = "interrupted") -> int:
    """Every command's exit: body()'s code (None: 0); 2 for what the user can mend (UsageError,
    SetupError, RunError, bad JSON or toy settings, a missing file), each line of it printed
    as `prog: error: ...` (a bad dataset: one line per kind of problem); 130 on Ctrl-C."""
    try:
        return body() or 0
    except KeyboardInterrupt:
        print(f"{prog}: {interrupted}", file=sys.stderr)
        return 130
    except (ValueError, OSError) as err:
        for line in str(err).splitlines() or [""]:
            print(f"{prog}: error: {line}", file=sys.stderr)
        return 2


# ------------------------------------------------------------------ the parser

class _Parser(argparse.ArgumentParser):
    def error(self, message):                       # one line, not usage + error
        raise UsageError(message)


class _Help(argparse.HelpFormatter):
    """Help lines of at most 100 columns; a default is shown unless it is empty or the
    help already says it; tuples read as the values one would type."""

    def __init__(self, prog):
        width = min(100, shutil.get_terminal_size().columns - 2)
        super().__init__(prog, max_help_position=30, width=width)

    def _get_help_string(self, action):
        text, default = action.help, action.default
        empty = default is argparse.SUPPRESS or default is False or default in (None, "", ())
        if empty or "(default" in text:
            return text
        shown = " ".join(map(str, default)) if isinstance(default, (tuple, list)) else str(default)
        return f"{text} (default: {shown.replace('%', '%%')})"

    def _split_lines(self, text, width):              # never break "wrong-long" at its hyphen
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


def _metavar(name, kind):
    values = [c for c in CHOICES.get(name, ()) if c]
    if values and len(",".join(values)) <= 40:
        return "{" + ",".join(values) + "}"
    return "NAME" if values else {int: "N", float: "X"}.get(kind, "TEXT")


def add_fields(parser, options_class):
    """One flag per field of a dataclass, in sections opened by the `section` marks."""
    group = parser
    for f in dataclasses.fields(options_class):
        if "section" in f.metadata:
            group = parser.add_argument_group(f.metadata["section"])
        flag = "--" + f.name.replace("_", "-")
        text = f.metadata["help"]
        if f.type in ("bool", bool):
            group.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default,
                               help=text)
            continue
        type_name = f.type if isinstance(f.type, str) else f.type.__name__
        kind = {"int": int, "float": float, "str": str, "tuple": str}[type_name]
        choices = CHOICES.get(f.name)
        if choices and _metavar(f.name, kind) == "NAME":           # too many to list in the flag
            text += "; one of " + ", ".join(c for c in choices if c)
        group.add_argument(flag, type=kind, default=f.default, choices=choices, help=text,
                           metavar=_metavar(f.name, kind),
                           nargs="+" if f.type in ("tuple", tuple) else None)   # several values


def build_parser(*study_options, prog="grpo_ba.py", description="") -> _Parser:
    """Args' flags first, then each study dataclass's own; grpo_ba.py's moved flags are
    accepted only to answer with their new command."""
    usage = epilog = None
    if prog == "grpo_ba.py":
        usage = "python grpo_ba.py [--aggregator RULE] [--design NAME] [flags]"
        epilog = ("studies have their own commands: python -m grpo_ba_lab.analysis.sweep, "
                  "grpo_ba_lab.analysis.regime_map, grpo_ba_lab.analysis.report RUNS_DIR, "
                  "grpo_ba_lab.analysis.diagnose ROLLOUTS.jsonl")
    parser = _Parser(prog=prog, usage=usage, description=description, epilog=epilog,
                     formatter_class=_Help, allow_abbrev=False)
    parser.add_argument("--config", metavar="FILE", default="",
                        help="settings from JSON or YAML (a run's args.json works); "
                             "typed flags win")
    add_fields(parser, Args)
    for options in study_options:
        add_fields(parser, options)
    if not study_options:
        for name in MOVED:
            parser.add_argument("--" + name.replace("_", "-"), nargs="*", help=argparse.SUPPRESS)
    return parser


def _first_moved(argv) -> str:
    for token in argv or ():
        name = token.split("=")[0].lstrip("-").replace("-", "_")
        if token.startswith("--") and (name in MOVED or name.removeprefix("no_") in MOVED):
            return name.removeprefix("no_")
    return ""


def parse_command(argv=None, *study_options, prog="grpo_ba.py", description=""):
    """(Args, *one instance per study options class) from a command line: the field
    defaults, then a --preset's or a --design's values, then the flags typed."""
    import sys
    argv = sys.argv[1:] if argv is None else list(argv)
    moved = _first_moved(argv) if not study_options else ""
    if moved:
        raise UsageError(f"--{moved.replace('_', '-')} moved out of grpo_ba.py: {MOVED[moved]}")
    parser = build_parser(*study_options, prog=prog, description=description)
    known, _ = parser.parse_known_args(argv)
    config = config_settings(known.config)
    parser.set_defaults(**config)                  # the file's preset and design count below
    known, _ = parser.parse_known_args(argv)
    parser.set_defaults(**PRESETS.get(known.preset, {}))     # preset values are defaults; flags win
    design = chosen_design(known, study=bool(study_options))
    parser.set_defaults(**designs.design_flags(design))        # and so are a toy design's
    parser.set_defaults(**config)                  # and the --config file's, above both
    values = vars(parser.parse_args(argv))
    args = Args(**{f.name: values.pop(f.name) for f in dataclasses.fields(Args)})
    args = dataclasses.replace(args, design=design)
    options = [cls(**{f.name: values[f.name] for f in dataclasses.fields(cls)})
               for cls in study_options]
    return (args, *options)


# Keys of a --config file that are not settings: where a run goes is typed (a run's
# args.json names its own directory, which a rerun must not overwrite), and so is --resume.
NOT_SETTINGS = ("output_dir", "resume", "config")


def config_settings(path: str) -> dict:
    """{field: value} of a --config file ({} without one): Args' fields only; the keys
    that are not settings and the study flags an older args.json may hold are ignored."""
    if not path:
        return {}
    return run_config.read_config(path, Args, ignore=(*NOT_SETTINGS, *MOVED))


def parse_args(argv=None) -> Args:
    """grpo_ba.py's command line -> Args."""
    return parse_command(argv)[0]


def chosen_design(flags, study=False) -> str:
    """The toy design a command line runs: --design as typed, or for 'auto' the demo's
    design when grpo_ba.py runs the demo on the toy, plain otherwise (and in a study)."""
    if flags.design != designs.AUTO:
        return flags.design
    demo = flags.aggregator == "all" and not (study or flags.model or flags.resume or flags.preset)
    return designs.DEMO if demo else designs.NO_DESIGN


def given_flags(argv=None) -> dict:
    """Only the flags typed on the command line, parsed: {name: value}. A flag typed
    with its default value counts as given; defaults and preset values do not."""
    moved = _first_moved(argv)
    if moved:
        raise UsageError(f"--{moved.replace('_', '-')} moved out of grpo_ba.py: {MOVED[moved]}")
    not_given = object()                       # not a string: argparse would parse a string default
    parser = build_parser()
    parser.set_defaults(**{f.name: not_given for f in dataclasses.fields(Args)})
    fields = {f.name for f in dataclasses.fields(Args)}
    return {name: value for name, value in vars(parser.parse_args(argv)).items()
            if value is not not_given and name in fields}


def resumed_args(argv) -> Args:
    """The Args of `--resume DIR`: its args.json, then the flags typed. An args.json of
    an older version may hold the study flags that left Args; they are dropped."""
    parsed = parse_args(argv)
    defaults = {f.name: f.default for f in dataclasses.fields(Args)}
    defaults.update({name: None for name in MOVED})             # retired settings load, then drop
    saved = run_io.resumed_args(parsed.resume, given_flags(argv), defaults)
    return Args(**{f.name: saved[f.name] for f in dataclasses.fields(Args)})


# ------------------------------------------------------------------ checks

def check_args(args: Args):
    """Refuse, with one clear line, what would fail later or silently do the wrong thing."""
    if args.group_size < 2:
        raise UsageError(f"--group-size must be at least 2 (got {args.group_size}): "
                         f"a group of one has no relative advantage")
    for name in ("steps", "prompts_per_step", "inner_updates", "max_new_tokens", "eval_prompts",
                 "eval_samples"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
    batch = args.group_size * args.prompts_per_step
    if args.micro_batch_size and (args.micro_batch_size < 0 or batch % args.micro_batch_size):
        raise UsageError(f"--micro-batch-size {args.micro_batch_size} does not divide "
                         f"the batch of {batch} responses")
    if args.max_prompt_tokens < 0:
        raise UsageError("--max-prompt-tokens must be positive, or 0 for the model's context "
                         "minus --max-new-tokens")
    if args.eval_temperature < 0 or args.lora_rank < 0 or args.lora_alpha < 0:
        raise UsageError("--eval-temperature, --lora-rank and --lora-alpha cannot be negative")
    if args.clip_ratio_c and not args.clip_ratio_c > 1:
        raise UsageError(f"--clip-ratio-c must be above 1, or 0 for no dual clip "
                         f"(got {args.clip_ratio_c})")
    run_io.pick_device(args.device)               # a device this machine lacks: before any file
    if args.dataset and not args.model:
        raise UsageError("--dataset needs --model (the toy model only knows the toy tasks)")
    designed = args.design in designs.DESIGNS
    if designed and args.model:
        raise UsageError(f"--design {args.design} sets the toy's knobs; it cannot run with --model "
                         f"(add --design plain)")
    if not args.model:
        try:                                      # the toy's own checks, before anything is written
            lm_setup.toy_world(args)
        except ValueError as err:                # naming the design's knobs when they are the cause
            knobs = designed and designs.knobs_at_fault(args.design, args, lm_setup.toy_world)
            raise UsageError(err if not knobs else f"{err} (design {args.design} sets {knobs}: "
                                                   f"add --design plain)") from None
