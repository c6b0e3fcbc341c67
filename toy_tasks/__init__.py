"""The toy world: arithmetic whose right and wrong answers differ in length (arithmetic.py),
its named designs (designs.py, docs/toy-designs.md) and their shipped warm-ups (warmups/)."""
from toy_tasks.arithmetic import (GAP_SIGNS, REGIMES, SLIP_STYLES, VOCAB_CHARS,  # noqa: F401
                                  ToyWorld, length_stats, make_problems, score_running_sums,
                                  warmup_corpus)
