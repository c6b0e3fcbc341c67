"""--dataset refuses what it cannot use: one stderr line per problem kind naming the file,
the first offending row and how many rows share it; exit 2; nothing written. With
--skip-bad-rows the same rows are dropped, counted and training goes on."""
import json

import pytest

import grpo_ba
from grpo_ba_lab.plumbing import real_data
import verifier
from grpo_ba_lab.train import main

GOOD = [json.dumps({"prompt": f"{a}+{b}", "answer": str(a + b)}) for a in range(1, 4) for b in range(1, 4)]
# The tiny model's context is 128 tokens (one per character); with --max-new-tokens 4 a
# prompt may take 124. The chat template alone adds ~95, so 60 characters fit as written
# but not once templated: the check measures what the policy is fed.
LONG_PROMPT = "9" * 60
FLAGS = ["--aggregator", "token", "--steps", "1", "--group-size", "2", "--prompts-per-step", "2",
         "--max-new-tokens", "4", "--eval-prompts", "2"]

BAD_ROWS = {                           # kind -> (a bad line, words its error line must say)
    "malformed_json": ('{"prompt": "1+1", "answer": "2"', "malformed JSON"),
    "missing_prompt": ('{"prompt": null, "answer": "2"}', "no prompt"),
    "bad_messages": ('{"prompt": [{"role": "user"}], "answer": "2"}', "message 1 has no 'content'"),
    "missing_answer": ('{"prompt": "1+1"}', "no gold answer"),
    "unreadable_answer": ('{"prompt": "1+1", "answer": "four-ish ???"}', "verifier cannot read"),
    "prompt_too_long": (json.dumps({"prompt": LONG_PROMPT, "answer": "2"}), "prompt too long"),
}


def run(tmp_path, capsys, tiny_model_dir, text, *extra, name="data.jsonl"):
    """main() on a dataset file holding `text`: (exit code, stderr lines, stdout, run dir)."""
    data, out = tmp_path / name, tmp_path / "run"
    data.write_text(text)
    code = main(["--model", tiny_model_dir, "--dataset", str(data), *FLAGS, "--output-dir", str(out), *extra])
    captured = capsys.readouterr()
    return code, [line for line in captured.err.splitlines() if line.strip()], captured.out, out


def test_the_unreadable_gold_of_the_issue_is_unreadable_to_the_verifier():
    assert verifier.parse_gold("four-ish ???") is None and verifier.parse_gold("#### 4") is not None


@pytest.mark.parametrize("kind", BAD_ROWS)
def test_each_bad_row_kind_is_refused_in_one_line_naming_its_row(kind, tmp_path, capsys, tiny_model_dir):
    bad_line, words = BAD_ROWS[kind]
    text = "\n".join(GOOD[:3] + [bad_line] + GOOD[3:]) + "\n"
    code, err, _, out = run(tmp_path, capsys, tiny_model_dir, text)
    assert code == 2
    assert len(err) == 1, err
    assert err[0].startswith("python -m grpo_ba_lab.train: error: ") and "data.jsonl line 4:" in err[0] and words in err[0], err
    assert "1 row like this" in err[0] and "--skip-bad-rows" in err[0]
    assert not out.exists()                                         # nothing written, not even the directory


def test_a_malformed_last_line_and_an_empty_file_are_one_line_each(tmp_path, capsys, tiny_model_dir):
    code, err, _, _ = run(tmp_path, capsys, tiny_model_dir, "\n".join(GOOD) + '\n{"prompt": "1+1", "ans')
    assert code == 2 and len(err) == 1 and f"line {len(GOOD) + 1}: malformed JSON" in err[0], err
    for extra in ([], ["--skip-bad-rows"]):                         # nothing to skip to
        code, err, _, out = run(tmp_path, capsys, tiny_model_dir, "\n\n", *extra)
        assert code == 2 and len(err) == 1 and "empty dataset" in err[0] and not out.exists(), err


def test_every_kind_gets_its_own_line_with_its_count(tmp_path, capsys, tiny_model_dir):
    lines = GOOD[:2] + [bad for bad, _ in BAD_ROWS.values()] + ['{"prompt": "2+2", "answer": null}'] + GOOD[2:]
    code, err, _, out = run(tmp_path, capsys, tiny_model_dir, "\n".join(lines))
    assert code == 2 and len(err) == len(BAD_ROWS), err
    for line_number, (_, words) in enumerate(BAD_ROWS.values(), 3):
        assert any(f"line {line_number}:" in e and words in e for e in err), (words, err)
    assert any("no gold answer" in e and "2 rows like this" in e for e in err)   # first shown, both counted
    assert not out.exists()


