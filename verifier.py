"""verifier.py -- is a completion's final answer equal to the gold answer?

    extract_answer("so the total is \\boxed{\\frac{7}{2}}")  -> "\\frac{7}{2}"
    verify("Answer: 3.5", "7/2")                               -> 1.0

Formats: `\\boxed{...}`, `Answer: ...` and `#### ...`; whichever of these comes last
in the text decides (a truncated `\\boxed{4` gives no answer). Only a text with none of
them falls back to its last number.
Values: signed integers, decimals, fractions `a/b` and `\\frac{a}{b}`, and arithmetic
with + - * / and brackets, e.g. `(3+4)*2`. Two values are equal when they are the same
exact rational number (sympy.Rational): `3.5 == 7/2`, but `0.333 != 1/3`.

Model output is untrusted. No text from it is ever handed to `sympify`, `parse_expr`
or `eval` (they run Python). Instead a whitelist (digits, `+ - * / ( ) .`, spaces)
and a small recursive-descent parser build sympy Rationals directly; limits on the
length, the digits of a number and the nesting depth keep every call fast.
`verify` never raises: anything malformed, and division by zero, scores 0.0.

Public API: `verify(completion, gold)` (gold may be a list/tuple of acceptable answers,
right if any matches), `extract_answer(text)`, and `parse_gold(gold)` -- the parsed gold
value, or None when the verifier cannot read it (for dataset validation).
"""
from __future__ import annotations

import re

import sympy

MAX_TEXT_CHARS = 200_000      # longer completions are judged on their last 200k characters
MAX_EXPR_CHARS = 200          # an answer expression longer than this is refused
MAX_NUMBER_DIGITS = 40        # no single number with more digits than this
MAX_DEPTH = 20                # bracket nesting depth

_ALLOWED = re.compile(r"[0-9+\-*/().\s]*")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:/\d+)?")
_MARKERS = re.compile(r"\\boxed\s*\{|Answer\s*:|####")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


def _braced(text: str, start: int) -> str | None:
    """Content of the brace group whose '{' is at text[start - 1]; None if unclosed."""
    depth = 1
    for pos in range(start, len(text)):
        if text[pos] == "{":
            depth += 1
        elif text[pos] == "}":
            depth -= 1
            if depth == 0:
                return text[start:pos]
    return None


def extract_answer(text: str) -> str | None:
    """The final answer written in `text`, as a string, or None if there is none."""
    if not isinstance(text, str) or not text:
        return None
    text = text[-MAX_TEXT_CHARS:]
    last_marker = None
    for last_marker in _MARKERS.finditer(text):      # the last marker decides, readable or not
        pass
    if last_marker is not None:
        if last_marker.group().startswith("\\boxed"):
            answer = _braced(text, last_marker.end())    # None when truncated: no answer
        else:
            answer = text[last_marker.end():].split("\n", 1)[0]
        answer = answer.strip().rstrip(".").strip() if answer is not None else ""
        return answer or None
    numbers = _NUMBER.findall(_THOUSANDS.sub("", text))
    return numbers[-1] if numbers else None


def _latex_to_plain(answer: str) -> str:
    """Rewrite the little LaTeX an answer may use into plain arithmetic."""
    answer = answer.replace("\\left", "").replace("\\right", "").replace("\\!", "")
    answer = answer.replace("\\cdot", "*").replace("\\times", "*").replace("\\div", "/")
    answer = answer.replace("\\$", "").replace("$", "").replace("{,}", "")
    answer = _THOUSANDS.sub("", answer)
    # \frac{a}{b}, \dfrac{a}{b}, \tfrac{a}{b} -> ((a)/(b)); innermost first, bounded.
    frac = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
    for _ in range(MAX_DEPTH):
        answer, count = frac.subn(r"((\1)/(\2))", answer)
        if not count:
            break
    return answer.strip()


class _Parser:
    """expr := term (('+'|'-') term)* ; term := factor (('*'|'/') factor)* ;
    factor := ('+'|'-') factor | number | '(' expr ')'   -- nothing else exists."""

    def __init__(self, text: str):
        self.tokens = re.findall(r"\d+\.?\d*|\.\d+|[-+*/()]", text)
        if "".join(self.tokens) != re.sub(r"\s+", "", text) or "**" in text:
            raise ValueError("unparseable")
        self.pos = 0
        self.depth = 0

    def _peek(self):
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def _take(self):
        self.pos += 1
        return self.tokens[self.pos - 1]

    def parse(self) -> sympy.Rational:
        value = self._expr()
        if self._peek() is not None:
            raise ValueError("trailing tokens")
        return value

    def _expr(self):
        value = self._term()
        while self._peek() in ("+", "-"):
            value = value + self._term() if self._take() == "+" else value - self._term()
        return value

    def _term(self):
        value = self._factor()
        while self._peek() in ("*", "/"):
            op, right = self._take(), self._factor()
            if op == "/" and right == 0:
                raise ZeroDivisionError
            value = value * right if op == "*" else value / right
        return value

    def _factor(self):
        token = self._peek()
        if token in ("+", "-"):
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise ValueError("too deep")
            self._take()
            value = self._factor()
            self.depth -= 1
            return value if token == "+" else -value
        if token == "(":
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise ValueError("too deep")
            self._take()
            value = self._expr()
            if self._peek() != ")":
                raise ValueError("unclosed bracket")
            self._take()
            self.depth -= 1
            return value
        if token is None or not token[0].isdigit() and token[0] != ".":
            raise ValueError("expected a number")
        if len(token.replace(".", "")) > MAX_NUMBER_DIGITS:
            raise ValueError("number too long")
        return sympy.Rational(self._take())      # exact: Rational("3.5") == 7/2


def parse_value(answer: str | None) -> sympy.Rational | None:
    """The exact rational value of an answer string, or None if it is not one."""
    if not isinstance(answer, str):
        return None
    plain = _latex_to_plain(answer[: 4 * MAX_EXPR_CHARS])
    if not plain or len(plain) > MAX_EXPR_CHARS or not _ALLOWED.fullmatch(plain):
        return None
    try:
        return _Parser(plain).parse()
    except (ValueError, ZeroDivisionError, TypeError, RecursionError):
        return None


def parse_gold(gold: str):
    """The value the verifier reads from a gold answer (bare, or in a `\\boxed{}` /
    `Answer:` / `####` format), or None when it cannot read it (such a gold scores 0)."""
    try:
        value = parse_value(str(gold))
        return value if value is not None else parse_value(extract_answer(str(gold)))
    except Exception:
        return None


def verify(completion: str, gold) -> float:
    """1.0 if the completion's final answer equals the gold answer exactly, else 0.0.
    `gold` may be a list or tuple of acceptable answers: right if any matches."""
    try:
        golds = gold if isinstance(gold, (list, tuple)) else [gold]
        value = parse_value(extract_answer(completion))
        if value is None:
            return 0.0
        for one_gold in golds:
            gold_value = parse_gold(one_gold)
            if gold_value is not None and sympy.Eq(value, gold_value) is sympy.true:
                return 1.0
        return 0.0
    except Exception:                                # untrusted input: never raise
        return 0.0
