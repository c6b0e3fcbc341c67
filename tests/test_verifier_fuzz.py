"""10,000 generated hostile inputs: no exception, no execution, every call under a second."""
import builtins
import random
import time

import sympy

import verifier


def hostile_inputs(n, seed, sentinel):
    rng = random.Random(seed)
    injections = [f"__import__('os').system('touch {sentinel}')", f"open('{sentinel}','w')",
                  "lambda: 1", "().__class__.__mro__[1].__subclasses__()", "exec('1')", "eval('2+2')",
                  "globals()", "Symbol('x')", "x.__dict__", "9**9**9", "10**10**10", "1e99999"]
    latex = ["\\frac{", "\\boxed{", "}", "{", "\\dfrac{1}{", "\\left(", "\\right)", "\\cdot", "\\sqrt{2}", "$", "\\$",
             "\\times", "^{", "_", "\\pi", "\\infty"]
    makers = [
        lambda: "".join(chr(rng.randint(0, 0x10FFFF)) for _ in range(rng.randint(0, 200))
                        if not 0xD800 <= rng.randint(0, 0x10FFFF) <= 0xDFFF),
        lambda: rng.choice(["(", "[", "{"]) * rng.randint(1, 5000) + "1" + rng.choice([")", "]", "}"]) * rng.randint(0, 5000),
        lambda: rng.choice(["", "-", "Answer: ", "\\boxed{", "#### "]) + str(rng.randint(0, 9)) * rng.randint(1, 20000),
        lambda: rng.choice(["\\boxed{", "Answer: ", "#### ", ""]) + rng.choice(injections) + rng.choice(["}", "", "\n"]),
        lambda: "".join(rng.choice(latex + list("0123456789+-*/. ")) for _ in range(rng.randint(1, 300))),
        lambda: "x" * rng.randint(10_000, 100_000) + rng.choice(["", "\\boxed{3}", "Answer: 4", "#### 5", "6"]),
        lambda: "".join(rng.choice("0123456789+-*/(). ") for _ in range(rng.randint(1, 400))),
    ]
    for _ in range(n):
        yield rng.choice(makers)()


def test_fuzzed_verifier_never_raises_never_executes_and_is_fast(tmp_path, monkeypatch, capsys):
    sentinel = tmp_path / "executed"
    calls = {"eval": 0, "sympify": 0}
    real_eval, real_exec, real_sympify = builtins.eval, builtins.exec, sympy.sympify

    def counting(name, real):
        def wrapper(*args, **kwargs):
            if name == "sympify" or (args and isinstance(args[0], str)):   # imports exec code objects
                calls[name] += 1
            return real(*args, **kwargs)
        return wrapper
    monkeypatch.setattr(builtins, "eval", counting("eval", real_eval))
    monkeypatch.setattr(builtins, "exec", counting("eval", real_exec))
    monkeypatch.setattr(sympy, "sympify", counting("sympify", real_sympify))

    exceptions, slowest, n = 0, 0.0, 10_000
    for text in hostile_inputs(n, seed=0, sentinel=sentinel):
        for completion, gold in ((text, "1"), ("1", text)):
            start = time.perf_counter()
            try:
                score = verifier.verify(completion, gold)
                assert score in (0.0, 1.0)
                verifier.extract_answer(completion)
            except Exception:
                exceptions += 1
            slowest = max(slowest, time.perf_counter() - start)
    executions = int(sentinel.exists()) + calls["eval"] + calls["sympify"]
    with capsys.disabled():
        print(f"\nverifier fuzz: {n} inputs x 2 roles, {exceptions} exceptions, {executions} executions "
              f"(eval/exec/sympify calls + sentinel), slowest call {slowest * 1000:.1f} ms")
    assert exceptions == 0 and executions == 0 and slowest < 1.0
