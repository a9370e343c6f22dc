"""Keyed state: descriptors (what a function declares) and handles (what it reads and writes).

The five kinds follow Flink (and PyFlink's ``datastream/state.py``): ``ValueState``,
``ListState``, ``MapState``, ``ReducingState`` and ``AggregatingState``. A descriptor is a
frozen value with a name and a type; every write is checked against that type, so a wrong
value fails where it is written, with the state's name and the key in the message.

A handle never stores data itself. It reads and writes the *current key's record*, a plain
dict that the engine (the test harness or the Spark runtime) swaps in before each call of the
user's function. That keeps every state call an in-memory dict operation.
"""

from __future__ import annotations

import copy
import types
import typing
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Self, TypeAlias, TypeVar, overload

from sparkstate.api.time import MIN_WATERMARK
from sparkstate.errors import StateAccessError, StateDescriptorError, StateTypeError

if TYPE_CHECKING:
    from sparkstate.api.ttl import StateTtlConfig

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")
IN = TypeVar("IN")
ACC = TypeVar("ACC")
OUT = TypeVar("OUT")

#: Key of a record's timers (a set of ``(domain, timestamp)``); user state names may not start
#: with ``__`` so they can never collide with it.
TIMERS_FIELD = "__timers__"

#: Key of the watermark at which a record's event-time timers at or behind it were registered
#: (outside an event-time ``on_timer``): they wait until the watermark advances past it, as
#: Flink fires such a timer only at its next watermark. Present only while such timers exist.
HELD_FIELD = "__held__"
#: Record fields that are not user state.
INTERNAL_FIELDS = frozenset({TIMERS_FIELD, HELD_FIELD})

#: A key's record: ``{state name: value, TIMERS_FIELD: {(domain, timestamp), ...}}``.
Record: TypeAlias = dict[str, Any]
#: A record's timers: ``(int(TimeDomain), timestamp)`` pairs.
Timers: TypeAlias = set[tuple[int, int]]

_IMMUTABLE = (int, float, complex, str, bytes, bool, tuple, frozenset, type(None))


# --------------------------------------------------------------------------- type checks


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or repr(tp)


def make_type_check(tp: Any, what: str) -> Callable[[Any], bool] | None:
    """Return a predicate for values of ``tp``, or None when anything is accepted.

    Generic aliases (``list[int]``, ``dict[str, float]``) are checked on their container type
    only: checking every element on every write would make state calls cost O(size).
    ``float`` accepts ints (Python's numeric tower); ``int`` and ``float`` refuse ``bool``.
    """
    if tp is None or tp is object or tp is Any:
        return None
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        checks = [make_type_check(a, what) for a in typing.get_args(tp)]
        present = [c for c in checks if c is not None]
        if len(present) < len(checks):
            return None
        return lambda v: any(c(v) for c in present)
    if origin is not None:
        tp = origin
    if tp is type(None):
        return lambda v: v is None
    if tp is float:
        return lambda v: type(v) is float or (isinstance(v, (int, float)) and not isinstance(v, bool))
    if tp is int:
        return lambda v: type(v) is int or (isinstance(v, int) and not isinstance(v, bool))
    if isinstance(tp, type):
        return lambda v: isinstance(v, tp)
    raise StateDescriptorError(
        f"{what}: unsupported type {tp!r}; use a class (float, str, a dataclass...), "
        "a generic alias such as list[int], or object for any value"
    )


def _check_name(name: Any, kind: str) -> None:
    if not isinstance(name, str) or not name:
        raise StateDescriptorError(f"{kind}: the state name must be a non-empty string, got {name!r}")
    if name.startswith("__"):
        raise StateDescriptorError(
            f"{kind} {name!r}: names starting with '__' are reserved for sparkstate's own fields"
        )


# --------------------------------------------------------------------------- descriptors


