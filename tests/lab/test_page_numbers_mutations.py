"""Every one-digit change and every verdict-word swap in the pages' checked numbers and words
is caught by the checker (tests/lab/page_mutations.py prints the counts)."""
import pytest

import page_mutations
from test_page_numbers import FRAGMENTS, anchored_pages

pytestmark = pytest.mark.slow                  # about 1800 checks of whole pages


def test_every_change_to_a_number_or_verdict_word_read_from_a_report_is_caught():
    pages = anchored_pages()
    counts = page_mutations.count(pages, FRAGMENTS)
    assert set(counts) == set(pages) | {f.page for f in FRAGMENTS}
    for page, tally in counts.items():
        assert tally["checked"] > 0, page
        assert tally["checked_caught"] == tally["checked"], (page, tally)


def test_a_mutant_changes_one_digit_or_swaps_a_verdict_word():
    assert page_mutations.mutants("+0.039") == ["+1.039", "+0.139", "+0.049", "+0.030"]
    assert page_mutations.mutants("8 of its 14") == ["9 of its 14", "8 of its 24", "8 of its 15"]
    assert page_mutations.mutants("not\ndetected") == ["holds", "contradicted"]
    assert page_mutations.mutants("hold") == ["contradicted", "not detected"]


def test_every_inserted_relation_between_two_designs_and_every_stray_line_is_caught():
    from test_page_numbers import SCOPE_PAGES
    counts = page_mutations.count_scope(SCOPE_PAGES)
    assert set(SCOPE_PAGES) <= set(counts)                       # every page is mutated
    for page, tally in counts.items():
        assert tally["scope"] > 0, page                          # every page has a heading
        assert tally["scope_caught"] == tally["scope"], (page, tally)


def test_every_inserted_unselected_result_or_unrun_gpu_claim_is_caught():
    from test_page_numbers import SELECTION_PAGES
    counts = page_mutations.count_claims(SELECTION_PAGES)
    assert set(SELECTION_PAGES) <= set(counts)                   # every page is mutated
    for page, tally in counts.items():
        assert tally["claims"] > 0, page
        assert tally["claims_caught"] == tally["claims"], (page, tally)
