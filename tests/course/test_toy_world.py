"""The toy world: deterministic problems, a corpus with a real length gap, a real tokenizer."""
import random

import pytest
import torch

from grpo_ba_support.task import load_model, load_tokenizer
from toy_tasks.model import char_tokenizer, tiny_qwen3
from toy_tasks import ToyWorld, length_stats, make_problems, warmup_corpus
from verifier import verify


def test_task_generator_is_deterministic_and_splits_are_disjoint():
    train_a, held_a = make_problems(seed=0)
    train_b, held_b = make_problems(seed=0)
    assert train_a["prompt"] == train_b["prompt"] and held_a["prompt"] == held_b["prompt"]
    assert set(train_a["prompt"]).isdisjoint(held_a["prompt"])
    assert make_problems(seed=1)[1]["prompt"] != held_a["prompt"]
    assert set(train_a.column_names) == {"prompt", "answer"}
    assert all(verify(str(eval(p[:-1])), a) == 1.0 for p, a in zip(held_a["prompt"][:50], held_a["answer"][:50]))


def test_corpus_styles_have_the_promised_lengths_and_correctness():
    train, _ = make_problems()
    answers = dict(zip(train["prompt"], train["answer"]))
    for sign in ("wrong-long", "right-long"):
        world = ToyWorld("gap", sign, gap_size=18, corpus_error=0.1)
        pairs = warmup_corpus(world, train["prompt"], 2000, seed=0)
        lengths = torch.tensor([len(r) + 1 for _, r in pairs])
        rewards = torch.tensor([verify(r, answers[p]) for p, r in pairs])
        stats = length_stats(lengths, rewards)
        if sign == "wrong-long":
            assert stats["wrong_over_right"] >= 2
        else:
            assert stats["len_right"] > stats["len_wrong"]
    world = ToyWorld("variance", gap_size=18)
    pairs = warmup_corpus(world, train["prompt"], 2000, seed=0)
    lengths = torch.tensor([len(r) + 1 for _, r in pairs])
    rewards = torch.tensor([verify(r, answers[p]) for p, r in pairs])
    stats = length_stats(lengths, rewards)
    assert stats["std_over_mean"] >= 0.5 and 0.8 <= stats["wrong_over_right"] <= 1.25


def test_forced_prefixes_follow_the_regime():
    rng = random.Random(0)
    slips = [ToyWorld("gap", "wrong-long", force_frac=0.3).forced_prefix("57+6+3=", rng) for _ in range(1000)]
    assert set(slips) == {"", "57"} and 0.25 < slips.count("57") / 1000 < 0.35
    assert ToyWorld("gap", "right-long", force_frac=1.0).forced_prefix("57+6+3=", rng) == "63 66?"
    assert ToyWorld("variance", force_frac=1.0).forced_prefix("57+6+3=", rng) == ""


def test_gap_size_knob_sets_the_ramble_length():
    train, _ = make_problems()
    short = ToyWorld("gap", gap_size=8, corpus_error=0.0)
    long = ToyWorld("gap", gap_size=30, corpus_error=0.0)
    mean_tilde = lambda w: sum(r.count("~") for _, r in warmup_corpus(w, train["prompt"], 1000, 0) if "~" in r) / \
        sum(1 for _, r in warmup_corpus(w, train["prompt"], 1000, 0) if "~" in r)
    assert mean_tilde(short) == pytest.approx(8, abs=1.5) and mean_tilde(long) == pytest.approx(30, abs=1.5)


def test_bad_world_settings_are_refused():
    with pytest.raises(ValueError):
        ToyWorld("nope")
    with pytest.raises(ValueError):
        ToyWorld("gap", "sideways")


