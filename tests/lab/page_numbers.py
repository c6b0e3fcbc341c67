"""Every number and verdict word a page states is read from its report at its own row and
column, or computed, never merely found somewhere in the report.

A page marks what it states with anchors, HTML comments that render as nothing. The tokens of
the text since the previous anchor (numbers such as 0.039, +0.039, 36% or 1/2, and the verdict
words holds, contradicted, not detected) belong to the next anchor, in order:

    balanced ends +0.039 ahead of sequence (holds). <!-- check: band | balanced - sequence /
    last held-out acc | pooled#1, against 0 -->

A reference is `SOURCE | ROW | COLUMN[, COLUMN ...]`: a report's row (its key cells joined by
' / ') and columns, each standing for the cell's tokens; `#k` picks the k-th, and where a `*`
in ROW matches several rows `#min` / `#max` reduce their first tokens (`#min*` / `#max*`: every
token). Derived columns read a verdict cell: `against 0` (holds, or not detected with what
could have been seen) and `earlier` (contradicted, with the earlier value). A reference may
also be `= EXPRESSION` (computed with grpo_ba's and paired_stats' functions: worked examples,
counts over a report) or `- why` (one token from no report: counted apart, not checked).
References are separated by `;`.

A table is anchored whole, on the line before it:

    <!-- check-table: band | 0, =last held-out acc | -, pooled, native-1t, default-1t, against 0 -->

names its source, how a row's key is made (cells by position, or a constant after `=`) and the
report column of each of its columns: `-` unchecked, `- why` from no report, `NAME@` a report
whose rows are the page's columns (the header names the row's last key part), or `*` for "the
page's own headers". `<!-- check-table: - why -->` marks a whole table as from no report.
Text a page's owners keep free of anchors (docs/method.md, docs/teaching.md) is checked through
`Fragment`s kept in the test: a passage found by its words, whose tokens may change and are
then compared.

Sources: band (assets/demo-band-v3/consequences.md), probe (assets/stability-probe/probe.md),
strong (assets/strong-band-v3/consequences.md), pilot (assets/strong-coupling-pilot/pilot.md),
v1-table (assets/table.md), v1-paired (assets/paired_differences.md), regime
(assets/regime-v3/regime.md), regime-v4 (assets/regime-v4/regime.md), long
(assets/long-horizon/long-horizon.md), endless (assets/endless-band-v3/consequences.md), map
(assets/regime_map.md, version 1's regime map, rows "gap / spread") and demo
(assets/demo-seed22/demo.log: the table `python grpo_ba.py` printed, read by `parse_demo_log`)."""
from __future__ import annotations

import bisect
import fnmatch
import functools
import os
import re
from dataclasses import dataclass

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCES = {"band": "assets/demo-band-v3/consequences.md", "probe": "assets/stability-probe/probe.md",
           "strong": "assets/strong-band-v3/consequences.md", "pilot": "assets/strong-coupling-pilot/pilot.md",
           "v1-table": "assets/table.md", "v1-paired": "assets/paired_differences.md",
           "regime": "assets/regime-v3/regime.md", "regime-v4": "assets/regime-v4/regime.md", "long": "assets/long-horizon/long-horizon.md",
           "endless": "assets/endless-band-v3/consequences.md", "demo": "assets/demo-seed22/demo.log",
           "map": "assets/regime_map.md"}

# a verdict word | a count such as 1/2 | a decimal number, its sign, a percent sign. Version
# strings (2.13.0), model names (Qwen2.5) and ranges' second ends (0.97-0.99) are not signed.
TOKEN = re.compile(r"(?P<word>\bnot\s+detected\b|\bcontradict(?:ed|s)?\b|\bholds?\b)"
                   r"|(?P<count>(?<![\w./])\d+/\d+(?![\w./])|(?<![\w.])\d+ of (?:its |the )?\d+\b)"
                   r"|(?P<number>(?:(?<![\w.)\]])[+-])?(?<![\w.])(?:\d+\.\d+(?!\.\d)(?!\d)%?|\d+%)(?!\w)"
                   r"(?!\s+power\b))")
ANCHOR = re.compile(r"<!--\s*check(?P<table>-table)?:(?P<body>.*?)-->", re.S)
CODE_SPAN = re.compile(r"`[^`\n]*`")
COMMAND_LINE = re.compile(r"^ {4,}(?:python|nice|--|\S+ --)", re.M)
# gap_size / spread_size: the version-1 regime map's cells ("18 / 0")
KEY_HEADERS = {"seed", "variant", "pair", "metric", "rule", "regime", "setting", "label", "world", "row", "level",
               "gap_size", "spread_size"}


def _normal_word(word: str) -> str:
    word = " ".join(word.split())
    return {"hold": "holds", "contradicts": "contradicted", "contradict": "contradicted"}.get(word, word)


def _normal_count(count: str) -> str:
    """'8 of its 14' -> '8/14'."""
    return re.sub(r"\s+of\s+(?:its\s+|the\s+)?", "/", count)


def tokens(text: str) -> list[tuple[int, int, str]]:
    """[(start, end, token)] of `text` outside code spans and command lines."""
    return list(_tokens(text))


@functools.lru_cache(maxsize=4096)          # the mutation tests ask for the same texts thousands of times
def _tokens(text: str) -> tuple[tuple[int, int, str], ...]:
    hidden = [m.span() for m in CODE_SPAN.finditer(text)]
    hidden += [(m.start(), text.find("\n", m.start()) % (len(text) + 1)) for m in COMMAND_LINE.finditer(text)]
    merged = []                                  # the hidden spans as disjoint [a, b), in order
    for a, b in sorted(hidden):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        elif a < b:
            merged.append([a, b])
    starts = [a for a, _ in merged]
    found = []
    for m in TOKEN.finditer(text):
        k = bisect.bisect_right(starts, m.start()) - 1           # the last span starting at or before it
        if k < 0 or m.start() >= merged[k][1]:
            found.append((m.start(), m.end(), m.group()))
    return tuple(found)


# ------------------------------------------------------------------ the reports, row by row

