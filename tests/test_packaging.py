"""pyproject.toml installs every module of the repository and agrees with requirements*.txt."""
import os
import tomllib

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOT_INSTALLED = {"exercises"}          # a student's working copy, checked from the clone


def pyproject():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


def requirement_lines(name):
    with open(os.path.join(ROOT, name)) as f:
        return sorted("".join(line.split("#")[0].split()) for line in f if line.split("#")[0].strip())


def test_every_top_level_module_is_installed():
    files = {name[:-3] for name in os.listdir(ROOT) if name.endswith(".py") and name not in ("setup.py", "conftest.py")}
    assert sorted(pyproject()["tool"]["setuptools"]["py-modules"]) == sorted(files)


def test_every_top_level_package_is_installed():
    packages = {name for name in os.listdir(ROOT) if os.path.isfile(os.path.join(ROOT, name, "__init__.py"))}
    assert sorted(pyproject()["tool"]["setuptools"]["packages"]) == sorted(packages - NOT_INSTALLED)


@pytest.mark.parametrize("extra, requirements", [(None, "requirements.txt"), ("trl", "requirements-trl.txt"),
                                                 ("dev", "requirements-dev.txt"), ("verl", "requirements-verl.txt")])
def test_pyproject_dependencies_agree_with_requirements_files(extra, requirements):
    project = pyproject()["project"]
    declared = project["dependencies"] if extra is None else project["optional-dependencies"][extra]
    assert sorted(d.replace(" ", "") for d in declared) == requirement_lines(requirements)

