"""grpo_ba_support/answer_grammar.py -- the verifier's answer language, read as exact sympy values.
Untrusted model output (normalised by verifier.py), never handed to `sympify`, `parse_expr` or `eval`:
a fixed-vocabulary tokenizer and a bounded recursive-descent parser build sympy objects directly.
The grammar and the values it builds: docs/verifier.md ("The grammar"). Else: `Unreadable`."""
import functools
import math
import operator
import re
from typing import NamedTuple

import sympy

MAX_TOKENS = 400              # an answer longer than this is refused
MAX_NUMBER_DIGITS = 40        # no single number with more digits than this
MAX_DEPTH = 20                # nesting depth of brackets, groups, signs, fractions, roots
MAX_ITEMS = 16                # entries of a tuple, interval list or set
MAX_EXPONENT = 1000           # |p| of an exponent p/q ...
MAX_ROOT = 12                 # ... and its q (also the n of \sqrt[n])
MAX_RESULT_DIGITS = 2000      # a rational power may not have more digits than this
MAX_SYMBOLIC_EXPONENT = 64    # |p| when the base is not a rational number
MAX_EXPANDED_TERMS = 400      # a power of a sum may not expand to more terms than this
MAX_DIVISIONS_BY_SUMS = 4     # divisions by a sum, `1/(x+1)`, `1/(1+\sqrt2)` (bounds `together`)
MAX_OPERANDS = 32             # terms of a sum or factors of a product (sympy flattens in O(n^2))

GREEK = {"alpha", "beta", "gamma", "delta", "epsilon", "theta", "lambda", "mu", "phi",
         "psi", "omega", "rho", "sigma", "tau"}
FRAC = {"\\frac", "\\dfrac", "\\tfrac", "\\cfrac"}
CONSTANTS = {"\\pi": sympy.pi, "\\infty": sympy.oo}
OPEN = {"(": "(", "[": "[", "\\langle": "(", "\\{": "{", "\\lbrace": "{"}
CLOSE = {")": ")", "]": "]", "\\rangle": ")", "\\}": "}", "\\rbrace": "}"}
SIGNS = ("+", "-", "\\pm", "\\mp")
PRODUCT = {"*": "*", "\\cdot": "*", "\\times": "*", "/": "/", "\\div": "/"}
OPERATIONS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}

PLUS_MINUS = sympy.Symbol("plus_minus")    # no answer can name it: words are not variables
_TOKEN = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+|\\[A-Za-z]+|\\[{}]|[A-Za-z]+|[-+*/^()\[\]{},=_])")
# What `_skip_lhs` skips, over one character per token (`_kind`): `x =`, `x_1 \in`, `f(x) =`, `(x, y) =`
_LHS = re.compile(r"v(?:_a)?[=i]|v\(v\)=|\(v(?:,v)*\)=")


class Unreadable(ValueError):
    """The text is not in the answer language (or breaks a bound)."""


class Brackets(NamedTuple):
    """A tuple or an interval as written: `(1, 3]` -> Brackets('(', ']', (1, 3))."""
    open: str
    close: str
    items: tuple


class AnswerSet(NamedTuple):
    """An unordered collection: `\\{1, 2\\}` or a bare list `-2, 1`."""
    items: tuple


def _is_variable(token: str) -> bool:
    return token.isalpha() and len(token) == 1 or token[1:] in GREEK


def _kind(token: str) -> str:
    """v: a variable; a: another word or number; i: `\\in`; the rest of `=(),_` as themselves."""
    if token in ("=", "(", ")", ",", "_"):
        return token
    return "v" if _is_variable(token) else "i" if token == "\\in" else "a" if token.isalnum() else "."


