"""--report-to (grpo_ba_lab/plumbing/report_to.py): a dashboard gets the metrics of metrics.jsonl,
read back from TensorBoard's own event files; a missing backend is one line."""
import math

import pytest

from grpo_ba_lab.plumbing import report_to
from grpo_ba_support import run as grpo_ba_run
from grpo_ba_support.run import SetupError

# Steps as grpo_step writes them: floats, ints, an accuracy only on eval steps, None (no
# positive response), NaN (written as null), and a benchmark's accuracy.
STEPS = [
    {"step": 0, "reward_mean": 0.4375, "accuracy": 0.5, "accuracy_math": 0.25, "len_pos": 12.5, "len_neg": None,
     "pg_loss": -0.0123, "pos_share": 0.31, "n_truncated": 3, "step_time": 1.5},
    {"step": 1, "reward_mean": 0.5, "len_pos": 11.0, "len_neg": 19.25, "pg_loss": 0.0042, "pos_share": float("nan"),
     "n_truncated": 0, "step_time": 1.25},
    {"step": 2, "reward_mean": 0.625, "accuracy": 0.75, "accuracy_math": 0.5, "len_pos": 10.0, "len_neg": 21.0,
     "pg_loss": 0.0, "pos_share": 0.48, "n_truncated": 1, "step_time": 1.0},
]


def event_scalars(log_dir):
    """{metrics key: {step: value}} from TensorBoard's reader of the event files."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    events = EventAccumulator(log_dir)
    events.Reload()
    return {report_to.metric_key(name): {e.step: e.value for e in events.Scalars(name)}
            for name in events.Tags()["scalars"]}


def test_tensorboard_holds_every_number_of_metrics_jsonl(tmp_path):
    pytest.importorskip("tensorboard", reason="pip install tensorboard (requirements/dev.txt)")
    run_dir = str(tmp_path)
    with report_to.open("tensorboard", run_dir, {"aggregator": "balanced", "steps": 3}) as reporter:
        for metrics in STEPS:                       # what train() does each step: the file, then the dashboard
            grpo_ba_run.append_metrics(str(tmp_path / "metrics.jsonl"), metrics)
            reporter.log(metrics)
    logged = event_scalars(reporter.log_dir)
    expected = {}
    for record in grpo_ba_run.read_metrics(str(tmp_path / "metrics.jsonl")):
        for key, value in record.items():
            if key != "step" and value is not None:
                expected.setdefault(key, {})[record["step"]] = value
    assert expected["accuracy"] == {0: 0.5, 2: 0.75} and 1 not in expected["pos_share"]    # the case is real
    assert logged.keys() == expected.keys()
    for key, by_step in expected.items():
        assert logged[key] == pytest.approx(by_step, rel=1e-6), key        # event files keep float32


def test_the_tags_group_held_out_accuracy_apart_and_convert_back():
    assert report_to.tag("accuracy") == "eval/accuracy" and report_to.tag("accuracy_aime") == "eval/accuracy_aime"
    assert report_to.tag("pos_share") == "train/pos_share"
    assert all(report_to.metric_key(report_to.tag(k)) == k for k in STEPS[0])


def test_scalars_keep_numbers_only():
    kept = report_to.scalars({"step": 4, "a": 1, "b": 2.5, "c": None, "d": float("nan"), "e": math.inf,
                              "f": "token", "g": True, "h": [1, 2]})
    assert kept == {"a": 1.0, "b": 2.5}


def test_none_logs_nothing_and_an_unknown_backend_is_refused(tmp_path):
    with report_to.open("none", str(tmp_path), {}) as reporter:
        reporter.log(STEPS[0])
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(SetupError, match="choose one of none, tensorboard, trackio, wandb"):
        report_to.open("mlflow", str(tmp_path), {})


@pytest.mark.parametrize("kind, package", [("tensorboard", "tensorboard"), ("trackio", "trackio"), ("wandb", "wandb")])
def test_a_missing_backend_is_one_line_naming_the_install(tmp_path, monkeypatch, kind, package):
    monkeypatch.setitem(__import__("sys").modules, package, None)         # import fails as if not installed
    with pytest.raises(SetupError) as caught:
        report_to.open(kind, str(tmp_path), {})
    message = str(caught.value)
    assert "\n" not in message and f"--report-to {kind}" in message and f"pip install {package}" in message


class FakeRun:
    """trackio's and wandb's module-level API, recorded."""

    def __init__(self):
        self.calls = []

    def init(self, **kwargs):
        self.calls.append(("init", kwargs))

    def log(self, data, step=None):
        self.calls.append(("log", data, step))

    def finish(self):
        self.calls.append(("finish",))


@pytest.mark.parametrize("kind", ["trackio", "wandb"])
def test_trackio_and_wandb_get_the_same_numbers_at_the_same_steps(tmp_path, monkeypatch, kind):
    fake = FakeRun()
    monkeypatch.setitem(__import__("sys").modules, kind, fake)
    with report_to.open(kind, str(tmp_path / "gap-balanced-s0"), {"lr": 1e-4}) as reporter:
        for metrics in STEPS:
            reporter.log(metrics)
    (_, init), *logs, finish = fake.calls
    assert init["project"] == "grpo-ba" and init["name"] == "gap-balanced-s0" and init["config"] == {"lr": 1e-4}
    assert finish == ("finish",)
    assert [step for _, _, step in logs] == [0, 1, 2]
    for (_, data, _), metrics in zip(logs, STEPS):
        assert {report_to.metric_key(k): v for k, v in data.items()} == report_to.scalars(metrics)
