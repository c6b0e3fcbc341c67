"""grpo_ba_lab/plumbing/real_data.py -- read a prompt/answer dataset and refuse what training cannot use.

    rows, report = load_rows("data.jsonl", "question", "answer", tokenizer=tok, max_prompt_tokens=984)
    rows   -> [{"prompt": str | [{"role", "content"}, ...], "answer": str | [str, ...]}]
    report -> DataReport: rows read / used, problems by kind, prompt lengths in tokens

A reward that is silently 0 for a whole prompt is wrong data in exactly the signal this
project studies, so every row is checked before anything trains or is written, by the checks
the course's `python grpo_ba.py --dataset` runs too (grpo_ba_support/task.py: `prompt_problem`,
`answer_problem`, `measure_prompt`); this module adds nested columns, JSON arrays, a count per
kind and --skip-bad-rows:

    malformed_json     a JSON line that does not parse, or is not an object
    missing_prompt     prompt column missing, null or empty
    bad_prompt         prompt neither text nor a list of chat messages
    bad_messages       chat messages without a text `role` and `content`
    template_error     the tokenizer's chat template refuses the prompt
    missing_answer     answer column missing, null, empty, or an empty list
    unreadable_answer  a gold answer `verifier.parse_gold` cannot read
    prompt_too_long    tokens after the chat template > max_prompt_tokens

Each kind found becomes one line (file, first offending row, how many rows share it),
raised together as one DataError (exit code 2 in grpo_ba.py). With skip_bad_rows=True
those rows are dropped instead, with one warning line per kind on stderr. An empty file,
a column no row has, or fewer than two usable rows is always refused.

An answer that is a list means several acceptable answers; it stays a list all the way
to `verifier.verify(completion, golds)`, which scores 1 if any matches. Every element
must be readable: an element that can never match is bad data too.

Rows are numbered as the user's editor shows them: "line N" (1-based, blank lines
counted) for JSON lines, "row N" (1-based) for JSON arrays, Parquet and hub datasets.
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field

from grpo_ba_support import task as grpo_ba_setup
from grpo_ba_support.task import MISSING, PROBLEMS
from grpo_ba_support.run import SetupError

SANE_CONTEXT = 10_000_000             # tokenizers without a limit say 1e30


class DataError(SetupError):
    """The dataset cannot be used as it is; one line per problem kind."""


@dataclass
class Problem:
    first: str                        # "line 7" / "row 7": the first offending row
    detail: str                       # what is wrong with that first row
    count: int = 1                    # rows with this kind of problem


@dataclass
class DataReport:
    """What load_rows read, kept and left out; saved as data_report.json by a run."""
    source: str
    rows_read: int = 0
    rows_used: int = 0
    rows_dropped: int = 0
    problems: dict = field(default_factory=dict)          # kind -> Problem
    chat_template: bool | None = None                     # None: prompts not tokenized
    max_prompt_tokens: int | None = None
    limit_reason: str = ""
    prompt_tokens: list = field(default_factory=list)     # per used row, after the template
    n_train: int | None = None                            # set by the caller that splits
    n_heldout: int | None = None

    def percentiles(self) -> dict:
        """Nearest-rank p50 / p90 / max of the used prompts' token lengths."""
        lengths = sorted(self.prompt_tokens)
        if not lengths:
            return {}
        at = lambda q: lengths[min(len(lengths) - 1, int(q * len(lengths)))]   # noqa: E731
        return {"p50": at(0.5), "p90": at(0.9), "max": lengths[-1]}

    def to_dict(self) -> dict:
        out = {k: v for k, v in vars(self).items() if k not in ("problems", "prompt_tokens")}
        out["problems"] = {kind: vars(p) for kind, p in self.problems.items()}
        out["prompt_tokens"] = self.percentiles()
        return out

    def save(self, path: str):
        with open(path, "w") as f:
            json.dump(self.to_dict(), f, indent=2)

    def summary(self) -> str:
        """The one line a real-data run starts with."""
        split = (f"{self.n_train} rows for training, {self.n_heldout} held out" if self.n_train is not None
                 else f"{self.rows_used} rows")
        dropped = f" (dropped {self.rows_dropped} of {self.rows_read})" if self.rows_dropped else ""
        p = self.percentiles()
        lengths = (f"; prompt tokens p50 {p['p50']}, p90 {p['p90']}, max {p['max']}"
                   f" (limit {self.max_prompt_tokens if self.max_prompt_tokens else 'unknown: not checked'})"
                   if p else "")
        template = {True: "; chat template applied", False: "; no chat template: prompts as written",
                    None: ""}[self.chat_template]
        return f"data {self.source}: {split}{dropped}{lengths}{template}"


