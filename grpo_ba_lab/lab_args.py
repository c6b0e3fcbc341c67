"""grpo_ba_lab/lab_args.py -- the lab trainer's settings: the course's `Args` and the lab's own.

`LabArgs` adds to grpo_ba_args.Args the knobs of the toy world, the warm-up, real-data
columns, benchmarks, LoRA, rollout engines and trackers. It is parsed by the course's own
parser (grpo_ba_args.parse_args: each source of defaults applied once); a --config file may
also be YAML here. Studies add their own options classes on top (`parse_command`).

    from grpo_ba_lab.lab_args import parse_args
    args = parse_args(["--aggregator", "balanced", "--lora-rank", "8"])
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from grpo_ba_support import args as grpo_ba_args
from grpo_ba_support import run as grpo_ba_run
from grpo_ba_support import task as grpo_ba_setup
from grpo_ba_support.args import UsageError, arg
from grpo_ba_lab.plumbing import report_to, rollout_engines, run_config
from toy_tasks import GAP_SIGNS, REGIMES, SLIP_STYLES, ToyWorld, designs


@dataclass
class LabArgs(grpo_ba_args.Args):
    preset: str = arg("", "one-GPU settings as defaults (grpo_ba_lab.lab_args.PRESETS)",
                      section="a real model (docs/real-models-gpu.md)")
    # ---- the toy world (a --design sets them; --design plain leaves the defaults)
    regime: str = arg("gap", "gap: right and wrong answers differ in length; variance: lengths "
                             "spread, no gap", section="the toy world (toy_tasks/)")
    gap_sign: str = arg("wrong-long", "wrong-long (forced slips, then rambling) or right-long "
                                      "(forced re-checks)")
    gap_size: int = arg(18, "mean ramble length in tokens: the length gap")
    spread_size: int = arg(0, "regime gap: half of all responses ramble this many tokens")
    slip_style: str = arg("ramble", "what a ramble writes: ramble (~) or loop (the sum repeated)")
    force_frac: float = arg(0.3, "fraction of responses whose start the environment forces")
    endless_slips: float = arg(0.0, "fraction of the corpus's slips that never end: the warm-up "
                                    "learns wrong answers that run to the length cap")
    warmup_steps: int = arg(0, "supervised warm-up steps, cached (0: 600 for gap, 1000 for "
                               "variance)")
    warmup_seed: int = arg(0, "seed of the warm-up; -1: the run's --seed (each seed its own)")
    warmup_from_scratch: bool = arg(False, "train the warm-up even where a design ships one")
    warmup_band_low: float = arg(0.0, "with --warmup-band-high: the warm-up stops once greedy "
                                      "held-out accuracy is in [LOW, HIGH], else is redrawn "
                                      "(grpo_ba_lab/plumbing/band_warmup.py)")
    warmup_band_high: float = arg(0.0, "upper end of the warm-up's band (0: no band)")
    cache_dir: str = arg(grpo_ba_setup.CACHE_DIR, "warmed-up toy policies and converted .gguf "
                                                  "models ($GRPO_BA_CACHE)")
    # ---- evaluation and reporting
    eval_dataset: tuple = arg((), "benchmarks instead of held-out prompts (hub ids or files); "
                                  "each logs accuracy_<name>, accuracy is their mean",
                              section="evaluation and reporting")
    eval_split: str = arg("test", "split of a hub --eval-dataset")
    eval_prompt_column: str = arg("", "prompt column of --eval-dataset (default: --prompt-column)")
    eval_answer_column: str = arg("", "answer column of --eval-dataset (default: --answer-column)")
    eval_samples: int = arg(1, "K samples per prompt: avg@K")
    eval_temperature: float = arg(0.0, "eval temperature (0: greedy)")
    report_to: str = arg("none", "also log the metrics to tensorboard, trackio or wandb")
    completions: bool = arg(False, "responses to completions.jsonl (diagnose)")
    # ---- real data and models
    dataset_split: str = arg("train", "split of a hub dataset",
                             section="real data and models (docs/real-models-gpu.md)")
    prompt_column: str = arg("prompt", "prompt column (text or chat messages); dots reach inside")
    answer_column: str = arg("answer", "gold answer column; a list = several acceptable answers")
    skip_bad_rows: bool = arg(False, "drop unusable rows (counted in data_report.json), not refuse")
    max_prompt_tokens: int = arg(0, "longest prompt; longer rows are refused (0: context minus "
                                    "--max-new-tokens)")
    lora_rank: int = arg(0, "R: train LoRA adapters of rank R over a frozen base (0: all weights)")
    lora_alpha: float = arg(0.0, "LoRA scale alpha / R (0: alpha = R)")
    lora_target_modules: str = arg("all-linear", "comma-separated module names, or all-linear")
    attn_implementation: str = arg("sdpa", "sdpa | eager | flash_attention_2 (if installed)")
    truncated: str = arg("keep", "a response cut at --max-new-tokens: keep it in the loss, or "
                                 "mask it out (DAPO's overlong filter; its advantage still counts)")
    rollout_engine: str = arg("generate", "generate (the reference) | static | paged: other "
                                          "samplers; tokens checked against generate's on a CPU "
                                          "only, speed measured once on an H200 "
                                          "(docs/gpu-rollouts.md)")


PRESETS = {
    **grpo_ba_args.PRESETS,
    # In one run on one H200 (random weights of this shape, 8 x 8, 1,000 new tokens, second
    # of two steps) static sampled 3.0x generate's tokens/s (docs/gpu-rollouts.md), so this
    # preset takes it.
    "qwen3-1.7b": {**grpo_ba_args.PRESETS["qwen3-1.7b"], "rollout_engine": "static"},
    # The paper's 7B model, meant for one 80 GB GPU (never run on one: only its update, at batch
    # 2 x 8 with random weights, ran on a 141 GB H200; docs/real-models-gpu.md): LoRA adapters
    # over a frozen bf16 base
    # (grpo_ba_lab/plumbing/lora.py). Its context is 4096 tokens: 3072 new, so prompts may have
    # up to 1024. LoRA's best lr sits about 10x above full fine-tuning's (1e-6 for Qwen3-1.7B).
    "qwen2.5-math-7b": dict(dtype="bfloat16", gradient_checkpointing=True, micro_batch_size=4,
                            max_new_tokens=3072, lr=1e-5, group_size=8, prompts_per_step=8,
                            inner_updates=1, eval_every=50, eval_prompts=64, temperature=1.0,
                            model="Qwen/Qwen2.5-Math-7B", lora_rank=32,
                            lora_alpha=64, lora_target_modules="all-linear"),
}
CHOICES = {**grpo_ba_args.CHOICES, "regime": REGIMES, "gap_sign": GAP_SIGNS,
           "slip_style": SLIP_STYLES, "truncated": ("keep", "mask"),
           "rollout_engine": rollout_engines.ENGINES,
           "report_to": report_to.BACKENDS, "preset": ("", *PRESETS),
           "design": (designs.AUTO, designs.NO_DESIGN, *designs.DESIGNS)}   # the band designs too
# Flags that change where or how fast a run runs, or what it reports, never what it
# computes: a resumed run may take new values (another machine, another GPU).
MACHINE_FLAGS = (*grpo_ba_run.MACHINE_FLAGS, "cache_dir", "attn_implementation",
                 "rollout_engine", "report_to", "completions")


def read_config(path: str, cls) -> dict:
    """A --config file, JSON or YAML, checked field by field (run_config.read_config)."""
    return run_config.read_config(path, cls, ignore=grpo_ba_args.NOT_SETTINGS)


def lab_design(chosen: dict) -> str:
    """--design auto in the lab: the demo's design for the three rules on the toy, else none."""
    demo = chosen["aggregator"] == "all" and not (chosen["model"] or chosen["preset"])
    return designs.DEMO if demo else designs.NO_DESIGN


