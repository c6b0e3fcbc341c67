"""The course's pages state the demo as it is: its seed in every run directory they name, its
step-0 accuracy, the world's forced fraction, and one wrong/right length figure, the one the
demo's story prints (the slow test of tests/course/test_demo.py checks that the README's
figures are the printed ones)."""
import os
import re

import pytest

from toy_tasks import designs
from toy_tasks.arithmetic import ToyWorld

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAGES = ("README.md", "docs/code-tour.md", "docs/teaching.md", "docs/lab-session.md", "docs/lab-session-answers.md",
         "docs/handout.md", "exercises/README.md")
DEMO = designs.DESIGNS["demo"]
DEMO_SEED = next(iter(DEMO["seeds"].values()))[0]


def read(page):
    with open(os.path.join(REPO, page)) as f:
        return f.read()


@pytest.mark.parametrize("page", PAGES)
def test_every_demo_run_directory_a_page_names_is_the_demos_seed(page):
    seeds = re.findall(r"runs/demo(?:-[a-z]+)?-s(\d+)", read(page))
    assert all(int(seed) == DEMO_SEED for seed in seeds), (page, seeds)


def test_the_code_tour_states_the_demos_step_0_accuracy_and_forced_fractions():
    text = " ".join(read("docs/code-tour.md").split())
    assert f"greedy accuracy starts at {DEMO['step0']['accuracy']:.3f}" in text
    assert f"`force_frac`: {DEMO['flags']['force_frac']} in the demo's world, {ToyWorld().force_frac} in" in text
    assert "30% of" not in text and "0.53" not in text


def test_the_demo_world_has_one_wrong_over_right_figure_and_it_is_the_readme_tables():
    readme = read("README.md")
    right, wrong = (re.search(rf"{side}-answer length, step 0 -> last 10\s+([\d.]+)", readme).group(1)
                    for side in ("right", "wrong"))
    figure = f"{float(wrong) / float(right):.2f}"
    assert f"{figure} times as long as right ones" in " ".join(readme.split())
    for page in PAGES[1:] + ("docs/explore.html",):
        quoted = re.findall(r"(?:wrong/right|the demo's world starts at) (\d\.\d\d)", " ".join(read(page).split()))
        assert all(q == figure for q in quoted), (page, quoted)
    assert "2.49" not in readme and "3.46" not in readme


def code_lines(name):
    """Lines of code (no docstring, comment or blank line) in the body of grpo_ba.py's `name`."""
    import ast
    source = read("grpo_ba.py")
    node = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == name)
    body = node.body[1:] if isinstance(node.body[0], ast.Expr) else node.body
    lines = source.splitlines()[body[0].lineno - 1:node.end_lineno]
    return sum(1 for line in lines if line.strip() and not line.strip().startswith("#"))


def test_the_lab_sessions_exercise_timing_states_the_exercises_real_size():
    sizes = {name: code_lines(name) for name in ("group_advantages", "_per_response_sums", "aggregate_token",
                                                 "aggregate_sequence", "aggregate_balanced", "sign_weights")}
    session = " ".join(read("docs/lab-session.md").split())
    assert (f"the five functions take {sum(sizes.values())} lines of code in `grpo_ba.py` (group_advantages "
            f"{sizes['group_advantages']}, the shared row sums {sizes['_per_response_sums']}, aggregate_token "
            f"{sizes['aggregate_token']}, aggregate_sequence {sizes['aggregate_sequence']}, aggregate_balanced "
            f"{sizes['aggregate_balanced']}, sign_weights {sizes['sign_weights']})") in session
    assert f"The five are {sum(sizes.values())} lines of code" in " ".join(read("exercises/README.md").split())
