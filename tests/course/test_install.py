"""A new machine installs what the tests were run with: requirements/lock.txt pins every
package the requirements files name (within their ranges), the README's commands install
through it (after PyTorch's CPU-only build, a line to paste), and CI runs the README's test
command, in a new virtual environment."""
import glob
import os
import re

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LOCK = "requirements/lock.txt"
REQUIREMENT_FILES = sorted(os.path.relpath(p, ROOT) for pattern in ("requirements.txt", "requirements/*.txt")
                           for p in glob.glob(os.path.join(ROOT, pattern)) if os.path.relpath(p, ROOT) != LOCK)


def read(name):
    with open(os.path.join(ROOT, name)) as f:
        return f.read()


def requirements(name):
    """The packages a requirements file names (comments, blank lines and options skipped)."""
    lines = (line.split("#")[0].strip() for line in read(name).splitlines())
    return [Requirement(line) for line in lines if line and not line.startswith("-")]


def lock_pins():
    pins = {}
    for line in read(LOCK).splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version and " " not in line, f"{LOCK}: {line!r} is not an exact pin"
            pins[canonicalize_name(name)] = Version(version)
    return pins


TEST_COMMAND_TAIL = "python -m pytest -q -n auto --dist loadgroup"   # both cores: pytest-xdist


def readme_commands():
    """The README's install commands: shell lines that start with `pip install`."""
    return [line.strip() for line in read("README.md").splitlines() if line.strip().startswith("pip install")]


def test_requirement_files_are_found():
    assert {"requirements.txt", "requirements/dev.txt", "requirements/no-deps.txt"} <= set(REQUIREMENT_FILES)


@pytest.mark.parametrize("name", REQUIREMENT_FILES)
def test_the_lock_pins_every_package_a_requirements_file_names_within_its_range(name):
    pins = lock_pins()
    for requirement in requirements(name):
        key = canonicalize_name(requirement.name)
        assert key in pins, f"{LOCK} does not pin {requirement.name} ({name}); run bash scripts/refresh_lock.sh"
        assert requirement.specifier.contains(pins[key], prereleases=True), \
            f"{LOCK} pins {requirement.name}=={pins[key]}, outside {requirement.specifier} of {name}"


def test_the_lock_pins_versions_without_local_tags_so_a_gpu_machine_can_install_it():
    assert not [v for v in lock_pins().values() if v.local], "a +cpu tag would not resolve on a CUDA machine"
    assert lock_pins()[canonicalize_name("torch")] == Version("2.13.0")


def test_readme_commands_install_through_the_lock():
    commands = readme_commands()
    demo = [c for c in commands if c.endswith("python grpo_ba.py")]
    tests = [c for c in commands if c.endswith(TEST_COMMAND_TAIL)]
    assert len(demo) == 1 and len(tests) == 1, commands
    for command in demo + tests:
        first_install = command.split("&&")[0]
        assert f"-c {LOCK}" in first_install, command
    named = set(re.findall(r"-r (\S+)", tests[0]))
    assert named == set(REQUIREMENT_FILES), f"the README's test command installs {sorted(named)}"


CPU_TORCH_INDEX = "--index-url https://download.pytorch.org/whl/cpu"


def test_the_readmes_first_command_installs_the_cpu_only_torch_as_a_line_to_paste():
    """The first line works on a laptop with no local torch wheel: PyTorch's CPU index, at the lock's
    version, whose +cpu build the lock's pin accepts (so the course's line keeps it). The pages
    that say how to install give the same line; CI's test command never reaches that index."""
    from packaging.specifiers import SpecifierSet
    first = readme_commands()[0]
    pin = lock_pins()[canonicalize_name("torch")]
    assert first == f"pip install torch=={pin} {CPU_TORCH_INDEX}", first
    assert SpecifierSet(f"=={pin}").contains(Version(f"{pin}+cpu"))
    assert readme_commands()[1].endswith("python grpo_ba.py")              # then the course, then the demo
    for page in ("docs/install.md", "docs/lab-session.md", "requirements.txt"):
        assert first in read(page), page
    test_command = [c for c in readme_commands() if c.endswith(TEST_COMMAND_TAIL)][0]
    assert "download.pytorch.org" not in test_command and "download.pytorch.org" not in read(".ci/run")


