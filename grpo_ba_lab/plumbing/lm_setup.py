"""grpo_ba_lab/plumbing/lm_setup.py -- what the lab trainer trains on, beyond the course's
grpo_ba_setup.build: a toy world from the lab's own knobs (--regime, --gap-size, ...), a
warm-up of any length and seed, a .gguf model converted once, and real data checked row by
row (real_data.py) with its own columns, split and token limits.
"""
from __future__ import annotations

import dataclasses
import os

from grpo_ba_support.run import SetupError
from grpo_ba_support.task import (Task, check_model_path, format_prompt, load_model, load_tokenizer,
                                  split_heldout, toy_task as world_task)
from toy_tasks import ToyWorld, designs
from toy_tasks.model import char_tokenizer, load_or_warmup_toy, load_warmup_file


def toy_world(args) -> ToyWorld:
    """The toy environment that grpo_ba.Args describe."""
    return ToyWorld(args.regime, args.gap_sign, args.gap_size, args.force_frac, spread_size=args.spread_size,
                    slip_style=args.slip_style, endless_slips=args.endless_slips)


def warmup_seed(args) -> int:
    """--warmup-seed, or with -1 the run's own --seed (each seed its own warm-up)."""
    return args.seed if args.warmup_seed < 0 else args.warmup_seed


def toy_warmup(args, log=print, score=None):
    """(policy, tokenizer, record) of the warm-up a toy run starts from: the file shipped
    for its design and seed when the run uses the design's own toy settings (the same
    start on every machine), else the cache, else a fresh warm-up (stopped inside
    --warmup-band-low/high, checked by `score`, grpo_ba.greedy_accuracy's signature)."""
    world = toy_world(args)
    steps = args.warmup_steps or designs.WARMUP_STEPS[args.regime]
    seed = warmup_seed(args)
    shipped = designs.shipped_warmup(args.design, seed)
    if shipped and not args.warmup_from_scratch:
        fields = {f.name for f in dataclasses.fields(args)}
        flags = {k: v for k, v in designs.design_flags(args.design).items() if k in fields}
        design_world = toy_world(dataclasses.replace(args, **flags))
        if vars(design_world) | {"force_frac": 0} == vars(world) | {"force_frac": 0} and steps == flags["warmup_steps"]:
            path, sha256 = shipped
            log(f"warm-up: the policy shipped for design {args.design}, seed {seed} ({os.path.relpath(path)})")
            policy, tokenizer = load_warmup_file(path, sha256)
            return policy, tokenizer, {"source": "shipped", "path": os.path.relpath(path, designs.REPO),
                                       "sha256": sha256, "world": vars(world), "steps": steps, "seed": seed}
    if args.warmup_band_high:
        from grpo_ba_lab.plumbing.band_warmup import band_warmup
        if score is None:
            raise SetupError("a band warm-up needs a score to check it (python -m grpo_ba_lab.train "
                             "passes grpo_ba.greedy_accuracy)")
        tokenizer = char_tokenizer()
        task = toy_task(args, tokenizer)          # built once: every check reads its held-out rows

        def accuracy_of(model):
            return score(model, tokenizer, task, args)["accuracy"]
        return band_warmup(args, world, steps, seed, accuracy_of, log)
    return load_or_warmup_toy(args.cache_dir, world, steps, seed, log)


def toy_task(args, tokenizer, warmup: dict | None = None) -> Task:
    """The toy's problems, prompts and forced prefixes for the world `args` describe."""
    return world_task(toy_world(args), tokenizer, warmup)


def build(args, log=print, score=None):
    """The policy, its tokenizer and the task: the toy (default) or --model/--dataset.
    `score`: what checks a band warm-up (toy_warmup)."""
    if args.model:
        if not args.dataset:
            raise SetupError("--model needs --dataset (a hub id or a local .json/.jsonl/.parquet file)")
        from grpo_ba_lab.plumbing import real_data                      # every row checked before the model loads
        model_path = args.model
        if model_path.lower().endswith(".gguf"):   # converted once into a cached model directory
            from grpo_ba_lab.plumbing import gguf_models
            model_path = gguf_models.converted_dir(model_path, args.cache_dir, log)
        check_model_path(model_path)
        tokenizer = load_tokenizer(model_path)
        limit, reason = real_data.prompt_token_limit(real_data.model_context(model_path, tokenizer),
                                                     args.max_new_tokens, args.max_prompt_tokens)
        rows, report = real_data.load_rows(args.dataset, args.prompt_column, args.answer_column, args.dataset_split,
                                           tokenizer, limit, args.skip_bad_rows, reason)
        train, heldout = split_heldout(rows, args.eval_prompts)
        report.n_train, report.n_heldout = len(train), len(heldout)
        log(report.summary())
        policy = load_model(model_path, args.attn_implementation)
        task = Task(train, heldout, lambda p: format_prompt(tokenizer, p), lambda p, rng: "", report)
    else:
        policy, tokenizer, warmup = toy_warmup(args, log, score)
        task = toy_task(args, tokenizer, warmup)
    if args.gradient_checkpointing:
        getattr(policy, "activation_checkpointing_enable", policy.gradient_checkpointing_enable)()
    return policy, tokenizer, task


def load_prompt_dataset(source: str, prompt_column: str, answer_column: str, split: str = "train",
                        heldout: int = 64, seed: int = 0):
    """(train, heldout) lists of {"prompt", "answer"} from a hub id or a local
    .json/.jsonl/.parquet file, every row checked by real_data.load_rows (no token
    lengths: that needs the tokenizer, see build). A prompt may be a string or a list
    of chat messages (DAPO-Math-17k); the answer a number, a worked solution ending in
    `#### 42` (GSM8K), or a list of acceptable answers."""
    from grpo_ba_lab.plumbing import real_data
    rows, _ = real_data.load_rows(source, prompt_column, answer_column, split)
    return split_heldout(rows, heldout, seed)


