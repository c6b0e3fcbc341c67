"""pyproject.toml installs every module of the project under names no other package owns,
and agrees with requirements.txt and requirements/*.txt."""
import os
import shutil
import subprocess
import sys
import tomllib

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOT_INSTALLED = {"exercises"}            # a student's working copy, checked from the clone
INSTALLED_NAMES = {"grpo_ba", "grpo_ba_plots", "verifier", "grpo_ba_support", "toy_tasks", "grpo_ba_lab"}


def pyproject():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


def requirement_lines(name):
    with open(os.path.join(ROOT, name)) as f:
        return sorted("".join(line.split("#")[0].split()) for line in f if line.split("#")[0].strip())


def test_every_top_level_module_but_the_exercises_is_installed():
    files = {name[:-3] for name in os.listdir(ROOT) if name.endswith(".py") and name not in ("setup.py", "conftest.py")}
    assert sorted(pyproject()["tool"]["setuptools"]["py-modules"]) == sorted(files - NOT_INSTALLED)


def test_toy_tasks_and_every_package_of_grpo_ba_lab_are_installed_and_nothing_else():
    packages = {os.path.relpath(folder, ROOT).replace(os.sep, ".") for folder, _, names in os.walk(ROOT)
                if "__init__.py" in names and ".git" not in folder.split(os.sep)}
    top = {p for p in packages if "." not in p and not p.startswith("tests")}
    assert top - NOT_INSTALLED == {"grpo_ba_lab", "grpo_ba_support", "toy_tasks"}, top
    assert sorted(pyproject()["tool"]["setuptools"]["packages"]) == sorted(p for p in packages
                                                                          if p.split(".")[0] in top - NOT_INSTALLED)


def installed_top_level_names(site_packages, dist_info):
    """The import names a distribution put into site-packages, read from its RECORD."""
    with open(os.path.join(site_packages, dist_info, "RECORD")) as f:
        firsts = {line.split(",")[0].split("/")[0] for line in f if line.strip()}
    return {name[:-3] if name.endswith(".py") else name for name in firsts
            if not name.endswith((".dist-info", ".pth")) and name not in ("__pycache__", "..")}


@pytest.mark.slow
def test_installing_into_a_new_venv_adds_only_grpo_ba_names_and_works_outside_the_clone(tmp_path):
    source = tmp_path / "source"                 # a copy, so the build leaves nothing in the checkout
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".git", "runs", "build", "*.egg-info", "__pycache__",
                                                                ".hypothesis", ".pytest_cache", "*.ipynb"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = str(venv / "bin" / "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    before = set(os.listdir(site))
    done = subprocess.run([python, "-m", "pip", "install", "--no-deps", "--quiet", str(source)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    dist_info = [name for name in set(os.listdir(site)) - before if name.endswith(".dist-info")]
    assert [name.split("-")[0] for name in dist_info] == ["grpo_ba"], dist_info
    assert installed_top_level_names(site, dist_info[0]) == INSTALLED_NAMES
    # Outside the clone, with the installed files on the path (the dependencies come from this interpreter):
    # the package, its shipped warm-up and the integrations' import load; the generic names do not exist.
    code = ("import grpo_ba, grpo_ba_lab, grpo_ba_lab.integrations.trl_balanced as trl\n"
            "from toy_tasks import designs\n"
            "from verifier import verify\n"
            "import os, importlib.util\n"
            "path, _ = designs.shipped_warmup('demo', 22)\n"
            "print(grpo_ba_lab.__file__.startswith(os.environ['SITE']), os.path.isfile(path), verify('\\\\boxed{7/2}', '3.5'),\n"
            "      [n for n in ('analysis', 'plumbing', 'integrations', 'verifier', 'toy_tasks')\n"
            "       if importlib.util.find_spec(n) is not None and n in ('analysis', 'plumbing', 'integrations')])\n")
    env = {**os.environ, "PYTHONPATH": site, "SITE": site}
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=env,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["True", "True", "1.0", "[]"], result.stdout
    for command, expected in ((["-m", "grpo_ba", "--help"], "usage: grpo_ba.py"),
                              (["-m", "grpo_ba_lab.analysis.diagnose", "--help"], "--adv-scale"),
                              (["-m", "verifier", "Answer: 7/2", "3.5"], "1\n"),
                              (["-m", "toy_tasks", "--problems", "1"], "design demo")):
        shown = subprocess.run([sys.executable, *command], cwd=tmp_path, capture_output=True, text=True, env=env,
                               timeout=300)
        assert shown.returncode == 0 and expected in shown.stdout, (command, shown.stderr[-2000:])


@pytest.mark.parametrize("extra, requirements", [(None, "requirements.txt"), ("trl", "requirements/trl.txt"),
                                                 ("dev", "requirements/dev.txt"), ("verl", "requirements/verl.txt")])
def test_pyproject_dependencies_agree_with_requirements_files(extra, requirements):
    project = pyproject()["project"]
    declared = project["dependencies"] if extra is None else project["optional-dependencies"][extra]
    assert sorted(d.replace(" ", "") for d in declared) == requirement_lines(requirements)



def test_pyproject_asks_for_the_python_the_readme_names():
    """The README says the oldest Python the lock installs on (its numpy and ipython need 3.11);
    pip must refuse an older one before it fails halfway through the lock."""
    import re
    with open(os.path.join(ROOT, "README.md")) as f:
        said = re.search(r"Python (3\.\d+) or newer", f.read())
    assert said, "README.md no longer says which Python it needs"
    assert pyproject()["project"]["requires-python"] == f">={said.group(1)}"
