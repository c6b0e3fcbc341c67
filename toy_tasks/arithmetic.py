"""Running-sum arithmetic with a habit RL can break and a length gap it cannot.

    prompt  57+6+3=
    plain   63 66                 57+6 = 63, 63+3 = 66         right, 6 tokens with EOS
    slip    57 ~~~~~~~~~~~~~~ 60  repeats 57 (forgets c), rambles, carries on: wrong, long
    check   63 66?~~~~~~~~~~~~~~  the right answer, then a long re-check: right, long

The warm-up corpus slips on 70% of the problems with c > d, 10% of the others; during RL the
environment forces the start of a fraction (`force_frac`) of the responses, as prompt, not loss.
The knobs, a worked example and why the world forces: docs/code-tour.md ("The toy world")."""
import random
import re
from dataclasses import dataclass

import torch

VOCAB_CHARS = "0123456789+=~? "
REGIMES = ("gap", "variance")
SLIP_STYLES = ("ramble", "loop")
GAP_SIGNS = ("wrong-long", "right-long")


def make_problems(seed: int = 0, heldout_fraction: float = 0.1):
    """All 90 * 9 * 9 problems `ab+c+d=`, shuffled by `seed`, split into disjoint
    train and held-out `datasets.Dataset`s with columns `prompt` and `answer`."""
    from datasets import Dataset        # here: importing it adds about a second to every start
    problems = [(a, c, d) for a in range(10, 100) for c in range(1, 10) for d in range(1, 10)]
    random.Random(seed).shuffle(problems)
    n_heldout = int(len(problems) * heldout_fraction)
    def to_dataset(rows):
        return Dataset.from_dict({"prompt": [f"{a}+{c}+{d}=" for a, c, d in rows],
                                  "answer": [str(a + c + d) for a, c, d in rows]})
    return to_dataset(problems[n_heldout:]), to_dataset(problems[:n_heldout])


def _parse(prompt: str) -> tuple[int, int, int]:
    return tuple(int(n) for n in prompt.rstrip("=").split("+"))


