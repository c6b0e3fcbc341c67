"""Every number and verdict word the pages state about the toy's reports is read from that
report at its own row and column (tests/lab/page_numbers.py), and every anchor can fail."""
import os

import pytest

import page_numbers as pn
from page_numbers import Fragment

# The pages this project anchors itself, and the region of each that states results.
ANCHORED = {
    "docs/results-toy.md": None,
    "docs/stability-probe.md": None,
    "docs/toy-designs.md": "## Version 3: design `demo-band`",
}

README_TOY = ("README.md", "## What the toy shows")


def anchored_pages() -> dict:
    """ANCHORED, and the README's toy section once it carries anchors of its own
    (tests/lab/test_readme_reports.py checks it either way)."""
    page, heading = README_TOY
    text = _text(page)
    start, end = pn.section(text, heading)
    return {**ANCHORED, **({page: heading} if "<!-- check" in text[start:end] else {})}


# Pages whose text is kept by others (docs/method.md, docs/teaching.md): each passage that
# states a toy result or a worked example, with the references of its tokens in order. The
# passage is found by its words; its numbers and verdict words may be anything, and are then
# compared with the report or with grpo_ba's own computation.
EXAMPLE = "group([1, 0, 1, 0], [2, 4, 1, 3], '{}')"        # docs/method.md §3's worked example
EXPLORE = "group([1, 0, 1, 0, 1, 0], [120, 400, 120, 120, 120, 120], 'token')"   # teaching.md, step 2
FRAGMENTS = [
    Fragment("docs/method.md",
             "token:    -(1*2 - 1*4 + 1*1 - 1*3) / (2 + 4 + 1 + 3)                = -(-4)/10 = 0.4",
             f"= {EXAMPLE.format('token')}[0]"),
    Fragment("docs/method.md",
             "The per-sign weights: token W+ = 1 * 3/10 = 0.3 and W- = -1 * 7/10 = -0.7 (ratio\n"
             "3/7 = Lbar+/Lbar-); sequence and balanced W+ = -W- = sqrt(2 * 2)/4 = 0.5.",
             f"- 3 of the 10 tokens; = {EXAMPLE.format('token')}[1]; - 7 of the 10 tokens; "
             f"= {EXAMPLE.format('token')}[2]; - Lbar+ / Lbar- = 1.5 / 3.5; "
             f"= {EXAMPLE.format('sequence')}[1]"),
    Fragment("docs/method.md", "and take 70% of its weight.",
             f"= -{EXAMPLE.format('token')}[2]"),
    Fragment("docs/method.md",
             "two floating-point paths) balanced's last accuracy exceeds sequence's by +0.039 (holds) and\n"
             "  its lead over token is not detected (0.031 or more would have been seen)",
             "band | balanced - sequence / last held-out acc | pooled#1, against 0; "
             "band | balanced - token / last held-out acc | against 0"),
    Fragment("docs/teaching.md",
             "there balanced ends\n  +0.039 ahead of sequence (holds), its lead over token is not detected (0.031 or more would\n"
             "  have been seen)",
             "band | balanced - sequence / last held-out acc | pooled#1, against 0; "
             "band | balanced - token / last held-out acc | against 0"),
    Fragment("docs/teaching.md",
             "Token's share on the\n   right answers falls to 36% and its loss at ratio 1 rises to +0.28",
             f"= {EXPLORE}[1] / ({EXPLORE}[1] - {EXPLORE}[2]); = {EXPLORE}[0]"),
    Fragment("docs/teaching.md", "so 7.2 times less at\n360 tokens than at 50.", "= 360 / 50"),
    Fragment("docs/teaching.md", "Lbar+ / (Lbar+ + Lbar-) = 1 / (1 + 3) = 25%",
             "= (lambda w: w[1] / (w[1] - w[2]))(group([1, 0], [1, 3], 'token'))"),
    Fragment("docs/teaching.md", 'the preset "Long wrong answers" shows 18.3%\nfor a ratio of 0.22',
             "- the explorable's preset (tests/course/test_explore_page.py checks the page against grpo_ba); "
             "- the same preset"),
]


