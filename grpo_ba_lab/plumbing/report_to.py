"""grpo_ba_lab/plumbing/report_to.py -- a run's metrics in the dashboard people already read:
--report-to none | tensorboard | trackio | wandb (as TRL's `report_to`).

    reporter = report_to.open(kind, run_dir, config)    # config: the run's args.json
    reporter.log(metrics)                               # each step, the dict metrics.jsonl gets
    reporter.close()

metrics.jsonl stays the record; a reporter receives the same dict per step and sends
`scalars(metrics)`: every number in it (None, NaN, inf, strings and lists skipped, as
metrics.jsonl writes NaN as null), at x = metrics["step"]. TensorBoard groups tags by
the part before a slash, so keys are sent as `eval/<key>` for held-out accuracies
(accuracy, accuracy_<benchmark>) and `train/<key>` for the rest, the way TRL's logs read;
`metric_key` and `tag` convert between the two.

Every backend is optional and imported only when chosen; a missing one is one line
naming the pip install (a SetupError: exit code 2 in grpo_ba.main).
"""
from __future__ import annotations

import json
import math
import os

from grpo_ba_support.run import SetupError

BACKENDS = ("none", "tensorboard", "trackio", "wandb")
INSTALL = {"tensorboard": "pip install tensorboard", "trackio": "pip install trackio", "wandb": "pip install wandb"}
PROJECT = "grpo-ba"                   # the trackio / wandb project runs are logged under


def scalars(metrics: dict) -> dict[str, float]:
    """The numbers of one metrics dict, without `step` (the x axis): None, NaN, inf,
    booleans and anything not a number are left out."""
    return {key: float(value) for key, value in metrics.items()
            if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value)}


def tag(key: str) -> str:
    """The dashboard name of a metrics key: eval/accuracy..., train/<everything else>."""
    return f"eval/{key}" if key == "accuracy" or key.startswith("accuracy_") else f"train/{key}"


def metric_key(name: str) -> str:
    """The metrics key of a dashboard name (tag's inverse)."""
    return name.split("/", 1)[1]


def _import(kind: str, module: str):
    import importlib
    try:
        return importlib.import_module(module)
    except ImportError:
        raise SetupError(f"--report-to {kind} needs the {kind} package: {INSTALL[kind]}") from None


class Reporter:
    """--report-to none: logs nothing. The other reporters log what `scalars` keeps."""
    kind = "none"

    def log(self, metrics: dict, step: int | None = None):
        pass

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _step(self, metrics, step):
        return int(metrics["step"] if step is None else step)


class TensorBoardReporter(Reporter):
    """Event files in RUN_DIR/tensorboard (tensorboard --logdir RUN_DIR). A resumed run
    starts at `start_step`: TensorBoard drops the first run's points from that step on."""
    kind = "tensorboard"

    def __init__(self, run_dir: str, config: dict, start_step: int = 0):
        _import("tensorboard", "tensorboard")          # torch.utils.tensorboard needs it, with a worse message
        from torch.utils.tensorboard import SummaryWriter
        self.log_dir = os.path.join(run_dir, "tensorboard")
        self.writer = SummaryWriter(log_dir=self.log_dir, purge_step=start_step or None)
        if config and not start_step:
            self.writer.add_text("config", "```\n" + json.dumps(config, indent=2, default=str) + "\n```", 0)

    def log(self, metrics: dict, step: int | None = None):
        step = self._step(metrics, step)
        for key, value in scalars(metrics).items():
            self.writer.add_scalar(tag(key), value, step)

    def close(self):
        self.writer.close()


class _RunReporter(Reporter):
    """trackio and wandb: the same init / log / finish calls (trackio copies wandb's API)."""

    def __init__(self, kind: str, run_dir: str, config: dict):
        self.kind = kind
        module = _import(kind, kind)
        name = os.path.basename(os.path.abspath(run_dir))
        kwargs = {"project": os.environ.get(f"{kind.upper()}_PROJECT", PROJECT), "name": name, "config": config}
        if kind == "wandb":
            kwargs["dir"] = run_dir
        self.module = module
        self.run = module.init(**kwargs)

    def log(self, metrics: dict, step: int | None = None):
        self.module.log({tag(key): value for key, value in scalars(metrics).items()}, step=self._step(metrics, step))

    def close(self):
        self.module.finish()


def open(kind: str, run_dir: str, config: dict | None = None, start_step: int = 0) -> Reporter:  # noqa: A001
    """The reporter --report-to KIND asks for. `config` (the run's settings) is shown
    beside the curves; `start_step` > 0 for a resumed run."""
    if kind not in BACKENDS:
        raise SetupError(f"--report-to {kind!r}: choose one of {', '.join(BACKENDS)}")
    if kind == "none":
        return Reporter()
    if kind == "tensorboard":
        return TensorBoardReporter(run_dir, config or {}, start_step)
    return _RunReporter(kind, run_dir, config or {})      # a resumed run logs as a new run there
