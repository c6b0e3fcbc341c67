"""Write a student's copy of the course: everything the course and its lab session run and
link to, without the lab, the research code or the instructor's answers page.

    python -m exercises.student_copy DIR      # then, in DIR:
    python -m exercises.prelab_check          # READY: the demo, the notebook and the runs work
    python -m exercises.check                 # the student's exercises/math_core.py, per function

The copy keeps grpo_ba.py whole, because the first hour of docs/lab-session.md (the pre-lab
check, the notebook, predict-then-run) runs on its five functions. The students write the same
five in the copy's exercises/math_core.py, whose stubs say here, in each docstring, which
claims the checker runs on them (read from tests/course/test_math_core.py when the copy is
written); `python -m exercises.check` checks that file, and a rule written there trains a real
run (`python grpo_ba.py --aggregator exercises/math_core.py:aggregate_token ...`).

What is copied: the course's code (COURSE), and the course pages (COURSE_PAGES) with every
page and asset they link to, but for the instructor's files (LEFT_OUT) and the pages of the lab
(LAB_PAGES: what is built on the course, in grpo_ba_lab/, which the copy does not hold). Every
reference in a copied page is then made true in the copy:

- a link to a file the copy leaves out becomes plain text that names the file in the course
  repository, so no link of the copy is broken;
- a file, folder or module the copy lacks, named in a page (a path such as
  `scripts/time_lab_plan.py`, a command such as `python -m grpo_ba_lab.train`), is marked
  "(in the course repository)" after its code span (", in the course repository" when a parenthesis
  closes there, "(in the course repository; ..." when one opens there, and "the course repository's"
  before it when a possessive follows), or, on a command line, with a trailing `# in the course
  repository` comment; once: not where its clause already says so, and never
  what the student writes or a run writes (STUDENTS), though the instructor's checkout may hold it;
- README.md's way to run the repository's whole test suite (the first paragraph of its "Run the
  tests" and the command after it) becomes what the copy can run: the checker, or pytest on the
  claims file.
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from exercises.check import FUNCTIONS  # noqa: E402  (the five, in the order of exercises/README.md)

COURSE = ("grpo_ba.py", "grpo_ba_plots.py", "verifier.py", "grpo_ba_support", "toy_tasks", "exercises",
          "tests/conftest.py", "tests/course/test_math_core.py", "LICENSE", "CITATION.cff",
          "requirements.txt", "requirements/lock.txt", "pyproject.toml")
# The pages a student reads in the course and the session; each is copied with what it links to.
COURSE_PAGES = ("README.md", "docs/lab-session.md", "docs/handout.md", "docs/method.md", "docs/code-tour.md",
                "docs/explore.html", "docs/teaching.md", "docs/install.md", "exercises/README.md",
                "exercises/balanced_aggregation_lab.ipynb")
LEFT_OUT = ("docs/lab-session-answers.md", "exercises/student_copy.py")      # the instructor's
# The lab's pages (docs/lab.md: what is built on the course) and the repository's index of every
# page: about grpo_ba_lab/, TRL, verl and GPUs, none of which the copy holds. A course page's link
# to one of them becomes plain text naming it in the course repository.
LAB_PAGES = ("docs/README.md", "docs/lab.md", "docs/trl.md", "docs/verl.md", "docs/gpu-rollouts.md",
             "docs/real-models-gpu.md", "docs/diagnose.md")
ELSEWHERE = "in the course repository"
# README.md's way to run the tests (its section's first paragraph and command), as the copy has it:
# the copy holds the claims file of the exercises, not the suite (requirements/dev.txt, the lab's tests).
README_TESTS = re.compile(r"\n## Run the tests\n\n((?:[^\n]+\n)+\n(?: {4}[^\n]*\n)+)")
COPY_TESTS = """This copy holds the course's claims about the five functions of the exercises,
`tests/course/test_math_core.py`; the whole suite is in the course repository
([docs/install.md](docs/install.md)). From this folder:

    python -m exercises.check --solution                 # the claims against grpo_ba.py: all pass
    python -m exercises.check                            # the same claims against your exercises/math_core.py
    python -m pytest -q tests/course/test_math_core.py   # the claims file as pytest runs it (on grpo_ba.py)"""
