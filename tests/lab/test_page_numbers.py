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
    "docs/strong-coupling.md": None,
    "docs/regime-design.md": "## The registered designs' results",
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
# demo-band's balanced - token under the rule its registration names (its note of 2026-12-07):
# the verdict word from no report (the report uses the later against-0 rule), the value from it.
REGISTERED_RULE = ("- contradicted under its registered rule (registrations/demo-band-v3.md); "
                   "band | balanced - token / last held-out acc | earlier")
EXAMPLE = "group([1, 0, 1, 0], [2, 4, 1, 3], '{}')"        # docs/method.md §3's worked example
POOLING = "pooling([1, 0, 1, 0, 1, 1, 0, 0], [2, 4, 1, 3, 6, 6, 10, 10], 4)"   # docs/method.md §5's batch
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
    Fragment("docs/method.md", "so k = 2, mean 1/2,\nstd 1/2 and A = [1, -1, 1, -1]; lengths L = [2, 4, 1, 3] (the "
             "wrong answers are\nlonger: Lbar+ = 1.5, Lbar- = 3.5)",
             "- the group's mean reward, as a fraction; - its std; = sign_lengths([1, 0, 1, 0], [2, 4, 1, 3])"),
    Fragment("docs/method.md", "sequence: -(1/4) * (1 - 1 + 1 - 1)", "- 1/G, a coefficient of the formula"),
    Fragment("docs/method.md", "balanced: (2/4) * (-(2 + 1) / 3)  +  (2/4) * ((4 + 3) / 7)           = -1/2 + 1/2",
             "- k/G, a coefficient; - (G-k)/G, a coefficient; = group([1, 0, 1, 0], [2, 4, 1, 3], 'balanced')[1]; "
             "= -group([1, 0, 1, 0], [2, 4, 1, 3], 'balanced')[2]"),
    Fragment("docs/method.md", "# per group: 0.325", f"= {POOLING}['per group']['J']"),
    Fragment("docs/method.md", "# pooled over the batch: 0.286", f"= {POOLING}['pooled']['J']"),
    Fragment("docs/method.md",
             "| per group (this project, DAPO's formula) | (0.400 + 0.250) / 2 = 0.325 | 1/20 = 0.050 / 1/64 = 0.016 | 0.50 |\n"
             "| pooled (verl `token-mean`, TRL `dapo`) | (4 + 8) / 42 = 0.286 | 1/42 = 0.024 / 1/42 = 0.024 | 0.76 |",
             f"= {POOLING}['groups']; = {POOLING}['per group']['J']; - 1/(P x group 1's 10 tokens); "
             f"= {POOLING}['per group']['c'][0]; - 1/(P x group 2's 32 tokens); = {POOLING}['per group']['c'][1]; "
             f"= {POOLING}['per group']['share']; = {POOLING}['pooled']['J']; - 1/(the batch's 42 tokens); "
             f"= {POOLING}['pooled']['c'][0]; - the same; = {POOLING}['pooled']['c'][1]; = {POOLING}['pooled']['share']"),
    Fragment("docs/method.md", "(32 of 42 here)", f"- group 2's tokens of the batch's"),
    Fragment("docs/method.md", "+0.196, beside sequence's and balanced's 0.000",
             "- the demo's printed mean pg-loss (a run, in no report); - the same run's"),
    Fragment("docs/method.md", "and take 70% of its weight.",
             f"= -{EXAMPLE.format('token')}[2]"),
    Fragment("docs/method.md",
             "balanced against sequence holds: its last accuracy is higher by +0.039; balanced\n"
             "against token is not detected (0.031 or more would have been seen at 80% power)\n"
             "(under its registered rule, contradicted: version 1's +0.080 lies outside the interval;",
             "band | balanced - sequence / last held-out acc | against 0, pooled#1; "
             "band | balanced - token / last held-out acc | against 0; " + REGISTERED_RULE),
    Fragment("docs/method.md",
             "There, balanced against token holds (+0.077); balanced\nagainst sequence is not detected (+0.017; "
             "0.027 or more would have been seen at 80% power);\ntoken against sequence holds (token lower by 0.060)",
             "strong | balanced - token / last held-out acc | against 0, pooled#1; "
             "strong | balanced - sequence / last held-out acc | against 0#1, pooled#1, against 0#2; "
             "strong | token - sequence / last held-out acc | against 0, pooled#1"),
    Fragment("docs/teaching.md",
             "there balanced ends\n  +0.039 ahead of sequence (holds), its lead over token is not detected (0.031 or more would\n"
             "  have been seen at 80% power; under its registered rule, contradicted: version 1's +0.080 lies\n"
             "  outside the interval; the against-0 rule came after its report), and both intervals lie below "
             "this project's version-1 toy values (+0.155, +0.080)",
             "band | balanced - sequence / last held-out acc | pooled#1, against 0; "
             "band | balanced - token / last held-out acc | against 0; " + REGISTERED_RULE + "; "
             "band | balanced - sequence / last held-out acc | earlier#1; "
             "band | balanced - token / last held-out acc | earlier#1"),
    Fragment("docs/teaching.md", "0.5 is the unbiased share", "= group([1, 0, 1, 0], [1, 3, 1, 3], 'sequence')[1]"),
    Fragment("docs/teaching.md", "Lbar+ / (Lbar+ + Lbar-) = 1 / (1 + 3) = 25%, where 0.5 would be unbiased",
             "= (lambda w: w[1] / (w[1] - w[2]))(group([1, 0], [1, 3], 'token')); "
             "= group([1, 0], [1, 3], 'sequence')[1]"),
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
    assert pn.earlier_value(cell) == "outside the interval: +0.080"
    assert pn.against_zero("holds, but not at the earlier +0.155 (it lies outside the interval)") == "holds"
    assert pn.earlier_value("holds, but not at the earlier +0.155 (it lies outside the interval)") == \
        "outside the interval: +0.155"
    assert pn.earlier_value("holds") == ""


