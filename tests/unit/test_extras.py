"""A feature of an extra used without its package installed fails when the job is built, with
the extra to install (a clear MissingDependencyError, not an ImportError deep in a batch)."""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path

import pytest

from sparkstate import KafkaSink, KafkaSource, PostgresSink, SparkStateError
from sparkstate.errors import MissingDependencyError
from sparkstate.extras import EXTRAS

PYPROJECT = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())


@pytest.fixture
def missing(monkeypatch):
    """Make the extras' modules look uninstalled."""
    gone = {module for module, _ in EXTRAS.values()}
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in gone else real(name, *a))


@pytest.mark.parametrize("build, extra", [
    (lambda: KafkaSink(bootstrap_servers="localhost:9092", topic="out"), "kafka"),
    (lambda: KafkaSource(bootstrap_servers="localhost:9092", topic="in", schema="n long"), "kafka"),
    (lambda: PostgresSink(url="postgresql://u@localhost:5432/db", table="t"), "postgres"),
])
def test_a_spec_without_its_extra_names_the_extra(missing, build, extra):
    with pytest.raises(MissingDependencyError, match=rf"pip install 'sparkstate\[{extra}\]'") as caught:
        build()
    assert isinstance(caught.value, SparkStateError) and isinstance(caught.value, ImportError)


def test_every_extra_is_declared_in_pyproject():
    declared = PYPROJECT["project"]["optional-dependencies"]
    for extra, (_, package) in EXTRAS.items():
        assert any(d.replace(" ", "").startswith(package) for d in declared[extra]), (extra, declared.get(extra))
    core = " ".join(PYPROJECT["project"]["dependencies"])
    assert not any(package.split("[")[0] in core for _, package in EXTRAS.values()), "an extra's package is a core one"