def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _header_name(header: str) -> str:
    """A column's name without what the report adds to it ('pooled mean [95% interval]' ->
    'pooled', 'native-1t: own [95% interval]' -> 'native-1t', 'x (mean; per seed)' -> 'x')."""
    name = re.sub(r"\s*\((?:mean; per seed)\)$", "", header)
    name = re.sub(r"(?:\s*mean)?\s*\[95% interval\]$", "", name).removesuffix(":").strip()
    name = re.sub(r": own$", "", name)
    return {"mean difference": "difference"}.get(name, name)


def parse_report(text: str) -> dict:
    """{row key: {column: cell text}}: every table row (key: its leading key columns joined by
    ' / '), and the lines a report writes outside tables (step 0, the primaries' spread, the
    probe's counts of falls, the long-horizon probe's counts of collapses)."""
    rows, header = {}, None
    for line in text.splitlines():
        if not line.startswith("|"):
            header = None
            _parse_line(line, rows)
            continue
        cells = _cells(line)
        if set(line) <= set("|-: "):
            continue
        if header is None:
            header = [_header_name(c) for c in cells]
            continue
        n_keys = next((i for i, h in enumerate(header) if h not in KEY_HEADERS or h == "label"), len(header))
        key = " / ".join(cells[:n_keys])
        n = 1
        while key + (f" #{n}" if n > 1 else "") in rows:    # a key's later tables: "none #2", "none #3"
            n += 1
        rows[key + (f" #{n}" if n > 1 else "")] = dict(zip(header, cells))
    return rows


def _parse_line(line: str, rows: dict):
    step0 = re.match(r"Step 0: greedy held-out accuracy (\S+), wrong/right (\S+) \(right (\S+), wrong (\S+) "
                     r"tokens\), std/mean (\S+), sampled reward (\S+) ", line)
    if step0:
        rows["step 0"] = dict(zip(("accuracy", "wrong/right", "right", "wrong", "std/mean", "reward"),
                                  (g.rstrip(",") for g in step0.groups())))
    spread = re.match(r"- (.+), last held-out acc: sd (\S+) pooled, (\S+) on native-1t, (\S+) on default-1t; "
                      r"the whole rule detects (\S+) at", line)
    if spread:
        rows[f"sd / {spread.group(1)}"] = dict(zip(("pooled", "native-1t", "default-1t", "detects"),
                                                   spread.groups()[1:]))
    falls = re.match(r"- (\S+) \(.*\): token (\d+/\d+), sequence (\d+/\d+), balanced (\d+/\d+)$", line)
    if falls:
        rows[f"falls / {falls.group(1)}"] = dict(zip(("token", "sequence", "balanced"), falls.groups()[1:]))
    collapses = re.match(r"- (\S+) \(.*\): token (\d+/\d+), sequence (\d+/\d+), balanced (\d+/\d+); "
                         r"move-on rule (met|not met)$", line)
    if collapses:                                              # the long-horizon probe's counts
        rows[f"collapses / {collapses.group(1)}"] = dict(zip(("token", "sequence", "balanced", "move-on"),
                                                             collapses.groups()[1:]))


DEMO_CELL = 15                  # grpo_ba_plots.story's cell width
DEMO_TABLE = re.compile(r"^What each rule did \(.*\):\n(?P<header>.*)\n(?P<rows>(?:.+\n)+)", re.M)
DEMO_WORLD = re.compile(r"The world: the environment starts (?P<forced>\S+) of the responses.*?"
                        r"wrong/right length at step 0 is (?P<ratio>[\d.]+)", re.S)


def parse_demo_log(text: str) -> dict:
    """{row label: {rule: cell}} of the table `python grpo_ba.py` prints (grpo_ba_plots.story:
    a label, then one right-aligned cell of DEMO_CELL characters per rule; a cell may hold single
    spaces, '0.455 -> 0.671'), and the world's line as the row 'world' (forced: the share of
    responses started with a slip; wrong/right: the wrong/right length ratio at step 0)."""
    table = DEMO_TABLE.search(text)
    if not table:
        raise ValueError("no 'What each rule did' table in the demo's log")
    rules = table.group("header").split()
    width = DEMO_CELL * len(rules)
    rows = {}
    for line in table.group("rows").splitlines():
        label, cells = line[:-width], line[-width:]
        if not label.strip() or any(not cells[k:k + DEMO_CELL].startswith(" ") for k in range(0, width, DEMO_CELL)):
            raise ValueError(f"demo log row {line!r}: not a label and {len(rules)} cells of {DEMO_CELL} characters")
        rows[label.strip()] = {rule: cells[k * DEMO_CELL:(k + 1) * DEMO_CELL].strip() for k, rule in enumerate(rules)}
    world = DEMO_WORLD.search(text)
    if world:
        rows["world"] = {"forced": world.group("forced"), "wrong/right": world.group("ratio")}
    return rows


def against_zero(verdict_cell: str) -> str:
    """The verdict against 0 a verdict cell gives, then what it could have seen: 'holds' or
    'not detected; differences of X ...' ('contradicted' only when it holds with the other sign)."""
    if verdict_cell.startswith("holds"):
        return "holds"
    if verdict_cell.startswith("no verdict"):      # a failed manipulation check withholds it
        return "no verdict"
    if verdict_cell.startswith("identical by construction"):      # equal by formula: no test
        return "identical by construction"
    detectable = re.search(r"differences of (\S+) or more", verdict_cell)
    if "not detected" in verdict_cell:
        return f"not detected; differences of {detectable.group(1)} or more" if detectable else "not detected"
    return "contradicted"


def unregistered_against_zero(row: dict) -> str:
    """A version-1 interval (one warm-up, no machine variants) never holds: 'not detected;
    differences of X or more' where it contains 0 (X from its own width, as `python -m
    grpo_ba_lab.analysis.paired_stats --interval LOW HIGH --seeds N` prints it), and no verdict
    word where it excludes 0 (the page says exploratory)."""
    from grpo_ba_lab.analysis import paired_stats
    if row["interval excludes 0"] == "yes":
        return ""
    low, high = (float(t) for _, _, t in tokens(row["difference"])[1:3])
    n = int(row["seeds"])
    detectable = paired_stats.detectable_difference(paired_stats.sd_from_interval(low, high, n), n)
    return f"not detected; differences of {detectable:.3f} or more"