class AnswerParser:
    def __init__(self, text: str):
        self.tokens = _TOKEN.findall(text)          # the fixed vocabulary, or refused:
        if "".join(self.tokens) != re.sub(r"\s", "", text):
            raise Unreadable("unexpected character")
        if len(self.tokens) > MAX_TOKENS:
            raise Unreadable("answer too long")
        self.pos = self.depth = self.divisions_by_sums = 0

    def _peek(self):
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def _take(self, expected: str | None = None):
        if self.pos >= len(self.tokens) or expected not in (None, self.tokens[self.pos]):
            raise Unreadable(f"expected {expected!r}" if expected else "unexpected end")
        self.pos += 1
        return self.tokens[self.pos - 1]

    def _enter(self):
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise Unreadable("nested too deeply")

    def parse(self):
        items = self._items(stop=None)
        if self._peek() is not None:
            raise Unreadable("trailing tokens")
        return items[0] if len(items) == 1 else AnswerSet(tuple(items))

    def _separated(self, read, separator: str) -> list:
        """read() (separator read())*: at most MAX_ITEMS values (`read` returns a list)."""
        values = read()
        while self._peek() == separator:
            self._take()
            values += read()
            if len(values) > MAX_ITEMS:
                raise Unreadable(f"too many items separated by {separator}")
        return values

    def _items(self, stop, allow_two=True):
        items = self._separated(lambda: self._item(allow_two), ",")
        if stop is not None and self._peek() not in stop:
            raise Unreadable("unclosed bracket")
        return items

    def _item(self, allow_two: bool) -> list:
        """One item, or the two values of an item written with `\\pm` (`1 \\pm \\sqrt{2}`). An
        answer written as an equation (or membership) for its unknowns is read as its right side."""
        lhs = _LHS.match("".join(map(_kind, self.tokens[self.pos:])))
        self.pos += lhs.end() if lhs else 0
        value = self._union()
        if self._peek() == "=":
            raise Unreadable("an equation that is not `variable = value`")
        if isinstance(value, sympy.Expr) and value.has(PLUS_MINUS):
            if not allow_two:
                raise Unreadable("\\pm inside a tuple or interval")
            return [_checked(value.xreplace({PLUS_MINUS: sympy.Integer(sign)})) for sign in (1, -1)]
        return [value]

    def _union(self):
        pieces = self._separated(lambda: [self._expr()], "\\cup")
        return pieces[0] if len(pieces) == 1 else sympy.Union(*map(to_interval, pieces))

    def _expr(self):
        value = self._term()
        while self._peek() in SIGNS:
            op = self._take()
            right = self._term()
            if op in ("\\pm", "\\mp"):                  # a +- b: a sign symbol, two values later
                op, right = "+" if op == "\\pm" else "-", _arith(PLUS_MINUS, right, "*")
            value = _arith(value, right, op)
        return value

    def _starts_atom(self, token) -> bool:
        """Implicit multiplication: `2x`, `3\\pi`, `x(x+1)`; never a bare number after a value."""
        return token is not None and (token.isalpha() or token in ("(", "\\pi", "\\sqrt", "\\infty")
                                      or token in FRAC or token[1:] in GREEK)

    def _term(self):
        value = self._signed()
        while True:
            token = self._peek()
            if token in PRODUCT:
                self._take()
                value = _arith(value, self._signed(), PRODUCT[token], self)
            elif self._starts_atom(token):
                value = _arith(value, self._power(), "*", self)
            else:
                return value

    def _signed(self):
        if self._peek() not in SIGNS:
            return self._power()
        self._enter()
        sign = self._take()
        value = self._signed()
        self.depth -= 1
        if not isinstance(value, sympy.Expr):
            raise Unreadable("sign before a tuple")
        return {"+": value, "-": -value, "\\pm": PLUS_MINUS * value, "\\mp": -PLUS_MINUS * value}[sign]

    def _power(self):
        base = self._atom()
        if self._peek() != "^":
            return base
        self._take()
        if not isinstance(base, sympy.Expr):
            raise Unreadable("power of a tuple")
        return bounded_power(base, self._exponent(), self)

    def _exponent(self):
        token = self._peek()
        if token == "{":
            return self._group()
        if token in ("+", "-"):                     # `2^-1`
            self._take()
            return -self._exponent() if token == "-" else self._exponent()
        if token is not None and (token[0].isdigit() or token.isalpha() and len(token) == 1):
            self._take()
            return self._number(token) if token[0].isdigit() else sympy.Symbol(token)
        raise Unreadable("bad exponent")

    def _group(self):
        """`{ expr }`: LaTeX braces group like brackets."""
        self._enter()
        self._take("{")
        value = self._expr()
        self._take("}")
        self.depth -= 1
        return value

    def _argument(self):
        """The argument of \\frac or \\sqrt: a `{}` group or one character (`\\frac12`)."""
        token = self._peek()
        if token == "{":
            return self._group()
        if token is None:
            raise Unreadable("missing argument")
        if token[0].isdigit() or token.isalpha():   # \frac12, \frac ab: LaTeX takes one character
            self._take()
            if len(token) > 1:
                self.tokens.insert(self.pos, token[1:])
            return sympy.Integer(token[0]) if token[0].isdigit() else sympy.Symbol(token[0])
        if token == "\\pi":
            self._take()
            return sympy.pi
        raise Unreadable("bad argument")

    def _number(self, token: str):
        if len(token.replace(".", "")) > MAX_NUMBER_DIGITS:
            raise Unreadable("number too long")
        return sympy.Rational(token.rstrip(".") or "0")      # exact: Rational("3.5") == 7/2

    def _atom(self):
        token = self._take()
        if token[0].isdigit() or token[0] == ".":
            value = self._number(token)
            return self._mixed_number(value) if value.is_Integer else value
        if token in FRAC:
            self._enter()
            numerator, denominator = self._argument(), self._argument()
            self.depth -= 1
            return _arith(numerator, denominator, "/", self)
        if token == "\\sqrt":
            return self._sqrt()
        if token in CONSTANTS:
            return CONSTANTS[token]
        if token.isalpha() and len(token) > 1:
            raise Unreadable("a word, not a variable")
        if token.isalpha() or token[1:] in GREEK:
            return sympy.Symbol(token.lstrip("\\"))
        if token == "{":
            self.pos -= 1
            return self._group()
        if token in OPEN:
            return self._brackets(OPEN[token])
        raise Unreadable(f"unexpected {token!r}")

    def _mixed_number(self, whole):
        """`2\\frac{1}{2}` is 5/2 (MATH's mixed numbers); only a proper fraction of integers."""
        if self._peek() not in FRAC:
            return whole
        saved = self.pos
        self._take()
        try:
            numerator, denominator = self._argument(), self._argument()
            if numerator.is_Integer and denominator.is_Integer and 0 <= numerator < denominator:
                return whole + numerator / denominator
        except Unreadable:
            pass
        self.pos = saved                            # not a mixed number: a product, read later
        return whole

    def _sqrt(self):
        self._enter()
        index = 2
        if self._peek() == "[":
            self._take()
            index = self._expr()
            self._take("]")
            if not (index.is_Integer and 2 <= index <= MAX_ROOT):
                raise Unreadable("bad root index")
        radicand = self._argument()
        self.depth -= 1
        return bounded_power(radicand, sympy.Rational(1, int(index)))

    def _brackets(self, opening: str):
        self._enter()
        items = self._items({token for token, kind in CLOSE.items() if (kind == "}") == (opening == "{")},
                            opening == "{")
        closing = CLOSE[self._take()]
        self.depth -= 1
        if opening == "{":
            return AnswerSet(tuple(items))
        if len(items) == 1:
            if (opening, closing) not in (("(", ")"), ("[", "]")):
                raise Unreadable("half-open bracket around one value")
            return items[0]                         # a bracket that only groups
        if not all(isinstance(item, sympy.Expr) for item in items):
            raise Unreadable("nested tuples")
        return Brackets(opening, closing, tuple(items))


