"""verifier.py and toy_tasks/ at the top of a clone lead into grpo_ba_kit: the same objects,
and two commands that show what the reward reads and what the toy asks."""
import os
import re
import subprocess
import sys

import grpo_ba_kit.toy_tasks
import grpo_ba_kit.verifier

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_import_verifier_in_a_clone_gives_the_packages_functions():
    import verifier
    for name in verifier.__all__:
        assert getattr(verifier, name) is getattr(grpo_ba_kit.verifier, name), name


def test_import_toy_tasks_in_a_clone_gives_the_packages_objects():
    import toy_tasks
    for name in toy_tasks.__all__:
        assert getattr(toy_tasks, name) is getattr(grpo_ba_kit.toy_tasks, name), name


def run(*argv):
    return subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_python_verifier_py_prints_the_reward_then_what_it_read():
    right = run("verifier.py", "so the total is \\boxed{\\frac{7}{2}}", "3.5")
    assert right.returncode == 0, right.stderr
    assert right.stdout.splitlines() == ["1", "completion's answer: '\\\\frac{7}{2}' -> 7/2", "gold: '3.5' -> 7/2"]
    wrong = run("verifier.py", "Answer: 41", "42", "\\sqrt{8}")
    assert wrong.stdout.splitlines() == ["0", "completion's answer: '41' -> 41", "gold: '42' -> 42",
                                         "gold: '\\\\sqrt{8}' -> 2*sqrt(2)"]


def test_python_m_toy_tasks_scores_each_corpus_answer_as_its_last_sum_against_the_gold():
    done = run("-m", "toy_tasks", "--design", "loop-gap", "--problems", "6", "--seed", "1")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("design loop-gap: ToyWorld(") and "slip_style='loop'" in lines[0]
    problems = [re.match(r"(\d+)\+(\d)\+(\d)=\s+gold (\d+); the corpus slips here (\d+)%", line) for line in lines]
    problems = [m for m in problems if m]
    assert len(problems) == 6
    for m in problems:
        a, c, d, gold, slips = map(int, m.groups())
        assert gold == a + c + d and slips == (70 if c > d else 10)
    answers = [re.match(r"\s+reward (\d)\s+(\d+) tokens  (.*)$", line) for line in lines]
    answers = [m for m in answers if m]
    assert len(answers) == 18
    golds = [int(m.group(4)) for m in problems for _ in range(3)]
    for m, gold in zip(answers, golds):
        reward, tokens, response = int(m.group(1)), int(m.group(2)), m.group(3)
        assert reward == int(int(response.split()[-1]) == gold) and tokens == len(response) + 1
    assert {m.group(1) for m in answers} == {"0", "1"}      # both kinds show up in 18 answers