def earlier_value(verdict_cell: str) -> str:
    """'outside the interval: X' when the cell's second statement (not its verdict) says the
    pooled interval excludes an earlier value X ("Not a verdict: the pooled interval excludes
    ... value X"; reports before 2026-12-03: "contradicts ... X (it lies outside the
    interval)"), else ''. A page says it without a verdict word: the excluded value is a
    description, never a verdict."""
    earlier = re.search(r"interval excludes .*?value ([+-]\d+\.\d+)", verdict_cell)
    if not earlier and "outside" in verdict_cell:
        earlier = re.search(r"(?:the earlier|value) ([+-]\d+\.\d+)", verdict_cell)
    return f"outside the interval: {earlier.group(1)}" if earlier else ""


_REPORTS: dict = {}
_COMPUTED: dict = {}


def report(source: str) -> dict:
    if source not in _REPORTS:
        with open(os.path.join(REPO, SOURCES[source])) as f:
            _REPORTS[source] = (parse_demo_log if source == "demo" else parse_report)(f.read())
    return _REPORTS[source]


def cell(source: str, row: str, column: str) -> str:
    """One cell of a report; the derived columns 'against 0' and 'earlier' read a verdict."""
    rows = report(source)
    if row not in rows:
        raise KeyError(f"{source} has no row {row!r}")
    if column in ("against 0", "earlier") and "verdict" in rows[row]:
        return (against_zero if column == "against 0" else earlier_value)(rows[row]["verdict"])
    if column == "against 0" and "interval excludes 0" in rows[row]:      # version 1: 5 seeds, one warm-up
        return unregistered_against_zero(rows[row])
    if column not in rows[row]:
        raise KeyError(f"{source} row {row!r} has no column {column!r} (it has {sorted(rows[row])})")
    return rows[row][column]


def expected_tokens(reference: str) -> list[str] | None:
    """The tokens one reference stands for (None: '-', a token from no report)."""
    reference = reference.strip()
    if reference.startswith("-"):
        return None
    if reference.startswith("="):
        if reference not in _COMPUTED:                              # the page's own worked examples
            _COMPUTED[reference] = eval(reference[1:], computed_namespace())
        value = _COMPUTED[reference]
        return [v if isinstance(v, str) else repr(float(v))
                for v in (value if isinstance(value, (list, tuple)) else [value])]
    source, row, columns = (part.strip() for part in reference.split("|"))
    out = []
    for column in _columns(source, row, columns):
        out += column_tokens(source, row, column)
    return out


def _columns(source: str, row: str, columns: str) -> list[str]:
    """'pooled#1, against 0' -> ['pooled#1', 'against 0']; a column whose own name has a comma
    ('sampled reward, last 10%') is one column."""
    names, pending = [], ""
    known = set().union(*(r.keys() for k, r in report(source).items() if fnmatch.fnmatchcase(k, row)))
    known |= {"against 0", "earlier"}
    for piece in columns.split(","):
        pending = f"{pending},{piece}" if pending else piece.strip()
        if pending.partition("#")[0].strip() in known:
            names.append(pending.strip())
            pending = ""
    if pending:
        names.append(pending.strip())                  # unknown: column_tokens says so
    return names


def column_tokens(source: str, row: str, column: str) -> list[str]:
    """The tokens of one report column at one row (`#k`: the k-th; `#min` / `#max` over the
    rows a `*` in `row` matches, `#min*` / `#max*` over every token of those cells)."""
    name, _, pick = column.partition("#")
    if "*" in row:                                  # #min / #max over rows; #min* over every token
        values = [float(t.rstrip("%")) for r in report(source)
                  if fnmatch.fnmatchcase(r, row) and name in report(source)[r]
                  for _, _, t in tokens(cell(source, r, name))[:None if pick.endswith("*") else 1]]
        if not values:
            raise KeyError(f"{source}: no row matches {row!r} with a column {name!r}")
        return [repr({"min": min, "max": max}[pick.rstrip("*")](values))]
    found = [t for _, _, t in tokens(cell(source, row, name))]
    return found if not pick else [found[int(pick) - 1]]


def computed_namespace() -> dict:
    import math

    import torch

    import grpo_ba
    from grpo_ba_lab.analysis import paired_stats
    return {"math": math, "torch": torch, "grpo_ba": grpo_ba, "paired_stats": paired_stats,
            "group": worked_group, "sign_lengths": sign_lengths, "pooling": pooling, "falls": probe_falls, "peaks_at_step_0": probe_peaks_at_step_0,
            "HIGH_LR": HIGH_LR, "holding": band_rows_holding, "ACCURACY": ACCURACY}


ACCURACY = ("last held-out acc", "peak held-out acc", "peak-to-last drop", "mean of the last 5 evals",
            "area under the acc curve (mean acc)")


def band_rows_holding(label: str, metrics=ACCURACY, verdict: str = "holds") -> tuple[str, str]:
    """('n/m', verdict): of demo-band's m rows with this label and one of these metrics, the n
    whose verdict against 0 is `verdict` (the page states the count, then the word)."""
    rows = [r for r in report("band").values() if r.get("label") == label and r.get("metric") in metrics]
    return f"{sum(against_zero(r['verdict']).startswith(verdict) for r in rows)}/{len(rows)}", verdict


HIGH_LR = ("cap-keep", "cap-mask", "hot-keep", "hot-mask", "tilde-hot-keep")   # lr 3e-4 or more


def _probe_runs(rule=None, settings=None) -> list[dict]:
    return [row for key, row in report("probe").items() if key.count(" / ") == 2
            and (rule is None or row["rule"] == rule) and (settings is None or row["setting"] in settings)]


