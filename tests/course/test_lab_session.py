"""The lab session's pages hold what they promise: the handout's numbers are what grpo_ba.py
computes, it fits one page and uses the paper's names for the two biases, the answers stay
off the students' pages, every course command of the session parses, and the pages link
what they name."""
import os
import re
import shlex

import pytest
import torch

import grpo_ba
from exercises import prelab_check

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAGES = ("docs/teaching.md", "docs/lab-session.md", "docs/handout.md", "docs/lab-session-answers.md")
WORKED_LENGTHS, FLIPPED_LENGTHS = [2, 4, 1, 3], [4, 2, 3, 1]     # the handout's, and its Predict table's
THREE_DECIMALS = re.compile(r"(?<![\w.])[+-]?\d\.\d{3}(?!\d)")


def read(path):
    with open(os.path.join(ROOT, path)) as f:
        return f.read()


def table_after(text, marker):
    """{first cell: other cells} of the first markdown table after the line holding `marker`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if marker in line)
    rows, seen = {}, False
    for line in lines[start + 1:]:
        if line.startswith("|"):
            seen = True
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows[cells[0]] = cells[1:]
        elif seen:
            break
    return rows


def group(lengths):
    """(mask (4, T), advantages (4,)) of rewards [1, 0, 1, 0] with these lengths."""
    return (grpo_ba.mask_from_lengths(torch.tensor(lengths)),
            grpo_ba.group_advantages(torch.tensor([1.0, 0.0, 1.0, 0.0]), 4))


def per_sign_numbers(lengths):
    """{rule: [J at ratio 1, W+, W-, share on right answers]}, by grpo_ba's functions."""
    mask, adv = group(lengths)
    logp = torch.zeros(mask.shape)                              # ratio 1: l_it = -A_i
    numbers = {}
    for rule, aggregate in grpo_ba.AGGREGATORS.items():
        J = aggregate(grpo_ba.clipped_token_loss(logp, logp, adv, mask), mask, adv, 4).item()
        w_pos, w_neg = grpo_ba.sign_weights(mask, adv, 4, rule)
        numbers[rule] = [J, w_pos.item(), w_neg.item(), grpo_ba.positive_share(mask, adv, 4, rule)]
    return numbers


def assert_printed(rows, computed):
    assert set(rows) >= set(computed)
    for rule, values in computed.items():
        assert [float(cell) for cell in rows[rule]] == pytest.approx(values, abs=5e-4), rule


def test_handouts_worked_example_is_what_grpo_ba_computes():
    rows = table_after(read("docs/handout.md"), "**Worked example**")
    assert_printed(rows, per_sign_numbers(WORKED_LENGTHS))


def test_handouts_token_weights_are_what_grpo_ba_computes():
    mask, adv = group(WORKED_LENGTHS)
    computed = {rule: grpo_ba.token_weights(mask, adv, 4, rule)[:, 0].tolist()
                for rule in grpo_ba.AGGREGATORS}
    assert_printed(table_after(read("docs/handout.md"), "Weight of one token of each answer"), computed)


def test_handouts_predict_table_is_blank_and_the_answers_are_what_grpo_ba_computes():
    blank = table_after(read("docs/handout.md"), "**Predict**")
    assert set(blank) >= set(grpo_ba.AGGREGATORS)
    assert all(cell == "" for rule in grpo_ba.AGGREGATORS for cell in blank[rule])
    answers = table_after(read("docs/lab-session-answers.md"), "## Step 1")
    assert_printed(answers, per_sign_numbers(FLIPPED_LENGTHS))


def test_handout_fits_one_page_with_the_formulas_and_the_papers_names():
    handout = read("docs/handout.md")
    assert len(handout.splitlines()) <= 70
    for formula in ("J_seq = (1/G)", "J_tok = (1 / sum_i L_i)", "J_BA  = (k/G)"):
        assert formula in handout
    assert "W+" in handout and "W-" in handout
    assert "*Sign-length coupling*" in handout and "*Sequence equal-weighting*" in handout
    assert "0.5 on the right answers is the unbiased" in handout