# -- bounded arithmetic ------------------------------------------------------------------
def _checked(value, product=False):
    """`value`, refused if undefined, of more than MAX_OPERANDS operands, or (a product or a power)
    if it would expand to more than MAX_EXPANDED_TERMS terms (`expansion_bound`)."""
    if product and expansion_bound(value, MAX_EXPANDED_TERMS) > MAX_EXPANDED_TERMS:
        raise Unreadable("expands to too many terms")
    if value.has(sympy.zoo, sympy.nan):
        raise Unreadable("undefined value")
    if (value.is_Add or value.is_Mul) and len(value.args) > MAX_OPERANDS:
        raise Unreadable("too many terms")
    return value


def _check_divisor(divisor, parser):
    if divisor == 0:
        raise Unreadable("division by zero")
    parser.divisions_by_sums += divisor.is_Add
    if parser.divisions_by_sums > MAX_DIVISIONS_BY_SUMS:
        raise Unreadable("too many divisions by sums")


def _arith(left, right, op, parser=None):
    """left op right; `parser` counts the divisions by sums (only a division needs it)."""
    if not (isinstance(left, sympy.Expr) and isinstance(right, sympy.Expr)):
        raise Unreadable("arithmetic on a tuple or set")
    if op == "/":
        _check_divisor(right, parser)
    return _checked(OPERATIONS[op](left, right), product=op == "*")


