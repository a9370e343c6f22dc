"""Computed key columns: ``key_by(name=function)``, Flink's ``KeySelector`` with a name.

A computed key's value is added to each event under its name before anything else sees the
event (the packing step on Spark, admission in the harness), so that from there on it is a
column like any other: keyed state, windows, dead letters and savepoints need nothing of
their own for it. Its function must be deterministic: Spark may compute it again for a
replayed batch, and a savepoint's keys must land in the same key groups on restore.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sparkstate.errors import JobDefinitionError

#: a computed key's function: the event (a dict) to its key
KeyFunction = Callable[[dict[str, Any]], Any]
#: what a computed key may return (besides None, which makes the event a dead letter)
SCALARS = (int, float, str, bool)


@dataclass(frozen=True)
class ComputedKey:
    """A key column computed from each event by ``function``; ``type`` (a DDL type such as
    ``"bigint"``) is needed only where the key's type must be known before the job runs."""

    name: str
    function: KeyFunction
    type: str | None = None

    @classmethod
    def of(cls, name: str, given: Any) -> ComputedKey:
        """``key_by``'s ``name=function`` or ``name=(function, "type")``."""
        function, kind = given if isinstance(given, tuple) and len(given) == 2 else (given, None)
        if not callable(function):
            raise JobDefinitionError(
                f"key_by({name}=...) needs a function of the event (or (function, 'type')), got {given!r}"
            )
        if kind is not None and not (isinstance(kind, str) and kind.strip()):
            raise JobDefinitionError(f"key_by({name}=(function, type)): the type is a DDL type such as 'bigint', got {kind!r}")
        return cls(name, function, kind)

    def value(self, event: dict[str, Any]) -> Any:
        """The key of ``event``: a scalar, or None (a null key). :class:`KeyNotComputed` when the
        function raises or returns something else: the event becomes a dead letter with the
        reason, as an event with a null key column does, and the job goes on."""
        try:
            value = self.function(event)
        except Exception as exc:
            raise KeyNotComputed(f"the computed key {self.name!r} raised {type(exc).__name__}: {exc}") from exc
        if value is not None and not isinstance(value, SCALARS):
            raise KeyNotComputed(
                f"the computed key {self.name!r} returned {type(value).__name__} {_short(value)}: a key is an int, "
                "float, str or bool"
            )
        return value


class KeyNotComputed(Exception):
    """A computed key's function failed for one event (its message is the dead letter's reason)."""


def _short(event: Any) -> str:
    text = repr(event)
    return text if len(text) <= 200 else text[:197] + "..."