class StateDescriptor:
    """Base of the five descriptors: a name that identifies the state in checkpoints and savepoints."""

    name: str
    kind: typing.ClassVar[str] = ""
    #: the state's time-to-live (:meth:`enable_time_to_live`); None: entries never expire
    ttl_config: StateTtlConfig | None

    def describe(self) -> str:
        """A short, human-readable signature such as ``ValueState[float]``."""
        raise NotImplementedError

    def enable_time_to_live(self, ttl_config: StateTtlConfig) -> Self:
        """Give this state a time-to-live (Flink's ``enableTimeToLive``); returns the descriptor.

        As in Flink the descriptor itself changes, so the usual two lines work::

            seen = ValueStateDescriptor("seen", bool)
            seen.enable_time_to_live(StateTtlConfig.new_builder(timedelta(hours=24)).build())

        ``StateTtlConfig.DISABLED`` turns the TTL off again.
        """
        from sparkstate.api.ttl import StateTtlConfig

        if not isinstance(ttl_config, StateTtlConfig):
            raise StateDescriptorError(
                f"{self.describe()} {self.name!r}: enable_time_to_live takes a StateTtlConfig "
                f"(StateTtlConfig.new_builder(timedelta(hours=1)).build()), got {ttl_config!r}"
            )
        # frozen like every descriptor, but Flink's API changes the descriptor in place
        object.__setattr__(self, "ttl_config", ttl_config if ttl_config.is_enabled() else None)
        return self


@dataclass(frozen=True)
class ValueStateDescriptor(StateDescriptor, Generic[T]):
    """One value per key.

    ``default`` is what ``value()`` returns while the key has no value (Flink's deprecated
    default value, kept because running totals read much better with it).

    Example::

        self.total = ctx.get_state(ValueStateDescriptor("total", float, default=0.0))
    """

    name: str
    type: Any = object
    default: Any = None
    kind: typing.ClassVar[str] = "value"
    ttl_config: StateTtlConfig | None = None

    def __post_init__(self) -> None:
        _check_name(self.name, "ValueStateDescriptor")
        make_type_check(self.type, f"ValueStateDescriptor {self.name!r}")

    def describe(self) -> str:
        return f"ValueState[{_type_name(self.type)}]"


@dataclass(frozen=True)
class ListStateDescriptor(StateDescriptor, Generic[T]):
    """A list of elements per key; ``element_type`` is checked on every element added.

    Example::

        self.buffer = ctx.get_list_state(ListStateDescriptor("buffer", dict))
    """

    name: str
    element_type: Any = object
    kind: typing.ClassVar[str] = "list"
    ttl_config: StateTtlConfig | None = None

    def __post_init__(self) -> None:
        _check_name(self.name, "ListStateDescriptor")
        make_type_check(self.element_type, f"ListStateDescriptor {self.name!r}")

    def describe(self) -> str:
        return f"ListState[{_type_name(self.element_type)}]"


@dataclass(frozen=True)
class MapStateDescriptor(StateDescriptor, Generic[K, V]):
    """A map per key (user key to user value), both types checked on every put.

    Example::

        self.features = ctx.get_map_state(MapStateDescriptor("features", str, float))
    """

    name: str
    key_type: Any = object
    value_type: Any = object
    kind: typing.ClassVar[str] = "map"
    ttl_config: StateTtlConfig | None = None

    def __post_init__(self) -> None:
        _check_name(self.name, "MapStateDescriptor")
        make_type_check(self.key_type, f"MapStateDescriptor {self.name!r} key")
        make_type_check(self.value_type, f"MapStateDescriptor {self.name!r} value")

    def describe(self) -> str:
        return f"MapState[{_type_name(self.key_type)}, {_type_name(self.value_type)}]"