def probe_falls(rule=None, settings=None) -> str:
    """'n/m': of the probe's m runs (of a rule, of some settings), the n whose drop exceeds 0.1."""
    runs = _probe_runs(rule, settings)
    return f"{sum(float(r['drop']) > 0.1 for r in runs)}/{len(runs)}"


def probe_peaks_at_step_0(rule=None, settings=None) -> str:
    """'n/m': of the probe's m runs, the n whose peak is their step-0 accuracy."""
    runs = _probe_runs(rule, settings)
    return f"{sum(r['peak'] == r['step-0 acc'] for r in runs)}/{len(runs)}"


def sign_lengths(rewards, lengths) -> tuple[float, float]:
    """(Lbar+, Lbar-): the mean length of the responses grpo_ba's advantages make positive and
    negative."""
    import torch

    import grpo_ba
    advantages = grpo_ba.group_advantages(torch.tensor(rewards, dtype=torch.float64), len(rewards))
    positive = [n for n, a in zip(lengths, advantages) if a > 0]
    negative = [n for n, a in zip(lengths, advantages) if a < 0]
    return sum(positive) / len(positive), sum(negative) / len(negative)


def pooling(rewards, lengths, group_size: int) -> dict:
    """docs/method.md §5's batch through grpo_ba's own functions: the token mean per group and
    pooled (J, each group's J, a token's |c_it| in each group, the last group's share of the
    token weight)."""
    import torch

    import grpo_ba
    mask = grpo_ba.mask_from_lengths(torch.tensor(lengths))
    advantages = grpo_ba.group_advantages(torch.tensor(rewards, dtype=torch.float32), group_size)
    loss = grpo_ba.clipped_token_loss(torch.zeros(mask.shape), torch.zeros(mask.shape), advantages, mask)
    out = {}
    for name, size in (("per group", group_size), ("pooled", len(rewards))):
        weights = grpo_ba.token_weights(mask, advantages, size, "token").abs()        # (B, T)
        firsts = [weights[g * group_size, 0].item() for g in range(len(rewards) // group_size)]
        out[name] = {"J": grpo_ba.aggregate_token(loss, mask, advantages, size).item(), "c": firsts,
                     "share": (weights[-group_size:].sum() / weights.sum()).item()}
    out["groups"] = [grpo_ba.aggregate_token(loss[g:g + group_size], mask[g:g + group_size],
                                             advantages[g:g + group_size], group_size).item()
                     for g in range(0, len(rewards), group_size)]
    return out


def worked_group(rewards, lengths, aggregator: str):
    """(J at ratio 1, W+, W-) of one group through grpo_ba's own functions (on-policy, so the
    token loss is -A_i at every token): docs/method.md §3's worked example and the explorable's."""
    import torch

    import grpo_ba
    g = len(rewards)
    advantages = grpo_ba.group_advantages(torch.tensor(rewards, dtype=torch.float64), g)
    mask = torch.zeros(g, max(lengths), dtype=torch.float64)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
    aggregate = getattr(grpo_ba, f"aggregate_{aggregator}")
    loss = aggregate(-advantages[:, None] * mask, mask, advantages, g)
    w_pos, w_neg = grpo_ba.sign_weights(mask, advantages, g, aggregator)
    return float(loss), float(w_pos), float(w_neg)


# ------------------------------------------------------------------ comparing a page's token

def same(stated: str, expected: str) -> bool:
    """Does a page's token say what the report's (or the computation's) does, to the page's
    own precision? A number without a sign may state a magnitude; a signed one, its sign too."""
    stated_word, expected_word = TOKEN.fullmatch(stated), TOKEN.fullmatch(expected)
    if stated_word and stated_word.group("word"):
        return bool(expected_word and expected_word.group("word")) and \
            _normal_word(stated) == _normal_word(expected)
    if TOKEN.fullmatch(stated).group("count"):
        numerator, denominator = (int(n) for n in _normal_count(stated).split("/"))
        if TOKEN.fullmatch(expected) and TOKEN.fullmatch(expected).group("count"):
            return _normal_count(stated) == _normal_count(expected)
        try:                                             # a fraction for a computed value
            return abs(numerator / denominator - float(expected)) < 1e-4
        except (ValueError, ZeroDivisionError):
            return False
    try:
        value = float(expected)
    except ValueError:
        return False
    digits = stated.lstrip("+-").rstrip("%")
    decimals = len(digits.split(".")[1]) if "." in digits else 0
    scale = 100.0 if stated.endswith("%") else 1.0
    if f"{abs(value) * scale:.{decimals}f}" != digits:
        return False
    if stated[0] in "+-" and value != 0 and (stated[0] == "-") != (value < 0):
        return False
    return not (stated[0] in "+-" and value == 0 and expected[:1] in "+-" and stated[0] != expected[0])


# ------------------------------------------------------------------ checking a page

@dataclass
class Fragment:
    """A passage of a page this project does not anchor, with the references of its tokens."""
    page: str
    text: str
    references: str


def _compare(where: str, stated: list, references, problems: list, exempt: list):
    """Compare the stated tokens [(offset, token)] with what `references` stand for, in order;
    a '-' reference's token goes to `exempt`."""
    expected = []
    for reference in references.split(";") if isinstance(references, str) else [references]:
        try:
            tokens_for = expected_tokens(reference) if isinstance(reference, str) else column_tokens(*reference)
        except (KeyError, IndexError, ValueError) as err:
            problems.append(f"{where}: reference {str(reference).strip()!r}: {err}")
            return
        expected += [None] if tokens_for is None else tokens_for
    said = [t for _, t in stated]
    if len(stated) != len(expected):
        problems.append(f"{where}: {len(stated)} tokens {said} but {len(expected)} references {expected}")
        return
    for (offset, token), meant in zip(stated, expected):
        if meant is None:
            exempt.append((offset, token))
        elif not same(token, meant):
            problems.append(f"{where}: states {token!r} where its reference reads {meant!r}")


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def check_text(text: str, name: str, start: int = 0, end: int | None = None):
    """(problems, exempt [(offset, token)]) of the anchored region text[start:end]."""
    end = len(text) if end is None else end
    problems, exempt = [], []
    anchors = [m for m in ANCHOR.finditer(text) if start <= m.start() < end]
    found = [(s, t) for s, _, t in tokens(text[:end]) if s >= start
             and not any(a.start() <= s < a.end() for a in anchors)]
    previous, tables = start, []                      # tables: (start, end) of anchored tables
    for anchor in anchors:
        if anchor.group("table"):
            tables.append((anchor.start(), _check_table(text, anchor, name, problems, exempt)))
            continue
        segment = [(s, t) for s, t in found if previous <= s < anchor.start()
                   and not any(a <= s < b for a, b in tables)]
        _compare(f"{name} line {_line_of(text, anchor.start())}", segment, anchor.group("body"), problems, exempt)
        previous = anchor.end()
    rest = [(s, t) for s, t in found if s >= previous and not any(a <= s < b for a, b in tables)]
    if rest:
        problems.append(f"{name} line {_line_of(text, rest[0][0])}: {[t for _, t in rest]} follow the last "
                        f"anchor: every number and verdict word needs one")
    return problems, exempt


def region_tokens(text: str, start: int = 0, end: int | None = None) -> list[tuple[int, str]]:
    """[(offset, token)] of every token check_text reads in text[start:end] (anchors excluded)."""
    end = len(text) if end is None else end
    anchors = [m for m in ANCHOR.finditer(text) if start <= m.start() < end]
    return [(s, t) for s, _, t in tokens(text[:end]) if s >= start
            and not any(a.start() <= s < a.end() for a in anchors)]


def _cell_spans(line: str, offset: int) -> list[tuple[str, int]]:
    """[(cell text, its offset in the page)] of one table line."""
    spans, at = [], offset
    body = line.rstrip("\n")
    bars = [i for i, c in enumerate(body) if c == "|"]
    for left, right in zip(bars, bars[1:]):
        raw = body[left + 1:right]
        spans.append((raw.strip(), at + left + 1 + len(raw) - len(raw.lstrip())))
    return spans


def _check_table(text, anchor, name, problems, exempt) -> int:
    """Check the table after a check-table anchor; returns where the table ends."""
    parts = [p.strip() for p in anchor.group("body").split("|")]
    lines, at = [], anchor.end()
    while text.startswith("\n", at):
        at += 1
    while text.startswith("|", at):
        line_end = text.find("\n", at)
        line_end = len(text) if line_end < 0 else line_end + 1
        lines.append((text[at:line_end], at))
        at = line_end
    rows = [_cell_spans(line, offset) for line, offset in lines if not set(line.strip()) <= set("|-: ")]
    header, rows = [c for c, _ in rows[0]], rows[1:]
    if parts[0].startswith("-"):
        exempt += [(o + s, t) for row in rows for c, o in row for s, _, t in tokens(c)]
        return at
    source, key_spec, column_spec = parts
    headers = [_header_name(c) for c in header]
    columns = headers if column_spec == "*" else [c.strip() for c in column_spec.split(",")]
    for row in rows:
        where = f"{name} line {_line_of(text, row[0][1])}"
        if len(row) != len(columns):
            problems.append(f"{where}: {len(row)} cells, the anchor names {len(columns)} columns")
            continue
        key = " / ".join(k[1:] if k.startswith("=") else row[int(k)][0] for k in
                         (k.strip() for k in key_spec.split(",")))
        for (value, offset), column, head in zip(row, columns, headers):
            stated = [(offset + s, t) for s, _, t in tokens(value)]
            if column == "-":
                continue
            if column.startswith("- "):
                exempt += stated
                continue
            row_key = key
            if column.endswith("@"):             # a pivoted report: the header names the row's metric
                row_key, column = f"{key} / {head}", column[:-1]
            _compare(f"{where} ({column})", stated, (source, row_key, column), problems, exempt)
    return at


def check_fragments(fragments: list, texts: dict) -> tuple[list, list]:
    """(problems, exempt [(page, offset, token)]) of passages of pages found by their words,
    whatever their tokens say now; a passage no longer found is a problem too."""
    problems, exempt = [], []
    for fragment in fragments:
        match = fragment_pattern(fragment.text).search(texts[fragment.page])
        if not match:
            problems.append(f"{fragment.page}: passage not found: {fragment.text[:60]!r}...")
            continue
        stated = [(match.start() + s, t) for s, _, t in tokens(match.group())]
        found = []
        _compare(f"{fragment.page} line {_line_of(texts[fragment.page], match.start())}", stated,
                 fragment.references, problems, found)
        exempt += [(fragment.page, o, t) for o, t in found]
    return problems, exempt


def fragment_spans(fragments: list, texts: dict) -> list[tuple[str, int, str]]:
    """[(page, offset, token)] of every token the fragments read."""
    out = []
    for fragment in fragments:
        match = fragment_pattern(fragment.text).search(texts[fragment.page])
        if match:
            out += [(fragment.page, match.start() + s, t) for s, _, t in tokens(match.group())]
    return out


def fragment_pattern(text: str):
    """The passage as a pattern in which each token may be any token of its kind, and any run
    of white space any other."""
    pieces, last = [], 0
    for start, end, token in tokens(text):
        pieces.append(re.escape(text[last:start]))
        kind = TOKEN.fullmatch(token).lastgroup
        pieces.append({"word": r"(?:not\s+detected|contradict(?:ed|s)?|holds?)",
                       "count": r"(?:\d+/\d+|\d+\s+of\s+(?:its\s+|the\s+)?\d+)",
                       "number": r"[+-]?(?:\d+\.\d+%?|\d+%)"}[kind])
        last = end
    pieces.append(re.escape(text[last:]))
    return re.compile(re.sub(r"(\\\s|\\\n| )+", r"\\s+", "".join(pieces)))


def section(text: str, heading: str) -> tuple[int, int]:
    """(start, end) of the section under `heading` up to the next heading of its level or above."""
    start = text.index(heading)
    level = len(heading) - len(heading.lstrip("#"))
    following = re.compile(r"^#{1,%d} " % level, re.M)
    after = following.search(text, start + len(heading))
    return start, after.start() if after else len(text)


# ------------------------------------------------------------------ scope: what a sentence may say

# A sentence that names two registered designs (grpo_ba_lab/designs.py's DESIGNS, by name or by
# the report its anchored tokens come from) describes two separate designs: it states no verdict
# word, causal or change verb, or "contradicts" between them, unless a registration compared
# them (REGISTERED_COMPARISONS: frozensets of design names; none yet). Each design's verdict is
# said in a sentence of its own. A table row may give each design's own verdict in its own
# column, but no relation between them.
VERDICT_WORDS = re.compile(r"\b(?:holds?|not\s+detected)\b", re.I)
RELATION_WORDS = re.compile(
    r"\b(?:contradict(?:s|ed|ing)?|grows?|grew|grown|growing|shrinks?|shrank|causes?|caused|causing|"
    r"because|changes?|changed|changing|drives?|drove|driven|driving|leads?\s+to|led\s+to|due\s+to|"
    r"explains?|explained|results?\s+in|turns?\s+into)\b", re.I)
REGISTERED_COMPARISONS: set = set()
SOURCE_DESIGNS = {"band": "demo-band", "strong": "strong-band", "regime": "regime-v3", "regime-v4": "regime-v4"}   # a report's design
# "would have been seen" names the power it was computed at, in the same sentence
SEEN = re.compile(r"would\s+have\s+been\s+seen")
AT_POWER = re.compile(r"would\s+have\s+been\s+seen\s+at\s+80%\s+power")
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_BOUNDARY = re.compile(r"[.!?][\"')\]*]*\s+(?=[A-Z\[(*`\"_])")
_UNIT_START = re.compile(r"^(?:\||#{1,6} |\s*[-*] |\s*\d+\. )")


def design_names() -> list[str]:
    """The registered designs' names, longest first (so that `demo-band` is not read as `demo`)."""
    from grpo_ba_lab.designs import DESIGNS
    return sorted(DESIGNS, key=len, reverse=True)


def _name_pattern(names) -> re.Pattern:
    """A hyphenated name anywhere as a whole word (not inside a path such as strong-band-v3/);
    a one-word name ('demo') only as `demo` or 'design demo', where it cannot be the common word."""
    parts = []
    for name in names:
        if "-" in name:
            parts.append(rf"(?<![\w/-]){re.escape(name)}(?![\w-])")
        else:
            parts.append(rf"(?<=`){re.escape(name)}(?=`)|(?<=\bdesign ){re.escape(name)}\b")
    return re.compile("|".join(f"(?:{p})" for p in parts), re.I)


def prose(text: str) -> str:
    """`text` with HTML comments and code blocks (fenced, or indented 4 spaces after a blank line)
    blanked out, every offset and line kept."""
    text = _COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), text)
    lines, out, fenced, code = text.split("\n"), [], False, False
    for i, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            out.append(" " * len(line))
            continue
        previous = lines[i - 1] if i else ""
        code = line.startswith("    ") and line.strip() != "" and (previous.strip() == "" or code)
        out.append(" " * len(line) if fenced or code else line)
    return "\n".join(out)