def _text(page):
    with open(os.path.join(pn.REPO, page)) as f:
        return f.read()


def page_problems(page: str, text: str):
    """(problems, exempt tokens) of one anchored page's results region."""
    heading = ANCHORED[page]
    start, end = pn.section(text, heading) if heading else (0, len(text))
    return pn.check_text(text, page, start, end)


@pytest.mark.parametrize("page", ANCHORED)
def test_every_number_and_verdict_word_of_the_page_is_its_reports_at_its_row_and_column(page):
    problems, _ = page_problems(page, _text(page))
    assert problems == []


def test_every_passage_of_method_and_teaching_states_what_its_report_or_grpo_ba_computes():
    texts = {f.page: _text(f.page) for f in FRAGMENTS}
    problems, _ = pn.check_fragments(FRAGMENTS, texts)
    assert problems == []


def test_the_worked_example_is_computed_by_grpo_ba_not_copied():
    loss, w_pos, w_neg = pn.worked_group([1, 0, 1, 0], [2, 4, 1, 3], "token")
    assert (loss, w_pos, w_neg) == pytest.approx((0.4, 0.3, -0.7), abs=1e-5)     # eps in the std
    assert pn.worked_group([1, 0, 1, 0], [2, 4, 1, 3], "balanced")[0] == pytest.approx(0, abs=1e-9)


# ------------------------------------------------------------------ the checker can fail

PAGE = """Intro.

Balanced ends +0.039 ahead (holds), and 8 of its 14 runs fell.
<!-- check: band | balanced - sequence / last held-out acc | pooled#1, against 0; = falls(rule="token") -->

<!-- check-table: band | 0, =last held-out acc | -, pooled, against 0 -->
| pair | pooled | verdict |
|---|---|---|
| balanced - token | +0.008 [-0.002, +0.018] | not detected; differences of 0.031 or more would have been seen |
"""


def test_the_checker_passes_a_page_that_reads_its_report_right():
    assert pn.check_text(PAGE, "page")[0] == []


@pytest.mark.parametrize("change", [("+0.039", "+0.049"), ("(holds)", "(not detected)"), ("8 of", "9 of"),
                                    ("+0.018]", "+0.019]"), ("not detected;", "holds;"), ("0.031", "0.032"),
                                    ("(holds)", "(holds, by 0.5)"), ("Intro.", "Intro 0.5.")])
def test_the_checker_fails_a_changed_number_or_verdict_word(change):
    problems, _ = pn.check_text(PAGE.replace(*change), "page")
    assert problems, change


def test_a_number_found_elsewhere_in_the_report_does_not_pass():
    # +0.031 is in the report (token - sequence's pooled mean), but not at this row and column
    problems, _ = pn.check_text(PAGE.replace("+0.039", "+0.031"), "page")
    assert problems and "+0.031" in problems[0]


def test_a_verdict_cell_reads_its_verdict_against_0_first():
    cell = ("contradicted (the earlier +0.080 lies outside the interval); a difference from 0 not detected, "
            "differences of 0.031 or more would have been seen (Holm over 2 primaries)")
    assert pn.against_zero(cell) == "not detected; differences of 0.031 or more"
    assert pn.earlier_value(cell) == "contradicted: +0.080"
    assert pn.against_zero("holds, but not at the earlier +0.155 (it lies outside the interval)") == "holds"
    assert pn.earlier_value("holds, but not at the earlier +0.155 (it lies outside the interval)") == \
        "contradicted: +0.155"
    assert pn.earlier_value("holds") == ""


def test_tokens_skip_versions_model_names_and_code_but_read_both_ends_of_a_range():
    text = "torch 2.13.0+cpu, Qwen2.5-Math, Qwen3-1.7B, `--lr 0.3`, 0.97-0.99, -0.021, 36% and 8 of its 14"
    assert [t for _, _, t in pn.tokens(text)] == ["0.97", "0.99", "-0.021", "36%", "8 of its 14"]