def test_lab_pages_use_the_papers_names_and_no_published_copy():
    for path in PAGES:
        text = read(path).lower()
        assert "devaluation" not in text, path
        assert "published copy" not in text, path
    session = read("docs/lab-session.md")
    assert "**sign-length coupling**" in session and "**sequence\n   equal-weighting**" in session


def test_lab_session_states_its_learning_objectives():
    session = read("docs/lab-session.md")
    section = session.split("## Learning objectives", 1)[1].split("\n## ", 1)[0]
    assert len(re.findall(r"^\d\. ", section, flags=re.M)) >= 5


def test_answers_stay_off_the_students_pages():
    answers, handout = read("docs/lab-session-answers.md"), read("docs/handout.md")
    only_in_answers = set(THREE_DECIMALS.findall(answers)) - set(THREE_DECIMALS.findall(handout))
    assert len(only_in_answers) >= 10                # the Predict table and both runs' numbers
    for page in ("docs/lab-session.md", "docs/handout.md"):
        assert set(THREE_DECIMALS.findall(read(page))) & only_in_answers == set(), page
    session = read("docs/lab-session.md")           # linked once, after the last step
    assert session.count("(lab-session-answers.md)") == 2
    assert session.index("(lab-session-answers.md)", session.index("**Step 4")) > 0


def test_every_link_of_the_lab_pages_resolves():
    for path in PAGES:
        for target in re.findall(r"\]\(([^)#]+)\)", read(path)):
            if "://" in target:
                continue
            assert os.path.exists(os.path.join(ROOT, os.path.dirname(path), target)), (path, target)
    assert "(lab-session.md)" in read("docs/teaching.md")


def test_every_course_command_of_the_lab_session_parses():
    """Steps 2 and 3: four runs of 5 steps of a rule by name, each given once, in its step (before
    the session the pre-lab check trains step 3's warm-up instead, so that no run's result is seen
    before it is predicted); after the session, one run of the student's own rule from the copy's
    exercises/math_core.py."""
    predict = " ".join(read("docs/lab-session.md").split("## Predict, then run", 1)[1].split())
    commands = [line.strip() for line in read("docs/lab-session.md").splitlines()
                if line.strip().startswith("python grpo_ba.py")]
    by_name = [c for c in commands if "math_core.py:" not in c]
    assert len(set(by_name)) == len(by_name) == 4 and all(c in predict for c in by_name)
    for command in by_name:
        args = grpo_ba.parse_args(shlex.split(command)[2:])
        grpo_ba.check_args(args)
        assert args.steps == 5 and args.aggregator in grpo_ba.AGGREGATORS and args.threads == 1
    own = [c for c in commands if "math_core.py:" in c]
    assert len(own) == 1
    argv = shlex.split(own[0])[2:]
    spec = argv[argv.index("--aggregator") + 1]
    path, function = spec.split(":")
    assert path == "exercises/math_core.py" and function in ("aggregate_token", "aggregate_sequence",
                                                              "aggregate_balanced")
    import exercises.math_core
    assert callable(getattr(exercises.math_core, function))
    rest = argv[:argv.index("--aggregator")] + argv[argv.index("--aggregator") + 2:]
    assert grpo_ba.parse_args(rest).steps == 5


def test_the_prelab_output_shown_names_every_check():
    session = read("docs/lab-session.md")
    assert "python -m exercises.prelab_check" in session
    for name, _ in prelab_check.CHECKS:
        assert f"ok    {name}: " in session, name


# ------------------------------------------------------------------ the students' questions (issue 75)

def questions():
    """lab-session.md's "Questions students ask": {the question, bold: its answer, on one line}."""
    section = read("docs/lab-session.md").split("## Questions students ask", 1)[1].split("\n## ", 1)[0]
    found = re.findall(r"\*\*(.+?)\*\*(.*?)(?=\n\n|\Z)", section, flags=re.S)
    return {question: " ".join(answer.split()) for question, answer in found}


def answer_to(words):
    return next(answer for question, answer in questions().items() if words in question)


def test_the_students_questions_are_each_answered_and_the_other_pages_point_there():
    asked = list(questions())
    for words in ("another seed train first", "accuracy band", "rerun overwrite", "may be deleted",
                  'sign_weights(..., "token")'):
        assert any(words in question for question in asked), words
    for page in ("docs/handout.md", "docs/teaching.md", "docs/lab-session-answers.md"):
        assert '"Questions students ask"' in read(page), page


