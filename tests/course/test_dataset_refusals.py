"""`python grpo_ba.py --model DIR --dataset FILE` refuses a dataset it cannot train on before
any training: exit code 2, one stderr line naming the file, the row and the problem, nothing
written. The checks are the lab's too (grpo_ba_support/task.py, called by
grpo_ba_lab/plumbing/real_data.py), so the two commands refuse the same rows. The refusals run
one after the other in one interpreter (tests/commands_in_one_process.py: each as `python
grpo_ba.py ...` runs it, with its own exit code and stderr), the dataset that trains in a
process of its own."""
import json
import os
import subprocess
import sys

import pytest

from commands_in_one_process import run_each
from grpo_ba_support import task as grpo_ba_setup

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOOD = [json.dumps({"prompt": f"What is {i}+{i}?", "answer": str(2 * i)}) for i in range(1, 7)]
FLAGS = ["--aggregator", "balanced", "--steps", "1", "--group-size", "2", "--prompts-per-step", "2",
         "--max-new-tokens", "4", "--eval-prompts", "2", "--threads", "1"]
# The tiny model's context is 128 positions and the chat template adds about 20 tokens around
# a prompt (one per character): 120 characters fit as written, not as the policy is fed them.
TOO_LONG = "9" * 120

BAD = {       # what goes at line 3 -> what the one error line must say after "data.jsonl line 3: "
    "a malformed line": ('{"prompt": "1+1", "answer": "2"', "malformed JSON"),
    "a missing answer": ('{"prompt": "1+1"}', "no gold answer (column 'answer' is missing)"),
    "an unparseable gold": ('{"prompt": "1+1", "answer": "four-ish ???"}', "gold answer the verifier cannot read"),
    "a chat message without content": ('{"prompt": [{"role": "user"}], "answer": "2"}',
                                       "chat messages without a text role and content (message 1 has no 'content')"),
    "a prompt that is a number": ('{"prompt": 42, "answer": "2"}', "prompt is neither text nor a list"),
    "a prompt longer than the context": (json.dumps({"prompt": TOO_LONG, "answer": "2"}), "prompt too long"),
}


