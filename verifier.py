"""verifier.py -- check one answer from the shell, the way training rewards it.

    python verifier.py "so the total is \\boxed{\\frac{7}{2}}" "3.5"
    python verifier.py "Answer: 2\\sqrt{2}" "\\sqrt{8}" "3"          # several acceptable golds

It prints the reward (1 or 0), then what the verifier read from the completion and from
each gold. The verifier itself is grpo_ba_kit/verifier.py, its grammar
grpo_ba_kit/verifier_parser.py (docs/verifier.md); installed, the same command is
`python -m grpo_ba_kit.verifier`. This file is not installed, so an install adds no name as
common as `verifier` (grpo_ba_kit/__init__.py); from a clone, `import verifier` gives the
same functions as `import grpo_ba_kit.verifier`.
"""
from grpo_ba_kit.verifier import (explain, extract_answer, main, normalise, parse_gold, parse_value,
                                  verify)

__all__ = ["explain", "extract_answer", "main", "normalise", "parse_gold", "parse_value", "verify"]

if __name__ == "__main__":
    raise SystemExit(main(prog="python verifier.py"))
