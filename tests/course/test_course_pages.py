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
