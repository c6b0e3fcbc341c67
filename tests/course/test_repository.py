"""The repository stands alone and reads as its layout promises: no tracked file points
outside it, every citation of the math (`docs/method.md §N`) names a section that exists,
the README is one page, and the project's modules import each other without a cycle."""
import ast
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Built from pieces so that this file does not match its own pattern.
OUTSIDE_PATH = re.compile(r"(?<![\w.-])(?:\.\./)*" + "shar" + r"ed/")
BARE_METHOD_CITATION = re.compile(r"(?<![\w/.])meth" + "od §")
METHOD_CITATION = re.compile(r"docs/method\.md`?\s*§(\d+)")


def tracked_text_files():
    try:
        names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    for name in names.decode().split("\0"):
        path = os.path.join(ROOT, name)
        if not name or not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            data = f.read()
        if b"\0" in data:                     # binary (PNG, checkpoints)
            continue
        yield name, data.decode("utf-8", errors="replace")


def offending_lines(pattern):
    return [f"{name}:{number}: {line.strip()}"
            for name, text in tracked_text_files()
            for number, line in enumerate(text.splitlines(), 1) if pattern.search(line)]


def test_no_tracked_file_refers_to_the_private_workspace():
    assert offending_lines(OUTSIDE_PATH) == []


def test_the_math_is_cited_as_docs_method_md():
    assert offending_lines(BARE_METHOD_CITATION) == []


def test_every_cited_section_of_docs_method_md_exists():
    with open(os.path.join(ROOT, "docs", "method.md")) as f:
        sections = set(re.findall(r"^## §(\d+) ", f.read(), flags=re.M))
    assert sections >= {"1", "2", "3", "4", "5", "6", "7"}
    dangling = [f"{name}: §{n}" for name, text in tracked_text_files()
                for n in METHOD_CITATION.findall(text) if n not in sections]
    assert dangling == []


def test_the_patterns_catch_what_they_are_for():
    assert OUTSIDE_PATH.search("see " + "shar" + "ed/method.md") and OUTSIDE_PATH.search("../" + "shar" + "ed/x")
    assert not OUTSIDE_PATH.search("torch.multiprocessing.share_memory_")
    assert BARE_METHOD_CITATION.search("(meth" + "od §3)") and not BARE_METHOD_CITATION.search("docs/method.md §3")
    assert METHOD_CITATION.findall("`docs/method.md` §6 and docs/method.md §2") == ["6", "2"]


# ------------------------------------------------------------------ one page, a layout by role

README_MAX_LINES = 150          # 120 before issue 51 (the world told, both biases read, the seed choice); 140 before issue 52 (the regime figure)
TOP_LEVEL_MODULES_MAX = 4
TOP_LEVEL_ENTRIES_MAX = 18
CARD = ("grpo_ba.py", "verifier.py", "toy_tasks", "tests", "requirements.txt", "README.md")
PACKAGES = ("grpo_ba_lab", "grpo_ba_lab/plumbing", "grpo_ba_lab/analysis", "grpo_ba_lab/integrations",
            "grpo_ba_support", "toy_tasks")


def test_the_readme_is_one_page():
    with open(os.path.join(ROOT, "README.md")) as f:
        lines = f.read().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail to docs/"


def test_few_modules_stay_at_the_top_and_each_package_says_what_it_holds():
    top = sorted(n for n in os.listdir(ROOT) if n.endswith(".py") and n not in ("setup.py", "conftest.py"))
    assert "grpo_ba.py" in top and len(top) <= TOP_LEVEL_MODULES_MAX, top
    for package in PACKAGES:
        with open(os.path.join(ROOT, package, "__init__.py")) as f:
            assert ast.get_docstring(ast.parse(f.read())), f"{package}/__init__.py has no docstring"


def test_the_top_level_shows_the_card_in_at_most_18_tracked_entries():
    try:
        names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    top = {name.split("/")[0] for name in names.splitlines() if not name.startswith(".")}
    assert set(CARD) <= top and len(top) <= TOP_LEVEL_ENTRIES_MAX, sorted(top)


def project_modules():
    """{dotted module name: file} for the top-level modules and the packages' modules."""
    modules = {n[:-3]: os.path.join(ROOT, n) for n in os.listdir(ROOT) if n.endswith(".py")}
    for package in PACKAGES:
        for name in os.listdir(os.path.join(ROOT, package)):
            if name.endswith(".py"):
                dotted = package.replace("/", ".") + ("" if name == "__init__.py" else f".{name[:-3]}")
                modules[dotted] = os.path.join(ROOT, package, name)
    return modules