def test_skip_bad_rows_drops_them_says_so_and_trains(tmp_path, capsys, tiny_model_dir):
    lines = GOOD[:2] + [bad for bad, _ in BAD_ROWS.values()] + ['{"prompt": "2+2", "answer": null}'] + GOOD[2:]
    code, err, stdout, out = run(tmp_path, capsys, tiny_model_dir, "\n".join(lines), "--skip-bad-rows")
    assert code == 0, err
    warnings = [e for e in err if e.startswith("grpo_ba.py: warning:")]
    assert len(warnings) == len(BAD_ROWS) and any("dropped 2 rows: no gold answer" in w for w in warnings), err
    report = json.load(open(out / "data_report.json"))
    assert report["rows_read"] == len(GOOD) + len(BAD_ROWS) + 1 and report["rows_used"] == len(GOOD)
    assert report["rows_dropped"] == len(BAD_ROWS) + 1
    assert {k: p["count"] for k, p in report["problems"].items()} == {**{k: 1 for k in BAD_ROWS}, "missing_answer": 2}
    assert report["n_train"] + report["n_heldout"] == len(GOOD) and report["chat_template"] is True
    start = next(line for line in stdout.splitlines() if line.startswith("data "))   # the run's first word on its data
    assert f"{report['n_train']} rows for training, {report['n_heldout']} held out" in start
    assert "prompt tokens p50" in start and "chat template applied" in start
    assert json.load(open(out / "args.json"))["skip_bad_rows"] is True


def test_fewer_than_two_usable_rows_are_refused_even_when_skipping(tmp_path, capsys, tiny_model_dir):
    text = GOOD[0] + '\n{"prompt": "1+1"}\n{"prompt": "1+1"}\n'
    code, err, _, out = run(tmp_path, capsys, tiny_model_dir, text, "--skip-bad-rows")
    assert code == 2 and err[-1].startswith("python -m grpo_ba_lab.train: error:") and "1 row usable after dropping 2 bad" in err[-1]
    assert not out.exists()


def test_a_list_answer_stays_a_list_to_the_reward_and_any_element_may_match(tmp_path, capsys, tiny_model_dir,
                                                                             monkeypatch):
    assert verifier.verify("so \\boxed{5}", ["5", "6"]) == 1.0            # only the first matches
    assert verifier.verify("so \\boxed{7}", ["5", "6"]) == 0.0
    lines = [json.dumps({"prompt": f"{a}+{a}", "answer": [str(2 * a), f"#### {2 * a}"]}) for a in range(1, 9)]
    golds = []
    monkeypatch.setattr(grpo_ba, "verify", lambda completion, gold: golds.append(gold) or verifier.verify(completion, gold))
    code, err, _, _ = run(tmp_path, capsys, tiny_model_dir, "\n".join(lines))
    assert code == 0, err
    assert golds and all(isinstance(g, list) and len(g) == 2 for g in golds)   # not "['2', '#### 2']"


def test_max_prompt_tokens_refuses_longer_prompts_and_a_limit_past_the_context(tmp_path, capsys, tiny_model_dir):
    code, err, _, _ = run(tmp_path, capsys, tiny_model_dir, "\n".join(GOOD), "--max-prompt-tokens", "90")
    assert code == 2 and len(err) == 1 and "prompt too long" in err[0] and "> 90: --max-prompt-tokens 90" in err[0]
    assert f"{len(GOOD)} rows like this" in err[0]                          # never truncated: every row refused
    code, err, _, _ = run(tmp_path, capsys, tiny_model_dir, "\n".join(GOOD), "--max-prompt-tokens", "125")
    assert code == 2 and len(err) == 1 and "exceeds the model's context of 128 tokens" in err[0], err


def test_a_broken_json_array_names_its_line_and_parquet_rows_are_numbered(tmp_path, capsys, tiny_model_dir):
    code, err, _, _ = run(tmp_path, capsys, tiny_model_dir, '[\n{"prompt": "1+1", "answer": "2"},\n{"prompt": }\n]',
                          "--skip-bad-rows", name="data.json")
    assert code == 2 and len(err) == 1 and "data.json line 3: malformed JSON" in err[0], err
    import pyarrow as pa
    import pyarrow.parquet as pq
    path = tmp_path / "data.parquet"
    pq.write_table(pa.table({"prompt": ["1+1", "2+2", "3+3"], "answer": ["2", None, "6"]}), path)
    with pytest.raises(real_data.DataError, match=r"data.parquet row 2: no gold answer \(column 'answer' is null\)"):
        real_data.load_rows(str(path))


def test_the_lab_refuses_rows_by_the_courses_own_checks(tmp_path, monkeypatch):
    # one implementation (grpo_ba_support/task.py): a change to the course's answer check is a change
    # to what the lab refuses, with the lab's count and its --skip-bad-rows advice around it
    from grpo_ba_support import task as grpo_ba_setup
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(GOOD) + "\n")
    rows, _ = real_data.load_rows(str(path))
    assert len(rows) == len(GOOD)
    monkeypatch.setattr(grpo_ba_setup, "answer_problem",
                        lambda answer, column="answer": ("unreadable_answer", "stub") if answer == "4" else None)
    with pytest.raises(real_data.DataError, match=r"data.jsonl line 3: gold answer the verifier cannot read "
                                                  r"\(stub\); 3 rows like this"):
        real_data.load_rows(str(path))
