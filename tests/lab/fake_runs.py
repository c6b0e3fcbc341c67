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