def _imports(tree, known, skip=lambda node: False):
    """Project modules imported anywhere in `tree` (function-level imports count), except
    inside the nodes `skip` accepts."""
    found, stack = set(), [tree]
    while stack:
        node = stack.pop()
        if skip(node):
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:                       # `from grpo_ba_lab.plumbing import run_io` imports a module
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in known else node.module)
        stack.extend(ast.iter_child_nodes(node))
    return {name for name in found if name in known}


def import_graph(modules):
    """module -> the project modules it imports, anywhere in it (function-level imports too)."""
    graph = {}
    for name, path in modules.items():
        with open(path) as f:
            tree = ast.parse(f.read())
        graph[name] = _imports(tree, modules) - {name}
        parts = name.split(".")                            # importing a package's module runs its __init__s first
        graph[name] -= {".".join(parts[:i]) for i in range(1, len(parts))}
    return graph


def find_cycle(graph):
    """One import cycle as [a, b, ..., a], or None."""
    state = {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt, path + [nxt])
                if cycle:
                    return cycle
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state:
            cycle = visit(start, [start])
            if cycle:
                return cycle
    return None


def test_the_cycle_finder_finds_cycles_through_function_level_imports():
    tree = ast.parse("import a\ndef f():\n    from pkg import b\n")
    assert _imports(tree, {"a", "pkg", "pkg.b"}) == {"a", "pkg.b"}
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a"}}) is None


def test_no_import_cycles_among_the_project_modules():
    graph = import_graph(project_modules())
    assert {"grpo_ba", "grpo_ba_lab.plumbing.lm_setup", "grpo_ba_lab.analysis.plots", "verifier", "toy_tasks"} <= set(graph)
    assert "grpo_ba_support.run" in graph["grpo_ba"] and "grpo_ba" in graph["grpo_ba_lab.analysis.plots"]   # the graph is real
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_plumbing_never_imports_the_algorithm_or_what_studies_it():
    graph = import_graph(project_modules())
    for name, imported in graph.items():
        if name.startswith("grpo_ba_lab.plumbing"):
            assert not {m for m in imported if m == "grpo_ba" or m.startswith(("grpo_ba_lab.analysis",
                                                                                 "grpo_ba_lab.integrations"))}, name


# ------------------------------------------------------------------ the course, and the lab around it

# The course: the design card's files and the few modules they need. It never imports the lab.
COURSE = ("grpo_ba", "grpo_ba_support", "grpo_ba_plots", "verifier", "toy_tasks")
COURSE_MAX_LINES = 3297          # measured 3,297 (issue 75: 3,291 after the third cut, then a dataset check), NOT 3,100.
# Cut: long-form prose now in docs/ (the toy world's worked example in code-tour.md, the answer
# grammar in verifier.md), shorter docstrings and comments, plots' imports; then the grammar's
# repeated shapes (one item reader, one left-hand-side pattern, checks from a table), verifier's
# marker scan, shared model loading, one ramble writer. Left: verifier.py and its grammar (645
# lines) for the dataset path (the toy is scored by toy_tasks.score_running_sums), and code the
# lab shares with the course (the toy world's lab settings, the parser's lab hooks, run.json)
# that would move only with the lab's modules. Before: 3,425 and 3,492 (issue 75), 3,315
# (issue 66), 3,011 (issue 51).


def course_modules():
    return {name: path for name, path in project_modules().items() if name.split(".")[0] in COURSE}


def test_no_course_module_imports_the_lab_anywhere_in_any_function():
    modules = project_modules()
    assert {"grpo_ba", "toy_tasks.designs", "toy_tasks.model", "grpo_ba_lab.train"} <= set(modules)
    offenders = {name: sorted(m for m in imported if m.startswith("grpo_ba_lab"))
                 for name, imported in import_graph(modules).items() if name in course_modules()}
    assert {name: found for name, found in offenders.items() if found} == {}


def test_the_lab_walk_would_see_an_import_hidden_in_a_function():
    tree = ast.parse("def main():\n    if True:\n        from grpo_ba_lab.analysis import sweep\n")
    assert _imports(tree, {"grpo_ba_lab.analysis.sweep", "grpo_ba_lab.analysis"}) == {"grpo_ba_lab.analysis.sweep"}


def import_closure(start, graph):
    seen, todo = set(), [start]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(graph.get(name, ()))
    return seen


def test_everything_grpo_ba_py_imports_adds_up_to_at_most_3297_lines():
    modules = project_modules()
    closure = import_closure("grpo_ba", import_graph(modules))
    assert {"grpo_ba_support.run", "grpo_ba_support.answer_grammar", "toy_tasks.model"} <= closure       # the walk is real
    lines = {name: len(_source(os.path.relpath(modules[name], ROOT)).splitlines()) for name in closure}
    assert sum(lines.values()) <= COURSE_MAX_LINES, sorted(lines.items(), key=lambda kv: -kv[1])


