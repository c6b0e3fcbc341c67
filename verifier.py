"""verifier.py -- is a completion's final answer equal to the gold answer? A dataset's reward:
the toy does not use it (toy_tasks.score_running_sums scores `63 66`, the last number written).

    verify("Answer: 3.5", "7/2")                               -> 1.0
    verify("\\boxed{\\frac{1}{\\sqrt2}}", "\\frac{\\sqrt{2}}{2}")   -> 1.0
    verify("\\boxed{42}", ["41", "42"])                        -> 1.0   (any acceptable gold)

verify never raises; extract_answer(text) -> the final answer or None; parse_gold(gold) and
parse_value(answer) -> the value read, or None (an unreadable gold scores only the same text).
Equality is exact and symbolic, not floating point (`\\sqrt{8}` = `2\\sqrt{2}`, `0.7499` != `3/4`).
Model output never reaches `sympify`, `parse_expr` or `eval` (grpo_ba_support/answer_grammar.py).
What is read, what is not (`2^x`, `\\sin`, inequalities), what is refused: docs/verifier.md."""
import functools
import re

import sympy

from grpo_ba_support.answer_grammar import (AnswerSet, Brackets, Unreadable, expansion_bound,
                                            parse_answer, to_interval)

MAX_TEXT_CHARS = 200_000      # longer completions are judged on their last 200k characters
MAX_ANSWER_CHARS = 1000       # an extracted answer longer than this is refused
MAX_WORD_CHARS = 60           # a word answer (`\text{Monday}`) is at most this long
MAX_COMPARE_TERMS = 600       # terms one comparison may expand; beyond, judged unequal

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:/\d+)?")
_MARKERS = re.compile(r"\\boxed\s*\{|\\fbox\s*\{|Answer\s*:|####(?!#)")   # `#####`: the last four
_BRACE = re.compile(r"[{}]")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_MINERVA_PREFIX = re.compile(r"^\s*(?:the\s+)?(?:final\s+)?answer\s+is\s*:?\s*", re.I)
_MINERVA_SUFFIX = re.compile(r"\.?\s*I hope it is correct\.?\s*$", re.I)


def _braced(text: str, start: int) -> str | None:
    """Content of the brace group whose '{' is at text[start - 1]; None if unclosed."""
    depth = 1
    for brace in _BRACE.finditer(text, start):       # jumps from brace to brace
        depth += 1 if brace.group() == "{" else -1
        if depth == 0:
            return text[start:brace.start()]
    return None


def _marked_answer(text: str) -> tuple[bool, str | None]:
    """(whether `text` has an answer marker, the answer after the last one): the last marker
    decides, readable or not."""
    markers = list(_MARKERS.finditer(text))
    if not markers:
        return False, None
    last = markers[-1]
    if last.group().startswith("\\"):
        answer = _braced(text, last.end())           # None when truncated: no answer
    else:
        answer = text[last.end():].split("\n", 1)[0]
        if len(answer) <= MAX_ANSWER_CHARS:          # longer answers are refused anyway
            answer = _MINERVA_SUFFIX.sub("", _MINERVA_PREFIX.sub("", answer, count=1))
    answer = answer.strip().rstrip(".").strip() if answer is not None else ""
    return True, answer or None


def extract_answer(text: str) -> str | None:
    """The final answer written in `text`: after the last `\\boxed{}`, `Answer:` or `####`
    (a truncated `\\boxed{4` gives none), only without any of them its last number; or None."""
    if not isinstance(text, str) or not text:
        return None
    marked, answer = _marked_answer(text[-MAX_TEXT_CHARS:])
    return answer if marked else _last_number(text[-MAX_TEXT_CHARS:])


def _last_number(text: str, window: int = 2000) -> str | None:
    """The last number in `text`, looking at its last `window` characters first (fast on
    100k-character texts); the whole text when the window holds none or starts mid-number."""
    text = text[: max(text.rfind(digit) for digit in "0123456789") + 1]     # ends at the last digit
    numbers = list(_NUMBER.finditer(_THOUSANDS.sub("", text[-window:])))
    if len(text) > window and (not numbers or numbers[-1].start() <= 1):
        numbers = list(_NUMBER.finditer(_THOUSANDS.sub("", text)))
    return numbers[-1].group() if numbers else None


