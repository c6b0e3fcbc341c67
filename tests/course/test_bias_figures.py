"""The demo's figures draw what they say, read back from the lines they draw: the sequence
equal-weighting panel shows one answer's per-token weight relative to a same-sign answer of
fixed length (sequence L_ref / L, token and balanced flat at 1), the sign-length coupling panel
token's share Lbar+ / (Lbar+ + Lbar-) against the others' 1/2; the mechanism figure plots the
pg-loss drift, no truncation panel, and every rule's line stays visible where two coincide."""
import matplotlib
import numpy as np
import pytest

import grpo_ba
import grpo_ba_plots

RULES = ("token", "sequence", "balanced")
LENGTHS = [2, 3, 5, 8, 10, 13, 20, 30, 40]


@pytest.fixture(scope="module")
def curves():
    return grpo_ba.bias_curves(ratios=[0.2, 0.5, 1.0, 2.0, 4.0], lengths=LENGTHS)


def drawn(ax) -> dict:
    """{rule: its Line2D} of one panel."""
    return {line.get_label(): line for line in ax.get_lines() if line.get_label() in RULES}


def visible_fractions(fig) -> dict:
    """{(panel title, rule): how much of the rule's line stays in sight with every line drawn}:
    pixels of its colour with all lines drawn over pixels of its colour with its line alone."""
    for ax in fig.axes:
        if ax.get_legend():
            ax.get_legend().set_visible(False)

    def pixels(rule):                           # {(title, rule): count} with these lines shown
        for ax in fig.axes:
            for line in ax.get_lines():
                line.set_visible(rule is None or line.get_label() == rule)
        fig.canvas.draw()
        image = np.asarray(fig.canvas.buffer_rgba())[..., :3].astype(int)
        counts = {}
        for ax in fig.axes:
            box = ax.get_window_extent()
            crop = image[int(image.shape[0] - box.y1):int(image.shape[0] - box.y0), int(box.x0):int(box.x1)]
            for name, line in drawn(ax).items():
                target = np.array(matplotlib.colors.to_rgb(line.get_color())) * 255
                counts[(ax.get_title(), name)] = int((np.abs(crop - target).sum(axis=-1) < 60).sum())
        return counts
    together = pixels(None)
    alone = {key: count for rule in RULES for key, count in pixels(rule).items() if key[1] == rule}
    return {key: together[key] / alone[key] for key in alone}


def test_the_sequence_equal_weighting_panel_draws_reference_over_length_and_flat_token_and_balanced(curves):
    fig = grpo_ba_plots.bias_curves(curves, None)
    lines = drawn(fig.axes[1])
    reference = curves["reference_length"]
    assert list(lines["sequence"].get_xdata()) == LENGTHS
    assert list(lines["sequence"].get_ydata()) == pytest.approx([reference / n for n in LENGTHS], rel=1e-6)
    for rule in ("token", "balanced"):                         # flat: a same-sign token weighs the same
        assert np.abs(np.asarray(lines[rule].get_ydata()) - 1.0).max() <= 1e-6
    assert "Sequence equal-weighting" in fig.axes[1].get_title()


def test_the_sign_length_coupling_panel_draws_token_following_the_lengths_and_the_others_at_one_half(curves):
    fig = grpo_ba_plots.bias_curves(curves, None)
    lines = drawn(fig.axes[0])
    ratios = np.asarray(lines["token"].get_xdata())
    assert np.asarray(lines["token"].get_ydata()) == pytest.approx(ratios / (ratios + 1), rel=1e-5)
    for rule in ("sequence", "balanced"):
        assert np.asarray(lines[rule].get_ydata()) == pytest.approx(0.5, abs=1e-6)
    assert "Sign-length coupling" in fig.axes[0].get_title()


@pytest.mark.slow                   # draws or redraws figures: the full suite runs it
def test_every_rule_stays_visible_where_its_line_coincides_with_another_in_the_bias_figure(curves):
    fractions = visible_fractions(grpo_ba_plots.bias_curves(curves, None))
    assert len(fractions) == 6 and min(fractions.values()) >= 0.3, fractions


def synthetic_runs(steps=30):
    """Metrics lines as the demo writes them: token's share below 1/2 and its loss drifting,
    sequence's and balanced's exactly at 1/2 and 0 (they coincide), lengths and entropy apart."""
    runs = {}
    for offset, rule in enumerate(RULES):
        lines = [{"step": s, "pos_share": 0.42 + 0.001 * s if rule == "token" else 0.5,
                  "pg_loss": 0.09 + 0.002 * s if rule == "token" else 0.0,
                  "len_right": 10 - 0.1 * s + offset, "len_wrong": 15 - 0.05 * s * (offset + 1),
                  "entropy": 0.3 - 0.002 * s * (offset + 1), "truncated_frac": 0.0,
                  "long_right_weight": 0.5 + 0.01 * s if rule == "sequence" else 1.0,
                  "forced_frac": 0.5 + 0.02 * (s % 3),                  # the world's: the same for all
                  **({"accuracy": 0.6 + 0.01 * s + 0.005 * offset} if s % 5 == 0 else {})}
                 for s in range(steps)]
        runs[rule] = lines + [{"step": steps, "final_evaluation": True, "accuracy": 0.9 - 0.02 * offset}]
    return runs


def test_the_mechanism_figure_draws_each_rules_metrics_both_biases_the_forced_slips_and_no_truncation_panel():
    runs = synthetic_runs()
    fig = grpo_ba_plots.mechanism_figure(runs, None, "test")
    panels = [ax for ax in fig.axes if ax.get_lines()]
    assert [key for key, _ in grpo_ba_plots.PANELS] == ["accuracy", "pos_share", "long_right_weight", "pg_loss",
                                                        "len_right", "len_wrong", "forced_frac", "entropy"]
    assert len(panels) == len(grpo_ba_plots.PANELS)
    for ax, (key, _) in zip(panels, grpo_ba_plots.PANELS):
        if key == "forced_frac":                                    # the world's, drawn as such
            assert {line.get_label() for line in ax.get_lines()} == {"the world"} and not drawn(ax)
            continue
        for rule, line in drawn(ax).items():
            expected = [(m["step"], m[key]) for m in runs[rule]
                        if key in m and (key == "accuracy" or not m.get("final_evaluation"))]
            assert list(zip(line.get_xdata(), line.get_ydata())) == expected, (key, rule)
    drift = drawn(panels[3])
    assert min(drift["token"].get_ydata()) > 0 and set(drift["sequence"].get_ydata()) == {0.0}


@pytest.mark.slow                   # draws or redraws figures: the full suite runs it
def test_every_rule_stays_visible_where_lines_coincide_in_the_mechanism_figure():
    fractions = visible_fractions(grpo_ba_plots.mechanism_figure(synthetic_runs(), None, "test"))
    assert len(fractions) == 21 and min(fractions.values()) >= 0.3, fractions