@dataclass(frozen=True)
class ReducingStateDescriptor(StateDescriptor, Generic[T]):
    """A single value per key, folded with ``reduce_function(old, new)`` on every ``add``.

    Example::

        self.max = ctx.get_reducing_state(ReducingStateDescriptor("max", max, float))
    """

    name: str
    #: required: the default None only lets ``__post_init__`` say so in words
    reduce_function: Callable[[T, T], T] | None = None
    type: Any = object
    kind: typing.ClassVar[str] = "reducing"
    ttl_config: StateTtlConfig | None = None

    def __post_init__(self) -> None:
        _check_name(self.name, "ReducingStateDescriptor")
        if not callable(self.reduce_function):
            raise StateDescriptorError(
                f"ReducingStateDescriptor {self.name!r}: reduce_function must be callable, "
                f"got {self.reduce_function!r}"
            )
        make_type_check(self.type, f"ReducingStateDescriptor {self.name!r}")

    def describe(self) -> str:
        return f"ReducingState[{_type_name(self.type)}]"


class AggregateFunction(Generic[IN, ACC, OUT]):
    """Incremental aggregation in Flink's four steps (used by ``AggregatingState`` and windows).

    Example::

        class Average(AggregateFunction):
            def create_accumulator(self):
                return (0.0, 0)
            def add(self, value, acc):
                return (acc[0] + value, acc[1] + 1)
            def get_result(self, acc):
                return acc[0] / acc[1] if acc[1] else None
            def merge(self, a, b):
                return (a[0] + b[0], a[1] + b[1])
    """

    def create_accumulator(self) -> ACC:
        raise NotImplementedError

    def add(self, value: IN, accumulator: ACC) -> ACC:
        raise NotImplementedError

    def get_result(self, accumulator: ACC) -> OUT:
        raise NotImplementedError

    def merge(self, a: ACC, b: ACC) -> ACC:
        raise NotImplementedError


@dataclass(frozen=True)
class AggregatingStateDescriptor(StateDescriptor, Generic[IN, ACC, OUT]):
    """An accumulator per key, driven by an :class:`AggregateFunction`.

    ``accumulator_type`` (optional) is checked each time ``add`` returns a new accumulator.

    Example::

        self.avg = ctx.get_aggregating_state(AggregatingStateDescriptor("avg", Average(), tuple))
    """

    name: str
    #: required: the default None only lets ``__post_init__`` say so in words
    aggregate_function: AggregateFunction[IN, ACC, OUT] | None = None
    accumulator_type: Any = object
    kind: typing.ClassVar[str] = "aggregating"
    ttl_config: StateTtlConfig | None = None

    def __post_init__(self) -> None:
        _check_name(self.name, "AggregatingStateDescriptor")
        fn = self.aggregate_function
        missing = [m for m in ("create_accumulator", "add", "get_result") if not callable(getattr(fn, m, None))]
        if fn is None or missing:
            raise StateDescriptorError(
                f"AggregatingStateDescriptor {self.name!r}: aggregate_function must be an "
                f"AggregateFunction (missing {', '.join(missing) or 'everything'}), got {fn!r}"
            )
        make_type_check(self.accumulator_type, f"AggregatingStateDescriptor {self.name!r}")

    def describe(self) -> str:
        return f"AggregatingState[{type(self.aggregate_function).__name__}, {_type_name(self.accumulator_type)}]"


# --------------------------------------------------------------------------- handles


