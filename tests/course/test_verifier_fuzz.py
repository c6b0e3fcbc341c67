"""10,000 generated inputs: hostile text, and random LaTeX built from the answer grammar then
mutated. No exception, no execution, every call under a second; the stats are printed."""
import builtins
import random
import time

import sympy
import sympy.parsing.sympy_parser

import verifier

INJECTIONS = ["__import__('os').system('touch {sentinel}')", "open('{sentinel}','w')",
              "lambda: 1", "().__class__.__mro__[1].__subclasses__()", "exec('1')", "eval('2+2')",
              "globals()", "Symbol('x')", "x.__dict__", "9**9**9", "10**10**10", "1e99999"]


class LatexAnswers:
    """Random answers from the verifier's grammar (grpo_ba_support/answer_grammar.py): numbers, fractions,
    roots, pi, powers (towers included), tuples, intervals, unions, sets, text, units."""

    def __init__(self, rng: random.Random):
        self.rng = rng

    def number(self):
        rng = self.rng
        return rng.choice([str(rng.randint(-50, 10**rng.randint(1, 12))), f"{rng.randint(0, 99)}.{rng.randint(0, 999)}",
                           "1{,}000", "2,\\!500", str(rng.randint(0, 9)) * rng.randint(30, 60)])

    def expr(self, depth=0):
        rng = self.rng
        if depth > rng.randint(0, 4):
            return rng.choice([self.number(), "x", "\\pi", "\\infty", "n", "\\theta", "C"])
        a, b = self.expr(depth + 1), self.expr(depth + 1)
        d = rng.randint
        return rng.choice([                          # built lazily: only the chosen form
            lambda: f"{a}+{b}", lambda: f"{a}-{b}", lambda: f"{a}\\cdot {b}", lambda: f"{a}\\times{b}",
            lambda: f"{a}/{b}", lambda: f"{a}{b}", lambda: f"\\frac{{{a}}}{{{b}}}",
            lambda: f"\\dfrac{{{a}}}{{{b}}}", lambda: f"\\frac{d(1, 9)}{d(0, 9)}", lambda: f"\\sqrt{{{a}}}",
            lambda: f"\\sqrt[{d(0, 20)}]{{{a}}}", lambda: f"\\sqrt{d(0, 9)}", lambda: f"{a}^{{{b}}}",
            lambda: f"({a})^{{{d(-100, 5000)}}}", lambda: f"{a}^{d(0, 99)}", lambda: f"\\left({a}\\right)",
            lambda: f"{{{a}}}", lambda: f"-{a}", lambda: f"{d(1, 9)}\\frac{{1}}{{{d(2, 9)}}}",
            lambda: f"{d(2, 10)}^{{{d(2, 10)}^{{{d(2, 10)}^{{{d(2, 10)}}}}}}}",
        ])()

    def answer(self):
        rng = self.rng
        e = self.expr
        return rng.choice([
            e, e, lambda: f"({e()}, {e()})", lambda: f"[{e()}, {e()})",
            lambda: f"(-\\infty, {e()}] \\cup [{e()}, \\infty)", lambda: f"\\{{{e()}, {e()}\\}}",
            lambda: f"{e()}, {e()}, {e()}", lambda: f"x = {e()}", lambda: f"f(x) = {e()}",
            lambda: f"\\text{{({rng.choice('ABCDE')})}}",
            lambda: f"\\text{{{rng.choice(['Monday', 'odd', 'no solution'])}}}",
            lambda: f"{e()}^\\circ", lambda: f"{e()}\\%", lambda: f"\\${e()}", lambda: f"{e()} \\text{{ cm}}^2",
            lambda: f"{e()} apples", lambda: f"x = {e()} \\text{{ or }} x = {e()}",
            lambda: f"\\langle {e()}, {e()} \\rangle",
        ])()

    def mutate(self, text: str, sentinel) -> str:
        rng = self.rng
        for _ in range(rng.randint(0, 4)):
            pos = rng.randint(0, len(text))
            choice = rng.random()
            if choice < 0.3:
                text = text[:pos] + text[pos + rng.randint(1, 5):]                    # delete
            elif choice < 0.55:
                text = text[:pos] + rng.choice("{}()[]^_\\,.-+/$%") + text[pos:]      # insert a symbol
            elif choice < 0.75:
                piece = text[pos: pos + rng.randint(1, 20)]
                text = text[:pos] + piece * rng.randint(2, 200) + text[pos:]          # repeat a slice
            elif choice < 0.9:
                text = text[:pos] + rng.choice(INJECTIONS).format(sentinel=sentinel) + text[pos:]
            else:
                text = text[:pos] + rng.choice(["\\frac{", "\\sqrt{", "^{", "\\text{", "\\left(", "}"]) * rng.randint(1, 3000) + text[pos:]
        return text

    def formatted(self, answer: str) -> str:
        return self.rng.choice(["\\boxed{{{}}}", "so $\\boxed{{{}}}$.", "Answer: {}", "#### {}", "{}",
                                "Final Answer: The final answer is ${}$. I hope it is correct."]).format(answer)


