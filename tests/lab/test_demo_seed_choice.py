"""How the demo's seed was chosen (docs/toy-designs.md, "The demo since 2026-12-02"), read back
from the committed runs (assets/demo-seed-choice/runs.tar.gz: args.json, metrics.jsonl and run.json
of each demo run, `python grpo_ba.py --seed S --threads T` with and without ATEN_CPU_CAPABILITY).
The rule: the first seed from 20 whose demo repeats every metrics line on every kernel/thread path
tried, and whose token share on right answers passes strong-band's registered check (<= 0.40)."""
import io
import json
import os
import tarfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ARCHIVE = os.path.join(REPO, "assets", "demo-seed-choice", "runs.tar.gz")
RULES = ("token", "sequence", "balanced")
# Computed from the weights' gradients and log-probs, these differ between kernels in the 6th-7th
# significant digit even where every sampled token is the same; everything else must repeat exactly.
FLOAT_PATH = ("entropy", "kl", "grad_norm")
MOST_SHARE = 0.40                          # registrations/strong-band-v3.md's manipulation check


@pytest.fixture(scope="module")
def runs():
    """{(seed, path as run.json names it): {rule: [metrics lines without step_time]}}."""
    files = {}
    with tarfile.open(ARCHIVE) as tar:
        for member in tar.getmembers():
            if member.isfile():
                files[member.name] = tar.extractfile(member).read().decode()
    found = {}
    for name in files:
        if name.endswith("token/run.json"):
            folder = name[:-len("token/run.json")]
            machine = json.loads(files[name])["starts"][0]["machine"]
            path = f"{machine['aten_cpu_capability'] or 'native'}-{machine['threads']}t"
            seed = json.loads(files[folder + "token/args.json"])["seed"]
            found[(seed, path)] = {rule: [{k: v for k, v in json.loads(line).items() if k != "step_time"}
                                          for line in io.StringIO(files[f"{folder}{rule}/metrics.jsonl"])]
                                   for rule in RULES}
    return found


def sampled(lines):
    """The metrics lines without the float-path diagnostics."""
    return [{k: v for k, v in m.items() if k not in FLOAT_PATH} for m in lines]


def first_difference(a, b):
    return next((x["step"] for x, y in zip(sampled(a), sampled(b)) if x != y), None)


def largest_float_path_gap(a, b):
    return max(abs(x[k] - y[k]) for x, y in zip(a, b) for k in FLOAT_PATH if x.get(k) is not None)


def token_share(run):
    shares = [m["pos_share"] for m in run["token"] if m.get("pos_share") is not None]
    return sum(shares) / len(shares)


def final_accuracy(run, rule):
    return run[rule][-1]["accuracy"]


def test_seed_22_repeats_every_metrics_line_on_five_paths_and_passes_the_share_check(runs):
    paths = {path for seed, path in runs if seed == 22}
    assert paths == {"native-2t", "native-1t", "avx2-2t", "default-1t", "default-2t"}
    native = runs[(22, "native-2t")]
    for path in paths - {"native-2t"}:
        for rule in RULES:
            assert sampled(runs[(22, path)][rule]) == sampled(native[rule]), (path, rule)
            assert largest_float_path_gap(runs[(22, path)][rule], native[rule]) < 1e-4, (path, rule)
    assert runs[(22, "native-1t")] == native       # native kernels on 1 thread: every digit
    assert token_share(native) <= MOST_SHARE
    assert [round(final_accuracy(native, rule) * 729) for rule in RULES] == [489, 509, 489]


def test_seed_20_left_at_step_24_on_scalar_kernels_and_seed_21_failed_the_share_check(runs):
    native, scalar = runs[(20, "native-2t")], runs[(20, "default-1t")]
    assert first_difference(native["token"], scalar["token"]) == 24
    assert all(sampled(native[rule]) == sampled(scalar[rule]) for rule in ("sequence", "balanced"))
    assert (round(final_accuracy(native, "token"), 3), round(final_accuracy(scalar, "token"), 3)) == (0.476, 0.479)
    assert token_share(runs[(21, "native-2t")]) > MOST_SHARE


def test_the_page_quotes_what_the_runs_show(runs):
    with open(os.path.join(REPO, "docs", "toy-designs.md")) as f:
        text = " ".join(f.read().split())
    section = text[text.index("## The demo since 2026-12-02"):text.index("## The claim rule")]
    scalar, native = runs[(20, "default-1t")], runs[(20, "native-2t")]
    assert (f"final accuracy {final_accuracy(scalar, 'token'):.3f} instead of "
            f"{final_accuracy(native, 'token'):.3f}") in section
    assert f"token's share {token_share(runs[(21, 'native-2t')]):.3f}" in section
    assert "differed from step 24" in section and "assets/demo-seed-choice/runs.tar.gz" in section


def test_the_stability_the_move_relied_on_is_read_from_strong_bands_committed_runs():
    """'4 of strong-band's 144 runs dropped more than 0.1' (peak minus last held-out accuracy)."""
    drops = []
    with tarfile.open(os.path.join(REPO, "assets", "strong-band-v3", "runs.tar.gz")) as tar:
        for member in tar.getmembers():
            if member.name.endswith("metrics.jsonl"):
                lines = tar.extractfile(member).read().decode().splitlines()
                accuracy = [m["accuracy"] for m in map(json.loads, lines) if m.get("accuracy") is not None]
                drops.append(max(accuracy) - accuracy[-1])
    with open(os.path.join(REPO, "docs", "toy-designs.md")) as f:
        text = " ".join(f.read().split())
    assert f"{sum(d > 0.1 for d in drops)} of strong-band's {len(drops)} runs dropped more than 0.1" in text