class KeyScope:
    """What the engine sets before each call of the user's function: the key and its record.

    ``rec`` is the current key's record: ``{state name: value, TIMERS_FIELD: {(domain, ts)}}``.
    """

    __slots__ = (
        "key", "rec", "timestamp", "watermark", "processing_time", "due", "timers_enabled", "event_time", "side",
        "in_event_timer", "broadcast", "broadcast_changed", "broadcast_descriptors",
    )

    def __init__(self) -> None:
        self.key: Any = None
        self.rec: Record | None = None
        self.timestamp: int | None = None
        self.watermark: int = MIN_WATERMARK
        self.processing_time: int = 0
        #: records that registered a timer already due in this batch: fired before it ends
        self.due: list[tuple[Any, Record]] = []
        #: the function defines on_timer, so it may register timers
        self.timers_enabled = False
        #: a watermark can reach event-time timers (a watermark strategy, or a bounded input)
        self.event_time = True
        #: side-output rows of the batch so far: ``(tag name, row)``
        self.side: list[tuple[str, Any]] = []
        #: an event-time ``on_timer`` is running: an event-time timer it registers for a time
        #: the watermark has passed fires in the same round, in timestamp order (Flink's
        #: timer queue); registered anywhere else, such a timer waits for the next watermark
        self.in_event_timer = False
        #: the key group's broadcast states (name -> map) while a broadcast function runs
        self.broadcast: dict[str, dict[Any, Any]] | None = None
        #: process_broadcast_element changed them in this batch
        self.broadcast_changed = False
        #: the job's broadcast state descriptors by name
        self.broadcast_descriptors: dict[str, Any] = {}


class _Handle:
    __slots__ = ("_scope", "_name", "_desc")

    def __init__(self, scope: KeyScope, desc: StateDescriptor) -> None:
        self._scope = scope
        self._name = desc.name
        self._desc = desc

    def _record(self) -> Record:
        rec = self._scope.rec
        if rec is None:
            raise StateAccessError(
                f"{self._desc.describe()} {self._name!r} was used outside of a keyed context; "
                "keyed state can be read and written in process_element and on_timer, not in open or close"
            )
        return rec

    def _type_error(self, what: str, value: Any, expected: Any) -> StateTypeError:
        return StateTypeError(
            f"{self._desc.describe()} {self._name!r} for key {self._scope.key!r}: {what} must be "
            f"{_type_name(expected)}, got {type(value).__name__} {value!r}"
        )

    def clear(self) -> None:
        """Remove this state's value for the current key."""
        self._record().pop(self._name, None)

    def __repr__(self) -> str:
        return f"<{self._desc.describe()} {self._name!r}>"


class ValueState(_Handle, Generic[T]):
    """A single value for the current key (see :class:`ValueStateDescriptor`)."""

    __slots__ = ("_default", "_copy_default", "_check", "_exact")
    _desc: ValueStateDescriptor[T]

    def __init__(self, scope: KeyScope, desc: ValueStateDescriptor[T]) -> None:
        super().__init__(scope, desc)
        self._default: T | None = desc.default
        self._copy_default = not isinstance(desc.default, _IMMUTABLE)
        self._check = make_type_check(desc.type, desc.name)
        # values of exactly the declared class skip the check (the hot path of running totals)
        self._exact = desc.type if isinstance(desc.type, type) else None

    def value(self) -> T:
        """The current key's value, or the descriptor's default when there is none (None
        without a default; typed ``T`` as in PyFlink, so a counter with ``default=0`` needs
        no None check)."""
        rec = self._scope.rec
        if rec is None:
            rec = self._record()
        # the default is None when the descriptor has none: Flink's null, typed away as PyFlink does
        if self._copy_default:
            value = rec.get(self._name, _MISSING)
            return copy.deepcopy(self._default) if value is _MISSING else value  # type: ignore[return-value]
        return rec.get(self._name, self._default)  # type: ignore[return-value]

    def update(self, value: T | None) -> None:
        """Set the current key's value; ``None`` clears it, as in Flink."""
        rec = self._scope.rec
        if rec is None:
            rec = self._record()
        if value is None:
            rec.pop(self._name, None)
            return
        if type(value) is not self._exact:
            check = self._check
            if check is not None and not check(value):
                raise self._type_error("the value", value, self._desc.type)
        rec[self._name] = value


