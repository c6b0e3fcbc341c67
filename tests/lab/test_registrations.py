"""Registrations cannot move (registrations/README.md): after a file's first commit, every
later commit may only append lines at its end. The check walks the git history, so it
needs a clone with its history; without one it skips and says why."""
import os
import re
import shutil
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FOLDER = "registrations"
VERSION_2_COMMIT = "713152f524902a43cc897e0e204fbdb64a3620b1"   # registered in docs/toy-designs.md
BEGIN, END = "<!-- registered text: begin -->\n", "<!-- registered text: end -->\n"


def _git(repo: str, *args: str) -> str:
    done = subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, check=True)
    return done.stdout


def missing_history(repo: str) -> str:
    """Why `repo` cannot show its history ('' if it can)."""
    if shutil.which("git") is None:
        return "git is not installed"
    if not os.path.exists(os.path.join(repo, ".git")):
        return f"{repo} is not a git clone (.git absent): the registrations' history cannot be read"
    if _git(repo, "rev-parse", "--is-shallow-repository").strip() == "true":
        return "a shallow clone: a registration's first commit may be missing"
    return ""


def _version(repo: str, commit: str, path: str):
    """The file at `commit` (None if that commit deleted it)."""
    shown = subprocess.run(["git", "-C", repo, "show", f"{commit}:{path}"], capture_output=True,
                           text=True)
    return shown.stdout if shown.returncode == 0 else None


def not_an_append(old: str, new) -> str:
    """'' if `new` is `old` with lines appended at its end, else what changed."""
    if new is None:
        return "deletes the file"
    old_lines, new_lines = old.splitlines(), new.splitlines()
    for number, line in enumerate(old_lines, start=1):
        if number > len(new_lines):
            return f"deletes line {number} ({line!r})"
        if new_lines[number - 1] != line:
            return f"changes line {number}: {line!r} -> {new_lines[number - 1]!r}"
    return ""


def registration_violations(repo: str, folder: str = FOLDER) -> list[str]:
    """Every commit after a file's first (and the working tree) that changes a file under
    `folder` other than by appending at its end, files since deleted or renamed included."""
    paths = sorted(set(_git(repo, "log", "--format=", "--name-only", "--", folder).split()))
    problems = []
    for path in paths:
        commits = _git(repo, "log", "--reverse", "--format=%H", "--", path).split()
        versions = [(commit[:12], _version(repo, commit, path)) for commit in commits]
        tracked = _git(repo, "ls-files", "--", path).strip()
        if tracked:                                   # an edit not yet committed counts too
            with open(os.path.join(repo, path)) as f:
                versions.append(("working tree", f.read()))
        for (_, old), (where, new) in zip(versions, versions[1:]):
            why = "re-creates a deleted registration" if old is None else not_an_append(old, new)
            if why:
                problems.append(f"{path}: {where} {why}")
    return problems


# ------------------------------------------------------------------ this repository

def test_no_commit_changes_a_registration_after_its_first_other_than_by_appending():
    why = missing_history(REPO)
    if why:
        pytest.skip(why)
    assert _git(REPO, "ls-files", "--", FOLDER).split(), "no registration is committed"
    assert registration_violations(REPO) == []


def test_the_version_2_files_hold_the_registered_text_verbatim():
    why = missing_history(REPO)
    if why:
        pytest.skip(why)
    if subprocess.run(["git", "-C", REPO, "cat-file", "-e", VERSION_2_COMMIT]).returncode != 0:
        pytest.skip(f"commit {VERSION_2_COMMIT[:12]} (version 2's registration) is not here")
    registered = _git(REPO, "show", f"{VERSION_2_COMMIT}:docs/toy-designs.md")
    for design in ("demo", "loop-gap", "spread-room", "tilde-gap"):
        with open(os.path.join(REPO, FOLDER, f"{design}-v2.md")) as f:
            text = f.read()
        quoted = text[text.index(BEGIN) + len(BEGIN):text.index(END)]
        assert quoted.startswith("## Version 2:") and quoted in registered, design
        assert "\n## Amendment 1, 2026-12-01: a correction of the record" in text[text.index(END):]


# ------------------------------------------------------------------ the check, on a throwaway repo

def _commit(repo, files: dict, message: str):
    for path, text in files.items():
        full = os.path.join(repo, path)
        if text is None:
            os.remove(full)
        else:
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w") as f:
                f.write(text)
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=test", "-c", "user.email=test@example.com", "commit", "-q",
         "-m", message)


REGISTERED = "# d\n\nseeds 1-6\nprimary: last accuracy\n"


