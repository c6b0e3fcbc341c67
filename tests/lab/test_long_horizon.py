"""The long-horizon probe's settings and committed collapse criteria
(grpo_ba_lab/analysis/long_horizon.py), on hand-made metrics, and its figure read back."""
import pytest

from fake_runs import write_units
from grpo_ba_lab import designs
from grpo_ba_lab.analysis import long_horizon as lh
from grpo_ba_lab.analysis import regime_pilot
from grpo_ba_lab.lab_args import check_args, parse_args


def test_the_probe_runs_strong_bands_world_and_band_for_200_steps_evaluated_every_10():
    strong = designs.DESIGNS["strong-band"]["flags"]
    for setting in lh.SETTINGS:
        args = parse_args(lh.command(setting, 1600, "/tmp/lh", 1))
        check_args(args)
        for key, value in strong.items():
            if key not in ("steps", "eval_every"):
                assert getattr(args, key) == value, (setting, key)
        assert (args.steps, args.eval_every, args.aggregator) == (200, 10, "all")
        assert args.endless_slips == (0.5 if setting == "strong-endless" else 0.0)


def test_the_probe_seeds_are_no_design_or_pilot_seeds():
    used = {seed for name in designs.DESIGNS for seed, _ in designs.registered_seeds(name)}
    assert not set(lh.SEEDS) & (used | set(regime_pilot.PILOT_SEEDS) | set(regime_pilot.ROUND2_SEEDS))


def _metrics(curve, steps=200):
    """Evaluations every 10 steps with accuracies `curve` (21 values: steps 0..200)."""
    lines = [{"step": s, "pos_share_token": 0.3} for s in range(steps)]
    for k, a in enumerate(curve[:-1]):
        lines[10 * k]["accuracy"] = a
    return lines + [{"step": steps, "final_evaluation": True, "accuracy": curve[-1]}]


def _curve(peak, last, peak_at=10):
    """Rises to `peak` at evaluation `peak_at`, then falls linearly to `last`."""
    rise = [0.5 + (peak - 0.5) * k / peak_at for k in range(peak_at + 1)]
    fall = [peak + (last - peak) * k / (20 - peak_at) for k in range(1, 21 - peak_at)]
    return rise + fall


def test_a_run_collapses_by_its_drop_or_by_its_deficit_against_balanced_never_at_the_bounds():
    s = lh.run_summary(_metrics(_curve(0.80, 0.65)), balanced_last=0.70)
    assert s["collapsed"] and abs(s["drop"] - 0.15) < 1e-12 and s["peak_step"] == 100
    s = lh.run_summary(_metrics(_curve(0.75, 0.70)), balanced_last=0.85)
    assert s["collapsed"] and abs(s["deficit"] - 0.15) < 1e-12
    s = lh.run_summary(_metrics(_curve(0.75, 0.70)), balanced_last=0.78)
    assert not s["collapsed"]
    s = lh.run_summary(_metrics(_curve(0.75, 0.75 - 0.0625)), balanced_last=None)   # drop 0.0625
    assert not s["collapsed"] and s["deficit"] == 0.0


def _found(token_curves, balanced_curves, setting="strong-long"):
    found = {}
    for seed, tok, bal in zip(lh.SEEDS, token_curves, balanced_curves):
        found[(setting, seed)] = {"token": _metrics(tok), "sequence": _metrics(_curve(0.7, 0.7)),
                                  "balanced": _metrics(bal)}
    return found


def test_the_move_on_rule_needs_token_collapsing_in_half_and_balanced_in_at_most_a_quarter():
    fall, keep = _curve(0.8, 0.6), _curve(0.75, 0.75)
    units = lh.summaries(_found([fall, fall, keep, keep], [keep, keep, keep, fall]))
    counts, met = lh.move_on(units, "strong-long")
    assert counts["token"] == (2, 4) and counts["balanced"] == (1, 4) and met
    units = lh.summaries(_found([fall, fall, keep, keep], [keep, keep, fall, fall]))
    assert not lh.move_on(units, "strong-long")[1]
    units = lh.summaries(_found([fall, keep, keep, keep], [keep] * 4))
    assert not lh.move_on(units, "strong-long")[1]
    assert lh.move_on(units, "strong-endless") == ({r: (0, 0) for r in ("token", "sequence", "balanced")}, False)


def test_the_report_and_figure_draw_one_line_per_seed_from_the_runs_on_disk(tmp_path):
    fall, keep = _curve(0.8, 0.6), _curve(0.75, 0.75)
    write_units(tmp_path, _found([fall, keep, fall, keep], [keep] * 4))
    text = lh.report(str(tmp_path), log=lambda *a: None)
    assert "| strong-long | 1600 | token | 0.800 (100) | 0.600 | 0.200 | +0.150 | yes |" in text
    assert "- strong-long (strong-band's world, 200 steps): token 2/4, sequence 0/4, balanced 0/4; move-on rule met" in text
    assert (tmp_path / "long-horizon.png").stat().st_size > 10_000
    fig = lh.figure(lh.coupling_pilot.collect(str(tmp_path)), str(tmp_path / "again.png"))
    lines = {line.get_gid(): line for ax in fig.axes for line in ax.get_lines() if line.get_gid()}
    assert len(lines) == 12                              # 3 rules x 4 seeds, one setting
    x, y = lines["strong-long/token/1600"].get_data()
    assert list(x) == list(range(0, 201, 10)) and abs(y[10] - 0.8) < 1e-12 and abs(y[-1] - 0.6) < 1e-12
    assert [ax.get_title() for ax in fig.axes] == ["strong-long: token", "strong-long: sequence", "strong-long: balanced"]