class ListState(_Handle, Generic[T]):
    """A list of elements for the current key (see :class:`ListStateDescriptor`)."""

    __slots__ = ("_check",)
    _desc: ListStateDescriptor[T]

    def __init__(self, scope: KeyScope, desc: ListStateDescriptor[T]) -> None:
        super().__init__(scope, desc)
        self._check = make_type_check(desc.element_type, desc.name)

    def get(self) -> list[T]:
        """A copy of the current key's elements (empty when there are none)."""
        return list(self._record().get(self._name, ()))

    def __iter__(self) -> Iterator[T]:
        return iter(self.get())

    def __len__(self) -> int:
        return len(self._record().get(self._name, ()))

    def _checked(self, value: T) -> T:
        if value is None:
            raise self._type_error("an element", value, self._desc.element_type)
        check = self._check
        if check is not None and not check(value):
            raise self._type_error("an element", value, self._desc.element_type)
        return value

    def add(self, value: T) -> None:
        """Append one element."""
        rec = self._record()
        v = self._checked(value)
        lst = rec.get(self._name)
        if lst is None:
            rec[self._name] = [v]
        else:
            lst.append(v)

    def add_all(self, values: Iterable[T]) -> None:
        """Append every element of ``values``."""
        checked = [self._checked(v) for v in values]
        if checked:
            rec = self._record()
            rec.setdefault(self._name, []).extend(checked)

    def update(self, values: Iterable[T]) -> None:
        """Replace the whole list (an empty list clears the state)."""
        checked = [self._checked(v) for v in values]
        rec = self._record()
        if checked:
            rec[self._name] = checked
        else:
            rec.pop(self._name, None)


class MapState(_Handle, Generic[K, V]):
    """A map for the current key (see :class:`MapStateDescriptor`); also usable as a mapping."""

    __slots__ = ("_check_key", "_check_value")
    _desc: MapStateDescriptor[K, V]

    def __init__(self, scope: KeyScope, desc: MapStateDescriptor[K, V]) -> None:
        super().__init__(scope, desc)
        self._check_key = make_type_check(desc.key_type, desc.name)
        self._check_value = make_type_check(desc.value_type, desc.name)

    def _map(self) -> dict[K, V]:
        return self._record().get(self._name) or {}

    @overload
    def get(self, key: K) -> V | None: ...

    @overload
    def get(self, key: K, default: V) -> V: ...

    def get(self, key: K, default: V | None = None) -> V | None:
        """The value stored under ``key``, or ``default``."""
        return self._map().get(key, default)

    def put(self, key: K, value: V) -> None:
        """Store ``value`` under ``key``."""
        desc = self._desc
        if self._check_key is not None and not self._check_key(key):
            raise self._type_error("a map key", key, desc.key_type)
        if value is not None and self._check_value is not None and not self._check_value(value):
            raise self._type_error("a map value", value, desc.value_type)
        rec = self._record()
        m = rec.get(self._name)
        if m is None:
            rec[self._name] = {key: value}
        else:
            m[key] = value

    def put_all(self, entries: dict[K, V]) -> None:
        """Store every entry of ``entries``."""
        for k, v in entries.items():
            self.put(k, v)

    def remove(self, key: K) -> None:
        """Remove ``key`` (no error if absent)."""
        rec = self._record()
        m = rec.get(self._name)
        if m is not None:
            m.pop(key, None)
            if not m:
                del rec[self._name]

    def contains(self, key: K) -> bool:
        return key in self._map()

    def keys(self) -> list[K]:
        return list(self._map().keys())

    def values(self) -> list[V]:
        return list(self._map().values())

    def items(self) -> list[tuple[K, V]]:
        return list(self._map().items())

    def is_empty(self) -> bool:
        return not self._map()

    __contains__ = contains

    def __getitem__(self, key: K) -> V:
        return self._map()[key]

    def __setitem__(self, key: K, value: V) -> None:
        self.put(key, value)

    def __delitem__(self, key: K) -> None:
        self.remove(key)

    def __iter__(self) -> Iterator[K]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self._map())