def test_tokens_skip_versions_model_names_and_code_but_read_both_ends_of_a_range():
    text = "torch 2.13.0+cpu, Qwen2.5-Math, Qwen3-1.7B, `--lr 0.3`, 0.97-0.99, -0.021, 36% and 8 of its 14"
    assert [t for _, _, t in pn.tokens(text)] == ["0.97", "0.99", "-0.021", "36%", "8 of its 14"]


# ------------------------------------------------------------------ scope: what a sentence may say

SCOPE_PAGES = ["README.md", *sorted(f"docs/{f}" for f in os.listdir(os.path.join(pn.REPO, "docs"))
                                    if f.endswith(".md"))]


@pytest.mark.parametrize("page", SCOPE_PAGES)
def test_no_sentence_says_more_than_one_design_shows_and_nothing_renders_by_mistake(page):
    text = _text(page)
    problems = pn.scope_problems(text, page) + pn.stray_problems(text, page)
    assert problems == []


SCOPE_PAGE = """Design `demo-band` found +0.008. Design `strong-band`, a different world, found +0.077.

| | `demo-band` | `strong-band` |
|---|---|---|
| last acc | +0.008, not detected | +0.077, holds |

    python -m grpo_ba_lab.analysis.sweep --design strong-band   # demo-band grows here, in code
"""


def test_the_scope_checker_passes_two_designs_described_apart():
    assert pn.scope_problems(SCOPE_PAGE, "page") == [] and pn.stray_problems(SCOPE_PAGE, "page") == []


@pytest.mark.parametrize("sentence", [
    "demo-band's lead grows into strong-band's.",
    "Strong-band's intervals contradict demo-band's values.",
    "The forced slips of strong-band cause a larger lead than in demo-band.",
    "Balanced holds in `strong-band` and is not detected in `demo-band`.",
    "Because the coupling is strong, strong-band differs from demo-band.",
    "| demo-band | strong-band | grows |",
    "Token's lead over sequence in `loop-gap` changes in `spread-room`.",
    "Design demo drives the result of strong-band.",
])
def test_the_scope_checker_fails_a_relation_or_verdict_between_two_designs(sentence):
    assert pn.scope_problems(SCOPE_PAGE + "\n" + sentence + "\n", "page"), sentence


def test_a_registered_comparison_may_relate_its_designs(monkeypatch):
    monkeypatch.setattr(pn, "REGISTERED_COMPARISONS", {frozenset({"demo-band", "strong-band"})})
    assert pn.scope_problems(SCOPE_PAGE + "\ndemo-band's lead grows into strong-band's.\n", "page") == []


def test_a_sentence_names_a_design_by_the_report_its_anchored_numbers_come_from():
    page = ("With strong coupling the lead grows from +0.008 to +0.077. <!-- check: band | balanced - token / "
            "last held-out acc | pooled#1; strong | balanced - token / last held-out acc | pooled#1 -->\n")
    assert pn.check_text(page, "page")[0] == []
    assert pn.scope_problems(page, "page")
    assert not pn.scope_problems(page.replace("grows", "is"), "page")


@pytest.mark.parametrize("change", [("found +0.077.", "found +0.077 (0.031 or more would have been seen)."),
                                    ("\n\n| |", "\n\n0.077 0.055\n\n| |"), ("\n\n| |", "\n-->\n\n| |")])
def test_the_checker_fails_an_unqualified_power_or_stray_text(change):
    changed = SCOPE_PAGE.replace(*change, 1)
    assert pn.scope_problems(changed, "page") + pn.stray_problems(changed, "page"), change
    ok = SCOPE_PAGE.replace("found +0.077.", "found +0.077 (0.031 or more would have been seen at 80% power).")
    assert pn.scope_problems(ok, "page") == []


# ------------------------------------------------------------------ selection: strong-band's world

# Every page, the README and the pages kept by others (docs/method.md, docs/diagnose.md) included.
SELECTION_PAGES = SCOPE_PAGES


@pytest.mark.parametrize("page", SELECTION_PAGES)
def test_every_result_of_strong_bands_world_says_how_the_world_was_chosen(page):
    assert pn.selection_problems(_text(page), page) == []