def test_length_stats_on_known_lengths():
    stats = length_stats(torch.tensor([6, 6, 24, 24, 24, 6]), torch.tensor([1, 1, 0, 0, 0, 1]))
    assert stats["len_right"] == 6 and stats["len_wrong"] == 24 and stats["wrong_over_right"] == 4
    assert stats["len_mean"] == 15 and stats["std_over_mean"] == pytest.approx(9 / 15)
    all_right = length_stats(torch.tensor([3, 5]), torch.tensor([1, 1]))
    assert all_right["len_wrong"] != all_right["len_wrong"]                     # NaN, not an error


def test_char_tokenizer_round_trips_and_saved_model_gives_identical_logits(tmp_path):
    tokenizer = char_tokenizer()
    ids = tokenizer.encode("57+6+3=57 ~~~ 60", add_special_tokens=False)
    assert len(ids) == len("57+6+3=57 ~~~ 60") and tokenizer.decode(ids) == "57+6+3=57 ~~~ 60"
    model = tiny_qwen3(tokenizer).eval()
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    loaded, loaded_tok = load_model(str(tmp_path)).eval(), load_tokenizer(str(tmp_path))
    assert loaded_tok.encode("12+3=", add_special_tokens=False) == tokenizer.encode("12+3=", add_special_tokens=False)
    batch = torch.tensor([ids])
    with torch.no_grad():
        assert torch.equal(model(batch).logits, loaded(batch).logits)


def test_corpus_slips_by_habit_on_c_greater_than_d_with_the_same_arithmetic():
    """The habit RL can break: slips are frequent where c > d, rare elsewhere, in both
    regimes; a slip repeats a and forgets c, so it is always wrong."""
    train, _ = make_problems()
    answers = dict(zip(train["prompt"], train["answer"]))
    for regime in ("gap", "variance"):
        world = ToyWorld(regime, corpus_error=0.0)
        pairs = warmup_corpus(world, train["prompt"], 4000, seed=0)
        slipped = {True: [], False: []}
        for prompt, response in pairs:
            a, c, d = map(int, prompt.rstrip("=").split("+"))
            is_slip = response.split(" ")[0] == str(a)
            slipped[c > d].append(is_slip)
            assert verify(response, answers[prompt]) == (0.0 if is_slip else 1.0)
        habit = sum(slipped[True]) / len(slipped[True])
        other = sum(slipped[False]) / len(slipped[False])
        assert habit == pytest.approx(world.habit_slip, abs=0.04) and other == pytest.approx(world.plain_slip, abs=0.03)
        assert 0.40 < len(slipped[True]) / len(pairs) < 0.48          # c > d on 36 of 81 (c, d) pairs


def test_spread_size_makes_half_of_all_answers_ramble_right_or_wrong():
    train, _ = make_problems()
    answers = dict(zip(train["prompt"], train["answer"]))
    pairs = warmup_corpus(ToyWorld("gap", gap_size=0, spread_size=16, corpus_error=0.0), train["prompt"], 4000, seed=0)
    right = [("~" in r) for p, r in pairs if verify(r, answers[p]) == 1.0]
    wrong = [("~" in r) for p, r in pairs if verify(r, answers[p]) == 0.0]
    assert sum(right) / len(right) == pytest.approx(0.5, abs=0.04)      # spread without a gap
    assert sum(wrong) / len(wrong) == pytest.approx(0.5, abs=0.05)
    no_knobs = warmup_corpus(ToyWorld("gap", gap_size=0, corpus_error=0.0), train["prompt"], 1000, seed=0)
    assert not any("~" in r for _, r in no_knobs)                         # gap 0, spread 0: nobody rambles
    both = warmup_corpus(ToyWorld("gap", gap_size=18, spread_size=16, corpus_error=0.0), train["prompt"], 4000, seed=0)
    wrong_tildes = [r.count("~") for p, r in both if verify(r, answers[p]) == 0.0]
    assert min(wrong_tildes) >= 18 - 4 and max(wrong_tildes) <= 18 + 4    # a slip rambles the longer of the two