# ------------------------------------------------------------------ one readable script

SCRIPT_MAX_LINES = 586          # 580 before issue 65 (your own rule); 549 before issue 51
LINE_MAX_CHARS = 100
TRAIN_MAX_LINES = 40
SHORT_LINED = ("grpo_ba.py", "grpo_ba_support/args.py", "grpo_ba_plots.py", "grpo_ba_support/task.py", "verifier.py",
               "grpo_ba_support/own_rule.py",
               "toy_tasks/__init__.py", "toy_tasks/__main__.py", "toy_tasks/model.py", "toy_tasks/designs.py",
               "grpo_ba_lab/train.py", "grpo_ba_lab/lab_args.py", "grpo_ba_lab/plumbing/training_run.py",
               "grpo_ba_lab/analysis/sweep.py", "grpo_ba_lab/analysis/report.py", "grpo_ba_lab/__init__.py")


def _source(name):
    with open(os.path.join(ROOT, name)) as f:
        return f.read()


def test_grpo_ba_py_is_read_in_one_sitting_at_most_586_lines():
    assert len(_source("grpo_ba.py").splitlines()) <= SCRIPT_MAX_LINES


@pytest.mark.parametrize("name", SHORT_LINED)
def test_no_line_of_the_script_or_its_command_line_is_over_100_characters(name):
    long_lines = [n for n, line in enumerate(_source(name).splitlines(), 1) if len(line) > LINE_MAX_CHARS]
    assert long_lines == [], f"{name}: lines {long_lines}"


def test_the_training_loop_fits_on_one_screen_train_at_most_40_lines():
    train = next(node for node in ast.parse(_source("grpo_ba.py")).body
                 if isinstance(node, ast.FunctionDef) and node.name == "train")
    assert train.end_lineno - train.lineno + 1 <= TRAIN_MAX_LINES


def test_grpo_ba_py_is_laid_out_in_the_papers_order():
    titles = re.findall(r"^# (\d)\. (\S+)", _source("grpo_ba.py"), flags=re.M)
    assert [title for _, title in titles] == ["Group-relative", "The", "The", "Rollout:", "The", "Diagnostics:",
                                              "The", "main:"]
    assert [int(n) for n, _ in titles] == list(range(1, 9))


@pytest.mark.slow
def test_importing_grpo_ba_and_the_integrations_leaves_progress_bars_as_they_were():
    code = ("import importlib\n"
            "from transformers.utils import logging\n"
            "from huggingface_hub import utils as hub\n"
            "before = (logging.is_progress_bar_enabled(), hub.are_progress_bars_disabled())\n"
            "import grpo_ba, grpo_ba_support.args, grpo_ba_lab.analysis.sweep, grpo_ba_lab.analysis.report\n"
            "import grpo_ba_lab.train\n"
            "for name in ('grpo_ba_lab.integrations.trl_balanced', 'grpo_ba_lab.integrations.verl_balanced'):\n"
            "    try:\n"
            "        importlib.import_module(name)\n"
            "    except ImportError:\n"
            "        pass\n"
            "after = (logging.is_progress_bar_enabled(), hub.are_progress_bars_disabled())\n"
            "from grpo_ba_support import task\n"
            "with task.no_progress_bars():\n"
            "    during = logging.is_progress_bar_enabled()\n"
            "restored = (logging.is_progress_bar_enabled(), hub.are_progress_bars_disabled())\n"
            "print(before == after == restored == (True, False), during)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_DISABLE_PROGRESS_BARS", "TQDM_DISABLE")}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "False"]


# ------------------------------------------------------------------ one name per bias

BIAS_NAMED = ("grpo_ba.py", "grpo_ba_plots.py", "grpo_ba_support/args.py", "grpo_ba_support/run.py", "docs/method.md",
              "docs/code-tour.md", "docs/metrics.md", "docs/outputs.md")


def test_the_course_calls_the_two_biases_by_the_papers_names_only():
    texts = {name: _source(name).lower() for name in BIAS_NAMED}
    assert not [name for name, text in texts.items() if "devaluation" in text]
    for name in ("grpo_ba.py", "grpo_ba_plots.py", "docs/method.md", "docs/code-tour.md"):
        assert "sign-length coupling" in " ".join(texts[name].split()), name
        assert "sequence equal-weighting" in " ".join(texts[name].split()), name
    described = sum(" ".join(text.split()).count("a long answer's tokens count less") for text in texts.values())
    assert described == 1                     # what sequence equal-weighting does, said once, by its name
