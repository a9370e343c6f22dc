"""Handles of state with a time-to-live: Flink's TTL decorators, per state kind.

A descriptor with ``ttl_config`` set (``descriptor.enable_time_to_live(config)``) gets one of
the handles below from :func:`sparkstate.api.state.handle_for`; they subclass the plain
handles (``isinstance(h, ValueState)`` holds, type checks are the same) and keep the plain
handles' code untouched, so state without a TTL pays nothing for it.

Stored representation in the key's record (``rec[name]``), fixed by the design:

* Value, Reducing, Aggregating: ``(value, last_access_ms)``;
* List: ``[(element, last_access_ms), ...]``;
* Map: ``{user_key: (value, last_access_ms)}``.

An empty List or Map is removed from the record, as for state without a TTL.

The rules (Flink's ``AbstractTtlDecorator`` and the ``Ttl*State`` classes; docs/guides/ttl.md):

* an entry has expired once ``last_access + ttl <= now`` (:func:`~sparkstate.api.ttl.is_expired`);
* a read that meets an expired entry removes it from the state, whatever the visibility, and
  returns it only with ``ReturnExpiredIfNotCleanedUp``;
* with ``OnReadAndWrite`` a read that returns an *unexpired* entry gives it a new time (an
  expired entry that is returned is removed, not refreshed);
* every write stores its value with a new time; List elements and Map entries each have their
  own time, and reads filter them one by one;
* ``ReducingState.add`` / ``AggregatingState.add`` on an expired value: it is folded in with
  ``ReturnExpiredIfNotCleanedUp`` and dropped (the fold starts afresh) otherwise, as Flink's
  ``TtlReduceFunction`` / ``TtlAggregateFunction`` do; the result gets a new time.

Clocks: with processing time, "now" and a new time are the micro-batch's processing time
(``scope.processing_time``, on Spark the batch's recorded timestamp, so a replay decides the
same). With event time, "now" is the watermark and a new time is the current element's event
time (``scope.timestamp``, the timer's time in ``on_timer``), or the watermark when there is none.

One deliberate difference from Flink's code (not its documentation): a List read removes the
expired elements it meets even when others are left (Flink's ``TtlListState`` keeps them in
storage unless all expired or ``OnReadAndWrite``); reads of a List and a Map behave alike.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar, overload

from sparkstate.api.state import (
    _MISSING,
    AggregatingState,
    AggregatingStateDescriptor,
    KeyScope,
    ListState,
    ListStateDescriptor,
    MapState,
    MapStateDescriptor,
    ReducingState,
    ReducingStateDescriptor,
    StateDescriptor,
    ValueState,
    ValueStateDescriptor,
    _Handle,
    register_ttl_handles,
)

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")
IN = TypeVar("IN")
OUT = TypeVar("OUT")


class _Ttl:
    """The TTL's figures, in slots of the handle (read on every call: attribute lookups on
    the handle are the cheapest), and its two times, read from the scope at each call:
    ``_now`` (expiry is judged against it) and ``_stamp`` (the time a write or refresh gives)."""

    __slots__ = ()
    _ttl: int
    _event: bool
    _refresh: bool
    _ret: bool
    _name: str
    _scope: KeyScope

    def _init_ttl(self, desc: StateDescriptor) -> None:
        config = desc.ttl_config
        assert config is not None, "a TTL handle is made for a descriptor with a TTL"
        # the slots are the concrete handle's (_TTL_SLOTS), which mypy cannot see from here
        handle: Any = self
        handle._ttl, handle._event = config.ttl_ms, config.event_time
        handle._refresh, handle._ret = config.refresh_on_read, config.return_expired

    def _now(self) -> int:
        scope = self._scope
        return scope.watermark if self._event else scope.processing_time

    def _stamp(self) -> int:
        scope = self._scope
        if not self._event:
            return scope.processing_time
        ts = scope.timestamp
        return scope.watermark if ts is None else ts


#: the slots of a TTL handle (each handle class declares them: two bases with slots of their
#: own cannot be combined)
_TTL_SLOTS = ("_ttl", "_event", "_refresh", "_ret")


class _SingleValue(_Ttl):
    """The read rule of the kinds that hold one ``(value, ts)``: Value, Reducing, Aggregating.

    Returns the stored value, or ``_MISSING`` when there is none or it expired and is not
    returned; an expired value leaves the record, an unexpired one is refreshed on read."""

    __slots__ = ()

    def _read(self, rec: dict[str, Any]) -> Any:
        stored = rec.get(self._name)
        if stored is None:
            return _MISSING
        value, ts = stored
        if ts + self._ttl > self._now():
            if self._refresh:
                rec[self._name] = (value, self._stamp())
            return value
        del rec[self._name]
        return value if self._ret else _MISSING

    def _current(self, rec: dict[str, Any]) -> Any:
        """The value an ``add`` folds into (no refresh: the add writes a new time anyway)."""
        stored = rec.get(self._name)
        if stored is None:
            return _MISSING
        value, ts = stored
        if ts + self._ttl <= self._now() and not self._ret:
            return _MISSING
        return value


class TtlValueState(_SingleValue, ValueState[T]):
    """``ValueState`` with a TTL: ``value()`` gives the default when the value expired (and
    is not returned), or there is none."""

    __slots__ = _TTL_SLOTS

    def __init__(self, scope: KeyScope, desc: ValueStateDescriptor[T]) -> None:
        super().__init__(scope, desc)
        self._init_ttl(desc)

    def value(self) -> T:
        # _read inlined: running totals and seen-flags call this once per event
        scope = self._scope
        rec = scope.rec
        if rec is None:
            rec = self._record()
        stored = rec.get(self._name)
        if stored is not None:
            value, ts = stored
            if ts + self._ttl > (scope.watermark if self._event else scope.processing_time):
                if self._refresh:
                    rec[self._name] = (value, self._stamp())
                return value  # type: ignore[no-any-return]
            del rec[self._name]
            if self._ret:
                return value  # type: ignore[no-any-return]
        return copy.deepcopy(self._default) if self._copy_default else self._default  # type: ignore[return-value]

    def update(self, value: T | None) -> None:
        if value is None or type(value) is not self._exact:
            ValueState.update(self, value)  # None clears; any other value has its type checked
            if value is None:
                return
        scope = self._scope
        rec = scope.rec
        if rec is None:
            rec = self._record()
        rec[self._name] = (value, self._stamp() if self._event else scope.processing_time)


class TtlListState(_Ttl, ListState[T]):
    """``ListState`` with a TTL per element."""

    __slots__ = _TTL_SLOTS

    def __init__(self, scope: KeyScope, desc: ListStateDescriptor[T]) -> None:
        super().__init__(scope, desc)
        self._init_ttl(desc)

    def get(self) -> list[T]:
        """The elements that have not expired (and, with ``ReturnExpiredIfNotCleanedUp``, the
        expired ones, which this read removes), in order."""
        rec = self._record()
        stored = rec.get(self._name)
        if not stored:
            return []
        limit = self._now() - self._ttl  # expired: ts <= limit
        if self._refresh:
            stamp = self._stamp()
            kept = [(e, stamp) for e, ts in stored if ts > limit]
        else:
            kept = [entry for entry in stored if entry[1] > limit]
            if len(kept) == len(stored):
                return [e for e, _ in stored]
        out = [e for e, _ in (stored if self._ret else kept)]
        if kept:
            rec[self._name] = kept
        else:
            del rec[self._name]
        return out

    def __iter__(self) -> Iterator[T]:
        return iter(self.get())

    def __len__(self) -> int:
        """How many elements a read would return now. Unlike a read it changes nothing (no
        removal, no refresh): ``list(state)`` asks for the length too, and stays one read."""
        stored = self._record().get(self._name)
        if not stored:
            return 0
        if self._ret:
            return len(stored)
        limit = self._now() - self._ttl
        return sum(1 for _, ts in stored if ts > limit)

    def add(self, value: T) -> None:
        entry = (self._checked(value), self._stamp())
        self._record().setdefault(self._name, []).append(entry)

    def add_all(self, values: Iterable[T]) -> None:
        checked = [self._checked(v) for v in values]
        if checked:
            stamp = self._stamp()
            self._record().setdefault(self._name, []).extend([(v, stamp) for v in checked])

    def update(self, values: Iterable[T]) -> None:
        checked = [self._checked(v) for v in values]
        rec = self._record()
        if checked:
            stamp = self._stamp()
            rec[self._name] = [(v, stamp) for v in checked]
        else:
            rec.pop(self._name, None)


class TtlMapState(_Ttl, MapState[K, V]):
    """``MapState`` with a TTL per entry: every read (``get``, ``contains``, ``in``, ``[]``,
    ``keys``, ``values``, ``items``, iteration, ``is_empty``) applies the rule to the entries
    it looks at; ``len`` counts what a read would return, changing nothing."""

    __slots__ = _TTL_SLOTS

    def __init__(self, scope: KeyScope, desc: MapStateDescriptor[K, V]) -> None:
        super().__init__(scope, desc)
        self._init_ttl(desc)

    def _entry(self, key: K) -> Any:
        """The value under ``key`` by the read rule, or ``_MISSING``."""
        rec = self._record()
        m = rec.get(self._name)
        if not m:
            return _MISSING
        stored = m.get(key, _MISSING)
        if stored is _MISSING:
            return _MISSING
        value, ts = stored
        if ts + self._ttl <= self._now():
            del m[key]
            if not m:
                del rec[self._name]
            return value if self._ret else _MISSING
        if self._refresh:
            m[key] = (value, self._stamp())
        return value

    def _read_all(self, first_only: bool = False) -> list[tuple[K, V]]:
        """The entries a full read returns, in the map's order (``first_only``: stop at the
        first one, as Flink's ``isEmpty`` stops at its iterator's first entry)."""
        rec = self._record()
        m = rec.get(self._name)
        if not m:
            return []
        limit = self._now() - self._ttl
        refresh = self._refresh
        stamp = self._stamp() if refresh else 0
        out: list[tuple[K, V]] = []
        for key, (value, ts) in list(m.items()):
            if ts <= limit:
                del m[key]
                if not self._ret:
                    continue
            elif refresh:
                m[key] = (value, stamp)
            out.append((key, value))
            if first_only:
                break
        if not m:
            del rec[self._name]
        return out

    @overload
    def get(self, key: K) -> V | None: ...

    @overload
    def get(self, key: K, default: V) -> V: ...

    def get(self, key: K, default: V | None = None) -> V | None:
        value = self._entry(key)
        return default if value is _MISSING else value

    def put(self, key: K, value: V) -> None:
        check_key, check_value = self._check_key, self._check_value
        if (check_key is not None and not check_key(key)) or (
            value is not None and check_value is not None and not check_value(value)
        ):
            MapState.put(self, key, value)  # raises the type error, naming the state and key
        self._record().setdefault(self._name, {})[key] = (value, self._stamp())

    def contains(self, key: K) -> bool:
        return self._entry(key) is not _MISSING

    __contains__ = contains

    def __getitem__(self, key: K) -> V:
        value = self._entry(key)
        if value is _MISSING:
            raise KeyError(key)
        return value  # type: ignore[no-any-return]

    def keys(self) -> list[K]:
        return [k for k, _ in self._read_all()]

    def values(self) -> list[V]:
        return [v for _, v in self._read_all()]

    def items(self) -> list[tuple[K, V]]:
        return self._read_all()

    def is_empty(self) -> bool:
        return not self._read_all(first_only=True)

    def __iter__(self) -> Iterator[K]:
        return iter(self.keys())

    def __len__(self) -> int:
        """How many entries a read would return now, changing nothing (see ``TtlListState.__len__``)."""
        m = self._record().get(self._name)
        if not m:
            return 0
        if self._ret:
            return len(m)
        limit = self._now() - self._ttl
        return sum(1 for _, ts in m.values() if ts > limit)


class TtlReducingState(_SingleValue, ReducingState[T]):
    """``ReducingState`` with a TTL on its value."""

    __slots__ = _TTL_SLOTS

    def __init__(self, scope: KeyScope, desc: ReducingStateDescriptor[T]) -> None:
        super().__init__(scope, desc)
        self._init_ttl(desc)

    def get(self) -> T:
        value = self._read(self._record())
        return None if value is _MISSING else value  # type: ignore[return-value]

    def add(self, value: T) -> None:
        rec = self._record()
        check = self._check
        desc = self._desc
        if value is None or (check is not None and not check(value)):
            raise self._type_error("an added value", value, desc.type)
        current = self._current(rec)
        if current is _MISSING:
            reduced = value
        else:
            reduced = self._reduce(current, value)
            if reduced is None or (check is not None and not check(reduced)):
                raise self._type_error("the reduce function's result", reduced, desc.type)
        rec[self._name] = (reduced, self._stamp())


class TtlAggregatingState(_SingleValue, AggregatingState[IN, OUT]):
    """``AggregatingState`` with a TTL on its accumulator."""

    __slots__ = _TTL_SLOTS

    def __init__(self, scope: KeyScope, desc: AggregatingStateDescriptor[IN, Any, OUT]) -> None:
        super().__init__(scope, desc)
        self._init_ttl(desc)

    def get(self) -> OUT:
        acc = self._read(self._record())
        if acc is _MISSING:
            return None  # type: ignore[return-value]
        return self._fn.get_result(acc)

    def add(self, value: IN) -> None:
        rec = self._record()
        acc = self._current(rec)
        if acc is _MISSING:
            acc = self._fn.create_accumulator()
        acc = self._fn.add(value, acc)
        check = self._check
        if acc is None or (check is not None and not check(acc)):
            raise self._type_error("the accumulator returned by add()", acc, self._desc.accumulator_type)
        rec[self._name] = (acc, self._stamp())


_TTL_HANDLES: dict[type[StateDescriptor], type[_Handle]] = {
    ValueStateDescriptor: TtlValueState,
    ListStateDescriptor: TtlListState,
    MapStateDescriptor: TtlMapState,
    ReducingStateDescriptor: TtlReducingState,
    AggregatingStateDescriptor: TtlAggregatingState,
}
register_ttl_handles(_TTL_HANDLES)