def test_the_warm_up_answer_gives_the_designs_steps_and_a_committed_time():
    from toy_tasks import designs
    said = answer_to("another seed train first")
    assert f"{designs.warmup_steps('demo')} supervised steps in the demo's world" in said
    assert f"({designs.warmup_steps('long-right')} in `long-right`'s)" in said
    seconds = re.search(r"(\d+)-step warm-up took (\d+) s", said)
    log = read("assets/lab-plan-times/log.txt")
    assert int(seconds.group(1)) == designs.warmup_steps("long-right")
    assert f"design long-right, seed 80: trained now ({seconds.group(2)} s)" in log     # the committed log's
    assert "longer than the GRPO steps" in said and "demo-s22.safetensors" in said
    assert list(designs.DESIGNS["demo"]["shipped"]) == [22]


def test_the_band_answer_is_the_designs_band_and_seed_22s_shipped_start():
    from toy_tasks import designs
    said = answer_to("accuracy band")
    assert f"[{designs.BAND[0]:.2f}, {designs.BAND[1]:.2f}]" in said
    start = f"{designs.DESIGNS['demo']['step0']['accuracy']:.3f}"
    assert f"stopped at step 470, at {start}" in said
    assert f"stopped at step 470 at greedy accuracy {start}" in read("docs/toy-designs.md")
    assert "with no accuracy band" in said
    with open(os.path.join(ROOT, "toy_tasks", "model.py")) as f:
        assert "with no accuracy band" in f.read()                    # the line a trained warm-up prints


@pytest.mark.slow                                     # two 1-step runs of the toy
def test_the_rerun_answer_says_what_the_code_does(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    tiny = ["--aggregator", "token", "--steps", "1", "--prompts-per-step", "2", "--group-size", "2",
            "--eval-every", "1000", "--eval-prompts", "2", "--max-new-tokens", "8", "--threads", "1",
            "--output-dir", "run"]
    assert grpo_ba.main(tiny) == 0
    first = read_json_lines(tmp_path / "run" / "metrics.jsonl")
    code = grpo_ba.main(tiny[:-2] + ["--lr", "3e-4", "--output-dir", "run"])      # the same folder again
    capsys.readouterr()
    said = answer_to("rerun overwrite")
    replaced = code == 0 and len(read_json_lines(tmp_path / "run" / "metrics.jsonl")) == len(first)
    with open(tmp_path / "run" / "args.json") as f:
        replaced = replaced and '"lr": 0.0003' in f.read()
    assert replaced == ("replaces it without asking" in said), (code, said)
    assert "grpo_ba_support/run.py" in said


def read_json_lines(path):
    with open(path) as f:
        return [line for line in f if line.strip()]


def test_the_delete_answer_keeps_the_shipped_warm_up_and_names_the_cache():
    said = answer_to("may be deleted")
    assert "`runs/`" in said and "`~/.cache/grpo_ba`" in said and "`$GRPO_BA_CACHE`" in said
    assert "Not `toy_tasks/warmups/`" in said


def test_sign_weights_by_name_measures_grpo_bas_rule_and_a_function_measures_that_function():
    said = answer_to('sign_weights(..., "token")')
    assert "not the `aggregate_token` in the student's `exercises/math_core.py`" in said
    assert grpo_ba.aggregator_function("token") is grpo_ba.aggregate_token
    mask = grpo_ba.mask_from_lengths(torch.tensor(WORKED_LENGTHS))
    advantages = grpo_ba.group_advantages(torch.tensor([1.0, 0.0, 1.0, 0.0]), 4)
    by_name = grpo_ba.sign_weights(mask, advantages, 4, "token")
    own = grpo_ba.sign_weights(mask, advantages, 4, grpo_ba.aggregate_sequence)    # "your" rule, passed
    assert torch.allclose(by_name[0], torch.tensor(0.3)) and torch.allclose(own[0], torch.tensor(0.5))


def test_the_answers_page_says_balanced_loss_is_zero_up_to_rounding():
    answers = " ".join(read("docs/lab-session-answers.md").split())
    assert "0 to 8 decimals" not in answers and "`pg_loss` 0 up to float32 rounding" in answers
