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

What is copied: the course's code (COURSE), every page and asset that README.md and
docs/lab-session.md link to, and the course pages (COURSE_PAGES) with what they link to. In the
copied pages a link to a file the copy leaves out (the answers page, the lab's pages) becomes
plain text that names the file in the course repository, so no link of the copy is broken.
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
CLAIMS = os.path.join("tests", "course", "test_math_core.py")
RULES = ("token", "sequence", "balanced")
MARKDOWN_LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")
HTML_LINK = re.compile(r"<a href=\"([^\"]+)\">(.*?)</a>", re.S)
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "runs", ".ipynb_checkpoints")


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
    return sorted(set(wanted) - set(LEFT_OUT))


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
            return f"{where} (in the course repository)"
        return f"{label} ({where} in the course repository)"

    text = MARKDOWN_LINK.sub(markdown, text)
    if page.endswith(".html"):
        text = HTML_LINK.sub(lambda m: m.group(2) if target_missing(m.group(1)) else m.group(0), text)
    return text


# ------------------------------------------------------------------ what the checker checks


def claims_by_function(claims_path: str = os.path.join(ROOT, CLAIMS)) -> dict:
    """{exercise function: [claim in words]} from the `@checks(...)` tags of the claims file:
    each claim's test name in words, its rule when the tag is per rule, and the exception it
    expects when it expects one."""
    with open(claims_path, encoding="utf-8") as f:
        source = f.read()
    found = {name: [] for name in FUNCTIONS}
    for node in ast.parse(source).body:
        if not isinstance(node, ast.FunctionDef):
            continue
        tags = [d for d in node.decorator_list if isinstance(d, ast.Call)
                and getattr(d.func, "id", "") == "checks"]
        if not tags:
            continue
        words = node.name.removeprefix("test_").replace("_", " ")
        body = ast.get_source_segment(source, node)
        raised = re.search(r"pytest\.raises\((\w+)", body)
        if raised:
            words += f" (it must raise {raised.group(1)})"
        for tag in tags:
            for arg in tag.args:
                pattern = arg.value
                for name in ([pattern.format(rule=r) for r in RULES] if "{rule}" in pattern else [pattern]):
                    if name in found:
                        found[name].append(words)
    return found


def claims_docstring_text(name: str, claims: list[str]) -> str:
    """The paragraph added to a stub's docstring: what `python -m exercises.check` runs on it."""
    lines = [f"What `python -m exercises.check {name}` checks on this function (the claims",
             "of tests/course/test_math_core.py about it, in their order):"]
    lines += [f"- {claim}" for claim in claims]
    return "\n".join("    " + line for line in lines)


def stubs_with_claims(source: str, claims: dict) -> str:
    """exercises/math_core.py's `source` with each exercise stub's docstring extended by the
    claims the checker runs on it."""
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


def _rewrite_links(page: str, out: str):
    path = os.path.join(out, page)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if page.endswith(".ipynb"):
        notebook = json.loads(text)
        for cell in notebook["cells"]:
            if cell["cell_type"] == "markdown":
                source = "".join(cell["source"])
                new = unlink_missing(source, page, out)
                if new != source:
                    cell["source"] = new.splitlines(keepends=True)
        new_text = json.dumps(notebook, indent=1, ensure_ascii=False) + "\n"
        if json.loads(new_text) == json.loads(text):
            return
    else:
        new_text = unlink_missing(text, page, out)
    if new_text != text:
        with open(path, "w", encoding="utf-8") as f:
            f.write(new_text)


def write_copy(out: str) -> str:
    """Copy the course to `out` (which must not exist); see the module's docstring."""
    if os.path.exists(out):
        raise FileExistsError(f"{out} exists; give a new directory")
    with open(os.path.join(ROOT, "exercises", "math_core.py"), encoding="utf-8") as f:
        stubs = stubs_with_claims(f.read(), claims_by_function())
    pages = pages_to_copy()
    os.makedirs(out)
    for name in COURSE + tuple(pages):
        _copy(name, out)
    for name in LEFT_OUT:
        if os.path.exists(os.path.join(out, name)):
            os.remove(os.path.join(out, name))
    with open(os.path.join(out, "exercises", "math_core.py"), "w", encoding="utf-8") as f:
        f.write(stubs)
    for page in pages:
        if page.endswith((".md", ".html", ".ipynb")):
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
