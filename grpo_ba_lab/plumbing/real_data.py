"""grpo_ba_lab/plumbing/real_data.py -- read a prompt/answer dataset and refuse what training cannot use.

    rows, report = load_rows("data.jsonl", "question", "answer", tokenizer=tok, max_prompt_tokens=984)
    rows   -> [{"prompt": str | [{"role", "content"}, ...], "answer": str | [str, ...]}]
    report -> DataReport: rows read / used, problems by kind, prompt lengths in tokens

A reward that is silently 0 for a whole prompt is wrong data in exactly the signal this
project studies, so every row is checked before anything trains or is written:

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

import verifier
from grpo_ba_setup import format_prompt
from grpo_ba_run import SetupError

KIND_TEXT = {                         # noun phrases: "<file> line 3: <text> (<detail>)"
    "malformed_json": "malformed JSON",
    "missing_prompt": "no prompt",
    "bad_prompt": "prompt is neither text nor a list of chat messages",
    "bad_messages": "chat messages without a text role and content",
    "template_error": "the chat template refuses the prompt",
    "missing_answer": "no gold answer",
    "unreadable_answer": "gold answer the verifier cannot read",
    "prompt_too_long": "prompt too long",
}
_MISSING = object()                   # a column path a row does not have at all
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

def _read_json_records(path: str):
    """[(where, record | None, problem detail | None)], reading the file ourselves:
    the `datasets` json loader reports a bad line without its number, or not at all."""
    with open(path, "rb") as f:
        raw = f.read()
    if raw.startswith(b"\xef\xbb\xbf"):                   # a UTF-8 byte-order mark
        raw = raw[3:]
    if path.lower().endswith(".json") and raw.lstrip()[:1] == b"[":
        try:                                              # one JSON array of rows
            document = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise DataError(f"{path}: not UTF-8 text") from None
        except json.JSONDecodeError as err:               # one array: no row can be trusted
            raise DataError(f"{path} line {err.lineno}: malformed JSON ({err.msg}, column {err.colno}); "
                            f"a JSON array is read whole, so fix the file") from None
        return [(f"row {n}", row, None) if isinstance(row, dict) else
                (f"row {n}", None, f"a row must be a JSON object, not {type(row).__name__}")
                for n, row in enumerate(document, 1)]
    records = []
    for n, line in enumerate(raw.split(b"\n"), 1):        # JSON lines
        if not line.strip():
            continue
        try:
            row = json.loads(line.decode("utf-8"))
        except UnicodeDecodeError:
            records.append((f"line {n}", None, "not UTF-8"))
            continue
        except json.JSONDecodeError as err:
            records.append((f"line {n}", None, f"{err.msg}, column {err.colno}"))
            continue
        records.append((f"line {n}", row, None) if isinstance(row, dict) else
                       (f"line {n}", None, f"a row must be a JSON object, not {type(row).__name__}"))
    return records


def read_records(source: str, split: str = "train"):
    """Every row of a local .json/.jsonl/.parquet file or a hub dataset, as
    [(where, record | None, problem | None)]; a file that cannot be opened at all
    is a SetupError."""
    extension = os.path.splitext(source)[1].lower()
    if extension in (".json", ".jsonl", ".parquet"):
        if not os.path.isfile(source):
            raise SetupError(f"dataset file {source!r} does not exist")
        if extension != ".parquet":
            return _read_json_records(source)
        load_dataset = _quiet_load_dataset()
        try:
            data = load_dataset("parquet", data_files=source, split="train")
        except Exception as err:                          # not Parquet, truncated ...
            raise SetupError(f"cannot read Parquet file {source!r}: {str(err).splitlines()[0]}") from None
    elif os.path.exists(source):
        raise SetupError(f"dataset {source!r}: use a .json, .jsonl or .parquet file")
    else:
        load_dataset = _quiet_load_dataset()
        try:
            data = load_dataset(source, split=split)
        except Exception as err:                          # offline, unknown id, bad split ...
            raise SetupError(f"cannot load dataset {source!r}: {str(err).splitlines()[0]}") from None
    return [(f"row {n}", row, None) for n, row in enumerate(data, 1)]


def _quiet_load_dataset():
    """datasets.load_dataset without per-load progress bars (they would drown the training
    log). Imported here, not at the top: `datasets` adds about a second to every start."""
    import datasets
    datasets.disable_progress_bars()
    return datasets.load_dataset


def _column(record: dict, dotted: str):
    """record["a"]["b"] for "a.b"; None if a level is null, _MISSING if a key is absent."""
    value = record
    for key in dotted.split("."):
        if value is None:
            return None
        if not isinstance(value, dict) or key not in value:
            return _MISSING
        value = value[key]
    return value


# ------------------------------------------------------------------ checking one row

def _short(value, width: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= width else text[:width - 3] + "..."


def _prompt_problem(prompt, column: str):
    """(kind, detail) of what makes this prompt unusable, or None."""
    if prompt is _MISSING or prompt is None or (isinstance(prompt, str) and not prompt.strip()):
        state = "missing" if prompt is _MISSING else "null" if prompt is None else "empty"
        return "missing_prompt", f"column {column!r} is {state}"
    if isinstance(prompt, str):
        return None
    if not isinstance(prompt, list):
        return "bad_prompt", f"got {type(prompt).__name__}"
    if not prompt:
        return "bad_messages", "an empty list of messages"
    for i, message in enumerate(prompt, 1):
        if not isinstance(message, dict):
            return "bad_messages", f"message {i} is {type(message).__name__}, not an object"
        for key in ("role", "content"):
            value = message.get(key)
            if not isinstance(value, str) or not value.strip():
                state = "no" if value is None else "an empty" if isinstance(value, str) else "a non-text"
                return "bad_messages", f"message {i} has {state} {key!r}"
    return None


def _answer_problem(answer, column: str):
    """(kind, detail) of what makes this gold answer unusable, or None. A list is
    several acceptable answers; each one must be readable."""
    empty = answer is None or answer == [] or (isinstance(answer, str) and not answer.strip())
    if answer is _MISSING or empty:
        state = "missing" if answer is _MISSING else "null" if answer is None else "empty"
        return "missing_answer", f"column {column!r} is {state}"
    for gold in answer if isinstance(answer, list) else [answer]:
        readable = (isinstance(gold, (str, int, float)) and not isinstance(gold, bool)
                    and verifier.parse_gold(str(gold)) is not None)
        if not readable:
            inside = f" in {_short(answer)}" if isinstance(answer, list) else ""
            return "unreadable_answer", f"{_short(gold)}{inside}"
    return None


def _as_gold(answer):
    """Numbers become their text; a list stays a list (of texts)."""
    return [str(a) for a in answer] if isinstance(answer, list) else str(answer)


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
    objects = [r for _, r, _ in records if r is not None]
    for column in (prompt_column, answer_column):          # a typo in a flag, not bad rows
        if objects and all(_column(r, column) is _MISSING for r in objects):
            raise DataError(f"dataset {source!r} has no column {column!r}; columns: {sorted(objects[0])}")

    bad = {}                                                # row index -> first kind
    def note(index, where, kind, detail):                   # noqa: E306
        if kind in report.problems:
            report.problems[kind].count += 1
        else:
            report.problems[kind] = Problem(where, detail)
        bad.setdefault(index, kind)

    measured = []                                           # (index, where, prompt, row or None)
    for index, (where, record, detail) in enumerate(records):
        if record is None:
            note(index, where, "malformed_json", detail)
            continue
        prompt, answer = _column(record, prompt_column), _column(record, answer_column)
        prompt_problem = _prompt_problem(prompt, prompt_column)
        for problem in (prompt_problem, _answer_problem(answer, answer_column)):
            if problem:
                note(index, where, *problem)
        if not prompt_problem:                              # a bad answer: still measure the prompt
            measured.append((index, where, prompt, None if index in bad else
                             {"prompt": prompt, "answer": _as_gold(answer)}))

    lengths = {}                                            # index -> prompt tokens
    if tokenizer is not None:
        report.chat_template = bool(getattr(tokenizer, "chat_template", None))
        texts = []
        for index, where, prompt, _ in measured:
            try:
                texts.append((index, where, format_prompt(tokenizer, prompt)))
            except Exception as err:                        # jinja: unknown role, bad order ...
                note(index, where, "template_error", f"{type(err).__name__}: {(str(err) or '?').splitlines()[0]}")
        ids = tokenizer([t for _, _, t in texts], add_special_tokens=False)["input_ids"] if texts else []
        for (index, where, _), tokens in zip(texts, ids):   # tokenized as rollout() does
            lengths[index] = len(tokens)
            if max_prompt_tokens and len(tokens) > max_prompt_tokens:
                note(index, where, "prompt_too_long", f"{len(tokens)} tokens after the chat template"
                     if report.chat_template else f"{len(tokens)} tokens")
        if "prompt_too_long" in report.problems:            # say which limit, once
            report.problems["prompt_too_long"].detail += f" > {max_prompt_tokens}: {limit_reason or 'the limit'}"

    if report.problems and not skip_bad_rows:
        raise DataError("\n".join(
            f"{source} {p.first}: {KIND_TEXT[kind]} ({p.detail}); {_rows(p.count)} like this, "
            f"fix the data or pass --skip-bad-rows" for kind, p in report.problems.items()))
    for kind, p in report.problems.items():
        warn(f"{source}: dropped {_rows(p.count)}: {KIND_TEXT[kind]} (first at {p.first}: {p.detail})")
    used = [(index, row) for index, _, _, row in measured if index not in bad]
    report.rows_used, report.rows_dropped = len(used), len(bad)
    report.prompt_tokens = [lengths[index] for index, _ in used if index in lengths]
    if len(used) < 2:
        left = f" after dropping {len(bad)} bad" if bad else ""
        raise DataError(f"{source}: {_rows(len(used))} usable{left}; training needs at least 2")
    return [row for _, row in used], report


def _rows(n: int) -> str:
    return f"{n} row" if n == 1 else f"{n} rows"
