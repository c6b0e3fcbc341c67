"""verifier.py -- check one answer from the shell, the way training rewards it.

    python verifier.py "so the total is \\boxed{\\frac{7}{2}}" "3.5"
    python verifier.py "Answer: 2\\sqrt{2}" "\\sqrt{8}" "3"          # several acceptable golds

It prints the reward (1 or 0), then what the verifier read from the completion and from
each gold. The verifier itself is grpo_ba_kit/verifier.py, its grammar
grpo_ba_kit/verifier_parser.py (docs/verifier.md). This file is not installed, so an install
adds no name as common as `verifier` (grpo_ba_kit/__init__.py); from a clone,
`import verifier` gives the same functions as `import grpo_ba_kit.verifier`.
"""
import argparse

from grpo_ba_kit.verifier import extract_answer, normalise, parse_gold, parse_value, verify

__all__ = ["extract_answer", "normalise", "parse_gold", "parse_value", "verify"]


def explain(completion: str, golds: list[str]) -> list[str]:
    """The reward, then what was read: each line `what: text -> value` (None: unreadable)."""
    answer = extract_answer(completion)
    read = parse_value(answer) if answer is not None else None
    lines = [f"{verify(completion, golds):.0f}", f"completion's answer: {answer!r} -> {read}"]
    lines += [f"gold: {gold!r} -> {parse_gold(gold)}" for gold in golds]
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python verifier.py", description=(
        "Check one answer the way training rewards it: the reward, then what the verifier "
        "read from the completion and from each gold."))
    parser.add_argument("completion", help="the model's text (its last \\boxed{}, Answer: or ####)")
    parser.add_argument("gold", nargs="+", help="the gold answer; several: right if any matches")
    args = parser.parse_args(argv)
    print("\n".join(explain(args.completion, args.gold)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
