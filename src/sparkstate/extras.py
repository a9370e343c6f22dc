"""The optional parts of sparkstate and the packages they need: the extras of pyproject.toml
(``pip install 'sparkstate[kafka]'``). A feature calls :func:`require` where it is declared
(a Kafka spec, a PostgreSQL sink, a report), so a missing package fails when the job is built,
with the extra to install, not deep inside a running batch as an ``ImportError``.

This module imports nothing of sparkstate but its errors, so every layer can use it."""

from __future__ import annotations

import importlib.util

from sparkstate.errors import MissingDependencyError

#: extra -> (the module imported, the package pip installs)
EXTRAS: dict[str, tuple[str, str]] = {
    "kafka": ("confluent_kafka", "confluent-kafka"),
    "postgres": ("psycopg", "psycopg[binary]"),
    "report": ("matplotlib", "matplotlib"),
}


def require(extra: str, feature: str) -> None:
    """Raise :class:`MissingDependencyError` when ``feature`` cannot run for want of ``extra``'s package."""
    module, package = EXTRAS[extra]
    if importlib.util.find_spec(module) is None:
        raise MissingDependencyError(
            f"{feature} needs the {package} package, which is not installed: pip install 'sparkstate[{extra}]'")