def course(tmp_path, model_dir, text: str):
    """Run the course's command on a dataset file holding `text`: (exit code, stderr lines, run dir)."""
    data, out = tmp_path / "data.jsonl", tmp_path / "run"
    data.write_text(text)
    done = subprocess.run([sys.executable, "grpo_ba.py", "--model", model_dir, "--dataset", str(data), *FLAGS,
                           "--output-dir", str(out)], cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    return done.returncode, [line for line in done.stderr.splitlines() if line.strip()], out


def nothing_written(out) -> bool:
    return not os.path.exists(out / "metrics.jsonl") and not os.path.exists(out / "checkpoint.pt")


EMPTY = "an empty file"


@pytest.fixture(scope="module")
def refusals(tmp_path_factory, tiny_model_dir):
    """The course's command on each refused dataset -- a bad line 3 (BAD) or an empty file --
    in one interpreter: {case: (exit code, stderr lines, run dir)}."""
    texts = {**{case: "\n".join(GOOD[:2] + [bad_line] + GOOD[2:]) + "\n" for case, (bad_line, _) in BAD.items()},
             EMPTY: "\n\n"}
    argvs, outs = [], []
    for case, text in texts.items():
        folder = tmp_path_factory.mktemp("refused")
        (folder / "data.jsonl").write_text(text)
        outs.append(folder / "run")
        argvs.append(["--model", tiny_model_dir, "--dataset", str(folder / "data.jsonl"), *FLAGS,
                      "--output-dir", str(folder / "run")])
    done = run_each("grpo_ba.py", argvs, cwd=REPO, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    return {case: (d.returncode, [line for line in d.stderr.splitlines() if line.strip()], out)
            for case, d, out in zip(texts, done, outs)}


@pytest.mark.parametrize("case", BAD)
@pytest.mark.slow
def test_the_course_refuses_a_bad_row_in_one_line_naming_file_row_and_problem(case, refusals):
    _, words = BAD[case]
    code, err, out = refusals[case]
    assert code == 2, err
    assert len(err) == 1, err
    assert f"data.jsonl line 3: {words}" in err[0], err
    assert nothing_written(out)


@pytest.mark.slow
def test_the_course_refuses_an_empty_file_in_one_line(refusals):
    code, err, out = refusals[EMPTY]
    assert code == 2 and len(err) == 1 and "data.jsonl: empty" in err[0], err
    assert nothing_written(out)


@pytest.mark.slow
def test_a_list_of_acceptable_answers_still_trains(tmp_path, tiny_model_dir):
    rows = [json.dumps({"prompt": f"What is {i}+{i}?", "answer": [str(2 * i), f"#### {2 * i}"]}) for i in range(6)]
    code, err, out = course(tmp_path, tiny_model_dir, "\n".join(rows) + "\n")
    assert code == 0, err
    with open(out / "metrics.jsonl") as f:
        assert [json.loads(line)["step"] for line in f] == [0, 1]


# ------------------------------------------------------------------ the checks themselves (no model)

@pytest.mark.parametrize("prompt, kind", [
    ("What is 1+1?", None), ([{"role": "user", "content": "1+1?"}], None),
    (grpo_ba_setup.MISSING, "missing_prompt"), (None, "missing_prompt"), ("  ", "missing_prompt"),
    (42, "bad_prompt"), ([], "bad_messages"), (["1+1"], "bad_messages"),
    ([{"role": "user"}], "bad_messages"), ([{"role": "user", "content": ""}], "bad_messages"),
    ([{"role": "user", "content": 7}], "bad_messages")])
def test_a_prompt_is_text_or_chat_messages_with_a_text_role_and_content(prompt, kind):
    problem = grpo_ba_setup.prompt_problem(prompt)
    assert (problem and problem[0]) == kind


@pytest.mark.parametrize("answer, kind", [
    ("4", None), (4, None), ("#### 4", None), (["4", "four-ish ???"], "unreadable_answer"), (["4", "#### 4"], None),
    (grpo_ba_setup.MISSING, "missing_answer"), (None, "missing_answer"), ("", "missing_answer"),
    ([], "missing_answer"), (True, "unreadable_answer"), ("four-ish ???", "unreadable_answer"),
    ({"value": 4}, "unreadable_answer")])
def test_every_acceptable_answer_must_be_one_the_verifier_can_read(answer, kind):
    problem = grpo_ba_setup.answer_problem(answer)
    assert (problem and problem[0]) == kind


def test_json_lines_are_numbered_as_an_editor_shows_them_and_a_bad_line_says_why():
    raw = b'\xef\xbb\xbf{"prompt": "a", "answer": "1"}\n\n[1, 2]\n{"prompt": \n\xff\n'
    assert grpo_ba_setup.json_lines(raw) == [
        ("line 1", {"prompt": "a", "answer": "1"}), ("line 3", "a row must be a JSON object, not list"),
        ("line 4", "Expecting value, column 12"), ("line 5", "not UTF-8")]


def test_a_missing_dataset_file_is_refused_before_any_model_is_loaded(tmp_path, monkeypatch):
    """A paper reader's typo, `--preset qwen3-1.7b --aggregator balanced --dataset nothere.jsonl`,
    spent about a minute retrying the hub for the model, then named the tokenizer, not the file."""
    from grpo_ba_support import args as grpo_ba_args
    loaded = []
    monkeypatch.setattr(grpo_ba_setup, "load_tokenizer", lambda *a, **k: loaded.append(a))
    monkeypatch.chdir(tmp_path)
    for argv in (["--preset", "qwen3-1.7b", "--aggregator", "balanced", "--dataset", "nothere.jsonl"],
                 ["--model", "some/model", "--aggregator", "balanced", "--dataset", "gone.parquet"]):
        with pytest.raises(grpo_ba_args.UsageError, match=r"does not exist \(looked from "):
            grpo_ba_args.check_args(grpo_ba_args.parse_args(argv))
    assert loaded == []