def hostile_inputs(n, seed, sentinel):
    """(completion, gold) pairs: half hostile text against a plain gold, half grammar answers
    (mutated or not) against each other, so that real comparisons run too."""
    rng = random.Random(seed)
    grammar = LatexAnswers(rng)
    latex = ["\\frac{", "\\boxed{", "}", "{", "\\dfrac{1}{", "\\left(", "\\right)", "\\cdot", "\\sqrt{2}", "$", "\\$",
             "\\times", "^{", "_", "\\pi", "\\infty", "\\cup", "\\text{", "^\\circ", "\\%", ",", "x=", "[", ")"]
    makers = [
        lambda: "".join(chr(rng.randint(0, 0x10FFFF)) for _ in range(rng.randint(0, 200))
                        if not 0xD800 <= rng.randint(0, 0x10FFFF) <= 0xDFFF),
        lambda: rng.choice(["(", "[", "{"]) * rng.randint(1, 5000) + "1" + rng.choice([")", "]", "}"]) * rng.randint(0, 5000),
        lambda: rng.choice(["", "-", "Answer: ", "\\boxed{", "#### "]) + str(rng.randint(0, 9)) * rng.randint(1, 20000),
        lambda: rng.choice(["\\boxed{", "Answer: ", "#### ", ""]) + rng.choice(INJECTIONS).format(sentinel=sentinel)
        + rng.choice(["}", "", "\n"]),
        lambda: "".join(rng.choice(latex + list("0123456789+-*/. x")) for _ in range(rng.randint(1, 300))),
        lambda: "x" * rng.randint(10_000, 100_000) + rng.choice(["", "\\boxed{3}", "Answer: 4", "#### 5", "6"]),
        lambda: "".join(rng.choice("0123456789+-*/(). ") for _ in range(rng.randint(1, 400))),
    ]
    for i in range(n):
        if i % 2:
            text = rng.choice(makers)()
            yield (text, "1") if rng.random() < 0.5 else ("1", text)
        else:
            answer = grammar.answer()
            gold = grammar.mutate(answer, sentinel) if rng.random() < 0.3 else answer
            completion = grammar.mutate(grammar.formatted(answer), sentinel) if rng.random() < 0.6 \
                else grammar.formatted(grammar.answer() if rng.random() < 0.3 else answer)
            yield completion, gold


def test_fuzzed_verifier_never_raises_never_executes_and_is_fast(tmp_path, monkeypatch, capsys):
    sentinel = tmp_path / "executed"
    calls = {"eval": 0, "sympify": 0}
    real_eval, real_exec = builtins.eval, builtins.exec
    real_sympify, real_parse_expr = sympy.sympify, sympy.parsing.sympy_parser.parse_expr

    def counting(name, real):
        def wrapper(*args, **kwargs):
            if name == "sympify" or (args and isinstance(args[0], str)):   # imports exec code objects
                calls[name] += 1
            return real(*args, **kwargs)
        return wrapper
    monkeypatch.setattr(builtins, "eval", counting("eval", real_eval))
    monkeypatch.setattr(builtins, "exec", counting("eval", real_exec))
    monkeypatch.setattr(sympy, "sympify", counting("sympify", real_sympify))
    monkeypatch.setattr(sympy.parsing.sympy_parser, "parse_expr", counting("sympify", real_parse_expr))
    verifier.verify("\\boxed{(1,2]\\cup[3,4)}", "\\frac{1}{x+1}")             # sympy's lazy imports

    exceptions, slowest, slowest_input, right, n = 0, 0.0, None, 0, 10_000
    for completion, gold in hostile_inputs(n, seed=0, sentinel=sentinel):
        start = time.perf_counter()
        try:
            score = verifier.verify(completion, gold)
            assert score in (0.0, 1.0)
            right += score == 1.0
            verifier.extract_answer(completion)
            verifier.parse_gold(gold)
        except Exception:
            exceptions += 1
        elapsed = time.perf_counter() - start
        if elapsed > slowest:
            slowest, slowest_input = elapsed, (completion[:60], gold[:60])
    executions = int(sentinel.exists()) + calls["eval"] + calls["sympify"]
    with capsys.disabled():
        print(f"\nverifier fuzz: {n} inputs (half grammar LaTeX, mutated), {exceptions} exceptions, "
              f"{executions} executions (eval/exec/sympify/parse_expr calls + sentinel), {right} scored 1, "
              f"slowest call {slowest * 1000:.1f} ms on {slowest_input!r}")
    assert exceptions == 0 and executions == 0 and slowest < 1.0
    assert right > n // 20                           # the grammar half does reach real comparisons