# ------------------------------------------------------------------ the model's room for a prompt

def model_context(model_name_or_path: str, tokenizer) -> int | None:
    """Longest sequence the model takes: config.max_position_embeddings, else the
    tokenizer's model_max_length when it is a real number; None when neither says."""
    from transformers import AutoConfig
    try:
        config = AutoConfig.from_pretrained(os.path.expanduser(model_name_or_path))
    except (OSError, ValueError) as err:
        raise SetupError(f"cannot load model config {model_name_or_path!r}: {str(err).splitlines()[0]}") from None
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    positions = getattr(text_config, "max_position_embeddings", None)
    if isinstance(positions, int) and positions > 0:
        return positions
    length = getattr(tokenizer, "model_max_length", None)
    return length if isinstance(length, int) and 0 < length < SANE_CONTEXT else None


def prompt_token_limit(context: int | None, max_new_tokens: int, max_prompt_tokens: int = 0):
    """(limit, reason): the longest prompt that leaves room for max_new_tokens.
    max_prompt_tokens 0 means context - max_new_tokens; a larger value is refused,
    as generation would run past the model's last position. (None, ...) when the
    context is unknown and no limit was given."""
    if context is None:
        return (max_prompt_tokens or None,
                f"--max-prompt-tokens {max_prompt_tokens}" if max_prompt_tokens else "model context unknown")
    room = context - max_new_tokens
    if room < 1:
        raise SetupError(f"--max-new-tokens {max_new_tokens} leaves no room for a prompt in the model's "
                         f"context of {context} tokens")
    if max_prompt_tokens > room:
        raise SetupError(f"--max-prompt-tokens {max_prompt_tokens} plus --max-new-tokens {max_new_tokens} "
                         f"exceeds the model's context of {context} tokens")
    if max_prompt_tokens:
        return max_prompt_tokens, f"--max-prompt-tokens {max_prompt_tokens}"
    return room, f"context {context} - --max-new-tokens {max_new_tokens}"


# ------------------------------------------------------------------ reading records

def read_records(source: str, split: str = "train"):
    """Every row of a local .json/.jsonl/.parquet file or a hub dataset, as
    [(where, record or why it is not one)] (grpo_ba_setup.read_records), a .json file read
    here: a JSON array of rows, or JSON lines."""
    if not source.lower().endswith(".json"):
        return grpo_ba_setup.read_records(source, split)
    if not os.path.isfile(source):
        raise SetupError(f"dataset file {source!r} does not exist")
    with open(source, "rb") as f:
        raw = f.read()
    if raw.removeprefix(b"\xef\xbb\xbf").lstrip()[:1] != b"[":
        return grpo_ba_setup.json_lines(raw)
    try:                                                  # one JSON array of rows
        document = json.loads(raw.removeprefix(b"\xef\xbb\xbf").decode("utf-8"))
    except UnicodeDecodeError:
        raise DataError(f"{source}: not UTF-8 text") from None
    except json.JSONDecodeError as err:                   # one array: no row can be trusted
        raise DataError(f"{source} line {err.lineno}: malformed JSON ({err.msg}, column {err.colno}); "
                        f"a JSON array is read whole, so fix the file") from None
    return [(f"row {n}", row if isinstance(row, dict) else
             f"a row must be a JSON object, not {type(row).__name__}") for n, row in enumerate(document, 1)]


def _column(record: dict, dotted: str):
    """record["a"]["b"] for "a.b"; None if a level is null, MISSING if a key is absent."""
    value = record
    for key in dotted.split("."):
        if value is None:
            return None
        if not isinstance(value, dict) or key not in value:
            return MISSING
        value = value[key]
    return value


