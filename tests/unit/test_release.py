"""The release's facts agree: the version lives in one place (``sparkstate.__version__``, read by
the package metadata and ``sparkstate --version``), CHANGELOG.md has a section for it, and
pyproject.toml declares ranges where requirements.txt pins."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

import sparkstate
from sparkstate.cli import main

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_version_lives_in_one_place():
    project = PYPROJECT["project"]
    assert "version" not in project and "version" in project["dynamic"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "sparkstate.__version__"}
    assert CliRunner().invoke(main, ["--version"]).output.split()[-1] == sparkstate.__version__


def test_the_changelog_has_the_version():
    changelog = (ROOT / "CHANGELOG.md").read_text()
    released = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", changelog, re.M)
    assert released and released[0] == sparkstate.__version__, released
    assert f"[{released[0]}]: " in changelog, "the version's link at the end"


def _name(requirement: str) -> str:
    return re.split(r"[\[<>=!~ ;]", requirement, maxsplit=1)[0].lower()


def _pins(file: str) -> dict[str, str]:
    pins = {}
    for line in (ROOT / file).read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            pins[_name(name)] = version
    return pins


@pytest.mark.parametrize("file", ["requirements.txt", "requirements-lowest.txt"])
def test_pyproject_declares_ranges_and_requirements_pins_them(file):
    """A library's dependencies are ranges (an environment with another PySpark or pandas can
    install it); requirements.txt pins the newest proven set within them, requirements-lowest.txt
    the lowest (scripts/test-lowest.sh)."""
    Requirement = pytest.importorskip("packaging.requirements").Requirement
    from packaging.version import Version

    pins = _pins(file)
    project = PYPROJECT["project"]
    declared = [*project["dependencies"], *(d for extra in ("kafka", "postgres", "report") for d in
                                           project["optional-dependencies"][extra])]
    for text in declared:
        requirement = Requirement(text)
        assert not any(s.operator == "==" for s in requirement.specifier), f"{text}: a range, not a pin"
        pin = pins[requirement.name.lower()]
        assert requirement.specifier.contains(pin), (text, pin)
        if file == "requirements-lowest.txt":  # the floor itself is what scripts/test-lowest.sh proves
            floor = next(s.version for s in requirement.specifier if s.operator == ">=")
            assert Version(floor) == Version(pin), f"{text}: requirements-lowest.txt pins {pin}, not the floor"