def sentences(text: str) -> list[tuple[int, int, str]]:
    """[(start, end, sentence)] of a page's prose: paragraphs, list items, headings and table
    rows are units, and units split after '.', '!' or '?' before a capital."""
    plain, units, start, at = prose(text), [], None, 0
    for line in plain.split("\n") + [""]:
        if not line.strip() or _UNIT_START.match(line):
            if start is not None:
                units.append((start, at))
            start = at if line.strip() else None
        elif start is None:
            start = at
        if line.startswith("|"):
            units.append((at, at + len(line)))
            start = None
        at += len(line) + 1
    out = []
    for begin, end in units:
        last = begin
        for m in _BOUNDARY.finditer(plain, begin, end):
            out.append((last, m.end()))
            last = m.end()
        out.append((last, end))
    return [(a, b, " ".join(plain[a:b].split())) for a, b in out if plain[a:b].strip()]


def token_sources(text: str) -> dict:
    """{offset: report source} of every anchored token read from a report (band, strong, ...),
    matched to its reference in order as check_text matches them."""
    sources, previous, tables = {}, 0, []
    found = region_tokens(text)
    for anchor in ANCHOR.finditer(text):
        body = anchor.group("body")
        if anchor.group("table"):
            at = anchor.end()
            while text.startswith("\n", at):
                at += 1
            while text.startswith("|", at):
                at = (text.find("\n", at) + 1) or len(text)
            source = body.split("|")[0].strip()
            sources.update({s: source for s, _ in found if anchor.end() <= s < at and not source.startswith("-")})
            tables.append((anchor.start(), at))
            continue
        segment = [s for s, _ in found if previous <= s < anchor.start() and not any(a <= s < b for a, b in tables)]
        refs = []
        for reference in body.split(";"):
            reference = reference.strip()
            try:
                n = 1 if reference.startswith("-") else len(expected_tokens(reference))
            except (KeyError, IndexError, ValueError, SyntaxError, NameError):
                n = 1
            source = None if reference[:1] in "-=" else reference.split("|")[0].strip()
            refs += [source] * n
        sources.update({s: src for s, src in zip(segment, refs) if src})
        previous = anchor.end()
    return sources


