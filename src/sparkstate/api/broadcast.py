"""Broadcast state: the map states a broadcast input writes and every key group reads.

The maps themselves live in the engine (one copy per key group, identical because every key
group applies the same broadcast elements in the same order); these views only check access:
writes only from ``process_broadcast_element``, as in Flink.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Generic, TypeVar

from sparkstate.api.state import KeyScope, MapStateDescriptor, make_type_check
from sparkstate.errors import StateAccessError, StateTypeError

K = TypeVar("K")
V = TypeVar("V")


class ReadOnlyBroadcastState(Generic[K, V]):
    """A broadcast map state as ``process_element`` and ``on_timer`` see it: readable only.

    Flink makes the keyed side read-only because every parallel instance must keep the same
    broadcast state; only ``process_broadcast_element``, which every instance runs on the same
    elements, may change it. (Do not change the *values* you read either, for the same reason.)
    """

    __slots__ = ("_scope", "_desc")

    def __init__(self, scope: KeyScope, desc: MapStateDescriptor[K, V]) -> None:
        self._scope = scope
        self._desc = desc

    def _map(self) -> dict[K, V]:
        states = self._scope.broadcast
        if states is None:
            raise StateAccessError(
                f"broadcast state {self._desc.name!r} was used outside of process_element, "
                "process_broadcast_element or on_timer"
            )
        m: dict[K, V] = states.setdefault(self._desc.name, {})
        return m

    def get(self, key: K, default: V | None = None) -> V | None:
        return self._map().get(key, default)

    def contains(self, key: K) -> bool:
        return key in self._map()

    def keys(self) -> list[K]:
        return list(self._map())

    def values(self) -> list[V]:
        return list(self._map().values())

    def items(self) -> list[tuple[K, V]]:
        return list(self._map().items())

    # Flink's names for the same
    def immutable_entries(self) -> list[tuple[K, V]]:
        return self.items()

    def entries(self) -> list[tuple[K, V]]:
        return self.items()

    def is_empty(self) -> bool:
        return not self._map()

    __contains__ = contains

    def __getitem__(self, key: K) -> V:
        return self._map()[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self._map())

    def _refuse(self, what: str) -> StateAccessError:
        return StateAccessError(
            f"broadcast state {self._desc.name!r} is read-only here: {what} is allowed in "
            "process_broadcast_element only (as in Flink, so that every key group keeps the same "
            "broadcast state); keep per-key data in keyed state instead"
        )

    def put(self, key: K, value: V) -> None:
        raise self._refuse("put")

    def put_all(self, entries: dict[K, V]) -> None:
        raise self._refuse("put_all")

    def remove(self, key: K) -> None:
        raise self._refuse("remove")

    def clear(self) -> None:
        raise self._refuse("clear")

    def __setitem__(self, key: K, value: V) -> None:
        self.put(key, value)

    def __delitem__(self, key: K) -> None:
        self.remove(key)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._desc.name!r}>"


class BroadcastState(ReadOnlyBroadcastState[K, V]):
    """A broadcast map state as ``process_broadcast_element`` sees it: read and write."""

    __slots__ = ("_check_key", "_check_value")

    def __init__(self, scope: KeyScope, desc: MapStateDescriptor[K, V]) -> None:
        super().__init__(scope, desc)
        self._check_key = make_type_check(desc.key_type, desc.name)
        self._check_value = make_type_check(desc.value_type, desc.name)

    def put(self, key: K, value: V) -> None:
        desc = self._desc
        checks = (("a key", key, self._check_key, desc.key_type), ("a value", value, self._check_value, desc.value_type))
        for what, v, check, tp in checks:
            if check is not None and not check(v):
                raise StateTypeError(
                    f"broadcast state {desc.name!r} ({desc.describe()}): {what} must be "
                    f"{getattr(tp, '__name__', tp)}, got {type(v).__name__} {v!r}"
                )
        self._map()[key] = value
        self._scope.broadcast_changed = True

    def put_all(self, entries: dict[K, V]) -> None:
        for k, v in entries.items():
            self.put(k, v)

    def remove(self, key: K) -> None:
        m = self._map()
        if key in m:
            del m[key]
            self._scope.broadcast_changed = True

    def clear(self) -> None:
        m = self._map()
        if m:
            m.clear()
            self._scope.broadcast_changed = True


def declared_broadcast(scope: KeyScope, descriptor: Any) -> Any:
    names = scope.broadcast_descriptors
    if not isinstance(descriptor, MapStateDescriptor) or descriptor.name not in names:
        declared = ", ".join(repr(n) for n in names) or "none"
        raise StateAccessError(
            f"get_broadcast_state({descriptor!r}): not a broadcast state of this job (declared: {declared}); "
            "declare it with job.connect(rules).broadcast(MapStateDescriptor(...))"
        )
    return names[descriptor.name]


def read_only_broadcast_state(scope: KeyScope, descriptor: MapStateDescriptor[K, V]) -> ReadOnlyBroadcastState[K, V]:
    """The read-only view of a declared broadcast state (the keyed side's)."""
    return ReadOnlyBroadcastState(scope, declared_broadcast(scope, descriptor))