def test_spread_size_belongs_to_regime_gap():
    with pytest.raises(ValueError, match="spread_size"):
        ToyWorld("variance", spread_size=8)
    with pytest.raises(ValueError, match="negative"):
        ToyWorld("gap", spread_size=-1)


def test_warmup_batches_hold_each_pair_as_the_tokenizer_encodes_it_row_by_row():
    from toy_tasks.model import char_tokenizer, encode_pairs
    tokenizer = char_tokenizer()
    pairs = [("57+6+3=", "63 66"), ("23+8+2=", "23 ~~~~~~~~~~~~~~~ 25"), ("10+1+1=", "11 12")]
    input_ids, labels = encode_pairs(tokenizer, pairs, width=16)                    # the second row is cut
    for row, (prompt, response) in enumerate(pairs):
        p = [tokenizer.bos_token_id] + tokenizer.encode(prompt)
        ids = (p + tokenizer.encode(response) + [tokenizer.eos_token_id])[:16]
        assert input_ids[row].tolist() == ids + [tokenizer.pad_token_id] * (16 - len(ids))
        assert labels[row].tolist() == [-100] * len(p) + ids[len(p):] + [-100] * (16 - len(ids))
    assert tokenizer.decode([t for t in labels[0].tolist() if t >= 0]) == "63 66<eos>"


def test_two_runs_asking_for_one_uncached_warmup_train_it_once(tmp_path):
    """The cache entry is locked while one run trains it: the other waits and loads the copy
    (the tests' parallel workers share one cache). The first trainer's log line sleeps, so
    without the lock the second would find no copy and train too."""
    import threading
    import time

    from toy_tasks import model as toy_model
    lines = []

    def log(line):
        lines.append(line)
        if "training" in line:
            time.sleep(0.5)

    results = []
    runs = [threading.Thread(target=lambda: results.append(toy_model.load_or_warmup_toy(
        str(tmp_path / "cache"), ToyWorld("gap"), 2, 0, log=log)[2])) for _ in range(2)]
    for run in runs:
        run.start()
    for run in runs:
        run.join()
    assert sum("training" in line for line in lines) == 1, lines
    assert sorted(record["source"] for record in results) == ["cache", "trained"]
    assert results[0]["sha256"] == results[1]["sha256"]


def test_the_toys_plain_score_and_the_verifier_agree_on_every_toy_answer():
    """The toy is scored by its own exact match (the last number written is the sum), so that
    a reader of the toy need not open the answer grammar; verifier.verify gives the same."""
    from toy_tasks import VOCAB_CHARS, score_running_sums
    from toy_tasks.designs import DESIGNS, world
    prompts = [r["prompt"] for r in make_problems()[1].to_list()[:60]]
    golds = {p: str(sum(int(n) for n in p.rstrip("=").split("+"))) for p in prompts}
    texts = []
    for name in DESIGNS:                                   # every style every design writes
        pairs = warmup_corpus(world(name), prompts, 200, seed=1)
        texts += [(p, world(name).forced_prefix(p, random.Random(i)) + r) for i, (p, r) in enumerate(pairs)]
    rng = random.Random(0)
    for _ in range(3000):                                  # what a policy might sample instead
        p = rng.choice(prompts)
        texts.append((p, "".join(rng.choice(VOCAB_CHARS) for _ in range(rng.randint(0, 40)))))
        texts.append((p, f"{rng.choice(['', '0', '00'])}{golds[p]}{rng.choice(['', ' ', '?', '~~', '+'])}"))
    scores = [(score_running_sums(t, golds[p]), verify(t, golds[p])) for p, t in texts]
    assert all(a == b for a, b in scores), [t for (p, t), (a, b) in zip(texts, scores) if a != b][:5]
    assert 0.2 < sum(a for a, _ in scores) / len(scores) < 0.9           # both verdicts occur
    assert score_running_sums("63 66", "66") == 1.0 and score_running_sums("57 ~~~~ 60", "66") == 0.0