CLAIMS = os.path.join("tests", "course", "test_math_core.py")
MARKDOWN_LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")
HTML_LINK = re.compile(r"<a href=\"([^\"]+)\">(.*?)</a>", re.S)
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "runs", ".ipynb_checkpoints", "my_answers.py")
# What the pages tell the student to write (exercises/README.md, docs/code-tour.md) and where a run
# writes: never the course repository's, so never copied (IGNORE) nor marked as missing.
STUDENTS = ("my_rules.py", "exercises/my_answers.py", "runs")


def _local(target: str) -> str | None:
    """The file part of a relative link (None for a URL, an anchor or a data: link)."""
    if "://" in target or target.startswith(("#", "data:", "mailto:")):
        return None
    return target.split("#", 1)[0] or None


def page_text(path: str) -> str:
    """A page's text; a notebook's markdown cells, joined."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if path.endswith(".ipynb"):
        cells = json.loads(text)["cells"]
        return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    return text


def links(page: str, root: str = ROOT) -> list[str]:
    """Repository paths of the local files `page` (a path in `root`) links to."""
    text = page_text(os.path.join(root, page))
    targets = [m.group(3) for m in MARKDOWN_LINK.finditer(text)]
    if page.endswith(".html"):
        targets += [m.group(1) for m in HTML_LINK.finditer(text)]
    found = []
    for target in targets:
        local = _local(target)
        if local:
            found.append(os.path.normpath(os.path.join(os.path.dirname(page), local)))
    return found


def pages_to_copy() -> list[str]:
    """COURSE_PAGES and every file they link to (what a page links to is there to read)."""
    wanted = list(COURSE_PAGES)
    for page in COURSE_PAGES:
        wanted += [p for p in links(page) if os.path.exists(os.path.join(ROOT, p))]
    return sorted(set(wanted) - set(LEFT_OUT) - set(LAB_PAGES))


def unlink_missing(text: str, page: str, out: str) -> str:
    """`text` of `page` with each link whose file the copy `out` lacks turned into plain text."""
    def target_missing(target):
        local = _local(target)
        return local and not os.path.exists(os.path.join(out, os.path.dirname(page), local))

    def markdown(m):
        bang, label, target = m.groups()
        if not target_missing(target):
            return m.group(0)
        where = os.path.normpath(os.path.join(os.path.dirname(page), _local(target)))
        if not label.strip("` ") or label.strip("` ").endswith(os.path.basename(where)):
            if m.string[m.end():m.end() + 2] == "'s":                 # a possessive: name the place first
                return f"{_owner(m.string, m.start())}{where}"
            closing = m.string[m.end():m.end() + 1] == ")"            # the last thing inside a parenthesis
            return f"{where}, in the course repository" if closing else f"{where} (in the course repository)"
        return f"{label} ({where} in the course repository)"

    text = MARKDOWN_LINK.sub(markdown, text)
    if page.endswith(".html"):
        text = HTML_LINK.sub(lambda m: m.group(2) if target_missing(m.group(1)) else m.group(0), text)
    return text


# ------------------------------------------------------------------ references the copy lacks

PATH_LIKE = re.compile(r"(?<![\w./~$-])([\w.-]+(?:/[\w.-]+)+/?"                 # a/b, a/b/c.py, a/
                       r"|[\w.-]+/(?![\w.-])"                                   # a folder: grpo_ba_lab/
                       r"|[\w-]+(?:\.[\w-]+)*\.(?:py|md|txt|ipynb|html|sh|cff|toml))")   # a file: check.py
MODULE_LIKE = re.compile(r"(?<![\w./-])([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)")
RUN_MODULE = re.compile(r"python3? -m ([\w.]+)")
CODE_SPAN = re.compile(r"`(?:[^`\n]|\n(?![ \t]*\n))+`|<code>.*?</code>", re.S)    # no blank line in a span
HTML_COMMENT = re.compile(r"<!--.*?-->", re.S)
COMMAND_WORDS = ("python ", "python3 ", "pip ", "jupyter ", "cd ", "git ", "bash ", "sh ", "grep ", "export ",
                 "./", "from ", "import ", "$ ")


def _module_file(dotted: str, root: str) -> str | None:
    """The longest prefix of `dotted` that is a module or package in `root`, as a path; None if
    its first name is none (torch.nn, e.g., or a file name like README.md)."""
    parts, found = dotted.split("."), None
    for k in range(1, len(parts) + 1):
        base = os.path.join(root, *parts[:k])
        if os.path.isfile(base + ".py"):
            found = os.path.relpath(base + ".py", root)
        elif os.path.isfile(os.path.join(base, "__init__.py")):
            found = os.path.relpath(base, root)
        else:
            break
    return found


def in_course(path: str) -> bool:
    """Whether `path` (from the root) is the course repository's: there, and not the student's."""
    return (path.split(os.sep)[0] != ".." and os.path.exists(os.path.join(ROOT, path))
            and not any(path == s or path.startswith(s + os.sep) for s in STUDENTS))


def missing_references(line: str, page: str, out: str) -> list[tuple[int, int, str]]:
    """[(start, end, name)] of what `line` (of `page`) names that is in the course repository
    but not in the copy `out`: a path (from the root or the page's folder) or a module."""
    found = []
    for m in PATH_LIKE.finditer(line):
        token = m.group(1).rstrip(".,")
        if "://" in line[max(0, m.start() - 8):m.start() + 3]:
            continue
        for where in (token, os.path.join(os.path.dirname(page), token)):
            where = os.path.normpath(where)
            if not in_course(where):
                continue
            if not os.path.exists(os.path.join(out, where)):
                found.append((m.start(1), m.start(1) + len(token), where))
            break
    for pattern in (RUN_MODULE, MODULE_LIKE):
        for m in pattern.finditer(line):
            module = _module_file(m.group(1), ROOT)
            if module and in_course(module) and not os.path.exists(os.path.join(out, module)):
                found.append((m.start(1), m.end(1), m.group(1)))
    return sorted(set(found))


def mark_missing(text: str, page: str, out: str) -> str:
    """`text` of `page` with each file or module it names that the copy `out` lacks marked as
    being in the course repository (see the module's docstring)."""
    spans = [(m.start(), m.end()) for m in CODE_SPAN.finditer(text)]      # a span may wrap a line
    comments = [(m.start(), m.end()) for m in HTML_COMMENT.finditer(text)]
    points, ends, owners, offset, fenced = set(), set(), set(), 0, False
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\n")
        if body.lstrip().startswith("```"):
            fenced = not fenced
        misses = [(offset + a, offset + b) for a, b, _ in missing_references(body, page, out)
                  if not re.search(ELSEWHERE + r"[^)]*$", body[:a])]   # its clause says so already
        misses = [(a, b) for a, b in misses if not any(s <= a < e for s, e in comments)]
        if misses and (fenced or (body.startswith("    ") and body.lstrip().startswith(COMMAND_WORDS))):
            if ELSEWHERE not in body:
                ends.add((offset + len(body), " # " in body))                 # a command line
        else:
            for start, end in misses:
                after = next((e for s, e in spans if s <= start < e), end)
                after += len(re.match(r"\w*", text[after:]).group(0))     # `.ci/run`s: after the s
                if text[after:after + 2] == "'s":                         # a possessive: name the place first
                    begin = next((s for s, e in spans if s <= start < e), start)
                    if "course repository's" not in text[max(0, begin - 30):begin]:
                        owners.add(begin)
                elif ELSEWHERE not in text[after:after + len(ELSEWHERE) + 6]:
                    points.add(after)
        offset += len(line)
    # the last thing inside a parenthesis: `(see a.md, in the course repository)`, not `(see a.md (in ...))`
    inserts = [(p, f", {ELSEWHERE}" if text[p:p + 1] == ")" else f" ({ELSEWHERE})") for p in points]
    inserts += [(p, f" ({ELSEWHERE})" if commented else f"   # {ELSEWHERE}") for p, commented in ends]
    inserts += [(p, _owner(text, p)) for p in owners]
    for point, words in sorted(inserts, reverse=True):
        text = text[:point] + words + text[point:]
    # a parenthesis right after the mark joins it: `X (in the course repository; same flags)`, not `X (...) (same flags)`
    return re.sub(r"\(" + ELSEWHERE + r"\) \(", f"({ELSEWHERE}; ", text)


def _owner(text: str, at: int) -> str:
    """What goes before a name at `at` that `text` follows with a possessive: "the course
    repository's ", or "course repository's " where "the " comes just before the name."""
    return "course repository's " if text[max(0, at - 4):at].lower() == "the " else "the course repository's "


def copy_readme_tests(text: str) -> str:
    """README.md's text with its way to run the tests (README_TESTS) as the copy has it."""
    found = README_TESTS.search(text)
    if not found or "pip install" not in found.group(1):
        raise ValueError("README.md: no paragraph and command under '## Run the tests' to rewrite for the copy")
    return text[:found.start(1)] + COPY_TESTS + "\n" + text[found.end(1):]


# ------------------------------------------------------------------ what the checker checks


def _cases(node: ast.FunctionDef, constants: dict, name: str) -> list[dict]:
    """The parameters of each case pytest makes of test `node` from its
    `@pytest.mark.parametrize(names, values)` decorators ([{}] for none): one per claim the
    checker counts. `constants`: the claims file's module-level literals (RULES, e.g.)."""
    cases = [{}]
    for decorator in node.decorator_list:
        if not (isinstance(decorator, ast.Call) and getattr(decorator.func, "attr", "") == "parametrize"):
            continue
        names_node, values_node = decorator.args[:2]
        try:
            names = [n.strip() for n in ast.literal_eval(names_node).split(",")]
            values = (constants[values_node.id] if isinstance(values_node, ast.Name)
                      else ast.literal_eval(values_node))
        except (ValueError, KeyError, SyntaxError, TypeError):
            raise ValueError(f"{CLAIMS}: the cases of {name} are not literals; "
                             "list them literally so that a stub's docstring can count them") from None
        rows = [dict(zip(names, v if len(names) > 1 else (v,))) for v in values]
        cases = [{**case, **row} for case in cases for row in rows]
    return cases


def _words(value) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_words(v) for v in value) + "]"
    return f"{value:g}" if isinstance(value, float) else str(value)