def scope_problems(text: str, name: str, names=None) -> list[str]:
    """Sentences of a page that say more than one design shows: a verdict word, causal or change
    verb, or 'contradicts' in a sentence naming two registered designs that no registration
    compared (a table row: no relation word); a 'would have been seen' without the power it was
    computed at."""
    pattern, problems = _name_pattern(names or design_names()), []
    sources = sorted(token_sources(text).items())
    for start, end, sentence in sentences(text):
        where = f"{name} line {_line_of(text, start)}"
        named = {m.group().lower() for m in pattern.finditer(sentence)}
        named |= {SOURCE_DESIGNS[src] for at, src in sources if start <= at < end and src in SOURCE_DESIGNS}
        words = [RELATION_WORDS] + ([] if sentence.startswith("|") else [VERDICT_WORDS])
        word = next((m for m in (w.search(sentence) for w in words) if m), None)
        if len(named) >= 2 and word and frozenset(named) not in REGISTERED_COMPARISONS:
            problems.append(f"{where}: a sentence names {sorted(named)} and says {word.group()!r} between "
                            f"them, a comparison no design registered: {sentence[:100]!r}")
        if len(SEEN.findall(sentence)) != len(AT_POWER.findall(sentence)):
            problems.append(f"{where}: 'would have been seen' without 'at 80% power': {sentence[:100]!r}")
    return problems


