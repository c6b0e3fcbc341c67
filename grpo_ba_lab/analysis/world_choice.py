"""grpo_ba_lab/analysis/world_choice.py -- worlds chosen blind: a registered rule picks a design's
coupling levels from step-0 quantities alone, before any GRPO run of the design.

    python -m grpo_ba_lab.analysis.world_choice DESIGN.json measure --variant avx2-1t --out DIR
    python -m grpo_ba_lab.analysis.world_choice DESIGN.json measure --variant default-1t --out DIR
    python -m grpo_ba_lab.analysis.world_choice DESIGN.json choose DIR

The design file's "selection" names a grid of worlds (every combination of its settings), the
selection seed of each machine variant, and the targets of each level. `measure` trains each
world's band warm-up for the variant's seed (the design's own band rule) and samples
`step0_batches` batches of P * G responses from it, as a run's steps 0, 1, ... would before any
update. It keeps token's weight share on right answers (mean over the batches), the wrong/right
length ratio and whether the warm-up entered the band: no GRPO step runs, so no accuracy of a
GRPO run exists to read. `choose` applies the registered rule (choose_worlds) to those numbers
and writes the chosen worlds (worlds.json, worlds.md) beside the design's report.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys

from grpo_ba_lab import designs

MEASURED_KEYS = ("token_share", "wrong_over_right", "in_band")


def read_design(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def grid_worlds(selection: dict) -> list[dict]:
    """Every world of the grid, in the registered order (the grid's keys, each in its order)."""
    keys = list(selection["grid"])
    return [dict(zip(keys, values)) for values in itertools.product(*(selection["grid"][k] for k in keys))]


def world_name(world: dict) -> str:
    """slip-force-gap, e.g. `ramble-f0.5-g30`: one name per grid point."""
    return f"{world['slip_style']}-f{world['force_frac']}-g{world['gap_size']}"


def world_flags(design: dict, world: dict) -> dict:
    """The flags of a world's runs: the design's fixed flags and the grid point."""
    return {**design["flags"], **world}


def command_line(flags: dict) -> list[str]:
    argv = ["--design", designs.NO_DESIGN]
    for key, value in flags.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    return argv


# ------------------------------------------------------------------ measure (step 0 only)

def step0_of_world(design: dict, world: dict, seed: int, cache_dir: str) -> dict:
    """token's share and the wrong/right ratio of a world's step-0 batches on one seed, from
    its band warm-up; in_band False (and no batch) when the warm-up misses the band."""
    import torch

    import grpo_ba
    from grpo_ba_lab import lab_args
    from grpo_ba_lab.analysis.toy_consequences import step0_batches, step0_policy
    from grpo_ba_support.run import SetupError
    args = lab_args.parse_args(command_line({**world_flags(design, world), "seed": seed, "threads": 1,
                                             "cache_dir": cache_dir}))
    try:
        start = step0_policy(args)
    except SetupError as error:                  # no draw of the warm-up entered the band
        return {"world": world_name(world), "seed": seed, "in_band": False, "why": str(error)}
    batches = design["selection"]["step0_batches"]
    size = args.prompts_per_step * args.group_size
    lengths, rewards = step0_batches(args, batches, start)
    shares, right, wrong = [], [], []
    for b in range(batches):
        L = torch.tensor(lengths[b * size:(b + 1) * size])                    # (P * G,)
        r = torch.tensor(rewards[b * size:(b + 1) * size])
        mask = grpo_ba.mask_from_lengths(L).float()                            # (P * G, T)
        advantages = grpo_ba.group_advantages(r, args.group_size)
        share = grpo_ba.positive_share(mask, advantages, args.group_size, "token")
        if share is not None:                    # None: every group of the batch tied
            shares.append(share)
        right += L[r > 0.5].tolist()
        wrong += L[r <= 0.5].tolist()
    ratio = (sum(wrong) / len(wrong)) / (sum(right) / len(right)) if right and wrong else float("nan")
    return {"world": world_name(world), "seed": seed, "in_band": True,
            "token_share": sum(shares) / len(shares) if shares else float("nan"),
            "wrong_over_right": ratio, "batches": batches, "batches_with_signal": len(shares),
            "len_right": sum(right) / max(len(right), 1), "len_wrong": sum(wrong) / max(len(wrong), 1)}


def measure(design: dict, variant: str, out: str, log=print) -> list[dict]:
    """Every grid world on the variant's selection seed, one JSON file per world under out/
    (a world already measured is skipped). Runs in this process: call it with the variant's
    kernels set (main() re-executes itself under them)."""
    import torch
    torch.set_num_threads(designs.VARIANTS[variant]["threads"])
    seed = design["selection"]["seeds"][variant]
    os.makedirs(out, exist_ok=True)
    found = []
    for world in grid_worlds(design["selection"]):
        path = os.path.join(out, f"{world_name(world)}-{variant}.json")
        if os.path.exists(path):
            with open(path) as f:
                found.append(json.load(f))
            continue
        log(f"{world_name(world)} ({variant}, seed {seed}): band warm-up, then "
            f"{design['selection']['step0_batches']} step-0 batches")
        record = {**step0_of_world(design, world, seed, os.path.join(out, f"cache-{variant}")),
                  "variant": variant, "cpu_capability": torch.backends.cpu.get_cpu_capability()}
        with open(path + ".tmp", "w") as f:
            json.dump(record, f, indent=1, sort_keys=True)
        os.replace(path + ".tmp", path)
        found.append(record)
    return found


# ------------------------------------------------------------------ the registered rule

def world_summaries(design: dict, records: list[dict]) -> dict:
    """{world name: {"world", "token_share", "wrong_over_right", "in_band", "seeds"}}: the mean
    over the selection seeds (one per variant); in_band only if every seed's warm-up entered."""
    selection = design["selection"]
    out = {}
    for world in grid_worlds(selection):
        name = world_name(world)
        mine = [r for r in records if r["world"] == name]
        if len(mine) != len(selection["seeds"]):
            raise ValueError(f"{name}: {len(mine)} of {len(selection['seeds'])} selection seeds measured")
        ok = all(r["in_band"] for r in mine)
        mean = (lambda key: sum(r[key] for r in mine) / len(mine)) if ok else (lambda key: float("nan"))
        out[name] = {"world": world, "in_band": ok, "seeds": sorted(r["seed"] for r in mine),
                     "token_share": mean("token_share"), "wrong_over_right": mean("wrong_over_right")}
    return out


def eligible(summary: dict, target: dict, min_ratio: float) -> bool:
    low, high = target["share"]
    return (summary["in_band"] and low <= summary["token_share"] <= high
            and summary["wrong_over_right"] > min_ratio)


def choose_worlds(design: dict, summaries: dict) -> dict:
    """The registered rule. A family is the grid's settings other than the gap. In each family,
    a level's candidates are the gaps whose world entered the band on every selection seed,
    whose wrong answers are longer than right ones (ratio > min_ratio) and whose token share
    lies in the level's window; the level takes the candidate nearest its aim. A family
    qualifies when its weak gap is smaller than its strong gap; the design takes the family
    with the least |weak share - weak aim| + |strong share - strong aim|, ties to the grid's
    order. Reads step-0 quantities only. {"family", "levels": {level: world name}, "why"}."""
    selection = design["selection"]
    targets, min_ratio = selection["targets"], selection["min_wrong_over_right"]
    families = {}
    for name, s in summaries.items():
        family = tuple((k, v) for k, v in s["world"].items() if k != "gap_size")
        families.setdefault(family, []).append(name)
    best = None
    for family, names in families.items():                  # grid order (dicts keep insertion order)
        picked = {}
        for level, target in targets.items():
            candidates = [n for n in names if eligible(summaries[n], target, min_ratio)]
            if candidates:
                picked[level] = min(candidates, key=lambda n: abs(summaries[n]["token_share"] - target["aim"]))
        if set(picked) != set(targets):
            continue
        gaps = {level: summaries[n]["world"]["gap_size"] for level, n in picked.items()}
        if not gaps["weak"] < gaps["strong"]:
            continue
        distance = sum(abs(summaries[picked[level]]["token_share"] - target["aim"])
                       for level, target in targets.items())
        if best is None or distance < best[0]:
            best = (distance, dict(family), picked)
    if best is None:
        return {"family": None, "levels": {}, "why": "no family of the grid has both levels"}
    return {"family": best[1], "levels": best[2], "distance": best[0], "why": ""}


def worlds_text(design: dict, summaries: dict, chosen: dict) -> str:
    selection = design["selection"]
    lines = [f"# {design['name']}: the worlds chosen blind", "",
             f"Chosen by `world_choice.choose_worlds` ({design['registration']}) from step-0 quantities "
             f"only: each grid world's band warm-up on the selection seeds "
             f"({', '.join(f'{s} on {v}' for v, s in selection['seeds'].items())}), then "
             f"{selection['step0_batches']} step-0 batches of P * G responses. No GRPO step ran.", "",
             "| world | slip | forced | gap | warm-ups in band | token's step-0 share | wrong / right | level |",
             "|---|---|---|---|---|---|---|---|"]
    chosen_of = {name: level for level, name in chosen["levels"].items()}
    for name, s in summaries.items():
        w = s["world"]
        share = f"{s['token_share']:.3f}" if s["in_band"] else "-"
        ratio = f"{s['wrong_over_right']:.2f}" if s["in_band"] else "-"
        lines.append(f"| {name} | {w['slip_style']} | {w['force_frac']} | {w['gap_size']} | "
                     f"{'yes' if s['in_band'] else 'no'} | {share} | {ratio} | {chosen_of.get(name, '')} |")
    targets = "; ".join(f"{level}: share in [{t['share'][0]}, {t['share'][1]}], nearest {t['aim']}"
                        for level, t in selection["targets"].items())
    lines += ["", f"Targets: {targets}; wrong / right above {selection['min_wrong_over_right']}."]
    if chosen["family"] is None:
        lines.append(f"No world chosen: {chosen['why']}.")
    else:
        lines.append(f"Chosen family: {chosen['family']}; " + ", ".join(
            f"{level} = {name}" for level, name in chosen["levels"].items())
            + f" (summed distance to the aims {chosen['distance']:.3f}).")
    return "\n".join(lines) + "\n"


def choose(design: dict, measured_dir: str, out: str, log=print) -> dict:
    records = []
    for name in sorted(os.listdir(measured_dir)):
        if name.endswith(".json"):
            with open(os.path.join(measured_dir, name)) as f:
                records.append(json.load(f))
    summaries = world_summaries(design, records)
    chosen = choose_worlds(design, summaries)
    os.makedirs(out, exist_ok=True)
    worlds = {"design": design["name"], "family": chosen["family"],
              "levels": {level: summaries[name]["world"] for level, name in chosen["levels"].items()},
              "level_worlds": chosen["levels"], "measured": records}
    with open(os.path.join(out, "worlds.json"), "w") as f:
        json.dump(worlds, f, indent=1, sort_keys=True)
        f.write("\n")
    with open(os.path.join(out, "worlds.md"), "w") as f:
        f.write(worlds_text(design, summaries, chosen))
    log(worlds_text(design, summaries, chosen))
    return worlds


# ------------------------------------------------------------------ seeds by power

# (difference, level) -> the archives whose sds plan it: regime-v3's own pair and, for
# balanced - sequence, regime-v4's token - sequence (the same sequence arm on 49 seeds)
PLANNING = {("balanced", "token"): (("regime-v3", ("balanced", "token")),),
            ("balanced", "sequence"): (("regime-v3", ("balanced", "sequence")),
                                       ("regime-v4", ("token", "sequence")))}


def seeds_needed(pooled_sd: float, path_sds: list[float], delta: float, primaries: int) -> int:
    """The smallest n at which claim_detectable's convention detects `delta`: the pooled test
    at 80% and each of the paths at 0.8^(1/paths), all at alpha / primaries (Holm's first step)."""
    from grpo_ba_lab.analysis import paired_stats as ps
    alpha, each = ps.ALPHA / primaries, ps.POWER ** (1 / len(path_sds))
    n = 2
    while max([ps.detectable_difference(pooled_sd, n, alpha)] +
              [ps.detectable_difference(sd, n, alpha, each) for sd in path_sds]) > delta:
        n += 1
    return n


def archive_sds(repo: str, work: str) -> dict:
    """{(archive, pair, level): (pooled sd, [path sds])} of last held-out accuracy, from
    regime-v3's and regime-v4's committed archives (unpacked under `work`)."""
    import tarfile

    from grpo_ba_lab.analysis import paired_stats, regime_design, regime_v4
    v3_dir, v4_dir = os.path.join(work, "regime-v3"), os.path.join(work, "regime-v4")
    os.makedirs(v3_dir, exist_ok=True)
    with tarfile.open(os.path.join(repo, "assets/regime-v3/runs.tar.gz")) as tar:
        tar.extractall(v3_dir, filter="data")
    regime_v4.extract(os.path.join(repo, "assets/regime-v4/archive"), v4_dir)
    v3, _ = regime_design.load_design(v3_dir)
    v4 = regime_v4.load_design(v4_dir)
    out = {}
    for level in ("weak", "strong"):
        for pair in (("balanced", "token"), ("balanced", "sequence")):
            out[("regime-v3", pair, level)] = paired_stats.claim_test(regime_design.per_unit(v3[level][0], *pair))
        out[("regime-v4", ("token", "sequence"), level)] = paired_stats.claim_test(regime_v4.per_unit(v4[level][0]))
    return {k: (t["sd"], [v["sd"] for v in t["variants"].values()]) for k, t in out.items()}


def power_text(design: dict, sds: dict) -> str:
    primaries = [r for r in design["rows"] if r["label"] == "primary"]
    delta = design["target_difference"]
    lines = [f"{design['name']}: seeds to detect {delta} on every primary ({len(primaries)} primaries, Holm's "
             f"first step alpha / {len(primaries)}; the pooled test at 80%, each path at 0.8^(1/2))", ""]
    for (archive, pair, level), (pooled, paths) in sds.items():
        lines.append(f"  sd {archive} {' - '.join(pair)} at {level}: pooled {pooled:.4f}, paths "
                     + ", ".join(f"{s:.4f}" for s in paths))
    lines.append("")
    need = []
    for r in primaries:
        sources = PLANNING[tuple(r["pair"])]
        parts = [sds[(archive, pair, r["level"])] for archive, pair in sources]
        pooled = max(p[0] for p in parts)
        paths = [max(p[1][i] for p in parts) for i in range(len(parts[0][1]))]
        own = seeds_needed(*parts[0], delta, len(primaries))
        n = seeds_needed(pooled, paths, delta, len(primaries))
        need.append(n)
        lines.append(f"  {' - '.join(r['pair'])} at {r['level']}: planning sd pooled {pooled:.4f}, paths "
                     + ", ".join(f"{s:.4f}" for s in paths)
                     + f" -> n = {n} (on regime-v3's own pair alone: {own})")
    lines += ["", f"n = {max(need)}"]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grpo_ba_lab.analysis.world_choice",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("design_file")
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure", help="step-0 quantities of every grid world on one variant's selection seed")
    m.add_argument("--variant", required=True, choices=sorted(designs.VARIANTS))
    m.add_argument("--out", required=True)
    m.add_argument("--here", action="store_true", help=argparse.SUPPRESS)   # already under the variant's kernels
    c = sub.add_parser("choose", help="apply the registered rule to the measured worlds")
    c.add_argument("measured_dir")
    c.add_argument("--out", default="", help="where worlds.json and worlds.md go (default: the design's report folder)")
    sub.add_parser("power", help="the seeds the design needs, from regime-v3's and regime-v4's archives")
    options = parser.parse_args(argv)
    design = read_design(options.design_file)
    if options.command == "power":
        import tempfile
        with tempfile.TemporaryDirectory() as work:
            print(power_text(design, archive_sds(designs.REPO, work)), end="")
        return 0
    if options.command == "measure":
        if not options.here:                     # the kernels must be set before torch loads
            from grpo_ba_lab.analysis.regime_design import variant_env
            return subprocess.run([sys.executable, "-m", "grpo_ba_lab.analysis.world_choice", options.design_file,
                                   "measure", "--variant", options.variant, "--out", options.out, "--here"],
                                  env=variant_env(options.variant)).returncode
        if options.variant not in design["selection"]["seeds"]:
            parser.error(f"{options.variant} has no selection seed in {options.design_file}")
        measure(design, options.variant, options.out)
    else:
        choose(design, options.measured_dir, options.out or os.path.join(designs.REPO, design["report_dir"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