# A test's name in words keeps Python's lower case; the math's one-letter names read as the pages
# write them, and so do the names and possessives the claims file's test names spell without marks.
SYMBOLS = {"g": "G", "l": "L", "a": "A", "p": "P", "nan": "NaN"}
PHRASES = {"dr grpo": "Dr. GRPO", "papers binary": "paper's binary", "signs token": "sign's token"}


def _headline(test_name: str) -> str:
    """`test_token_loss_at_ratio_one_is_minus_sum_a_l_over_sum_l` -> `token loss at ratio one is
    minus sum A L over sum L`."""
    words = " ".join(SYMBOLS.get(word, word) for word in test_name.removeprefix("test_").split("_"))
    for plain, marked in PHRASES.items():
        words = re.sub(rf"\b{plain}\b", marked, words)
    return words


def claim_cases(claims_path: str = os.path.join(ROOT, CLAIMS)) -> dict:
    """{exercise function: [(headline, case, raises)]} from the `@checks(...)` tags of the claims
    file, one entry per case the checker runs, as `python -m exercises.check` counts them: the
    claim's test name in words; the case's parameters, ((name, value in words), ...), but the
    expected values and a per-rule tag's rule, which is the function's own; and the exception it
    expects (None when it expects none)."""
    with open(claims_path, encoding="utf-8") as f:
        source = f.read()
    tree = ast.parse(source)
    constants = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                constants[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    found = {name: [] for name in FUNCTIONS}
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        tags = [d for d in node.decorator_list if isinstance(d, ast.Call)
                and getattr(d.func, "id", "") == "checks"]
        if not tags:
            continue
        raised = re.search(r"pytest\.raises\((\w+)", ast.get_source_segment(source, node))
        for case in _cases(node, constants, node.name):
            for tag in tags:
                for arg in tag.args:
                    pattern = arg.value
                    try:
                        name = pattern.format(**case)
                    except KeyError:
                        raise ValueError(f"{CLAIMS}: {node.name}'s tag {pattern!r} names a parameter "
                                         "it lacks") from None
                    if name not in found:
                        continue
                    shown = tuple((key, _words(value)) for key, value in case.items()
                                  if key != "expected" and "{" + key + "}" not in pattern)
                    found[name].append((_headline(node.name), shown, raised.group(1) if raised else None))
    return found


def claims_by_function(claims_path: str = os.path.join(ROOT, CLAIMS)) -> dict:
    """{exercise function: [claim in words]}, one per case the checker runs (claim_cases)."""
    return {name: [headline + (f" ({_case_words(case)})" if case else "")
                   + (f" (it must raise {raises})" if raises else "") for headline, case, raises in cases]
            for name, cases in claim_cases(claims_path).items()}


def _case_words(case: tuple) -> str:
    return ", ".join(f"{key} {value}" for key, value in case)


def _and(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def claim_lines(cases: list) -> list[str]:
    """One line per claim of the claims file, its cases together: `sign weights of the worked
    example (3 claims: rule token, sequence and balanced)`, not three lines that differ in a word."""
    grouped = []                                        # [(headline, raises, [case])], in order
    for headline, case, raises in cases:
        if grouped and grouped[-1][:2] == (headline, raises):
            grouped[-1][2].append(case)
        else:
            grouped.append((headline, raises, [case]))
    lines = []
    for headline, raises, shown in grouped:
        line = headline
        if len(shown) > 1:
            keys = {key for case in shown for key, _ in case}
            one_key = len(keys) == 1 and all(len(case) == 1 for case in shown)
            cases = (f"{keys.pop()} " + _and([case[0][1] for case in shown]) if one_key
                     else "; ".join(_case_words(case) for case in shown))
            line += f" ({len(shown)} claims: {cases})"
        elif shown[0]:
            line += f" ({_case_words(shown[0])})"
        lines.append(line + (f" (it must raise {raises})" if raises else ""))
    return lines


def claims_docstring_text(name: str, cases: list) -> str:
    """The paragraph added to a stub's docstring: what `python -m exercises.check` runs on it."""
    lines = [f"What `python -m exercises.check {name}` checks on this function: its {len(cases)} claims",
             "(the cases of tests/course/test_math_core.py about it, in their order" + (
                 ";\na claim named for all rules checks this function's rule alone):"
                 if any(headline.startswith("all rules") for headline, _, _ in cases) else "):")]
    lines += [f"- {line}" for line in claim_lines(cases)]
    return "\n".join("    " + line for line in "\n".join(lines).splitlines())


def stubs_with_claims(source: str, claims: dict) -> str:
    """exercises/math_core.py's `source` with each exercise stub's docstring extended by the
    claims the checker runs on it (`claims`: claim_cases())."""
    lines = source.splitlines()
    nodes = [n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name in FUNCTIONS]
    missing = [name for name in FUNCTIONS if name not in {n.name for n in nodes}]
    if missing:
        raise ValueError(f"exercises/math_core.py has no function {missing[0]!r}")
    for node in sorted(nodes, key=lambda n: n.lineno, reverse=True):      # bottom up
        doc = node.body[0]
        if not (isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant)):
            raise ValueError(f"exercises/math_core.py: {node.name} has no docstring")
        last = doc.end_lineno - 1                                         # the line that closes it
        closing = lines[last].rstrip()
        if closing.strip() != '"""':
            raise ValueError(f"exercises/math_core.py: {node.name}'s docstring must close on its own line")
        lines[last:last + 1] = ["", claims_docstring_text(node.name, claims[node.name]), closing]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ the copy


def _copy(name: str, out: str):
    src, dst = os.path.join(ROOT, name), os.path.join(out, name)
    if not os.path.exists(src) or os.path.exists(dst):
        return
    os.makedirs(os.path.dirname(dst) or out, exist_ok=True)
    if os.path.isdir(src):
        shutil.copytree(src, dst, ignore=IGNORE)
    else:
        shutil.copy2(src, dst)


def page_for_the_copy(text: str, page: str, out: str) -> str:
    """A page's text (markdown or HTML) as the copy `out` has it: links to what the copy lacks
    unlinked, what it names that the copy lacks marked (README.md: its test section replaced)."""
    if page == "README.md":
        text = copy_readme_tests(text)
    return mark_missing(unlink_missing(text, page, out), page, out)


def _rewrite_links(page: str, out: str):
    path = os.path.join(out, page)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if page.endswith(".ipynb"):
        notebook = json.loads(text)
        for cell in notebook["cells"]:
            if cell["cell_type"] == "markdown":
                source = "".join(cell["source"])
                new = page_for_the_copy(source, page, out)
                if new != source:
                    cell["source"] = new.splitlines(keepends=True)
        new_text = json.dumps(notebook, indent=1, ensure_ascii=False) + "\n"
        if json.loads(new_text) == json.loads(text):
            return
    else:
        new_text = page_for_the_copy(text, page, out)
    if new_text != text:
        with open(path, "w", encoding="utf-8") as f:
            f.write(new_text)


def copied_pages(out: str) -> list[str]:
    """Every page of the copy `out` (markdown, HTML, notebook), those of the copied folders too."""
    return sorted(os.path.relpath(os.path.join(d, f), out) for d, _, files in os.walk(out) for f in files
                  if f.endswith((".md", ".html", ".ipynb")))


def write_copy(out: str) -> str:
    """Copy the course to `out` (which must not exist); see the module's docstring."""
    if os.path.exists(out):
        raise FileExistsError(f"{out} exists; give a new directory")
    with open(os.path.join(ROOT, "exercises", "math_core.py"), encoding="utf-8") as f:
        stubs = stubs_with_claims(f.read(), claim_cases())
    pages = pages_to_copy()
    os.makedirs(out)
    for name in COURSE + tuple(pages):
        _copy(name, out)
    for name in LEFT_OUT:
        if os.path.exists(os.path.join(out, name)):
            os.remove(os.path.join(out, name))
    with open(os.path.join(out, "exercises", "math_core.py"), "w", encoding="utf-8") as f:
        f.write(stubs)
    for page in copied_pages(out):
        _rewrite_links(page, out)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m exercises.student_copy",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("out", metavar="DIR", help="a new directory for the student's copy")
    out = parser.parse_args(argv).out
    try:
        write_copy(out)
    except (OSError, ValueError) as err:
        print(f"exercises.student_copy: error: {err}", file=sys.stderr)
        return 2
    print(f"{out}: the course; students write {', '.join(FUNCTIONS)} in exercises/math_core.py "
          f"there and check them with `python -m exercises.check` (docs/lab-session.md)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
