"""The lab notebook runs top to bottom (nbclient, a real Jupyter kernel) and is committed
without outputs; its answers are folded."""
import os
import time

import nbformat
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOTEBOOK = os.path.join(ROOT, "notebooks", "balanced_aggregation_lab.ipynb")


def load():
    return nbformat.read(NOTEBOOK, as_version=4)


def test_notebook_is_committed_without_outputs():
    for cell in load().cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, cell.source[:60]


def test_notebook_imports_the_project_and_never_redefines_its_functions():
    import grpo_ba
    from grpo_ba_lab.analysis import plots
    project = {name for module in (grpo_ba, plots) for name in vars(module) if callable(getattr(module, name))}
    sources = "\n".join(cell.source for cell in load().cells if cell.cell_type == "code")
    assert "import grpo_ba" in sources and "import plots" in sources
    redefined = [name for name in project if f"def {name}(" in sources]
    assert redefined == []


def test_every_question_has_a_folded_answer():
    cells = load().cells
    questions = [i for i, c in enumerate(cells) if c.cell_type == "markdown" and "**Question" in c.source]
    assert len(questions) >= 5
    for i in questions:
        answer = cells[i + 1]
        assert answer.cell_type == "markdown" and answer.source.startswith("<details>")
    hidden = [c for c in cells if c.cell_type == "code" and c.metadata.get("jupyter", {}).get("source_hidden")]
    assert hidden and all(c.source.startswith("# Answer") for c in hidden)


def test_notebook_runs_top_to_bottom(tmp_path):
    from nbclient import NotebookClient
    notebook = load()
    started = time.time()
    NotebookClient(notebook, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": os.path.dirname(NOTEBOOK)}}).execute()
    errors = [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert errors == []
    print(f"notebook executed in {time.time() - started:.0f} s")
    text = "\n".join(o.get("text", "") for c in notebook.cells if c.cell_type == "code" for o in c.outputs)
    assert "token     J = +0.400" in text                      # the worked example, by code
    assert all(f"[{rule}] step" in text for rule in ("token", "sequence", "balanced"))   # live diagnostics
