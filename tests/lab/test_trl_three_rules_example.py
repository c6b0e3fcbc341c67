"""grpo_ba_lab/examples/trl_three_rules.py runs as its docstring says, `python -m` from the clone's top
folder with nothing installed but the requirements: three runs (token, sequence, balanced) from one
start and seed, each run's rollouts written, the side-by-side numbers it prints are diagnose's on
those files, TRL's own logs stay off, and it ends with what it measured: token's drift as TRL
logged it, the identities marked as identities, and the run called a smoke test."""
import importlib.util
import json
import os
import re

import pytest

from grpo_ba_lab.analysis import diagnose

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "grpo_ba_lab", "examples", "trl_three_rules.py")
RULES = ("token", "sequence", "balanced")

pytestmark = [pytest.mark.slow,                   # builds a model and trains it three times
              pytest.mark.skipif(importlib.util.find_spec("trl") is None,
                                 reason="TRL is optional: pip install .[trl]")]


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    """`python -m grpo_ba_lab.examples.trl_three_rules` as each test below types it, from the clone's
    top folder without PYTHONPATH (the requirements-only path), both in one new interpreter
    (tests/commands_in_one_process.py: importing torch, transformers and TRL is 6 CPU s of each
    start): {"random": (its result, its --out), "warmup": ...}."""
    from commands_in_one_process import run_each
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1",
               MPLBACKEND="Agg")
    outs = {"random": tmp_path_factory.mktemp("example") / "cmp", "warmup": tmp_path_factory.mktemp("example") / "warm"}
    argvs = [["--steps", "2", "--out", outs["random"]], ["--start", "warmup", "--steps", "1", "--out", outs["warmup"]]]
    done = run_each("-m grpo_ba_lab.examples.trl_three_rules", argvs, cwd=ROOT, env=env, timeout=1500)
    return {name: (result, outs[name]) for name, result in zip(outs, done)}


def test_the_three_rules_example_runs_from_the_clone_and_ends_with_what_it_measured(examples):
    done, out = examples["random"]
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    printed = json.loads(done.stdout.strip().splitlines()[-1])             # the last line: one JSON object
    assert list(printed) == list(RULES)
    assert "{'loss'" not in done.stdout and "'learning_rate'" not in done.stdout   # TRL's per-step dicts: off
    rows = {}
    for rule in RULES:
        path = out / f"rollouts-{rule}.jsonl"
        assert f"wrote {path}" in done.stdout
        rows[rule] = [json.loads(line) for line in open(path)]
        assert [row["step"] for row in rows[rule]] == [0] * 32 + [1] * 32    # 2 steps x P = 4 x G = 8
        assert len({row["run"] for row in rows[rule]}) == 1
        report = diagnose.diagnose(str(path))                               # the numbers it printed
        for key, value in printed[rule].items():
            if key == "mean_reward":
                assert value == pytest.approx(sum(r["reward"] for r in rows[rule]) / 64)
            elif key == "trl_first_loss":
                continue
            elif value is None:
                assert report[key] is None or report[key] != report[key]    # n/a: no signal
            else:
                assert value == pytest.approx(report[key], rel=1e-9), (rule, key)
        assert printed[rule]["pos_share_sequence"] == pytest.approx(0.5, abs=1e-5)   # binary rewards
    first = {rule: [(r["length"], r["reward"]) for r in rows[rule] if r["step"] == 0] for rule in RULES}
    assert first["token"] == first["sequence"] == first["balanced"]         # the same start and seed
    assert "step 0's rollouts are the same in the three runs (same start and seed): yes" in done.stdout
    later = {rule: [(r["length"], r["reward"]) for r in rows[rule] if r["step"] == 1] for rule in RULES}
    assert len({tuple(v) for v in later.values()}) > 1                      # the rules trained differently
    assert sum(r["reward"] for r in rows["token"]) > 0                      # the reward gives a signal

    # TRL's first logged loss is J_rule at ratio 1: token's is its drift on step 0's batch, which
    # diagnose computes with TRL's unbiased std (the dump records it), the others' are 0.
    step0 = diagnose.diagnose_steps(str(out / "rollouts-token.jsonl"))[0]
    token_loss = printed["token"]["trl_first_loss"]
    assert token_loss == pytest.approx(step0["token_loss_at_ratio_one"], rel=1e-5)
    assert abs(token_loss) > 1e-3
    assert abs(printed["sequence"]["trl_first_loss"]) < 1e-5 and abs(printed["balanced"]["trl_first_loss"]) < 1e-5
    story = done.stdout[done.stdout.index("What the three runs measured"):]
    assert f"token {token_loss:+.3g}" in story
    assert "Sign-length coupling" in story and "Sequence equal-weighting" in story
    assert story.count("an identity") >= 3 and "this was a smoke test, 2 steps of one seed" in story
    assert f"wrong answers were {step0['neg_over_pos']:.2f}x as long as right ones" in story
    assert "not the paper's situation" in story and "--start warmup reaches it" in story   # random weights: short wrong
    assert step0["neg_over_pos"] < 1
    with open(os.path.join(ROOT, "docs", "trl.md")) as f:                   # the ratio the page quotes
        assert f"the lenient reward at 8 tokens gave {step0['neg_over_pos']:.2f}" in " ".join(f.read().split())
    recommendation = story.strip().splitlines()[-2]                         # before the JSON line
    assert "What to do with it" in story and recommendation.startswith("recommendation: ")


def test_the_warmup_start_reaches_long_wrong_answers_at_step_0_and_ends_with_the_decision(examples):
    """--start warmup: the course demo's shipped warm-up, the toy's prompts, verifier.py. Step 0's
    wrong/right ratio is measured and printed, above 1 (the paper's situation), and the numbers
    docs/trl.md quotes for this command are the ones it prints."""
    done, out = examples["warmup"]
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    step0 = diagnose.diagnose_steps(str(out / "rollouts-token.jsonl"))[0]
    assert step0["neg_over_pos"] > 1 and step0["n_groups"] == 16
    measured = (f"wrong answers were {step0['neg_over_pos']:.2f}x as long as right ones (Lbar- "
                f"{step0['len_neg']:.2f}, Lbar+ {step0['len_pos']:.2f}): the paper's situation")
    assert measured in done.stdout
    # --steps 1: its lines say "1 step", not "1 steps"
    assert "(1 step each" in done.stdout and "smoke test, 1 step of one seed" in done.stdout
    assert re.search(r"(?<![\d.])1 steps\b", done.stdout) is None
    story = done.stdout[done.stdout.index("What the three runs measured"):]
    token = json.loads(done.stdout.strip().splitlines()[-1])["token"]
    recommendation = story.strip().splitlines()[-2]                         # before the JSON line
    signal = 16 - token["groups_without_signal"]
    if signal < diagnose.MIN_SIGNAL_GROUPS:                                 # too few groups to place it
        assert recommendation.startswith(f"recommendation: none: {signal} groups with a signal, fewer than")
    else:
        assert recommendation.startswith("recommendation: ") and "scope: the toy's worlds" in recommendation
    with open(os.path.join(ROOT, "docs", "trl.md")) as f:
        page = " ".join(f.read().split())
    quoted = (f"step 0's batch had wrong answers {step0['neg_over_pos']:.2f}x as long as right ones "
              f"({16 - token['groups_without_signal']} of 16 groups with a signal), token put "
              f"{token['pos_share_token']:.1%} of its weight on right answers and its drift, as TRL logged it, was "
              f"{token['trl_first_loss']:+.4f}")
    assert quoted in page, quoted