def bounded_power(base, exponent, parser=None):
    """base^exponent, refused unless its size is bounded before computing it: an exponent p/q with
    |p| <= MAX_EXPONENT, q <= MAX_ROOT, a small result (digits; terms of a power of a sum)."""
    if not (isinstance(base, sympy.Expr) and isinstance(exponent, sympy.Rational)):
        raise Unreadable("exponent must be a number")      # rejects towers such as x^{y^z}
    p, q = int(exponent.p), int(exponent.q)
    if abs(p) > MAX_EXPONENT or q > MAX_ROOT:
        raise Unreadable("exponent too large")
    if p < 0:                                       # only `_power` reads a negative exponent
        _check_divisor(base, parser)
    if base.is_Rational:
        size = max(abs(int(base.p)), int(base.q), 2)
        if abs(p) / q * math.log10(size) > MAX_RESULT_DIGITS:
            raise Unreadable("power too large")          # 10^{10^{10}} stops here
    elif abs(p) > 1:
        if abs(p) > MAX_SYMBOLIC_EXPONENT or base.has(sympy.oo):
            raise Unreadable("power of an expression too large")
        terms = len(base.args)                      # (a_1 + ... + a_terms)^|p|, expanded:
        if base.is_Add and math.comb(abs(p) + terms - 1, terms - 1) > MAX_EXPANDED_TERMS:
            raise Unreadable("power of a sum too large")          # checked before building it
    return _checked(sympy.Pow(base, exponent), product=True)


@functools.lru_cache(maxsize=4096)              # parsing checks each product: children are cached
def expansion_bound(expr, cap: int) -> int:
    """Upper bound on the terms of sympy.expand(expr), or cap + 1 once above cap: sums add,
    products multiply, a power n of a t-term sum gives C(n + t - 1, t - 1). Checked on each
    product: sympy merges (1+x)^64 (1+x)^64 into a power the parser never saw."""
    if expr.is_Add or expr.is_Mul:
        total = 0 if expr.is_Add else 1
        for arg in expr.args:
            size = expansion_bound(arg, cap)
            total = total + size if expr.is_Add else total * size
            if total > cap:
                return cap + 1
        return total
    if expr.is_Pow and expr.exp.is_Integer and expr.exp > 1:
        terms = expansion_bound(expr.base, cap)
        if terms > 1 and int(expr.exp) > cap:
            return cap + 1
        return min(math.comb(int(expr.exp) + terms - 1, terms - 1), cap + 1) if terms > 1 else 1
    return 1


def to_interval(value):
    """A two-item bracket with real constant ends, lower < upper, as a sympy Interval."""
    if isinstance(value, sympy.Set):
        return value
    if not (isinstance(value, Brackets) and len(value.items) == 2 and value.open in "(["):
        raise Unreadable("not an interval")
    low, high = value.items
    if low.free_symbols or high.free_symbols or (high - low).is_extended_positive is not True:
        raise Unreadable("not an interval")
    return sympy.Interval(low, high, value.open == "(", value.close == ")")


def parse_answer(text: str):
    """The value of a normalised answer text; raises Unreadable."""
    try:
        return AnswerParser(text).parse()
    except RecursionError as error:
        raise Unreadable("too deep") from error
