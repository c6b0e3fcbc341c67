"""How often does Hugging Face's math-verify agree with verifier.py on the case table?

    python tests/course/compare_math_verify.py            # agreement, by kind, and every difference

math-verify (requirements/dev.txt) parses with its own LaTeX grammar and sympy, under
signal-based timeouts. It is the reference most GRPO code uses; this script only measures
where the two verifiers judge the table's answers differently, and prints why for each kind
of difference we have seen (docs/verifier.md has the numbers).
"""
from __future__ import annotations

import collections
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from verifier import verify  # noqa: E402
from verifier_cases import CASES  # noqa: E402


def math_verify_score(completion: str, gold: str) -> float:
    """math-verify's judgement, fed the way its README shows: the gold as a LaTeX answer
    (`$...$` unless it is already in a format), the completion as written."""
    from math_verify import parse, verify as mv_verify
    gold_text = gold if gold.startswith(("\\boxed", "#", "$")) else f"${gold}$"
    try:
        return float(mv_verify(parse(gold_text), parse(completion)))
    except Exception:                                # math-verify may raise on odd input
        return 0.0


def compare(cases=CASES):
    """[(kind, completion, gold, expected, ours, theirs)] for every case."""
    warnings.filterwarnings("ignore")
    return [(kind, completion, gold, expected, verify(completion, gold), math_verify_score(completion, gold))
            for kind, completion, gold, expected in cases]


def main() -> int:
    try:
        import math_verify  # noqa: F401
    except ImportError:
        print("math-verify is not installed: pip install -r requirements/dev.txt", file=sys.stderr)
        return 2
    rows = compare()
    agree = sum(ours == theirs for *_, ours, theirs in rows)
    ours_right = sum(ours == expected for _, _, _, expected, ours, _ in rows)
    theirs_right = sum(theirs == expected for _, _, _, expected, _, theirs in rows)
    print(f"{len(rows)} cases: math-verify agrees with verifier.py on {agree} ({agree / len(rows):.1%}); "
          f"matches the table's expected score: verifier.py {ours_right}, math-verify {theirs_right}")
    by_kind = collections.defaultdict(lambda: [0, 0])
    for kind, *_, ours, theirs in rows:
        by_kind[kind][0] += ours == theirs
        by_kind[kind][1] += 1
    print("agreement by kind: " + ", ".join(f"{k} {a}/{n}" for k, (a, n) in by_kind.items()))
    for kind, completion, gold, expected, ours, theirs in rows:
        if ours != theirs:
            print(f"  [{kind}] {completion!r} vs gold {gold!r}: expected {expected:.0f}, "
                  f"verifier.py {ours:.0f}, math-verify {theirs:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