def _jitter(size: int) -> int:
    """How far a ramble's length strays from its mean size, either way."""
    return max(2, size // 4)


@dataclass
class ToyWorld:
    """The toy environment: its corpus, its forced prefixes, its problems."""
    regime: str = "gap"
    gap_sign: str = "wrong-long"
    gap_size: int = 18          # mean ramble length, in tokens
    force_frac: float = 0.3     # fraction of RL responses whose start the environment forces
    corpus_error: float = 0.1   # corpus rate of a wrong last sum in the plain style
    habit_slip: float = 0.7     # corpus slip rate on problems with c > d
    plain_slip: float = 0.1     # corpus slip rate on the others
    spread_size: int = 0        # regime gap: half of all responses ramble this long
    slip_style: str = "ramble"  # "ramble": `~`; "loop": the sum just written, repeated (H1)
    endless_slips: float = 0.0  # fraction of slips that ramble past the corpus width, no EOS

    def __post_init__(self):
        for name, choices in (("regime", REGIMES), ("gap_sign", GAP_SIGNS),
                              ("slip_style", SLIP_STYLES)):
            if getattr(self, name) not in choices:
                raise ValueError(f"unknown {name.replace('_', ' ')} {getattr(self, name)!r}; "
                                 f"choose from {choices}")
        if not (0.0 <= self.force_frac <= 1.0 and 0.0 <= self.endless_slips <= 1.0):
            raise ValueError("force_frac and endless_slips must lie in [0, 1]")
        if self.gap_size < 0 or self.spread_size < 0:
            raise ValueError("gap_size and spread_size cannot be negative")
        if self.spread_size and self.regime != "gap":
            raise ValueError("spread_size is a knob of regime gap "
                             "(regime variance's spread is gap_size)")

    # ---- the supervised warm-up corpus
    def slip_rate(self, prompt: str) -> float:
        """How often the corpus slips here: often when c > d (44% of prompts), else rarely. A habit
        of a surface feature, not difficulty: RL only has to learn *not to slip*, no new skill."""
        _, c, d = _parse(prompt)
        return self.habit_slip if c > d else self.plain_slip

    def response(self, prompt: str, rng: random.Random) -> str:
        """One corpus response for `prompt`, in a style drawn with the corpus's odds."""
        a, c, d = _parse(prompt)
        first, last = a + c, a + c + d
        if rng.random() < self.corpus_error:
            last += rng.choice([-2, -1, 1, 2])
        slip = rng.random() < self.slip_rate(prompt)
        if slip:
            first, last = a, a + d                          # repeat a, forget c: wrong
        if self.regime == "variance":                       # ramble half the time, slip or not
            return (f"{first} {self._write_ramble(rng, self.gap_size, first)} {last}"
                    if rng.random() < 0.5 else f"{first} {last}")
        ramble = self.gap_size if slip and self.gap_sign == "wrong-long" else 0  # a slip rambles
        if self.spread_size and rng.random() < 0.5:         # spread: half ramble, right or wrong
            ramble = max(ramble, self.spread_size)          # (a longer ramble, 40+, is not learned)
        if ramble and slip and self.endless_slips and rng.random() < self.endless_slips:
            return f"{first} {self._write_ramble(rng, 4 * self.longest_response(), first)}"
        if ramble:
            return f"{first} {self._write_ramble(rng, ramble, first)} {last}"
        if self.gap_sign == "right-long" and rng.random() < 0.05:  # rare: not the model's pick
            return f"{a + c} {a + c + d}?{self._write_ramble(rng, self.gap_size, a + c + d)}"
        return f"{first} {last}"

    def _write_ramble(self, rng: random.Random, size: int, number: int) -> str:
        """A ramble of about `size` characters in the world's slip style: `~`, or for `loop`
        `number` repeated ("23 23 23"), as many whole repeats as fit (at least one)."""
        length = rng.randint(max(1, size - _jitter(size)), size + _jitter(size))
        if self.slip_style != "loop":
            return "~" * length
        return " ".join([str(number)] * max(1, (length + 1) // len(f"{number} ")))

    def longest_response(self) -> int:
        """Tokens the longest corpus response can take: the longer ramble with its jitter,
        two sums, spaces and EOS (the warm-up's width; the regime map's --max-new-tokens)."""
        ramble = max(self.gap_size, self.spread_size)
        return ramble + _jitter(ramble) + 10

    # ---- what the environment forces during RL
    def forced_prefix(self, prompt: str, rng: random.Random) -> str:
        """The start of the response the environment imposes ('' for most prompts)."""
        if self.regime == "variance" or rng.random() >= self.force_frac:
            return ""
        a, c, d = _parse(prompt)
        return f"{a}" if self.gap_sign == "wrong-long" else f"{a + c} {a + c + d}?"


def score_running_sums(completion: str, answer: str) -> float:
    """The toy's reward: 1.0 when the last number the response writes is the sum, `63 66` for
    `57+6+3=` (gold "66"), else 0.0. Its answers are whole numbers, so a plain match of digits is
    exact; verifier.verify, the card's checker for any answer, gives the same on every toy text."""
    numbers = re.findall(r"\d+", completion)
    return 1.0 if numbers and (numbers[-1].lstrip("0") or "0") == str(answer) else 0.0


def warmup_corpus(world: ToyWorld, prompts: list[str], n: int, seed: int) -> list[tuple[str, str]]:
    """n (prompt, response) pairs drawn from `prompts` with the world's styles."""
    rng = random.Random(seed)
    return [(p, world.response(p, rng)) for p in (rng.choice(prompts) for _ in range(n))]


def length_stats(lengths: torch.Tensor, rewards: torch.Tensor) -> dict[str, float]:
    """Regime statistics of one batch of rollouts (lengths: (B,), rewards: (B,) in {0, 1}):
    `wrong_over_right` is the gap (>= 2 in regime gap/wrong-long), `std_over_mean` the
    spread (>= 0.5 in regime variance). NaN where a side is empty."""
    lengths, rewards = lengths.float(), rewards.float()
    right, wrong = lengths[rewards > 0.5], lengths[rewards <= 0.5]
    len_right, len_wrong = right.mean().item(), wrong.mean().item()      # an empty side: nan
    mean, std = lengths.mean().item(), lengths.std(unbiased=False).item()
    return {"len_mean": mean, "len_std": std, "len_right": len_right, "len_wrong": len_wrong,
            "wrong_over_right": len_wrong / len_right if len_right > 0 else float("nan"),
            "std_over_mean": std / mean if mean > 0 else float("nan")}
