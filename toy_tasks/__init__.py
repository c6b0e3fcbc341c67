"""Toy arithmetic tasks whose right and wrong answers differ in length (see arithmetic.py)."""
from toy_tasks.arithmetic import (ToyWorld, VOCAB_CHARS, length_stats, make_problems,
                                  warmup_corpus)

__all__ = ["ToyWorld", "VOCAB_CHARS", "length_stats", "make_problems", "warmup_corpus"]