SELECTION_PAGE = """## A result

In strong-band's world balanced ends +0.077 ahead of token (holds). <!-- check: strong | balanced - token / last held-out acc | pooled#1, against 0 -->
That world was chosen after its pilot's accuracies were seen.

The primaries, in a world chosen after its pilot's
accuracies were seen:

<!-- check-table: regime | 0 | -, pooled -->
| primary | pooled, 9 seeds |
|---|---|
| balanced - token at strong, last held-out acc | +0.053 [+0.035, +0.070] |

At gap 30, in a world chosen after its pilot's accuracies were seen, balanced - token holds.

At gap 6 token - sequence is +0.011 (not detected). <!-- check: regime | token - sequence at weak, last held-out acc | pooled#1, against 0#1 -->
"""


def test_the_selection_checker_passes_results_told_with_their_worlds_selection():
    assert pn.selection_problems(SELECTION_PAGE, "page") == []


@pytest.mark.parametrize("change", [
    ("That world was chosen after its pilot's accuracies were seen.", "That world is strong-band's."),
    ("in a world chosen after its pilot's\naccuracies were seen:", "paired by seed:"),
    (", in a world chosen after its pilot's accuracies were seen,", ","),
    ("At gap 6 token - sequence is +0.011 (not detected). <!-- check: regime | token - sequence at weak",
     "At gap 30 token - sequence is +0.011 (not detected). <!-- check: regime | token - sequence at strong"),
    ("## A result\n", "## A result\n\nendless-band's last-accuracy primary holds.\n"),
])
def test_the_selection_checker_fails_a_result_of_that_world_without_its_selection(change):
    changed = SELECTION_PAGE.replace(*change)
    assert changed != SELECTION_PAGE
    assert pn.selection_problems(changed, "page"), change


@pytest.mark.parametrize("page", ["docs/results-toy.md", "docs/strong-coupling.md", "docs/regime-design.md",
                                  "docs/stability-probe.md"])
def test_a_research_page_without_its_selection_notes_fails_at_each_paragraph_that_needs_one(page):
    text = _text(page)
    stripped = pn.SELECTION_NOTE.sub(lambda m: "chosen" + " " * (len(m.group()) - len("chosen")), text)
    flagged = pn.selection_flags(stripped)
    assert flagged == pn.selection_flags(text) and flagged, page      # the notes flag nothing themselves
    assert pn.selection_problems(stripped, page), page
    for k, _, table in flagged:                  # each paragraph that needs a note has its own, and loses it
        assert pn.selection_disclosed(text, k, table) and not pn.selection_disclosed(stripped, k, table)


# ------------------------------------------------------------------ demo-band's balanced - token under both rules

@pytest.mark.parametrize("page", SCOPE_PAGES)
def test_a_page_quoting_demo_bands_balanced_token_as_not_detected_says_its_registered_rule_contradicts_it(page):
    assert pn.registered_rule_problems(_text(page), page) == []


def test_the_registered_rule_check_fails_each_quote_that_loses_its_note():
    quoting = []
    for page in SCOPE_PAGES:
        text = _text(page)
        stripped = pn.REGISTERED_RULE_NOTE.sub("rule", text)
        if stripped != text:
            quoting.append(page)
            assert pn.registered_rule_problems(stripped, page), page
    assert len(quoting) >= 6          # headline-design, method, results-toy, strong-coupling, teaching, toy-designs
    assert pn.registered_rule_problems(
        "Balanced - token is not detected (0.031 or more would have been seen at 80% power).\n", "page")
    assert not pn.registered_rule_problems(
        "Balanced - token is not detected (0.031 or more would have been seen at 80% power). Under its "
        "registered rule, contradicted.\n", "page")


# ------------------------------------------------------------------ GPU sentences

@pytest.mark.parametrize("page", SCOPE_PAGES)
def test_no_sentence_says_more_ran_on_a_gpu_than_the_committed_logs_show(page):
    assert pn.gpu_claim_problems(_text(page), page) == []


GPU_PAGE = """# GPU

The 7B preset is sized for one 80 GB GPU on paper; no 80 GB card has run it.
`static` samples the same tokens as `generate`, checked on a CPU only.
`paged` sampled 501 tokens/s, slower than `generate`. `tests/lab/test_gpu.py` has never passed.
"""


def test_the_gpu_checker_passes_sentences_that_say_what_ran():
    assert pn.gpu_claim_problems(GPU_PAGE, "page", logs="") == []


@pytest.mark.parametrize("change", [
    ("on paper; no 80 GB card has run it.", "fits an 80 GB GPU with room to spare."),
    ("as `generate`, checked on a CPU only.", "as `generate`, faster."),
    ("slower than `generate`", "faster than `generate`"),
    ("has never passed.", "on the same H200: 3 passed in 26.7 s."),
])
def test_the_gpu_checker_fails_a_sentence_that_says_more_than_ran(change):
    changed = GPU_PAGE.replace(*change)
    assert changed != GPU_PAGE
    assert pn.gpu_claim_problems(changed, "page", logs=""), change
    if "passed" in change[1]:         # a committed log that shows the count makes it true
        assert pn.gpu_claim_problems(changed, "page", logs="tests/lab/test_gpu.py ..... 3 passed in 26.7s") == []