# ------------------------------------------------------------------ the one entry point

def load_rows(source: str, prompt_column: str = "prompt", answer_column: str = "answer", split: str = "train",
              tokenizer=None, max_prompt_tokens: int | None = None, skip_bad_rows: bool = False,
              limit_reason: str = "", warn=None):
    """Read `source` (hub id or local .json/.jsonl/.parquet) and check every row.

    Returns (rows, report): rows = [{"prompt", "answer"}] in file order, report a
    DataReport. With a tokenizer, prompts are measured after `format_prompt` (the chat
    template, as the policy sees them) and, with max_prompt_tokens, refused above it;
    nothing is ever truncated. Raises DataError (one line per problem kind) unless
    skip_bad_rows, which drops those rows and writes one line per kind to `warn`
    (default: stderr). Fewer than two usable rows is refused either way."""
    warn = warn or (lambda line: print(f"grpo_ba.py: warning: {line}", file=sys.stderr))
    records = read_records(source, split)
    report = DataReport(source, rows_read=len(records), max_prompt_tokens=max_prompt_tokens,
                        limit_reason=limit_reason)
    if not records:
        raise DataError(f"{source}: empty dataset, no rows")
    objects = [r for _, r in records if not isinstance(r, str)]
    for column in (prompt_column, answer_column):          # a typo in a flag, not bad rows
        if objects and all(_column(r, column) is MISSING for r in objects):
            raise DataError(f"dataset {source!r} has no column {column!r}; columns: {sorted(objects[0])}")

    bad = {}                                                # row index -> first kind
    def note(index, where, kind, detail):                   # noqa: E306
        if kind in report.problems:
            report.problems[kind].count += 1
        else:
            report.problems[kind] = Problem(where, detail)
        bad.setdefault(index, kind)

    measured = []                                           # (index, where, prompt, row or None)
    for index, (where, record) in enumerate(records):
        if isinstance(record, str):
            note(index, where, "malformed_json", record)
            continue
        prompt, answer = _column(record, prompt_column), _column(record, answer_column)
        prompt_problem = grpo_ba_setup.prompt_problem(prompt, prompt_column)
        for problem in (prompt_problem, grpo_ba_setup.answer_problem(answer, answer_column)):
            if problem:
                note(index, where, *problem)
        if not prompt_problem:                              # a bad answer: still measure the prompt
            measured.append((index, where, prompt, None if index in bad else
                             {"prompt": prompt, "answer": grpo_ba_setup.as_gold(answer)}))

    lengths = {}                                            # index -> prompt tokens
    if tokenizer is not None:
        report.chat_template = bool(getattr(tokenizer, "chat_template", None))
        for index, where, prompt, _ in measured:
            tokens, problem = grpo_ba_setup.measure_prompt(tokenizer, prompt, max_prompt_tokens or 0,
                                                           limit_reason or "the limit")
            if tokens is not None:
                lengths[index] = tokens
            if problem:
                note(index, where, *problem)

    if report.problems and not skip_bad_rows:
        raise DataError("\n".join(
            f"{source} {p.first}: {PROBLEMS[kind]} ({p.detail}); {_rows(p.count)} like this, "
            f"fix the data or pass --skip-bad-rows" for kind, p in report.problems.items()))
    for kind, p in report.problems.items():
        warn(f"{source}: dropped {_rows(p.count)}: {PROBLEMS[kind]} (first at {p.first}: {p.detail})")
    used = [(index, row) for index, _, _, row in measured if index not in bad]
    report.rows_used, report.rows_dropped = len(used), len(bad)
    report.prompt_tokens = [lengths[index] for index, _ in used if index in lengths]
    if len(used) < 2:
        left = f" after dropping {len(bad)} bad" if bad else ""
        raise DataError(f"{source}: {_rows(len(used))} usable{left}; training needs at least 2")
    return [row for _, row in used], report


def _rows(n: int) -> str:
    return f"{n} row" if n == 1 else f"{n} rows"
