"""grpo_ba_lab/plumbing/export.py -- the trained policy in a form other tools load: Hugging Face format.

    save_policy(policy, tokenizer, out_dir, card)

writes `out_dir/` as `AutoModelForCausalLM.from_pretrained(out_dir)` reads it (config,
safetensors weights, generation config) with the tokenizer beside it; under LoRA
(a PEFT model) it writes the adapter instead (`adapter_config.json` and
`adapter_model.safetensors`, megabytes), loaded over its base model with
`PeftModel.from_pretrained(base, out_dir)`. Both get a short README.md model card: what
trained the weights (rule, steps, data, held-out accuracy, the command), from `card`.
The card's command runs from the model directory, its paths relative to it
(`portable_command`), so it holds wherever the run directory is copied.
`run_card` builds that dict from a run's settings and metrics.

The directory is written beside its final place and renamed into it, so a kill leaves
the previous export or none, never half of one. An existing `out_dir` is replaced only
when it is empty or an earlier export (its README.md carries this module's marker).
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil

from grpo_ba_lab.plumbing import run_dirs
from grpo_ba_support.run import SetupError

MARKER = "exported by grpo_ba"        # in the card's front matter: this directory may be replaced

# Card keys shown first, with their labels; any other key is listed under "settings".
CARD_FIELDS = {"rule": "loss aggregation", "steps": "GRPO steps", "data": "training data",
               "heldout_accuracy": "held-out accuracy", "accuracy_step": "accuracy measured at step",
               "base_model": "base model", "command": "command"}


def is_adapter(policy) -> bool:
    """A PEFT model (LoRA adapters over a frozen base)?"""
    return hasattr(policy, "peft_config") and hasattr(policy, "get_base_model")


def save_policy(policy, tokenizer, out_dir: str, card: dict) -> str:
    """The policy in Hugging Face format (or its PEFT adapter), its tokenizer and a
    README.md model card, in `out_dir`; returns out_dir."""
    out_dir = os.path.abspath(os.path.expanduser(out_dir))
    _check_replaceable(out_dir)
    tmp = f"{out_dir}.tmp{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        os.makedirs(tmp)
        adapter = is_adapter(policy)
        policy.save_pretrained(tmp)            # safetensors; PEFT: the adapter only
        tokenizer.save_pretrained(tmp)         # with its padding side (toy_tasks/model.py: char_tokenizer)
        with open(os.path.join(tmp, "README.md"), "w") as f:
            f.write(model_card(card, adapter, model_dir=out_dir))
        if os.path.exists(out_dir):
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        raise SetupError(f"cannot write the model to {out_dir!r}: {err.strerror or err}") from None
    return out_dir


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _check_replaceable(out_dir: str):
    if not os.path.exists(out_dir):
        return
    if not os.path.isdir(out_dir):
        raise SetupError(f"cannot write the model to {out_dir!r}: it is a file")
    readme = os.path.join(out_dir, "README.md")
    if os.listdir(out_dir) and not (os.path.isfile(readme) and MARKER in _read(readme)):
        raise SetupError(f"{out_dir!r} exists and is not an earlier model export; choose another directory")


def _text(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(_text(v) for v in value) or "-"
    return "-" if value in (None, "") else str(value)


def portable_command(command: str, model_dir: str) -> str:
    """The command as the card gives it, to run from the model directory wherever the run
    directory lies: paths inside the run directory (the model directory's parent, e.g.
    `--config RUN/args.json`) become relative to the model directory, and the script
    `python PATH/grpo_ba.py` becomes `python -m grpo_ba`, which names no clone. Other
    absolute paths (a local base model, a dataset) stay: they are not in the run."""
    try:
        words = shlex.split(command)
    except ValueError:                                   # unbalanced quotes: shown as given
        return command
    run_dir = os.path.dirname(os.path.abspath(model_dir))

    def relative(path: str) -> str:
        inside = os.path.isabs(path) and os.path.commonpath([run_dir, path]) == run_dir
        return os.path.relpath(path, model_dir) if inside else path

    out = []
    for word in words:
        if os.path.basename(word) == "grpo_ba.py" and out and "python" in os.path.basename(out[-1]):
            out += ["-m", "grpo_ba"]
        elif word.startswith("--") and "=" in word:      # --config=RUN/args.json
            flag, _, value = word.partition("=")
            out.append(f"{flag}={relative(value)}")
        else:
            out.append(relative(word))
    return shlex.join(out)


def model_card(card: dict, adapter: bool, model_dir: str | None = None) -> str:
    """README.md: front matter for the Hub (library, base model, tags), then what
    trained the weights and how to load them. With `model_dir`, the command is shown
    to run from it (`portable_command`)."""
    if model_dir and card.get("command"):
        card = {**card, "command": portable_command(str(card["command"]), model_dir)}
    base = card.get("base_model")
    front = ["---", f"library_name: {'peft' if adapter else 'transformers'}"]
    if base and re.fullmatch(r"[\w.-]+/[\w.-]+", str(base)) and not os.path.exists(str(base)):
        front.append(f"base_model: {base}")  # a hub id; a local path means nothing on another machine
    front += ["tags:", "- grpo", "- balanced-aggregation", f"- {MARKER.replace(' ', '-')}", "---", ""]
    rule = card.get("rule", "?")
    lines = [f"# GRPO policy trained with {rule} aggregation", "",
             f"Trained by grpo_ba.py ({MARKER}), the reference implementation of GRPO's loss aggregation "
             "rules beside *Balanced Aggregation: Understanding and Fixing Aggregation Bias in GRPO* "
             "(Zeng et al., arXiv 2605.04077).", "",
             "| | |", "|---|---|"]
    lines += [f"| {label} | {_text(card[key]) if key != 'command' else '`' + _text(card[key]) + '`'} |"
              for key, label in CARD_FIELDS.items() if key in card]
    others = {k: v for k, v in card.items() if k not in CARD_FIELDS}
    if others:
        lines += ["", "Settings:", "", "| setting | value |", "|---|---|"]
        lines += [f"| {key} | {_text(value)} |" for key, value in sorted(others.items())]
    lines += ["", "## Load it", "", "```python"]
    if adapter:
        lines += ["from peft import PeftModel",
                  "from transformers import AutoModelForCausalLM, AutoTokenizer",
                  f"base = AutoModelForCausalLM.from_pretrained({json.dumps(str(base or 'BASE_MODEL'))})",
                  "model = PeftModel.from_pretrained(base, THIS_DIRECTORY)   # LoRA adapters over the base",
                  "tokenizer = AutoTokenizer.from_pretrained(THIS_DIRECTORY)"]
    else:
        lines += ["from transformers import AutoModelForCausalLM, AutoTokenizer",
                  "model = AutoModelForCausalLM.from_pretrained(THIS_DIRECTORY)",
                  "tokenizer = AutoTokenizer.from_pretrained(THIS_DIRECTORY)"]
    lines += ["```", ""]
    if model_dir and card.get("command"):
        lines += ["## Train it again", "",
                  "From this directory, with grpo_ba installed (`pip install .` in its clone). "
                  "`..` is the run directory that holds this folder and the run's args.json: copy "
                  "it whole. Add `--output-dir DIR` to choose where the new run goes.", "",
                  "    " + _text(card["command"]), ""]
    return "\n".join(front + lines)


def run_card(args: dict, metrics: list[dict], command: str = "", base_model: str = "") -> dict:
    """The card of a finished run: its rule, steps, data and the last held-out accuracy
    (from the metrics lines), the command, the base model, and the settings that shape
    the update. `args` is the run's args.json (dataclasses.asdict(Args))."""
    evaluated = [m for m in metrics if m.get("accuracy") is not None]
    steps = len(run_dirs.step_lines(metrics)[0])   # the final evaluation is no step
    card = {"rule": args.get("aggregator"), "steps": steps or args.get("steps"),
            "data": args.get("dataset") or "the toy's arithmetic prompts (toy_tasks)",
            "heldout_accuracy": evaluated[-1]["accuracy"] if evaluated else None,
            "accuracy_step": evaluated[-1]["step"] if evaluated else None,
            "base_model": base_model or args.get("model") or "the warmed-up toy Qwen3 (toy_tasks/model.py)",
            "command": command}
    for key in ("group_size", "prompts_per_step", "inner_updates", "lr", "eps_low", "eps_high", "beta",
                "adv_scale", "temperature", "max_new_tokens", "seed", "lora_rank"):
        if key in args:
            card[key] = args[key]
    return card
