"""verifier.py: formats, exact values, and model text that must never run."""
import time
from fractions import Fraction

import pytest
import sympy
from hypothesis import given, settings, strategies as st

from verifier import extract_answer, parse_gold, parse_value, verify
from verifier_cases import CASES
from grpo_ba_support.answer_grammar import AnswerSet, Brackets

KINDS = ["number", "format", "radical", "pi", "power", "tuple", "interval", "set", "text",
         "degree", "percent", "unit", "thousands", "equation", "polynomial"]


@pytest.mark.parametrize("kind, completion, gold, expected", CASES)
def test_verifier_table(kind, completion, gold, expected):
    assert verify(completion, gold) == expected


def test_case_table_covers_every_kind_with_right_and_wrong_answers():
    assert len(CASES) >= 200
    for kind in KINDS:
        scores = {expected for k, _, _, expected in CASES if k == kind}
        assert scores == {0.0, 1.0}, kind
    assert {k for k, *_ in CASES} == set(KINDS)


def test_gold_may_be_a_list_of_acceptable_answers():
    assert verify("\\boxed{(2, 5)}", ["[2, 5]", "(2, 5)"]) == 1.0
    assert verify("\\boxed{\\frac{1}{2}}", ("0.5", "50\\%")) == 1.0
    assert verify("\\boxed{3}", ["1", "2"]) == 0.0
    assert verify("\\boxed{3}", []) == 0.0
    assert verify("\\boxed{3}", ["\\begin{pmatrix}3\\end{pmatrix}", "3"]) == 1.0
    assert verify("\\boxed{3}", 3) == verify("\\boxed{3}", [2, 3]) == verify("#### 0.5", 0.5) == 1.0


def test_parse_gold_reads_benchmark_golds_and_returns_none_otherwise():
    assert parse_gold("\\frac{\\sqrt{3}}{2}") == sympy.sqrt(3) / 2
    assert parse_gold("#### 1{,}000") == 1000
    assert parse_gold("\\boxed{2\\pi}") == 2 * sympy.pi
    assert parse_gold("(-\\infty, 3]") == Brackets("(", "]", (-sympy.oo, 3))
    assert parse_gold("\\text{(C)}") == sympy.Symbol("C")
    assert parse_gold("\\text{Monday}") == "monday"
    assert parse_gold("\\pm 3") == AnswerSet((3, -3))
    for unreadable in ["\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "x^2 + y^2 = 1", "x > 3",
                       "10^{10^{10}}", "", None, "\\frac{1}{0}", "\\sin x"]:
        assert parse_gold(unreadable) is None, unreadable


def test_extract_answer_returns_the_raw_final_answer():
    assert extract_answer("so \\boxed{\\frac{7}{2}}.") == "\\frac{7}{2}"
    assert extract_answer("Answer: 12.\n") == "12"
    assert extract_answer("the sum is 1,234 apples") == "1234"
    assert extract_answer("nothing") is None
    assert extract_answer("") is None
    assert extract_answer(None) is None


def test_parse_value_is_exact():
    assert parse_value("3.5") == parse_value("7/2") == parse_value("\\frac{7}{2}")
    assert parse_value("0.333") != parse_value("1/3")
    assert parse_value("((((1))))+-2") == -1
    assert parse_value("1/0") is None


SENTINEL_CODE = [
    "__import__('os').system('touch {path}')",
    "\\boxed{{__import__('os').system('touch {path}')}}",
    "Answer: (lambda: open('{path}', 'w'))()",
    "\\boxed{{().__class__.__bases__[0].__subclasses__()}}",
    "#### exec(\"open('{path}','w').write('x')\")",
    "Answer: eval('open(\"{path}\", \"w\")')",
    "\\boxed{{Symbol('x').__class__}}",
    "\\boxed{{\\text{{__import__('os').system('touch {path}')}}}}",
    "\\boxed{{x = open('{path}', 'w')}}",
    "\\boxed{{\\frac{{open('{path}','w')}}{{2}}}}",
    "\\boxed{{\\sqrt{{__import__('os').system('touch {path}')}}}}",
    "\\boxed{{(exec('open(\"{path}\",\"w\")'), 1)}}",
    "\\boxed{{\\mathrm{{open}}('{path}', 'w')}}",
    "Answer: $\\text{{exec}}(\\text{{open('{path}','w')}})$",
]


@pytest.mark.parametrize("template", SENTINEL_CODE)
def test_code_in_model_text_is_never_executed(template, tmp_path):
    sentinel = tmp_path / "executed"
    text = template.format(path=sentinel)
    assert verify(text, "7") == 0.0
    assert verify("7", text) == 0.0
    assert verify(text, text) in (0.0, 1.0)
    assert parse_gold(text) is None or not sentinel.exists()
    assert not sentinel.exists()


