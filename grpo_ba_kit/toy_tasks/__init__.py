"""Toy arithmetic tasks whose right and wrong answers differ in length (arithmetic.py), and
the named designs of docs/toy-designs.md built on them, as grpo_ba.py flags (designs.py)."""
from grpo_ba_kit.toy_tasks.arithmetic import (GAP_SIGNS, REGIMES, SLIP_STYLES, ToyWorld, VOCAB_CHARS, length_stats,
                                  make_problems, warmup_corpus)

__all__ = ["GAP_SIGNS", "REGIMES", "SLIP_STYLES", "ToyWorld", "VOCAB_CHARS", "length_stats", "make_problems",
           "warmup_corpus"]
