"""A new machine installs what the tests were run with: requirements/lock.txt pins every
package the requirements files name (within their ranges), the README's two commands
install through it, and CI runs the README's test command, in a new virtual environment."""
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


def test_ci_runs_the_readme_test_command_in_a_new_virtual_environment():
    ci = read(".ci/run")
    test_command = [c for c in readme_commands() if c.endswith(TEST_COMMAND_TAIL)][0]
    assert test_command in ci.splitlines()
    venv_line = next(i for i, line in enumerate(ci.splitlines()) if "-m venv" in line)
    activate_line = next(i for i, line in enumerate(ci.splitlines()) if "bin/activate" in line)
    assert "mktemp" in ci and venv_line < activate_line < ci.splitlines().index(test_command)