STRAY = re.compile(r"^[\s\d.,;:+\-/%()\[\]=x*]*\d[\s\d.,;:+\-/%()\[\]=x*]*$")


def stray_problems(text: str, name: str) -> list[str]:
    """Text a page renders by mistake: a line of bare numbers that starts a paragraph (after a
    blank line, a comment or a table; not a wrapped line of a sentence) outside code, or what is
    left of an HTML comment ('-->' or an unclosed '<!--')."""
    problems = []
    if text.count("<!--") != text.count("-->"):
        problems.append(f"{name}: {text.count('<!--')} '<!--' but {text.count('-->')} '-->'")
    previous = ""
    for number, line in enumerate(prose(text).split("\n"), 1):
        starts = not previous.strip() or previous.startswith("|")
        if (STRAY.match(line) and starts and not line.startswith("|")) or "-->" in line or "<!--" in line:
            problems.append(f"{name} line {number}: stray text {line.strip()[:60]!r}")
        previous = line
    return problems


# ------------------------------------------------------------------ selection: strong-band's world

# strong-band's world (the coupling pilot's `gap30-force50`) was chosen after its pilot's
# accuracies were seen (docs/strong-coupling.md, "How the world was chosen, as it happened").
# strong-band, endless-band, regime-v3's and regime-v4's strong level (gap 30), the long-horizon
# probe and the demo all run it, so they are one world, and wherever a page quotes a result of
# that world, the same paragraph or table (or the paragraph that introduces the table) says how
# the world was chosen, in these words.
SELECTION_NOTE = re.compile(r"chosen\s+after\s+its\s+(?:exploratory\s+)?pilot's\s+accuracies\s+were\s+(?:seen|visible)", re.I)
STRONG_WORLD_SOURCES = {"strong", "endless", "long"}      # reports of designs or probes run in that world
LEVEL_SOURCES = {"regime", "regime-v4"}                   # reports whose `strong` level is that world
RULE_PAIR = re.compile(r"\b(?:balanced|token|sequence) - (?:token|sequence|it|balanced)\b")
STRONG_WORLD_WORDS = re.compile(r"(?<![\w/-])(?:strong-band|endless-band|regime-strong|regime-v4-strong)(?![\w-])"
                                r"|\bgap[ -]30\b", re.I)


def quotes_strong_world(reference: str) -> bool:
    """Whether an anchor's reference reads a result (a pair of rules, or the long-horizon probe's
    collapses and drops) of strong-band's world from its report."""
    parts = [p.strip() for p in reference.split("|")]
    if len(parts) < 3:
        return False                                    # '- why' or '= expression'
    source, row = parts[0], parts[1]
    if source == "long":
        return True
    if source in STRONG_WORLD_SOURCES:
        return bool(RULE_PAIR.search(row))
    return source in LEVEL_SOURCES and bool(RULE_PAIR.search(row) or "minus" in row) and "strong" in row


def paragraphs(text: str) -> list[tuple[int, int]]:
    """[(start, end)] of the blocks of lines between blank lines (a table is one block)."""
    blocks, start, at = [], None, 0
    for line in text.split("\n"):
        if line.strip() and start is None:
            start = at
        elif not line.strip() and start is not None:
            blocks.append((start, at))
            start = None
        at += len(line) + 1
    if start is not None:
        blocks.append((start, len(text)))
    return blocks


def _table_quotes_strong_world(text: str, anchor) -> bool:
    source = anchor.group("body").split("|")[0].strip()
    if source in STRONG_WORLD_SOURCES:
        return True
    if source not in LEVEL_SOURCES:
        return False
    at, rows = anchor.end(), []
    while text.startswith("\n", at):
        at += 1
    while text.startswith("|", at):
        end = (text.find("\n", at) + 1) or len(text)
        rows.append(text[at:end])
        at = end
    return any("strong" in _cells(row)[0] for row in rows[2:])


def selection_flags(text: str) -> list[tuple[int, str, bool]]:
    """[(paragraph index in `paragraphs(text)`, why, is a table)] of every paragraph or table
    that quotes a result of strong-band's world: by an anchor that reads one, or by a sentence
    naming that world's designs or gap 30 with a verdict word."""
    blocks, flags = paragraphs(text), {}

    def flag(offset, why, table=False):
        k = next(k for k, (a, b) in enumerate(blocks) if a <= offset <= b)
        flags.setdefault(k, (why, table))

    for anchor in ANCHOR.finditer(text):
        if anchor.group("table"):
            if _table_quotes_strong_world(text, anchor):
                flag(anchor.end() + 1, "a table quotes a result of strong-band's world", table=True)
        elif any(quotes_strong_world(r) for r in anchor.group("body").split(";")):
            flag(anchor.start(), "an anchor reads a result of strong-band's world")
    for start, _, sentence in sentences(text):
        if STRONG_WORLD_WORDS.search(sentence) and VERDICT_WORDS.search(sentence):
            flag(start, f"a sentence gives a verdict in strong-band's world ({sentence[:60]!r})",
                 table=sentence.startswith("|"))
    return [(k, why, table) for k, (why, table) in sorted(flags.items())]


def selection_disclosed(text: str, k: int, table: bool = False) -> bool:
    """Whether paragraph k (or, for a table, the paragraph just before it) says, outside
    comments and code, that the world was chosen after its pilot's accuracies were seen."""
    plain, blocks = prose(text), paragraphs(text)
    near = [k] + ([k - 1] if table and k else [])
    return any(SELECTION_NOTE.search(plain[blocks[j][0]:blocks[j][1]]) for j in near)