ADVERSARIAL = [
    "\\boxed{9**9**9}",
    "Answer: 9**9**9**9",
    "\\boxed{" + "9" * 5000 + "}",
    "#### " + "9" * 100_000,
    "1" * 100_000,
    "(" * 5000 + "1" + ")" * 5000,
    "\\boxed{" + "(" * 5000 + "1" + ")" * 5000 + "}",
    "\\boxed{" + "{" * 5000 + "1" + "}" * 5000 + "}",
    "\\boxed{" + "-" * 5000 + "1}",
    "\\frac{" * 3000 + "1" + "}{2}" * 3000,
    "x" * 100_000 + "Answer:",
    "\\boxed{" * 20_000,
    "Answer: " + "1*" * 50_000 + "1",
    "1e999999999",
    # exponent towers: refused, never computed
    "\\boxed{10^{10^{10}}}",
    "\\boxed{9^{9^{9^9}}}",
    "\\boxed{2^{2^{2^{2^{2^{2}}}}}}",
    "\\boxed{(10^{1000})^{1000}}",
    "\\boxed{\\sqrt[12]{10^{1000}}^{1000}}",
    "\\boxed{x^{x^{x^{x}}}}",
    # expansions that would blow up: refused by the size bound
    "\\boxed{" + "(1+x)^{64}" * 40 + "}",
    "\\boxed{" + "".join(f"({k}+x)^{{60}}" for k in range(1, 30)) + "}",
    "\\boxed{(1+\\sqrt{2}+\\sqrt{3}+\\sqrt{5}+\\sqrt{7}+x)^{64}}",
    "\\boxed{" + "+".join(f"\\frac{{1}}{{x+{k}}}" for k in range(1, 40)) + "}",
    "\\boxed{" + ",".join(f"(1+x)^{{{k + 10}}}" for k in range(16)) + "}",
    # deep nesting and many braces
    "\\boxed{" + "\\sqrt{" * 3000 + "2" + "}" * 3000 + "}",
    "\\boxed{" + "\\frac{1}{1+" * 3000 + "x" + "}" * 3000 + "}",
    "\\boxed{" + "\\text{" * 3000 + "1" + "}" * 3000 + "}",
    "\\boxed{" + "[" * 3000 + "1" + ")" * 3000 + "}",
    "\\boxed{" + "\\left(" * 3000 + "1" + "\\right)" * 3000 + "}",
    "\\boxed{" + "{}" * 50_000 + "}",
    "\\boxed{" + "(1," * 2000 + "1" + ")" * 2000 + "}",
    "\\boxed{" + "1 \\cup " * 3000 + "1}",
    # huge inputs (200k characters and more)
    "\\boxed{" + "1+" * 90_000 + "1}",
    "Answer: " + "a " * 100_000,
    "\\boxed{1}" * 25_000,
    "\\text{" * 40_000 + "1",
    "x = " * 50_000 + "1",
    "Answer: 5 " + "apples " * 30_000,
]


@pytest.fixture(scope="module")
def warm_verifier():
    """sympy imports parts of itself on first use; time calls after that."""
    for text in ["\\boxed{(1,2]\\cup[3,4)}", "\\boxed{\\frac{1}{x+1}}", "\\boxed{\\sqrt[3]{2}x^2}"]:
        verify(text, text)


@pytest.mark.parametrize("text", ADVERSARIAL, ids=range(len(ADVERSARIAL)))
def test_adversarial_inputs_score_zero_fast(text, warm_verifier):
    for completion, gold in ((text, "7"), ("7", text), (text, text)):    # no text here means 7
        start = time.perf_counter()
        score = verify(completion, gold)
        assert time.perf_counter() - start < 1.0
        assert score == 0.0 or completion == gold and score == 1.0


@settings(max_examples=300, deadline=1000)
@given(st.integers(-10**6, 10**6), st.integers(1, 10**4),
       st.sampled_from(["\\boxed{{{}}}", "Answer: {}", "#### {}", "so it is {}"]))
def test_property_any_written_fraction_verifies_against_its_exact_value(num, den, fmt):
    value = Fraction(num, den)
    written = f"{num}/{den}" if fmt != "\\boxed{{{}}}" else f"\\frac{{{num}}}{{{den}}}"
    assert verify(fmt.format(written), f"{value.numerator}/{value.denominator}") == 1.0
    assert verify(fmt.format(written), f"{value.numerator + 1}/{value.denominator}") == 0.0


@settings(max_examples=300, deadline=1000)
@given(st.text(max_size=300), st.text(max_size=20))
def test_property_verify_never_raises_and_returns_zero_or_one(completion, gold):
    assert verify(completion, gold) in (0.0, 1.0)