def parse_command(argv=None, *study_options, prog="python -m grpo_ba_lab.train",
                  description=""):
    """(LabArgs, *one instance per study options class) from one command line; in a study,
    --design auto is none."""
    combined = dataclasses.make_dataclass("Command", [], bases=(*reversed(study_options),
                                                                LabArgs))
    parsed = grpo_ba_args.parse_args(argv, combined, prog, presets=PRESETS, choices=CHOICES,
                                     config_reader=read_config, machine_flags=MACHINE_FLAGS,
                                     auto_design=(lambda chosen: designs.NO_DESIGN)
                                     if study_options else lab_design, description=description)
    values = dataclasses.asdict(parsed)
    args = LabArgs(**{f.name: values[f.name] for f in dataclasses.fields(LabArgs)})
    return (args, *[cls(**{f.name: values[f.name] for f in dataclasses.fields(cls)})
                    for cls in study_options])


def parse_args(argv=None, prog="python -m grpo_ba_lab.train") -> LabArgs:
    return parse_command(argv, prog=prog)[0]


def knobs_at_fault(name: str, args, build_world) -> str:
    """When `build_world(args)` refuses a toy setting: the toy-world flags design `name`
    set, as typed ('--spread-size 8'), if the world builds once they are back at the
    plain toy's values; '' if the design is not what makes the setting bad."""
    plain, flags = ToyWorld(), designs.design_flags(name)
    changed = {f.name: flags[f.name] for f in dataclasses.fields(ToyWorld)
               if f.name in flags and flags[f.name] != getattr(plain, f.name)}
    try:
        build_world(dataclasses.replace(args, **{k: getattr(plain, k) for k in changed}))
    except ValueError:
        return ""
    return ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in changed.items())


def check_args(args: LabArgs):
    """The course's checks, then the lab's own: the toy's settings, LoRA, evaluation."""
    grpo_ba_args.check_args(args)
    if args.max_prompt_tokens < 0:
        raise UsageError("--max-prompt-tokens must be positive, or 0 for the model's context "
                         "minus --max-new-tokens")
    if args.eval_temperature < 0 or args.lora_rank < 0 or args.lora_alpha < 0:
        raise UsageError("--eval-temperature, --lora-rank and --lora-alpha cannot be negative")
    if args.eval_samples < 1:
        raise UsageError("--eval-samples must be at least 1")
    if args.warmup_band_high and not 0 <= args.warmup_band_low <= args.warmup_band_high <= 1:
        raise UsageError(f"the warm-up's band needs 0 <= --warmup-band-low <= --warmup-band-high "
                         f"<= 1 (got {args.warmup_band_low}, {args.warmup_band_high})")
    if not args.model:
        from grpo_ba_lab.plumbing import lm_setup
        try:                                      # the toy's own checks, before anything is written
            lm_setup.toy_world(args)
        except ValueError as err:                # naming the design's knobs when they are the cause
            designed = args.design in designs.DESIGNS
            knobs = designed and knobs_at_fault(args.design, args, lm_setup.toy_world)
            raise UsageError(err if not knobs else f"{err} (design {args.design} sets {knobs}: "
                                                   f"add --design plain)") from None
