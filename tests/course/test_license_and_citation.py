"""The project can be used and cited: an Apache-2.0 LICENSE (as TRL and verl), the same
license in pyproject.toml, and a CITATION.cff that cites the paper and the repository."""
import os
import tomllib

import yaml
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAPER = "Balanced Aggregation: Understanding and Fixing Aggregation Bias in GRPO"


def read(name):
    with open(os.path.join(ROOT, name)) as f:
        return f.read()


def test_the_license_is_the_full_apache_2_0_text():
    text = read("LICENSE")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    for section in ("1. Definitions.", "2. Grant of Copyright License.", "3. Grant of Patent License.",
                    "9. Accepting Warranty or Additional Liability.", "END OF TERMS AND CONDITIONS"):
        assert section in text, section


def test_pyproject_declares_the_license_in_a_form_its_build_backend_accepts():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        pyproject = tomllib.load(f)
    project = pyproject["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    # A license string (an SPDX expression, PEP 639) needs setuptools >= 77, which then
    # refuses a license classifier beside it.
    (setuptools,) = [Requirement(r) for r in pyproject["build-system"]["requires"] if r.startswith("setuptools")]
    assert not setuptools.specifier.contains(Version("76.9")) and setuptools.specifier.contains(Version("77.0"))
    assert not [c for c in project.get("classifiers", []) if c.startswith("License ::")]


def test_citation_cff_cites_the_repository_and_prefers_the_paper():
    cff = yaml.safe_load(read("CITATION.cff"))
    assert cff["cff-version"] == "1.2.0"
    assert {"cff-version", "message", "title", "authors"} <= cff.keys()           # CFF 1.2.0's required keys
    assert cff["type"] == "software" and cff["license"] == "Apache-2.0"
    paper = cff["preferred-citation"]
    assert paper["title"] == PAPER and paper["year"] == 2026 and paper["type"] == "article"
    assert paper["authors"][0] == {"family-names": "Zeng", "given-names": "Zhiyuan"}     # "Zeng et al."
    assert all(author.get("family-names") and author.get("given-names") for author in paper["authors"])
    assert "2605.04077" in paper["url"] and any("2605.04077" in i["value"] for i in paper["identifiers"])


def test_the_readme_cites_the_same_paper():
    assert "arXiv 2605.04077" in read("README.md") and PAPER in read("README.md")