def selection_problems(text: str, name: str) -> list[str]:
    """Paragraphs and tables of a page that quote a result of strong-band's world
    (`selection_flags`) and do not say, in SELECTION_NOTE's words, that the world was chosen
    after its pilot's accuracies were seen; a table may say it in the paragraph just before it."""
    blocks = paragraphs(text)
    return [f"{name} line {_line_of(text, blocks[k][0])}: {why}, and its paragraph does not say that the "
            f"world was chosen after its pilot's accuracies were seen"
            for k, why, table in selection_flags(text) if not selection_disclosed(text, k, table)]


# ------------------------------------------------------------------ GPU sentences: what ran, and what is owed

# What a page says ran on a GPU is what a committed log shows (issue 74): no 80 GB card ran
# anything, no engine's tokens were compared with `generate`'s on CUDA, `paged` sampled slower
# than `generate` in the one H200 run, and tests/lab/test_gpu.py never passed on a GPU. A
# sentence that says otherwise is a problem until a log under assets/gpu-check-*/ shows it.
EIGHTY_GB = re.compile(r"\b80\s*GB\b")
NOT_RUN = re.compile(r"\b(?:owed|not\s+(?:yet\s+)?(?:been\s+)?run|on\s+paper|never|nothing)\b|\bno\s+(?:GPU|80\s*GB)\b", re.I)
SAME_TOKENS = re.compile(r"\bsame\s+tokens\b|\btokens\s+(?:are|equal)\s+`?generate`?'s|\bequal\s+`?generate`?'s", re.I)
ENGINE = re.compile(r"`?\b(?:static|paged)\b`?|--rollout-engine|\bengines?\b")
CPU_ONLY = re.compile(r"\bon\s+a\s+CPU\b|\bCPU\b.*\bonly\b|\bnot\s+(?:yet\s+)?(?:been\s+)?(?:checked|compared)\b|\bunchecked\b"
                      r"|\bowed\b|\bnot\s+that\b", re.I | re.S)
PASSED = re.compile(r"\b(\d+)\s+passed\b")


def gpu_logs(root: str = REPO) -> str:
    """Every committed GPU log's text (assets/gpu-check-*/*.log), joined."""
    import glob
    texts = []
    for path in sorted(glob.glob(os.path.join(root, "assets", "gpu-check-*", "*.log"))):
        with open(path) as f:
            texts.append(f.read())
    return "\n".join(texts)


def gpu_claim_problems(text: str, name: str, logs: str | None = None) -> list[str]:
    """Sentences of a page that say more about a GPU than was run: an 80 GB GPU without saying
    none ran; an engine's tokens equal `generate`'s without saying that was checked on a CPU only;
    `paged` faster without saying it was slower; tests/lab/test_gpu.py passing without a committed
    log that shows that count passed."""
    logs = gpu_logs() if logs is None else logs
    problems = []
    for start, _, sentence in sentences(text):
        where = f"{name} line {_line_of(text, start)}"
        if EIGHTY_GB.search(sentence) and not NOT_RUN.search(sentence):
            problems.append(f"{where}: an 80 GB GPU without saying that none ran anything: {sentence[:100]!r}")
        if SAME_TOKENS.search(sentence) and ENGINE.search(sentence) and not CPU_ONLY.search(sentence):
            problems.append(f"{where}: an engine's tokens as generate's, not said to be checked on a CPU only: "
                            f"{sentence[:100]!r}")
        if re.search(r"\bpaged\b", sentence) and re.search(r"\bfaster\b", sentence) and "slower" not in sentence:
            problems.append(f"{where}: paged said faster; in the committed H200 logs it was slower: {sentence[:100]!r}")
        if "tests/lab/test_gpu.py" in sentence:
            for count in PASSED.findall(sentence):
                if not re.search(rf"\b{count} passed\b", logs):
                    problems.append(f"{where}: tests/lab/test_gpu.py '{count} passed' with no committed GPU log "
                                    f"showing it: {sentence[:100]!r}")
    return problems


# ------------------------------------------------------------------ demo-band's balanced - token: both rules

# Its registration's claim rule reads a row contradicted when the pooled interval excludes the
# value an earlier version claimed; the first report (3053b40) read balanced - token so. The
# against-0 rule (9c21ef3) came after that report and reads it "not detected" (the note of
# 2026-12-07 in registrations/demo-band-v3.md). A page that quotes the later reading says the
# registered one in the same sentence or the next (for a table row: the first sentence after
# the table's rows).
REGISTERED_RULE_NOTE = re.compile(r"registered\s+rule,?\s+contradicted", re.I)


def band_token_detectable() -> str:
    """What demo-band's balanced - token could have seen, as its report says it (0.031)."""
    verdict = cell("band", "balanced - token / last held-out acc", "against 0")
    return re.search(r"differences of (\S+) or more", verdict).group(1)


def registered_rule_problems(text: str, name: str) -> list[str]:
    """Sentences that quote demo-band's balanced - token as not detected, with the size it could
    have seen, and say neither there nor in the next sentence that under its registered rule it
    is contradicted."""
    quote = re.compile(r"not\s+detected\b.*?(?<![\d.])" + re.escape(band_token_detectable()) + r"\s+or\s+more", re.S)
    units, problems = sentences(text), []
    for i, (start, _, sentence) in enumerate(units):
        if not quote.search(sentence):
            continue
        j = i + 1
        while sentence.startswith("|") and j < len(units) and units[j][2].startswith("|"):
            j += 1
        if not (REGISTERED_RULE_NOTE.search(sentence) or (j < len(units) and REGISTERED_RULE_NOTE.search(units[j][2]))):
            problems.append(f"{name} line {_line_of(text, start)}: demo-band's balanced - token quoted as not "
                            f"detected without 'under its registered rule, contradicted' (its note of 2026-12-07)")
    return problems
