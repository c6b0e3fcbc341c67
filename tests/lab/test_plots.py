"""Figures and the summary table: closed forms, non-empty PNGs, numbers recomputed from metrics."""
import json
import os
import subprocess
import sys

import pytest

from grpo_ba_lab.analysis import plots

from conftest import forced_kernels

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_token_share_follows_the_length_ratio_and_the_others_stay_at_one_half():
    ratios = [0.25, 0.5, 1.0, 2.0, 3.0]
    token = plots.positive_share_curve(ratios, "token", len_neg=8)
    for ratio, share in zip(ratios, token):
        assert share == pytest.approx(ratio / (ratio + 1), rel=1e-4)      # Lbar+ / (Lbar+ + Lbar-)
    for rule in ("sequence", "balanced"):
        assert plots.positive_share_curve(ratios, rule) == pytest.approx([0.5] * len(ratios), rel=1e-5)


def test_sequence_token_weight_falls_as_one_over_length_and_the_others_are_flat():
    lengths = [1, 2, 4, 8]
    seq = plots.token_weight_curve(lengths, "sequence")
    assert [w * length for w, length in zip(seq, lengths)] == pytest.approx([seq[0]] * 4, rel=1e-5)
    for rule in ("token", "balanced"):
        weights = plots.token_weight_curve(lengths, rule)
        assert weights == pytest.approx([weights[0]] * 4, rel=1e-5)


def test_loss_at_ratio_one_is_zero_for_sequence_and_balanced_and_drifts_for_token():
    gaps = [0, 5, 20]
    for rule in ("sequence", "balanced"):
        assert plots.loss_at_ratio_one_curve(gaps, rule) == pytest.approx([0, 0, 0], abs=1e-6)
    token = plots.loss_at_ratio_one_curve(gaps, "token")
    assert token[0] == pytest.approx(0, abs=1e-6) and 0 < token[1] < token[2]


def fake_run(root, regime, rule, seed, accuracies, pg_losses, len_pos, len_neg):
    run = root / f"{regime}-{rule}-s{seed}"
    run.mkdir(parents=True)
    (run / "args.json").write_text(json.dumps({"regime": regime, "aggregator": rule, "seed": seed}))
    with open(run / "metrics.jsonl", "w") as f:
        for step, (acc, loss) in enumerate(zip(accuracies, pg_losses)):
            row = {"step": step, "pg_loss": loss, "len_pos": len_pos, "len_neg": len_neg, "reward_mean": 0.5,
                   "pos_share": 0.5, "len_mean": 10}
            if acc is not None:
                row["accuracy"] = acc
            f.write(json.dumps(row) + "\n")


def test_table_numbers_are_recomputed_from_metrics(tmp_path):
    fake_run(tmp_path, "gap", "token", 0, [0.5, None, 0.9, 0.6], [0.1, -0.3, 0.2, 0.0], 6, 20)
    fake_run(tmp_path, "gap", "token", 1, [0.4, None, 0.8, 0.8], [0.0, 0.0, 0.0, 0.0], 6, 10)
    first = [plots.run_summary(m) for m in plots.load_runs(str(tmp_path))[("gap", "token")]]
    assert {round(s["peak_acc"], 6) for s in first} == {0.9, 0.8}
    run0 = next(s for s in first if s["peak_acc"] == 0.9)
    assert run0["last_acc"] == 0.6 and run0["drop"] == pytest.approx(0.3)
    assert run0["mean_abs_pg_loss"] == pytest.approx(0.15) and run0["mean_gap"] == 14
    table = plots.summary_table(plots.load_runs(str(tmp_path)))
    row = next(line for line in table.splitlines() if line.startswith("| gap | token"))
    assert "| 2 |" in row and "0.850 +- 0.050" in row and "0.150 +- 0.150" in row    # peak; drop (0.3, 0.0)