def test_ci_runs_the_readme_test_command_in_a_new_virtual_environment():
    ci = read(".ci/run")
    test_command = [c for c in readme_commands() if c.endswith(TEST_COMMAND_TAIL)][0]
    assert test_command in ci.splitlines()
    venv_line = next(i for i, line in enumerate(ci.splitlines()) if "-m venv" in line)
    activate_line = next(i for i, line in enumerate(ci.splitlines()) if "bin/activate" in line)
    assert "mktemp" in ci and venv_line < activate_line < ci.splitlines().index(test_command)


# ------------------------------------------------------------------ the course's install is the course
# The README's first command installs the course: every package that grpo_ba.py and what it imports,
# exercises/ (and the claims exercises.check runs) and the notebook's cells import, and nothing that
# only the lab imports. Two more are not imported but run the notebook: its kernel and nbclient.
import ast  # noqa: E402
import importlib.metadata  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402

COURSE_FILES = ("grpo_ba.py", "grpo_ba_plots.py", "verifier.py", "grpo_ba_support/*.py", "toy_tasks/*.py",
                "exercises/*.py", "tests/course/test_math_core.py")
NOTEBOOK = "exercises/balanced_aggregation_lab.ipynb"
NOTEBOOK_RUNS_WITH = {"ipykernel", "nbclient"}
PROJECT = ("grpo_ba", "grpo_ba_plots", "grpo_ba_support", "grpo_ba_lab", "toy_tasks", "verifier", "exercises", "tests")


def imported_top_names(source: str) -> set:
    """The top-level names of every absolute import in `source`, in any function too."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def notebook_sources():
    with open(os.path.join(ROOT, NOTEBOOK)) as f:
        cells = json.load(f)["cells"]
    return ["\n".join(line for line in "".join(c["source"]).splitlines() if not line.lstrip().startswith(("%", "!")))
            for c in cells if c["cell_type"] == "code"]


def third_party(names: set, strict=True) -> set:
    """Distributions (canonical names) that provide the non-standard, non-project import names;
    `strict`: each must be installed (the course's are; the lab's optional ones may not be)."""
    providers = importlib.metadata.packages_distributions()
    found = set()
    for name in names - set(sys.stdlib_module_names) - {"__future__"}:
        if name.startswith(PROJECT):
            continue
        assert name in providers or not strict, f"no installed distribution provides the module {name!r}"
        found |= {canonicalize_name(d) for d in providers.get(name, ())}
    return found


def course_imports() -> set:
    sources = [read(os.path.relpath(p, ROOT)) for pattern in COURSE_FILES
               for p in sorted(glob.glob(os.path.join(ROOT, pattern)))]
    return third_party(set().union(*map(imported_top_names, sources + notebook_sources())))


def lab_imports() -> set:
    paths = glob.glob(os.path.join(ROOT, "grpo_ba_lab", "**", "*.py"), recursive=True)
    return third_party(set().union(*(imported_top_names(read(os.path.relpath(p, ROOT))) for p in paths)), strict=False)


def first_command_files() -> list:
    demo = next(c for c in readme_commands() if c.endswith("python grpo_ba.py"))
    return re.findall(r"-r (\S+)", demo.split("&&")[0])


def named_in(files) -> set:
    return {canonicalize_name(r.name) for name in files for r in requirements(name)}


def not_named(imports: set, named: set) -> list:
    """What the course imports that the course's install does not name, and where else it is named."""
    elsewhere = {canonicalize_name(r.name): name for name in REQUIREMENT_FILES if name not in first_command_files()
                 for r in requirements(name)}
    return sorted(f"{d} (named only in {elsewhere[d]})" if d in elsewhere else d for d in imports - named)


def test_the_readmes_first_command_installs_requirements_txt():
    assert first_command_files() == ["requirements.txt"]


def test_the_courses_install_names_every_package_the_course_and_the_notebook_import():
    imports = course_imports()
    assert {"torch", "transformers", "sympy", "matplotlib", "pytest"} <= imports        # the walk is real
    assert not_named(imports | NOTEBOOK_RUNS_WITH, named_in(first_command_files())) == []


def test_the_check_names_a_course_import_that_only_the_dev_requirements_name():
    imports = course_imports() | third_party(imported_top_names("import hypothesis\nfrom xdist import plugin\n"))
    assert not_named(imports, named_in(first_command_files())) == [
        "hypothesis (named only in requirements/dev.txt)", "pytest-xdist (named only in requirements/dev.txt)"]


def test_the_courses_install_names_nothing_that_only_the_lab_imports():
    only_the_lab = lab_imports() - course_imports()
    assert "tqdm" in only_the_lab                     # the walk is real (grpo_ba_lab/analysis/regime_map.py)
    assert sorted(named_in(first_command_files()) & only_the_lab) == []
