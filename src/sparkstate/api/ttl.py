"""State time-to-live: Flink's ``StateTtlConfig``, with event time as a second clock.

A descriptor with a TTL (``descriptor.enable_time_to_live(config)``) stores each value with
the time of its last access: the whole value for Value, Reducing and Aggregating state, each
element of a List, each entry of a Map. An entry whose ``last access + ttl <= now`` has
expired (Flink's ``TtlUtils.expired``: the boundary itself is expired). ``now`` is the
micro-batch's processing time (recorded by Spark with the batch, so a replayed batch decides
the same) or, with ``use_event_time()``, the watermark.

The builder follows PyFlink's names (``StateTtlConfig.new_builder(ttl)....build()``)::

    ttl = (StateTtlConfig.new_builder(timedelta(hours=24))
           .set_update_type(StateTtlConfig.UpdateType.OnReadAndWrite)
           .cleanup_incrementally(10)
           .build())
    seen = ValueStateDescriptor("seen", bool)
    seen.enable_time_to_live(ttl)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from enum import Enum
from typing import Any, ClassVar

from sparkstate.api.time import Duration, to_millis
from sparkstate.errors import JobDefinitionError, StateDescriptorError


class UpdateType(Enum):
    """When an entry's last-access time is refreshed (Flink's ``StateTtlConfig.UpdateType``)."""

    #: no TTL (what ``StateTtlConfig.DISABLED`` holds)
    Disabled = 0
    #: on creation and on every write (the default)
    OnCreateAndWrite = 1
    #: also on every read that returns the entry
    OnReadAndWrite = 2


class StateVisibility(Enum):
    """Whether a read may return an expired entry not removed yet (Flink's ``StateVisibility``)."""

    #: an expired entry is returned until it is removed (the read that returns it removes it)
    ReturnExpiredIfNotCleanedUp = 0
    #: an expired entry is never returned (the default)
    NeverReturnExpired = 1


class TtlTimeCharacteristic(Enum):
    """The clock TTL is measured on: Flink's ``ProcessingTime``, and ``EventTime`` (the watermark)."""

    ProcessingTime = 0
    #: an entry's time is the event time of the element (or timer) that wrote it; it expires
    #: once the watermark reaches that time plus the TTL
    EventTime = 1


# the config's fields name the enums through these aliases: inside its body, ``UpdateType`` and
# the others are Flink's nested names (``StateTtlConfig.UpdateType.OnReadAndWrite``)
_Update = UpdateType
_Visibility = StateVisibility
_Clock = TtlTimeCharacteristic


@dataclass(frozen=True)
class StateTtlConfig:
    """A TTL and its options; build one with :meth:`new_builder`.

    Cleanup (expired entries leave the stored state, not only the reads):

    * ``cleanup_full_snapshot`` - a savepoint leaves expired entries out;
    * ``cleanup_incrementally(n)`` - each micro-batch checks ``n`` more keys of every key group
      it runs (and ``n`` per element with ``run_cleanup_for_every_record``);
    * ``cleanup_in_background`` (on by default, as in Flink) - key groups that see no traffic
      are swept once per ``background_interval_ms`` (the TTL unless set).

    A key touched by a micro-batch always loses its expired entries when it is written back.
    """

    ttl_ms: int
    update_type: _Update = _Update.OnCreateAndWrite
    state_visibility: _Visibility = _Visibility.NeverReturnExpired
    time_characteristic: _Clock = _Clock.ProcessingTime
    cleanup_full_snapshot: bool = False
    #: keys checked per key group and micro-batch (0: none beyond the touched ones)
    incremental_cleanup_size: int = 0
    run_cleanup_for_every_record: bool = False
    cleanup_in_background: bool = True
    #: how often an idle key group is swept (None: once per TTL)
    background_interval_ms: int | None = None

    UpdateType: ClassVar[type[UpdateType]] = UpdateType
    StateVisibility: ClassVar[type[StateVisibility]] = StateVisibility
    TtlTimeCharacteristic: ClassVar[type[TtlTimeCharacteristic]] = TtlTimeCharacteristic

    def __post_init__(self) -> None:
        if type(self.ttl_ms) is not int or self.ttl_ms <= 0:
            raise StateDescriptorError(
                f"StateTtlConfig: the TTL must be a positive duration, got {self.ttl_ms!r} ms; "
                "use StateTtlConfig.new_builder(timedelta(hours=24)) (or int milliseconds > 0)"
            )
        if type(self.incremental_cleanup_size) is not int or self.incremental_cleanup_size < 0:
            raise StateDescriptorError(
                f"StateTtlConfig: cleanup_incrementally needs a cleanup size >= 0, got {self.incremental_cleanup_size!r}"
            )
        if self.background_interval_ms is not None and (
            type(self.background_interval_ms) is not int or self.background_interval_ms <= 0
        ):
            raise StateDescriptorError(
                f"StateTtlConfig: the background cleanup interval must be a positive duration, "
                f"got {self.background_interval_ms!r} ms"
            )

    @staticmethod
    def new_builder(ttl: Duration | str) -> StateTtlConfigBuilder:
        """A builder for a TTL of ``ttl`` (a timedelta, int ms or text such as ``"24 hours"``)."""
        return StateTtlConfigBuilder(_ttl_ms(ttl))

    # Flink's getters
    def get_ttl(self) -> timedelta:
        return timedelta(milliseconds=self.ttl_ms)

    def get_update_type(self) -> _Update:
        return self.update_type

    def get_state_visibility(self) -> _Visibility:
        return self.state_visibility

    def get_ttl_time_characteristic(self) -> _Clock:
        return self.time_characteristic

    def is_enabled(self) -> bool:
        return self.update_type is not _Update.Disabled

    @property
    def event_time(self) -> bool:
        return self.time_characteristic is _Clock.EventTime

    @property
    def refresh_on_read(self) -> bool:
        return self.update_type is _Update.OnReadAndWrite

    @property
    def return_expired(self) -> bool:
        return self.state_visibility is _Visibility.ReturnExpiredIfNotCleanedUp

    @property
    def sweep_interval_ms(self) -> int:
        """How often an idle key group holding this state is swept by the background cleanup."""
        return self.background_interval_ms or self.ttl_ms

    def describe(self) -> str:
        """A short text such as ``ttl 1d, processing time, OnCreateAndWrite, NeverReturnExpired``."""
        clock = "event time" if self.event_time else "processing time"
        return f"ttl {_span(self.ttl_ms)}, {clock}, {self.update_type.name}, {self.state_visibility.name}"


def describe_cleanup(config: StateTtlConfig) -> str:
    """How expired entries of ``config``'s state leave the stored state, in words."""
    ways = ["on write-back"]
    n = config.incremental_cleanup_size
    if n:
        ways.append(f"incrementally {n} keys per run" + (f" and {n} per element" if config.run_cleanup_for_every_record else ""))
    if config.cleanup_in_background:
        ways.append(f"background sweep every {_span(config.sweep_interval_ms)}")
    if config.cleanup_full_snapshot:
        ways.append("left out of savepoints")
    return "cleanup " + ", ".join(ways)


def _span(ms: int) -> str:
    """A duration in its largest whole unit: ``90d``, ``24h``, ``10m``, ``30s``, ``1500ms``."""
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def _ttl_ms(ttl: Any, what: str = "StateTtlConfig: the TTL") -> int:
    try:
        ms = to_millis(ttl, what, text=True)
    except JobDefinitionError as exc:
        raise StateDescriptorError(str(exc)) from None
    if ms <= 0:
        raise StateDescriptorError(
            f"{what} must be a positive duration, got {ttl!r}; a TTL of zero would expire every entry at once"
        )
    return ms


class StateTtlConfigBuilder:
    """Flink's ``StateTtlConfig.Builder``: each call returns the builder; :meth:`build` ends it."""

    def __init__(self, ttl_ms: int) -> None:
        self._config = StateTtlConfig(ttl_ms)

    def _set(self, **changes: Any) -> StateTtlConfigBuilder:
        self._config = replace(self._config, **changes)
        return self

    def set_ttl(self, ttl: Duration | str) -> StateTtlConfigBuilder:
        return self._set(ttl_ms=_ttl_ms(ttl))

    def set_update_type(self, update_type: UpdateType) -> StateTtlConfigBuilder:
        if not isinstance(update_type, UpdateType):
            raise StateDescriptorError(f"StateTtlConfig: set_update_type takes a StateTtlConfig.UpdateType, got {update_type!r}")
        return self._set(update_type=update_type)

    def update_ttl_on_create_and_write(self) -> StateTtlConfigBuilder:
        return self._set(update_type=UpdateType.OnCreateAndWrite)

    def update_ttl_on_read_and_write(self) -> StateTtlConfigBuilder:
        return self._set(update_type=UpdateType.OnReadAndWrite)

    def set_state_visibility(self, visibility: StateVisibility) -> StateTtlConfigBuilder:
        if not isinstance(visibility, StateVisibility):
            raise StateDescriptorError(
                f"StateTtlConfig: set_state_visibility takes a StateTtlConfig.StateVisibility, got {visibility!r}"
            )
        return self._set(state_visibility=visibility)

    def return_expired_if_not_cleaned_up(self) -> StateTtlConfigBuilder:
        return self._set(state_visibility=StateVisibility.ReturnExpiredIfNotCleanedUp)

    def never_return_expired(self) -> StateTtlConfigBuilder:
        return self._set(state_visibility=StateVisibility.NeverReturnExpired)

    def set_ttl_time_characteristic(self, characteristic: TtlTimeCharacteristic) -> StateTtlConfigBuilder:
        if not isinstance(characteristic, TtlTimeCharacteristic):
            raise StateDescriptorError(
                "StateTtlConfig: set_ttl_time_characteristic takes a StateTtlConfig.TtlTimeCharacteristic, "
                f"got {characteristic!r}"
            )
        return self._set(time_characteristic=characteristic)

    def use_processing_time(self) -> StateTtlConfigBuilder:
        return self._set(time_characteristic=TtlTimeCharacteristic.ProcessingTime)

    def use_event_time(self) -> StateTtlConfigBuilder:
        """Measure the TTL against the watermark instead of processing time (not in Flink)."""
        return self._set(time_characteristic=TtlTimeCharacteristic.EventTime)

    def cleanup_full_snapshot(self) -> StateTtlConfigBuilder:
        return self._set(cleanup_full_snapshot=True)

    def cleanup_incrementally(self, cleanup_size: int, run_cleanup_for_every_record: bool = False) -> StateTtlConfigBuilder:
        return self._set(incremental_cleanup_size=cleanup_size, run_cleanup_for_every_record=run_cleanup_for_every_record)

    def cleanup_in_background(self, interval: Duration | str | None = None) -> StateTtlConfigBuilder:
        """Sweep idle key groups once per ``interval`` (default: once per TTL)."""
        ms = None if interval is None else _ttl_ms(interval, "StateTtlConfig: the background cleanup interval")
        return self._set(cleanup_in_background=True, background_interval_ms=ms)

    def cleanup_in_rocksdb_compact_filter(self, query_time_after_num_entries: int = 1000) -> StateTtlConfigBuilder:
        """Flink's RocksDB background cleanup; here the background sweep of idle key groups."""
        return self._set(cleanup_in_background=True)

    def disable_cleanup_in_background(self) -> StateTtlConfigBuilder:
        return self._set(cleanup_in_background=False)

    def build(self) -> StateTtlConfig:
        return self._config


#: Flink's ``StateTtlConfig.DISABLED`` (passing it to ``enable_time_to_live`` turns TTL off)
DISABLED = replace(StateTtlConfig(1), update_type=UpdateType.Disabled)


# --------------------------------------------------------------------------- the rule, shared


def ttl_now(config: StateTtlConfig, processing_time: int, watermark: int) -> int:
    """The current time on ``config``'s clock: the batch's processing time, or the watermark."""
    return watermark if config.time_characteristic is TtlTimeCharacteristic.EventTime else processing_time


def is_expired(last_access: int, config: StateTtlConfig, now: int) -> bool:
    """Flink's ``TtlUtils.expired``: an entry last accessed at ``last_access`` has expired once
    ``last_access + ttl <= now`` (at the boundary itself it has)."""
    return last_access + config.ttl_ms <= now