class ReducingState(_Handle, Generic[T]):
    """A value folded with the descriptor's reduce function (see :class:`ReducingStateDescriptor`)."""

    __slots__ = ("_reduce", "_check")
    _desc: ReducingStateDescriptor[T]

    def __init__(self, scope: KeyScope, desc: ReducingStateDescriptor[T]) -> None:
        super().__init__(scope, desc)
        assert desc.reduce_function is not None  # refused by the descriptor
        self._reduce = desc.reduce_function
        self._check = make_type_check(desc.type, desc.name)

    def get(self) -> T:
        """The reduced value, or None when nothing was added (typed ``T`` as in PyFlink)."""
        return self._record().get(self._name)  # type: ignore[return-value]

    def add(self, value: T) -> None:
        """Fold ``value`` into the state: ``reduce_function(current, value)``."""
        rec = self._record()
        check = self._check
        desc = self._desc
        if value is None or (check is not None and not check(value)):
            raise self._type_error("an added value", value, desc.type)
        current = rec.get(self._name, _MISSING)
        if current is _MISSING:
            rec[self._name] = value
            return
        reduced = self._reduce(current, value)
        if reduced is None or (check is not None and not check(reduced)):
            raise self._type_error("the reduce function's result", reduced, desc.type)
        rec[self._name] = reduced


class AggregatingState(_Handle, Generic[IN, OUT]):
    """An accumulator driven by an :class:`AggregateFunction` (see :class:`AggregatingStateDescriptor`)."""

    __slots__ = ("_fn", "_check")
    _desc: AggregatingStateDescriptor[IN, Any, OUT]

    def __init__(self, scope: KeyScope, desc: AggregatingStateDescriptor[IN, Any, OUT]) -> None:
        super().__init__(scope, desc)
        assert desc.aggregate_function is not None  # refused by the descriptor
        self._fn = desc.aggregate_function
        self._check = make_type_check(desc.accumulator_type, desc.name)

    def get(self) -> OUT:
        """``get_result`` of the accumulator, or None when nothing was added (as in Flink;
        typed ``OUT`` as in PyFlink)."""
        acc = self._record().get(self._name, _MISSING)
        if acc is _MISSING:
            return None  # type: ignore[return-value]  # Flink's null for empty state
        return self._fn.get_result(acc)

    def add(self, value: IN) -> None:
        """Add ``value`` to the accumulator (creating it on the first add)."""
        rec = self._record()
        acc = rec.get(self._name, _MISSING)
        if acc is _MISSING:
            acc = self._fn.create_accumulator()
        acc = self._fn.add(value, acc)
        check = self._check
        if acc is None or (check is not None and not check(acc)):
            raise self._type_error("the accumulator returned by add()", acc, self._desc.accumulator_type)
        rec[self._name] = acc


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


_MISSING: Any = _Missing()

_HANDLES: dict[type[StateDescriptor], type[_Handle]] = {
    ValueStateDescriptor: ValueState,
    ListStateDescriptor: ListState,
    MapStateDescriptor: MapState,
    ReducingStateDescriptor: ReducingState,
    AggregatingStateDescriptor: AggregatingState,
}


#: the handles of state with a TTL, by descriptor class: filled by ``api/state_ttl.py`` when
#: it is imported (``api/functions.py`` imports it), so this module does not import it back
_TTL_HANDLES: dict[type[StateDescriptor], type[_Handle]] = {}


def register_ttl_handles(handles: dict[type[StateDescriptor], type[_Handle]]) -> None:
    """Called by ``api/state_ttl.py``: the handle class per descriptor class for TTL'd state."""
    _TTL_HANDLES.update(handles)


def handle_for(scope: KeyScope, desc: StateDescriptor) -> _Handle:
    """Create the handle class that matches ``desc`` (a TTL handle when it has a TTL)."""
    try:
        cls = _HANDLES[type(desc)]
    except KeyError:
        raise StateDescriptorError(f"not a state descriptor: {desc!r}") from None
    if desc.ttl_config is not None:
        assert _TTL_HANDLES, "sparkstate.api.state_ttl registers the TTL handles when imported"
        cls = _TTL_HANDLES[type(desc)]
    return cls(scope, desc)
