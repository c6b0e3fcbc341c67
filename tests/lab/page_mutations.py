"""How many one-token changes to the pages the checker of tests/lab/page_numbers.py catches.

    python tests/lab/page_mutations.py

Each mutation changes one thing in one page, the others left as they are: one digit of a
number or count (d -> d+1 mod 10), or a verdict word swapped for each of the other two
(holds / contradicted / not detected). The checker then runs on that page; a mutation is
caught when it reports a problem. Tokens whose anchor says `-` (from no report: timings,
flags, a threshold) are counted apart: the checker reads nothing for them. Scope mutations
insert, after a heading, a sentence that relates two registered designs (a verdict word, a
causal or change verb, "contradicts") or a line of stray text; each must be reported. Claim
mutations insert a sentence quoting a result of strong-band's world without its selection, or
one saying more ran on a GPU than the committed logs show; each must be reported."""
from __future__ import annotations

import os
import sys
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repo

import page_numbers as pn                                    # noqa: E402

SWAPS = {"holds": ("contradicted", "not detected"), "contradicted": ("holds", "not detected"),
         "not detected": ("holds", "contradicted")}


def mutants(token: str) -> list[str]:
    """Every one-token change of `token`."""
    word = pn.TOKEN.fullmatch(token).group("word")
    if word:
        return list(SWAPS[pn._normal_word(token)])
    return [token[:i] + str((int(c) + 1) % 10) + token[i + 1:] for i, c in enumerate(token) if c.isdigit()]


def _read(page: str) -> str:
    with open(os.path.join(pn.REPO, page)) as f:
        return f.read()


def count(anchored: dict, fragments: list) -> dict:
    """{page: Counter(checked, checked_caught, exempt, exempt_caught)} over every mutation."""
    counts = {}
    for page, heading in anchored.items():
        text = _read(page)
        start, end = pn.section(text, heading) if heading else (0, len(text))
        problems, exempt = pn.check_text(text, page, start, end)
        assert problems == [], problems                       # the pages as they are pass
        exempt = set(exempt)
        tally = counts.setdefault(page, Counter())
        for offset, token in pn.region_tokens(text, start, end):
            kind = "exempt" if (offset, token) in exempt else "checked"
            for mutant in mutants(token):
                changed = text[:offset] + mutant + text[offset + len(token):]
                caught = bool(pn.check_text(changed, page, start, end + len(mutant) - len(token))[0])
                tally[kind] += 1
                tally[f"{kind}_caught"] += caught
    texts = {f.page: _read(f.page) for f in fragments}
    problems, exempt = pn.check_fragments(fragments, texts)
    assert problems == [], problems
    exempt = set(exempt)
    for page, offset, token in pn.fragment_spans(fragments, texts):
        kind = "exempt" if (page, offset, token) in exempt else "checked"
        tally = counts.setdefault(page, Counter())
        for mutant in mutants(token):
            changed = dict(texts, **{page: texts[page][:offset] + mutant + texts[page][offset + len(token):]})
            caught = bool(pn.check_fragments([f for f in fragments if f.page == page], changed)[0])
            tally[kind] += 1
            tally[f"{kind}_caught"] += caught
    return counts


# Scope mutations: a sentence relating two registered designs, or stray text, inserted after a
# heading of a page (never inside code); the scope and stray checkers must report each.
SCOPE_SENTENCES = ("{a}'s lead grows into {b}'s.", "{b}'s intervals contradict {a}'s values.",
                   "Balanced holds in `{b}` and is not detected in `{a}`.",
                   "The forced slips of {b} cause its larger lead over {a}.",
                   "| {a} | {b} | the gap changes the lead |")
STRAY_LINES = ("0.077 0.055", "-->", "+0.008 [-0.002, +0.018]")
DESIGN_PAIRS = (("demo-band", "strong-band"), ("loop-gap", "spread-room"))


