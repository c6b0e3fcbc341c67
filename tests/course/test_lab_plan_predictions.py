"""Each prediction of the lab session comes before anything of the session shows its answer
(issue 75: an instructor found "predict" steps asking what Parts 2 and 3 had already shown).
The predictions of steps 2 and 3 are written at minute 10, from the formulas alone, before the
worked example (handout, notebook Part 2, docs/lab-session.md), and the runs then check them;
what a run shows is told after its command, never before; the notebook's questions that come
after the outputs answering them ask to explain, not to predict; the interlude gives none of
the browser page's outcomes before the student drags."""
import json
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


def flat(text):
    return " ".join(text.split())


def notebook_cells():
    return json.loads(read("exercises/balanced_aggregation_lab.ipynb"))["cells"]


def source(cell):
    return "".join(cell["source"])


def test_the_session_asks_for_the_runs_predictions_before_the_worked_example():
    session = read("docs/lab-session.md")
    predict = session.split("## Predict, then run", 1)[1].split("\n## ", 1)[0]
    first = predict.index("**Predictions first**")
    assert first < predict.index("**Step 1") < predict.index("**Step 2") < predict.index("**Step 3")
    said = flat(predict[first:predict.index("**Step 1")])
    assert "minute 10" in said and "before its worked example" in said
    for world in ("`demo`", "`long-right`"):
        assert world in said
    assert "above, at or below 0.5" in said and "`pg_loss`" in said
    plan = next(line for line in session.splitlines() if line.startswith("| 10-25 |"))
    assert plan.index("predictions for steps 2 and 3") < plan.index("worked example")


def test_steps_2_and_3_check_the_written_predictions_and_tell_what_a_run_shows_after_its_command():
    predict = read("docs/lab-session.md").split("## Predict, then run", 1)[1].split("\n## ", 1)[0]
    step2 = predict.split("**Step 2", 1)[1].split("**Step 3", 1)[0]
    step3 = predict.split("**Step 3", 1)[1].split("**Step 4", 1)[0]
    for step, world in ((step2, "`demo`"), (step3, "`long-right`")):
        asked = flat(step.split("\n    python grpo_ba.py", 1)[0])
        assert "Take out your predictions" in asked and "Predict token's" not in asked, asked
    # the new prediction of step 2 (the last column) is asked before the line that prints it,
    # and what the runs printed there is told only after it
    printing = step2.index("\n    python -c ")
    assert re.search(r"one more\s+prediction", step2).start() < printing < step2.index("4 of the 5 steps printed")
    assert re.search(r"every\s+step\s+printed\s+a\s+number", step3).start() > step3.index("\n    python grpo_ba.py --design long-right")


def test_the_handout_puts_its_prediction_before_the_tables_that_answer_it():
    handout = read("docs/handout.md")
    first = handout.index("**Predict first**")
    assert first < handout.index("**Where the gradient goes**") < handout.index("**Worked example**")
    assert "before reading on" in flat(handout[first:handout.index("**Where the gradient goes**")])


def test_the_notebooks_prediction_comes_before_its_worked_example_and_any_rule_value():
    cells = notebook_cells()
    part2 = next(i for i, c in enumerate(cells) if source(c).startswith("## Part 2."))
    text = source(cells[part2])
    assert text.index("**Predict first**") < text.index("**By hand**")
    first_rule_value = next(i for i, c in enumerate(cells) if c["cell_type"] == "code" and "J = " in source(c))
    assert part2 < first_rule_value


def test_questions_after_their_answers_output_ask_to_explain_not_to_predict():
    cells = notebook_cells()
    training = next(i for i, c in enumerate(cells) if "grpo_ba.train(" in source(c))
    after = [source(c) for c in cells[training:] if c["cell_type"] == "markdown" and "**Question" in source(c)]
    assert len(after) >= 2
    for question in after:
        assert not re.search(r"\bpredict", question, flags=re.I), question


def test_the_interlude_gives_none_of_the_pages_outcomes_before_the_student_drags():
    interlude = next(source(c) for c in notebook_cells() if source(c).startswith("### Interlude"))
    steps = interlude.split("1. **Equal lengths**", 1)[1].split("docs/teaching.md", 1)[0]
    for outcome in ("agree.", "falls below half", "stay at half", "rises above 0", "count less", "no update",
                    "the shares do not"):
        assert outcome not in flat(steps), outcome
    assert "before you drag" in flat(interlude)
