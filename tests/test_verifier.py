"""verifier.py: formats, exact values, and model text that must never run."""
import time
from fractions import Fraction

import pytest
from hypothesis import given, settings, strategies as st

from verifier import extract_answer, parse_value, verify

CASES = [
    # (completion, gold, expected score)
    ("The answer is \\boxed{42}", "42", 1.0),
    ("\\boxed{41}", "42", 0.0),
    ("\\boxed{-7}", "-7", 1.0),
    ("\\boxed{ 3.5 }", "7/2", 1.0),
    ("\\boxed{\\frac{7}{2}}", "3.5", 1.0),
    ("\\boxed{\\dfrac{7}{2}}", "7/2", 1.0),
    ("\\boxed{\\frac{1}{3}}", "0.333", 0.0),
    ("\\boxed{0.333}", "1/3", 0.0),
    ("\\boxed{(3+4)*2}", "14", 1.0),
    ("\\boxed{2 \\times 7}", "14", 1.0),
    ("\\boxed{1,000}", "1000", 1.0),
    ("\\boxed{\\frac{-1}{2}}", "-0.5", 1.0),
    ("first \\boxed{3} then \\boxed{4}", "4", 1.0),
    ("first \\boxed{3} then \\boxed{4}", "3", 0.0),
    ("\\boxed{1/0}", "0", 0.0),
    ("\\boxed{5/(3-3)}", "5", 0.0),
    ("\\boxed{4", "4", 0.0),                     # truncated box: no answer, no fallback
    ("Answer: 12", "12", 1.0),
    ("Answer: 12.", "12", 1.0),
    ("Answer: -0.25", "-1/4", 1.0),
    ("Answer: 13", "12", 0.0),
    ("Answer: 5\nAnswer: 6", "6", 1.0),
    ("Answer: twelve", "12", 0.0),
    ("#### 72", "72", 1.0),
    ("so 48 + 24 = 72\n#### 72", "72", 1.0),
    ("#### 71", "72", 0.0),
    ("#### 1/2", "0.5", 1.0),
    ("\\boxed{5} ... Answer: 6", "6", 1.0),      # the last marker counts
    ("Answer: 6 ... \\boxed{5}", "5", 1.0),
    ("63 66", "66", 1.0),                         # toy format: running sums, last number
    ("57 ~~~~~~~ 60", "66", 0.0),
    ("I think it's 17 or maybe 18", "18", 1.0),
    ("I think it's 17 or maybe 18", "17", 0.0),
    ("-3", "-3", 1.0),
    ("1.50", "1.5", 1.0),
    ("", "1", 0.0),
    ("   ", "1", 0.0),
    ("no numbers here", "1", 0.0),
    ("~~~~ ??? ~~~", "0", 0.0),
    ("\\boxed{}", "0", 0.0),
    ("\\boxed{x+1}", "1", 0.0),
    ("\\boxed{2**3}", "8", 0.0),                 # powers are not part of the language
    ("Answer: $42$", "42", 1.0),
    ("\\boxed{42}", "\\boxed{42}", 1.0),           # gold in a format is read the same way
    ("\\boxed{42}", "#### 42", 1.0),
    ("\\boxed{42}", "not a number", 0.0),
    ("\\boxed{99999999999999999999999999999999999999999999999999}", "1", 0.0),
]


@pytest.mark.parametrize("completion, gold, expected", CASES)
def test_verifier_table(completion, gold, expected):
    assert verify(completion, gold) == expected


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
]


@pytest.mark.parametrize("template", SENTINEL_CODE)
def test_code_in_model_text_is_never_executed(template, tmp_path):
    sentinel = tmp_path / "executed"
    text = template.format(path=sentinel)
    assert verify(text, "7") == 0.0
    assert verify("7", text) == 0.0
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
]


@pytest.mark.parametrize("text", ADVERSARIAL, ids=range(len(ADVERSARIAL)))
def test_adversarial_inputs_score_zero_fast(text):
    start = time.perf_counter()
    score = verify(text, "1")
    assert time.perf_counter() - start < 1.0
    assert score == 0.0 or text == "(" * 5000 + "1" + ")" * 5000 and score in (0.0, 1.0)


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