@pytest.fixture
def throwaway(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = str(tmp_path / "repo")
    os.makedirs(repo)
    _git(repo, "init", "-q")
    _commit(repo, {"registrations/d-v1.md": REGISTERED}, "register d")
    return repo


def test_appending_an_amendment_passes(throwaway):
    amended = REGISTERED + "\n## Amendment 1, 2026-12-02: a reason\n"
    _commit(throwaway, {"registrations/d-v1.md": amended}, "amend d")
    _commit(throwaway, {"notes.md": "anything else may change\n"}, "other")
    assert registration_violations(throwaway) == []


def test_editing_a_registered_line_after_its_first_commit_fails(throwaway):
    _commit(throwaway, {"registrations/d-v1.md": REGISTERED.replace("1-6", "1-9")}, "edit d")
    (problem,) = registration_violations(throwaway)
    assert problem.startswith("registrations/d-v1.md: ")
    assert "changes line 3: 'seeds 1-6' -> 'seeds 1-9'" in problem


@pytest.mark.parametrize("change, words", [
    ({"registrations/d-v1.md": "# d\n\nseeds 1-6\n"}, "deletes line 4"),
    ({"registrations/d-v1.md": None}, "deletes the file"),
    ({"registrations/d-v1.md": None, "registrations/d-v1-new.md": "# d\n"}, "deletes the file"),
    ({"registrations/d-v1.md": "note\n" + REGISTERED}, "changes line 1")])
def test_deleting_renaming_or_inserting_above_fails(throwaway, change, words):
    _commit(throwaway, change, "move d")
    assert any(words in problem for problem in registration_violations(throwaway))


def test_an_uncommitted_edit_in_the_working_tree_fails_too(throwaway):
    with open(os.path.join(throwaway, "registrations", "d-v1.md"), "w") as f:
        f.write("# d\n\nseeds 1-6\nprimary: peak accuracy\n")
    assert registration_violations(throwaway) == ["registrations/d-v1.md: working tree changes "
                                                  "line 4: 'primary: last accuracy' -> "
                                                  "'primary: peak accuracy'"]


def test_a_clone_without_its_history_says_why_it_skips(tmp_path):
    assert "not a git clone" in missing_history(str(tmp_path))


# ------------------------------------------------------------------ the paths a registration names

PATH_IN_TEXT = re.compile(r"`((?:[\w.-]+/)+[\w.-]+\.(?:py|md|json|jsonl|gz|png))`")


def unresolved_paths(text: str, root: str) -> list[str]:
    """Repository paths `text` names in backticks that do not exist under `root`, unless a
    section after the path's first mention, a correction of the record, names it again and
    says it does not exist. Paths under assets/ are left out: a registration names the report
    its runs will write, before they exist."""
    unresolved = []
    for path in dict.fromkeys(PATH_IN_TEXT.findall(text)):
        if path.startswith("assets/") or os.path.exists(os.path.join(root, path)):
            continue
        later = text[text.index(f"`{path}`") + len(path) + 2:]
        corrected = any(f"`{path}`" in section and "does not exist" in section
                        for section in later.split("\n## ")[1:]
                        if "correction of the record" in section.lower())
        if not corrected:
            unresolved.append(path)
    return unresolved


def test_every_path_a_registration_names_exists_or_is_corrected_below_it():
    for name in sorted(os.listdir(os.path.join(REPO, FOLDER))):
        with open(os.path.join(REPO, FOLDER, name)) as f:
            text = f.read()
        if BEGIN in text:            # text quoted verbatim from its commit names that commit's paths
            text = text[:text.index(BEGIN)] + text[text.index(END) + len(END):]
        assert unresolved_paths(text, REPO) == [], name


def test_a_missing_path_without_its_correction_is_found(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "real.py").write_text("")
    text = "1. `tests/real.py` and `tests/gone.py` walk the history into `assets/d-v3/report.md`.\n"
    assert unresolved_paths(text, str(tmp_path)) == ["tests/gone.py"]
    corrected = text + "\n## Correction of the record, 2026-12-02\n\n`tests/gone.py` does not exist.\n"
    assert unresolved_paths(corrected, str(tmp_path)) == []


# ------------------------------------------------------------------ strong-band's world, as it was chosen

def undisclosed_selection(text: str) -> bool:
    """Whether a registration names strong-band (its design, or its world under another design)
    without saying that its world was chosen after its pilot's accuracies were seen
    (docs/strong-coupling.md, "How the world was chosen, as it happened")."""
    import page_numbers as pn
    return "strong-band" in text and not pn.SELECTION_NOTE.search(text)


def test_every_registration_naming_strong_bands_world_says_how_it_was_chosen():
    named = []
    for name in sorted(os.listdir(os.path.join(REPO, FOLDER))):
        if name.endswith(".md"):
            with open(os.path.join(REPO, FOLDER, name)) as f:
                text = f.read()
            named += ["strong-band" in text]
            assert not undisclosed_selection(text), name
    assert sum(named) >= 5          # strong-band, endless-band, regime-v3, regime-v4 and the README


def test_a_registration_naming_strong_band_without_its_selection_is_found():
    text = "# Registration: design `x`\n\nThe world of `strong-band`, gap 30.\n"
    assert undisclosed_selection(text)
    assert not undisclosed_selection(text + "\n## Note, 2026-12-07\n\nThat world was chosen after its\n"
                                            "pilot's accuracies were seen.\n")
    assert not undisclosed_selection("# Registration: design `demo-band`\n")