# -- text normalisation: what a grader ignores --------------------------------------------
_REPLACE = [  # (pattern, replacement), applied in order; every pattern is linear-time
    (re.compile(r"\\(?:left|right|[bB]igg?[lr]?)\s*\.?(?![A-Za-z])"), ""),  # `\left(` -> `(`
    (re.compile(r"\\!"), ""),
    (re.compile(r"\\[,;: ]|\\q?quad|\\displaystyle|~"), " "),
    (re.compile(r"\\?\$"), ""),
    (re.compile(r"\{,\}"), ","),
    (re.compile(r"\^\s*\{?\s*\\circ\s*\}?|\\circ|\\degree|°"), ""),
    (re.compile(r"\\?%|\\percent"), ""),
    (re.compile(r"\\[dtc]frac"), r"\\frac"),
    (re.compile(r"\\(?:text|mbox|mathrm|textrm|textnormal)\s*\{\s*(?:or|and)\s*\}"
                r"|\s(?:or|and)\s"), ","),
]
_UNICODE = str.maketrans({"π": "\\pi ", "∞": "\\infty ", "−": "-", "×": "*", "·": "*",
                          "÷": "/", "√": "\\sqrt", "∪": "\\cup "})
_TEXT_COMMAND = r"\\(?:text|textbf|textit|textrm|textnormal|mbox|mathrm|mathbf|mathit|operatorname)"
# A unit after the value: a \text{...} group, or plain words, with an optional ^2 / ^{3}.
_TRAILING_UNIT = re.compile(
    r"(?<=\S)\s*(?:" + _TEXT_COMMAND
    + r"\s*\{[^{}]*\}|(?<![\\A-Za-z])(?!(?:pi|sqrt|infty)\b)[A-Za-z]{2,}"
    r"(?:\s+[A-Za-z]{2,})*)\s*(?:\^\s*\{?\d\}?)?\s*$")
_TEXT_GROUP = re.compile(_TEXT_COMMAND + r"\s*\{([^{}]*)\}")
_GROUPED_THOUSANDS = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_WORD_ANSWER = re.compile(r"[A-Za-z][A-Za-z '\-]*")


def normalise(answer: str) -> str | None:
    """The answer with what a grader ignores removed: `$`, `\\left`, spacing, degrees,
    percent, units after the value, `\\text{}` wrappers, thousands separators."""
    if not isinstance(answer, str) or len(answer) > MAX_ANSWER_CHARS:
        return None
    answer = answer.translate(_UNICODE)
    for pattern, replacement in _REPLACE:
        answer = pattern.sub(replacement, answer)
    answer = answer.strip().rstrip(".").strip()
    for _ in range(3):                               # `5 \text{cm}`, `47 apples`, `3 m^2`
        stripped = _TRAILING_UNIT.sub("", answer).strip()
        if not stripped or stripped == answer or stripped.endswith((",", "=")):
            break
        answer = stripped
    for _ in range(4):                               # \text{(C)} -> (C), nested at most 4 deep
        answer = _TEXT_GROUP.sub(r"\1", answer)
    answer = answer.strip()
    if _GROUPED_THOUSANDS.fullmatch(answer):
        answer = answer.replace(",", "")
    return answer or None


def parse_value(answer: str | None):
    """The exact value of an extracted answer string, or None if the verifier cannot read it."""
    text = normalise(answer)
    if text is None:
        return None
    try:
        return parse_answer(text)
    except Exception:                                # Unreadable, or sympy refusing an operation
        pass
    word = len(text) <= MAX_WORD_CHARS and _WORD_ANSWER.fullmatch(text)
    return " ".join(text.lower().split()) if word else None    # `\text{Monday}` = `monday`


# -- exact comparison ---------------------------------------------------------------------
class _Budget:
    """Terms that the comparisons of one `verify` call may still expand (sets compare pairwise)."""
    terms = MAX_COMPARE_TERMS


def _same_expr(a: sympy.Expr, b: sympy.Expr, budget: _Budget) -> bool:
    """Exact symbolic equality, with no simplify (it can hang): structural, else the numerator of
    (a - b) over a common denominator expands to 0; unequal if that would overspend the budget."""
    if a == b:
        return True
    infinite = (sympy.oo, -sympy.oo, sympy.zoo, sympy.nan)
    if a.has(*infinite) or b.has(*infinite) or a.free_symbols != b.free_symbols:
        return False
    difference = a - b
    if difference.is_Number:
        return difference == 0
    symbols = sorted(difference.free_symbols, key=str)
    probe = difference.xreplace({symbol: sympy.Integer(10007 + 2 * k)       # exact, not floating:
                                 for k, symbol in enumerate(symbols)})
    if probe.is_Rational and probe != 0:            # a nonzero value at one point: unequal
        return False
    if any(power.exp.is_negative and power.base.is_Add for power in difference.atoms(sympy.Pow)):
        difference = sympy.fraction(sympy.together(difference))[0]     # 1/(1+x): one denominator
    budget.terms -= expansion_bound(difference, budget.terms)
    return budget.terms >= 0 and sympy.expand(difference) == 0


