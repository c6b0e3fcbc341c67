"""Hand-made pilot runs on disk, laid out as `--aggregator all` writes them under a study's
folder: OUT/<world>-s<seed>/<rule>/{args.json, metrics.jsonl}."""
import json


def write_units(out, found: dict):
    """found: {(world, seed): {rule: metrics}}; a run's steps are its last metrics line's step."""
    for (world, seed), runs in found.items():
        for rule, metrics in runs.items():
            run = out / f"{world}-s{seed}" / rule
            run.mkdir(parents=True)
            (run / "args.json").write_text(json.dumps({"aggregator": rule, "seed": seed, "steps": metrics[-1]["step"]}))
            (run / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    return str(out)


def regime_metrics(last: float, share: float) -> list[dict]:
    """A 30-step run's metrics as the regime designs read them: token's weight share on right
    answers `share` at every step, evaluations at steps 0, 10 and 20, and `last` after the last
    update."""
    steps = [{"step": s, "pos_share": share, "len_right": 7.0, "len_wrong": 14.0, "wrong_over_right": 2.0,
              "std_over_mean": 0.5, "reward_mean": 0.2} for s in range(30)]
    for s, a in zip((0, 10, 20), (0.5, 0.55, 0.6)):
        steps[s]["accuracy"] = a
    return steps + [{"step": 30, "final_evaluation": True, "accuracy": last}]