def scope_mutants(text: str, headings: int = 3) -> list[str]:
    """The page with one scope sentence or one stray line inserted after one of its first
    `headings` headings (outside code)."""
    plain, at, spots = pn.prose(text), 0, []
    for line in plain.split("\n"):
        at += len(line) + 1
        if line.startswith("#") and len(spots) < headings:
            spots.append(at - 1)
    inserts = [f"\n\n{t.format(a=a, b=b)}\n" for t in SCOPE_SENTENCES for a, b in DESIGN_PAIRS]
    inserts += [f"\n\n{line}\n" for line in STRAY_LINES]
    return [text[:spot] + insert + text[spot:] for spot in spots for insert in inserts]


def count_scope(pages) -> dict:
    """{page: Counter(scope, scope_caught)} over every scope mutant of each page that passes as it is."""
    counts = {}
    for page in pages:
        text = _read(page)
        if pn.scope_problems(text, page) or pn.stray_problems(text, page):
            continue                                   # a page still to be fixed: nothing to mutate
        tally = counts.setdefault(page, Counter())
        for changed in scope_mutants(text):
            tally["scope"] += 1
            tally["scope_caught"] += bool(pn.scope_problems(changed, page) or pn.stray_problems(changed, page))
    return counts


# Selection and GPU mutations (issue 74): a sentence that quotes a result of strong-band's world
# without its selection, or says more ran on a GPU than the logs show, inserted after a heading.
SELECTION_SENTENCES = ("In `strong-band`'s world balanced's lead over token holds.",
                       "At gap 30 token - sequence is not detected.",
                       "`endless-band`'s last-accuracy primary holds.")
GPU_SENTENCES = ("The 7B preset fits an 80 GB GPU with room to spare.",
                 "`static` or `paged` samples the same tokens faster.",
                 "`python -m pytest tests/lab/test_gpu.py` on the H200: 3 passed.")


def count_claims(pages, headings: int = 3) -> dict:
    """{page: Counter(claims, claims_caught)} over every selection and GPU sentence inserted after
    one of a page's first `headings` headings, on each page that passes both checkers as it is."""
    counts = {}
    for page in pages:
        text = _read(page)
        if pn.selection_problems(text, page) or pn.gpu_claim_problems(text, page):
            continue                                   # a page still to be fixed: nothing to mutate
        plain, at, spots = pn.prose(text), 0, []
        for line in plain.split("\n"):
            at += len(line) + 1
            if line.startswith("#") and len(spots) < headings:
                spots.append(at - 1)
        tally = counts.setdefault(page, Counter())
        for spot in spots:
            for sentence in SELECTION_SENTENCES + GPU_SENTENCES:
                changed = text[:spot] + f"\n\n{sentence}\n" + text[spot:]
                tally["claims"] += 1
                tally["claims_caught"] += bool(pn.selection_problems(changed, page) or
                                               pn.gpu_claim_problems(changed, page))
    return counts


def main() -> int:
    from test_page_numbers import FRAGMENTS, SCOPE_PAGES, anchored_pages
    scope = count_scope(SCOPE_PAGES)
    for page, tally in scope.items():
        print(f"{page}: {tally['scope_caught']} of {tally['scope']} scope and stray insertions caught")
    counts = count(anchored_pages(), FRAGMENTS)
    total = Counter()
    for page, tally in counts.items():
        total.update(tally)
        print(f"{page}: {tally['checked_caught']} of {tally['checked']} changes caught; "
              f"{tally['exempt']} changes to tokens from no report ({tally['exempt_caught']} caught)")
    print(f"all pages: {total['checked_caught']} of {total['checked']} changes caught; "
          f"{total['exempt']} changes to tokens from no report ({total['exempt_caught']} caught)")
    scope_missed = sum(t["scope"] - t["scope_caught"] for t in scope.values())
    claims = count_claims(SCOPE_PAGES)
    claims_missed = sum(t["claims"] - t["claims_caught"] for t in claims.values())
    print(f"selection and GPU sentences: {sum(t['claims_caught'] for t in claims.values())} of "
          f"{sum(t['claims'] for t in claims.values())} insertions caught on {len(claims)} pages")
    return 0 if total["checked_caught"] == total["checked"] and not scope_missed and not claims_missed else 1


if __name__ == "__main__":
    raise SystemExit(main())
