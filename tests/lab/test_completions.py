"""completions.jsonl (grpo_ba_lab/plumbing/completions.py) round-trips through the diagnosis
(grpo_ba_lab/analysis/diagnose.py), whole and step by step, from Python and `python -m grpo_ba_lab.analysis.diagnose`."""
import json
import os
import subprocess
import sys

import pytest
import torch

from grpo_ba_lab.analysis import diagnose
from grpo_ba_lab.plumbing import completions

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Three steps of P = 2 prompts x G = 4: wrong answers long at step 0, the gap closing later.
STEPS = {
    0: (["1+2=", "7+5="], [1, 0, 1, 0, 1, 0, 0, 0], [4, 20, 5, 23, 6, 15, 21, 8]),
    1: (["3+3=", "9+9="], [1, 1, 0, 0, 0, 1, 1, 1], [6, 9, 14, 11, 12, 7, 6, 9]),
    2: (["2+8=", "4+4="], [0, 1, 1, 0, 1, 1, 1, 1], [7, 8, 6, 9, 5, 6, 5, 7]),   # group 2: no signal
}


def write_completions(path):
    for step, (prompts, rewards, lengths) in STEPS.items():
        texts = [f"answer {i}" for i in range(len(rewards))]
        completions.append_completions(str(path), step, prompts, texts, torch.tensor(rewards, dtype=torch.float32),
                                       torch.tensor(lengths))
    return str(path)


def write_plain(path, steps=STEPS, group=lambda step, p: f"s{step}/{p}"):
    """The same responses as bare {group, reward, length} lines, with other group ids."""
    with open(path, "w") as f:
        for step, (prompts, rewards, lengths) in steps.items():
            g = len(rewards) // len(prompts)
            for i, (r, n) in enumerate(zip(rewards, lengths)):
                f.write(json.dumps({"group": group(step, i // g), "reward": r, "length": n}) + "\n")
    return str(path)


def test_completion_lines_hold_what_the_issue_names(tmp_path):
    path = write_completions(tmp_path / "completions.jsonl")
    lines = [json.loads(line) for line in open(path)]
    assert len(lines) == 24
    assert set(lines[0]) == {"prompt", "completion", "reward", "length", "group", "step"}
    assert lines[5] == {"prompt": "7+5=", "completion": "answer 5", "reward": 0.0, "length": 15,
                        "group": "step0-prompt1", "step": 0}
    with pytest.raises(ValueError, match="groups of equal size"):
        completions.completion_rows(0, ["a", "b"], ["x"] * 5, [0] * 5, [1] * 5)


@pytest.mark.parametrize("adv_scale", ["std", "none"])
def test_completions_jsonl_diagnoses_as_the_plain_lines_do(tmp_path, adv_scale):
    lines = []
    ours = diagnose.run(write_completions(tmp_path / "c.jsonl"), adv_scale, out=lines.append)
    plain = diagnose.run(write_plain(tmp_path / "plain.jsonl"), adv_scale, out=lambda text: None)
    assert ours == plain
    assert ours["n_groups"] == 6 and ours["groups_without_signal"] == 1
    assert json.loads(lines[-1].splitlines()[-1])["pos_share_token"] == pytest.approx(plain["pos_share_token"], rel=1e-5)


def test_each_step_reads_as_its_own_batch(tmp_path):
    steps = diagnose.diagnose_steps(write_completions(tmp_path / "c.jsonl"))
    assert [s["step"] for s in steps] == [0, 1, 2]
    for row in steps:                                  # = the whole-file diagnosis of that step's lines alone
        alone = diagnose.diagnose(write_plain(tmp_path / f"step{row['step']}.jsonl", {row["step"]: STEPS[row["step"]]}))
        for key in ("pos_share_token", "pos_share_sequence", "pos_share_balanced", "token_loss_at_ratio_one",
                    "len_pos", "len_neg", "n_groups", "group_size"):
            assert row[key] == alone[key], (row["step"], key)
    # the bias moves: long wrong answers at step 0 take the token rule's weight, less so later
    assert steps[0]["pos_share_token"] < 0.35 < steps[2]["pos_share_token"]
    assert all(s["pos_share_balanced"] == pytest.approx(0.5, abs=1e-6) for s in steps)
    assert diagnose.diagnose_steps(write_plain(tmp_path / "plain.jsonl")) == []      # no step, no table


@pytest.mark.slow                # runs a `python -m` subprocess
def test_the_command_line_prints_the_step_table_and_draws_the_figure(tmp_path):
    path = write_completions(tmp_path / "c.jsonl")
    png = tmp_path / "figs" / "bias.png"
    done = subprocess.run([sys.executable, "-m", "grpo_ba_lab.analysis.diagnose", path, "--adv-scale", "none", "--figure", str(png)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "MPLBACKEND": "Agg"})
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    assert "step by step" in out[0] and "positive share" in out[1]
    table = [line.split() for line in out[2:5]]
    steps = diagnose.diagnose_steps(path, "none")
    assert [int(row[0]) for row in table] == [0, 1, 2]
    assert [float(row[2]) for row in table] == [round(s["pos_share_token"], 3) for s in steps]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert json.loads(out[-1])["adv_scale"] == "none"                 # the last line is still one JSON object


def test_help_names_the_options(capsys):
    with pytest.raises(SystemExit) as done:
        diagnose.main(["--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert "python -m grpo_ba_lab.analysis.diagnose" in text and "--adv-scale {std,none}" in text and "--figure PNG" in text


@pytest.mark.parametrize("text, words", [
    ('{"group": 1, "reward": 1, "length": 3, "step": 0}\n{"group": 1, "reward": 0, "length": 5}\n', "line 2: no 'step'"),
    ('{"group": 1, "reward": 1, "length": 3, "step": 0}\n{"group": 1, "reward": 0, "length": 5, "step": 1}\n',
     "line 2: group 1 is in step 1"),
    ('{"group": 1, "reward": 1, "length": 3, "step": -1}\n{"group": 1, "reward": 0, "length": 5, "step": 0}\n',
     "line 1: 'step' must be a whole number"),
    ('{"group": 1, "reward": 1, "length": 3}\n{"group": 1, "reward": 0, "length": 5}\n', "no line has a 'step'"),
])
def test_bad_steps_are_one_line_and_exit_code_2(tmp_path, capsys, text, words):
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    assert diagnose.main([str(path), "--figure", str(tmp_path / "x.png")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and words in err
    assert not (tmp_path / "x.png").exists()


def test_a_resumed_run_drops_the_lines_of_the_steps_it_redoes(tmp_path):
    path = write_completions(tmp_path / "c.jsonl")
    assert completions.keep_steps_before(path, 2) == 16
    assert {json.loads(line)["step"] for line in open(path)} == {0, 1}
    assert completions.keep_steps_before(str(tmp_path / "none.jsonl"), 2) == 0


def test_a_torn_last_line_is_dropped_on_resume_and_a_bad_middle_line_is_refused(tmp_path):
    path = write_completions(tmp_path / "c.jsonl")
    with open(path, "a") as f:
        f.write('{"prompt": "1+2=", "comple')               # a kill while appending
    assert completions.keep_steps_before(path, 2) == 16
    lines = open(path).read().splitlines()
    lines.insert(3, "not json")
    open(path, "w").write("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match="line 4"):
        completions.keep_steps_before(path, 2)
    assert open(path).read().splitlines()[3] == "not json"   # refused: the file is untouched