@pytest.mark.slow                   # draws or redraws figures: the full suite runs it
def test_every_figure_function_writes_a_nonempty_png(tmp_path):
    for rule in ("token", "sequence", "balanced"):
        for seed in (0, 1):
            fake_run(tmp_path / "runs", "gap", rule, seed, [0.5, 0.6, 0.7], [0.1, 0.2, 0.1], 6, 12 + seed)
    written = plots.report(str(tmp_path / "runs"), str(tmp_path / "figs"), log=lambda *a: None)
    assert len(written) == 4
    for path in written:
        with open(path, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n" and os.path.getsize(path) > 10_000
    assert (tmp_path / "figs" / "table.md").read_text().count("| gap |") == 3


@pytest.mark.slow                # runs a `python -m` subprocess
def test_python_m_analysis_report_redraws_from_saved_metrics_without_training(tmp_path):
    fake_run(tmp_path, "variance", "balanced", 0, [0.5, 0.7], [0.0, 0.0], 8, 8)
    result = subprocess.run([sys.executable, "-m", "grpo_ba_lab.analysis.report", str(tmp_path)], cwd=REPO,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "training_variance.png").exists() and (tmp_path / "table.md").exists()


GPU_CHECK_EXTRAS = [[], ["--shape", "qwen2.5-math-7b", "--random-responses"]]


@pytest.fixture(scope="module")
def gpu_check_results():
    """scripts/gpu_check.py --tiny --steps 1 with each of GPU_CHECK_EXTRAS, both in one new
    interpreter (tests/commands_in_one_process.py; each start imports torch and transformers)."""
    from commands_in_one_process import run_each
    return run_each(os.path.join(REPO, "scripts", "gpu_check.py"), [["--tiny", "--steps", "1", *extra]
                                                                    for extra in GPU_CHECK_EXTRAS], cwd=None, timeout=600)


@forced_kernels
@pytest.mark.slow
@pytest.mark.parametrize("extra", GPU_CHECK_EXTRAS)
def test_gpu_check_script_runs_its_code_path_on_cpu(extra, gpu_check_results):
    result = gpu_check_results[GPU_CHECK_EXTRAS.index(extra)]
    assert result.returncode == 0, result.stderr
    assert "generated tokens/s" in result.stdout and "skipped 0" in result.stdout
    assert ("trainable LoRA parameters" in result.stdout) == bool(extra)


def course_run(run_dir, rule, seed=20):
    """A finished run as `python grpo_ba.py --aggregator RULE` writes it (design demo)."""
    import dataclasses
    from grpo_ba_support.args import parse_args
    os.makedirs(run_dir)
    args = dataclasses.asdict(parse_args(["--aggregator", rule, "--seed", str(seed), "--output-dir", str(run_dir)]))
    with open(os.path.join(run_dir, "args.json"), "w") as f:
        json.dump(args, f)
    with open(os.path.join(run_dir, "metrics.jsonl"), "w") as f:
        for step in range(3):
            f.write(json.dumps({"step": step, "accuracy": 0.5 + 0.1 * step, "reward_mean": 0.5, "pg_loss": 0.1,
                                "len_pos": 6, "len_neg": 12, "len_right": 6, "len_wrong": 12, "pos_share": 0.4,
                                "entropy": 0.3}) + "\n")
        f.write(json.dumps({"step": 3, "final_evaluation": True, "accuracy": 0.8}) + "\n")


@pytest.mark.slow                   # draws or redraws figures: the full suite runs it
@pytest.mark.parametrize("layout", ["one run", "the demo's three"])
def test_the_report_draws_a_single_course_run_or_the_demo_instead_of_refusing_it(layout, tmp_path, capsys):
    from grpo_ba_lab.analysis import report
    rules = ["token"] if layout == "one run" else ["token", "sequence", "balanced"]
    runs_dir = tmp_path / "demo-token-s20" if layout == "one run" else tmp_path / "demo-s20"
    for rule in rules:
        course_run(runs_dir if layout == "one run" else runs_dir / rule, rule)
    assert report.main([str(runs_dir)]) == 0                  # design demo registers 6 seeds x 3 rules
    assert (runs_dir / "mechanism.png").exists() and (runs_dir / "table.md").exists()
    assert not (runs_dir / "consequences.md").exists()        # no paired report from one seed
    assert "no paired report of design demo" in capsys.readouterr().out