def test_the_paired_rows_are_seed_by_seed_differences_against_balanced_with_what_they_detect():
    import statistics
    falls = [_curve(0.8, 0.6), _curve(0.8, 0.7), _curve(0.8, 0.65), _curve(0.8, 0.8)]
    keep = _curve(0.75, 0.75)
    units = lh.summaries(_found(falls, [keep] * 4))
    rows = lh.paired_lines(units, "strong-long")
    drops = [0.2, 0.1, 0.15, 0.0]                        # token's drops; balanced's are 0
    mean, sd = statistics.mean(drops), statistics.stdev(drops)
    half = lh.paired_stats.t_critical(3) * sd / 2
    detect = lh.paired_stats.detectable_difference(sd, 4)
    assert rows[0] == (f"| strong-long | token - balanced, peak - last | 4 | {mean:+.3f} "
                       f"[{mean - half:+.3f}, {mean + half:+.3f}] | {detect:.3f} |")
    lasts = [0.75 - x for x in (0.6, 0.7, 0.65, 0.8)]     # balanced's last - token's last
    assert rows[1].startswith(f"| strong-long | balanced - token, last held-out acc | 4 | {statistics.mean(lasts):+.3f} [")
    assert rows[2].startswith("| strong-long | sequence - balanced, peak - last | 4 | +0.000 [")
    assert lh.paired_lines(units, "strong-endless") == []
    one = {k: v for k, v in units.items() if k[1] == 1600}
    assert lh.paired_lines(one, "strong-long") == []     # one seed: no interval to draw


def test_the_page_checker_reads_every_row_and_count_of_the_long_horizon_report():
    import os
    import sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import page_numbers as pn
    fall, keep = _curve(0.8, 0.6), _curve(0.75, 0.75)
    rows = pn.parse_report(lh.report_text(_found([fall, keep, fall, keep], [keep] * 4)))
    assert rows["strong-long / 1600 / token"]["peak (step)"] == "0.800 (100)"
    assert rows["strong-long / 1600 / token"]["collapsed"] == "yes"
    assert rows["collapses / strong-long"] == {"token": "2/4", "sequence": "0/4", "balanced": "0/4", "move-on": "met"}
    assert rows["strong-long / token - balanced, peak - last"]["difference"].startswith("+0.100 [")
    assert rows["strong-long / token - balanced, peak - last"]["seeds"] == "4"


@pytest.mark.slow                   # draws or redraws figures: the full suite runs it
def test_the_committed_long_horizon_report_and_figure_redraw_from_the_runs_archive(tmp_path):
    """assets/long-horizon: long-horizon.md redrawn byte for byte from runs.tar.gz, every run
    of the archive finished at 200 steps on the probe's seeds and settings with its flags, and
    the figure draws each run's evaluations."""
    import json
    import os
    import tarfile
    assets = os.path.join(designs.REPO, "assets", "long-horizon")
    with tarfile.open(os.path.join(assets, "runs.tar.gz")) as tar:
        tar.extractall(tmp_path, filter="data")
    with open(os.path.join(assets, "long-horizon.md")) as f:
        committed = f.read()
    assert lh.report(str(tmp_path), log=lambda *a: None) == committed
    found = lh.coupling_pilot.collect(str(tmp_path))
    assert {seed for _, seed in found} <= set(lh.SEEDS) and {s for s, _ in found} <= set(lh.SETTINGS)
    assert sum(1 for s, _ in found if s == "strong-long") >= 4
    commits = set()
    for run_dir, args, metrics in lh.coupling_pilot.run_dirs.saved_runs(str(tmp_path)):
        setting, _, seed = os.path.basename(os.path.dirname(run_dir)).rpartition("-s")
        expected = vars(parse_args(lh.command(setting, int(seed), str(tmp_path), 1)))
        for key in ("gap_size", "force_frac", "endless_slips", "steps", "eval_every", "lr", "warmup_steps",
                    "eval_prompts", "warmup_band_low", "warmup_band_high", "seed", "threads"):
            assert args[key] == expected[key], (run_dir, key)
        with open(os.path.join(run_dir, "run.json")) as f:
            starts = json.load(f)["starts"]
        assert len(starts) == 1 and not starts[0]["provenance"]["git"]["dirty"], run_dir   # one clean start
        commits.add(starts[0]["provenance"]["git"]["commit"])
    assert len(commits) == 1                             # every run from the plan's one commit
    fig = lh.figure(found, str(tmp_path / "again.png"))
    drawn = {line.get_gid(): line.get_data() for ax in fig.axes for line in ax.get_lines() if line.get_gid()}
    assert len(drawn) == 3 * len(found)
    for (setting, seed), runs in found.items():
        for rule, metrics in runs.items():
            x, y = drawn[f"{setting}/{rule}/{seed}"]
            assert [list(x), list(y)] == [list(v) for v in lh.paired_stats.evaluations(metrics)]