def _same_unordered(a: tuple, b: tuple, budget: _Budget) -> bool:
    unmatched = list(b)                               # multiset matching, <= 16 x 16
    for x in a:
        match = next((i for i, y in enumerate(unmatched) if _same_value(x, y, budget)), None)
        if match is None:
            return False
        unmatched.pop(match)
    return not unmatched


def _same_value(a, b, budget: _Budget) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str) and a == b
    if isinstance(a, sympy.Set) or isinstance(b, sympy.Set):
        try:
            return to_interval(a) == to_interval(b)
        except Unreadable:
            return False
    if isinstance(a, AnswerSet) or isinstance(b, AnswerSet):
        a_items = a.items if isinstance(a, AnswerSet) else (a,)      # `5` = `\{5\}`
        b_items = b.items if isinstance(b, AnswerSet) else (b,)
        return len(a_items) == len(b_items) and _same_unordered(a_items, b_items, budget)
    if isinstance(a, Brackets) or isinstance(b, Brackets):             # same brackets, in order
        return (isinstance(a, Brackets) and isinstance(b, Brackets)
                and (a.open, a.close) == (b.open, b.close) and len(a.items) == len(b.items)
                and all(_same_value(x, y, budget) for x, y in zip(a.items, b.items)))
    return _same_expr(a, b, budget)


def parse_gold(gold: str):
    """The value read from a gold answer (bare, or after `\\boxed{}` / `Answer:` / `####`), or None:
    then only a completion whose answer is the same text (after `normalise`) scores 1."""
    return _read_gold(gold)[1]


def _read_gold(gold) -> tuple[str | None, object]:
    """(normalised gold text, gold value or None); a number gold (int, float) is read as text."""
    if isinstance(gold, (int, float)) and not isinstance(gold, bool):
        gold = str(gold)
    if not isinstance(gold, str):
        return None, None
    read = _read_gold_text if len(gold) <= MAX_ANSWER_CHARS else _read_gold_text.__wrapped__
    return read(gold)


@functools.lru_cache(maxsize=1024)    # a GRPO group scores G completions per gold: read it once
def _read_gold_text(gold: str):
    text, value = normalise(gold), parse_value(gold)     # never by its last number
    if value is None:
        marked, answer = _marked_answer(gold[-MAX_TEXT_CHARS:])
        if marked:
            text, value = normalise(answer), parse_value(answer)
    return text, value


def verify(completion: str, gold) -> float:
    """1.0 if the completion's final answer equals the gold answer, else 0.0: the same value
    (exact, symbolic), or the same text after `normalise` (`10^{10^{10}}` is judged so, without
    computing it). `gold` may be a list or tuple of acceptable answers: right if any matches."""
    try:
        answer = extract_answer(completion)
        text = normalise(answer)
        if text is None:
            return 0.0
        value = parse_value(answer)
        for one_gold in gold if isinstance(gold, (list, tuple)) else [gold]:
            gold_text, gold_value = _read_gold(one_gold)
            if gold_text == text or (value is not None and gold_value is not None
                                     and _same_value(value, gold_value, _Budget())):
                return 1.0
        return 0.0
    except Exception:                                # untrusted input: never raise
        return 0.0


# -- from the shell -----------------------------------------------------------------------
def main(argv=None) -> int:
    """`python verifier.py COMPLETION GOLD [GOLD ...]` (installed: python -m verifier): the reward,
    then what was read, each line `what: text -> value` (None: unreadable)."""
    import argparse
    parser = argparse.ArgumentParser(prog="python verifier.py", description=(
        "Check one answer the way training rewards it: the reward, then what the verifier "
        "read from the completion and from each gold."))
    parser.add_argument("completion", help="the model's text (its last \\boxed{}, Answer: or ####)")
    parser.add_argument("gold", nargs="+", help="the gold answer; several: right if any matches")
    args = parser.parse_args(argv)
    answer = extract_answer(args.completion)
    print(f"{verify(args.completion, args.gold):.0f}",
          f"completion's answer: {answer!r} -> {parse_value(answer)}",
          *(f"gold: {gold!r} -> {parse_gold(gold)}" for gold in args.gold), sep="\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
