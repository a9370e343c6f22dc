"""TTL cleanup: expired entries leave the stored state, not only the reads.

A TTL'd state keeps each value with its last access time (the stored representation fixed by
``api/ttl.py``: ``(value, last_access_ms)`` for Value, Reducing and Aggregating state, a list
of ``(element, last_access_ms)`` for a List, ``{user_key: (value, last_access_ms)}`` for a
Map). :func:`expire_record` drops what has expired from one key's record, on the rule of
:func:`~sparkstate.api.ttl.is_expired`; the engines call it at four moments, all per key group
(what Spark runs in one call, see ``engine/keygroups.py``):

* every key a micro-batch touched loses its expired entries when it is written back (all
  TTL'd states);
* ``cleanup_incrementally(n)``: each run of a key group checks ``n`` more of its keys (and
  ``n`` per element with ``run_cleanup_for_every_record``), from a cursor the group keeps in
  its checkpointed meta, so successive runs walk the whole group;
* ``cleanup_in_background`` (the default): a key group holding such state is swept whole at
  its first run once ``sweep_interval_ms`` has passed since its last sweep (or since it got
  that state); a group that sees no traffic is woken for it (``GroupMeta.next_wake``);
* ``cleanup_full_snapshot``: a savepoint leaves expired entries out
  (:meth:`TtlCleanup.snapshot_filter`), at the savepoint's processing time and watermark.

Invariants: nothing unexpired is ever removed (each check is ``is_expired`` at the batch's own
clocks, so a replayed batch removes the same entries); a List or Map left empty, and a record
left empty, are removed as the engines remove empty state; a value not in the stored
representation (state written before its TTL was enabled) is left alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from itertools import islice
from typing import Any, Protocol

from sparkstate.api.state import Record, StateDescriptor
from sparkstate.api.time import MIN_WATERMARK
from sparkstate.api.ttl import StateTtlConfig, StateVisibility, TtlTimeCharacteristic, UpdateType, ttl_now

__all__ = ["TtlCleanup", "cleanup_from_json", "config_from_json", "config_to_json", "expire_record", "walk_keys"]


def _limits(ttl_states: Mapping[str, StateTtlConfig], processing_time: int, watermark: int) -> list[tuple[str, int]]:
    """``(state, limit)``: an entry of the state last accessed at or before ``limit`` has expired
    (``last + ttl <= now`` is ``last <= now - ttl``)."""
    return [(name, ttl_now(cfg, processing_time, watermark) - cfg.ttl_ms) for name, cfg in ttl_states.items()]


def _expire(rec: Record, limits: Iterable[tuple[str, int]]) -> bool:
    changed = False
    for name, limit in limits:
        v = rec.get(name)
        if v is None:
            continue
        kind = type(v)
        if kind is tuple:
            if len(v) == 2 and type(v[1]) is int and v[1] <= limit:
                del rec[name]
                changed = True
        elif kind is list:
            if any(type(e) is tuple and e[1] <= limit for e in v):
                kept = [e for e in v if not (type(e) is tuple and e[1] <= limit)]
                if kept:
                    v[:] = kept
                else:
                    del rec[name]
                changed = True
        elif kind is dict:
            gone = [k for k, e in v.items() if type(e) is tuple and e[1] <= limit]
            if gone:
                for k in gone:
                    del v[k]
                if not v:
                    del rec[name]
                changed = True
    return changed


def expire_record(
    rec: Record, ttl_states: Mapping[str, StateTtlConfig], processing_time: int, watermark: int
) -> bool:
    """Drop the expired values, elements and entries of ``ttl_states`` from ``rec`` (in place);
    a List or Map left empty is removed. Returns whether anything was dropped."""
    return _expire(rec, _limits(ttl_states, processing_time, watermark))


# --------------------------------------------------------------------------- cursor walk


class Segmented(Protocol):
    """A key group's records in segments: buckets on Spark, one segment in the harness."""

    def segments(self) -> int: ...

    def segment(self, b: int) -> dict[Any, Record]: ...


def walk_keys(
    group: Segmented, cursor: tuple[int, int], n: int, total: int
) -> tuple[tuple[int, int], list[tuple[int, Any, Record]]]:
    """The next ``n`` records (at most ``total``, the group's key count) from ``cursor``, a
    ``(segment, offset)`` position, wrapping around at the end; and the cursor after them.

    The offset counts the records before it in the segment's (insertion) order. Records the
    caller empties are removed before the next walk, so the cursor steps over the ones left;
    a segment that loses records before the cursor, or splits, makes a pass skip a few keys,
    which the next pass checks."""
    n = min(n, total)
    out: list[tuple[int, Any, Record]] = []
    segments = group.segments()
    b, off = cursor
    if b >= segments:
        b, off = 0, 0
    hops = 0
    while len(out) < n and hops <= segments:
        seg = group.segment(b)
        want = n - len(out)
        got = [(b, key, rec) for key, rec in islice(seg.items(), off, off + want)]
        out.extend(got)
        if len(got) < want:
            b, off = (b + 1) % segments, 0
            hops += 1
        else:
            off += len(got)
    return (b, off), out


def next_offset(cursor: tuple[int, int], walked: list[tuple[int, Any, Record]]) -> tuple[int, int]:
    """The cursor after the walked records emptied by cleanup are removed from their segment."""
    b, off = cursor
    emptied = sum(1 for wb, _, rec in walked if wb == b and not rec)
    return b, max(0, off - emptied)


# --------------------------------------------------------------------------- the policy


class GroupCleanupState(Protocol):
    """What a key group remembers for cleanup (``GroupMeta`` on Spark, a small object in the harness)."""

    ttl_cursor: tuple[int, int]
    sweep_at: int | None


@dataclass
class CleanupStats:
    """What the cleanups of one key group run did (for tests and the benchmark's notes)."""

    checked: int = 0
    swept: bool = False


class TtlCleanup:
    """The cleanup a function's TTL'd states ask for, applied to one key group's run.

    ``bool(cleanup)`` is False when no state has a TTL: the engines then skip it entirely.
    Several states with different options share one cursor and one sweep: the cursor checks
    the largest ``cleanup_size`` of them (``run_cleanup_for_every_record`` if any asks), the
    sweep runs at the shortest interval, each over the states that asked for it.
    """

    def __init__(self, descriptors: Iterable[StateDescriptor]) -> None:
        states = {d.name: d.ttl_config for d in descriptors if getattr(d, "ttl_config", None) is not None}
        self.states: dict[str, StateTtlConfig] = states  # type: ignore[assignment]
        self.incremental = {n: c for n, c in self.states.items() if c.incremental_cleanup_size > 0}
        self.incremental_size = max((c.incremental_cleanup_size for c in self.incremental.values()), default=0)
        self.per_record = any(c.run_cleanup_for_every_record for c in self.incremental.values())
        self.background = {n: c for n, c in self.states.items() if c.cleanup_in_background}
        self.sweep_interval_ms = min((c.sweep_interval_ms for c in self.background.values()), default=None)
        self.snapshot = {n: c for n, c in self.states.items() if c.cleanup_full_snapshot}

    def __bool__(self) -> bool:
        return bool(self.states)

    def keys_to_check(self, elements: int) -> int:
        """Keys the incremental cleanup checks in a key group's run over ``elements`` elements."""
        n = self.incremental_size
        return n + n * elements if self.per_record else n

    def expire_touched(self, touched: Mapping[Any, Record], processing_time: int, watermark: int) -> None:
        """Every touched record loses its expired entries (it is written back anyway)."""
        limits = _limits(self.states, processing_time, watermark)
        for rec in touched.values():
            if rec:
                _expire(rec, limits)

    def holds_swept_state(self, rec: Record) -> bool:
        return any(name in rec for name in self.background)

    def first_sweep(self, records: Iterable[Record], processing_time: int) -> int | None:
        """When a key group holding ``records`` that was never swept (restored from a
        savepoint, say) is swept first: one interval from now if any holds such state."""
        interval = self.sweep_interval_ms
        if interval is None or not any(self.holds_swept_state(r) for r in records):
            return None
        return processing_time + interval

    def run_group(
        self,
        group: Segmented,
        meta: GroupCleanupState,
        n_keys: int,
        touched: dict[Any, Record],
        elements: int,
        processing_time: int,
        watermark: int,
        on_changed: Callable[[int, Any, Record], None] | None = None,
    ) -> CleanupStats:
        """All of a key group run's cleanup: the touched records, then a sweep when it is due
        or else the incremental cursor; records changed beyond the touched ones are added to
        ``touched`` (and reported to ``on_changed(segment, key, rec)``) so the engine writes
        them back. ``meta``'s cursor and sweep time are updated."""
        stats = CleanupStats()
        self.expire_touched(touched, processing_time, watermark)

        def changed(b: int, key: Any, rec: Record) -> None:
            if key not in touched:
                touched[key] = rec
                if on_changed is not None:
                    on_changed(b, key, rec)

        interval = self.sweep_interval_ms
        if interval is not None and meta.sweep_at is not None and processing_time >= meta.sweep_at and not n_keys:
            meta.sweep_at = None  # the group emptied: nothing to sweep until it holds such state again
        if interval is not None and meta.sweep_at is not None and processing_time >= meta.sweep_at:
            limits = _limits(self.background, processing_time, watermark)
            holds = False
            for b in range(group.segments()):
                for key, rec in list(group.segment(b).items()):
                    stats.checked += 1
                    if _expire(rec, limits):
                        changed(b, key, rec)
                    holds = holds or self.holds_swept_state(rec)
            meta.sweep_at = processing_time + interval if holds else None
            stats.swept = True
        elif self.incremental:
            n = self.keys_to_check(elements)
            if n and n_keys:
                cursor, walked = walk_keys(group, meta.ttl_cursor, n, n_keys)
                limits = _limits(self.incremental, processing_time, watermark)
                for b, key, rec in walked:
                    if _expire(rec, limits):
                        changed(b, key, rec)
                stats.checked = len(walked)
                meta.ttl_cursor = next_offset(cursor, walked)
        if meta.sweep_at is None:
            meta.sweep_at = self.first_sweep(touched.values(), processing_time)
        return stats

    def snapshot_filter(
        self, processing_time: int | None, watermark: int | None
    ) -> Callable[[Iterable[tuple[Any, Record]]], Iterator[tuple[Any, Record]]] | None:
        """What a savepoint passes its records through: expired entries of the states with
        ``cleanup_full_snapshot`` left out (records left empty dropped); None: keep all."""
        if not self.snapshot or processing_time is None:
            return None
        # no watermark yet: an event-time TTL expires nothing (Flink's Long.MIN_VALUE)
        limits = _limits(self.snapshot, processing_time, watermark if watermark is not None else MIN_WATERMARK)

        def records(pairs: Iterable[tuple[Any, Record]]) -> Iterator[tuple[Any, Record]]:
            for key, rec in pairs:
                _expire(rec, limits)
                if rec:
                    yield key, rec

        return records


# --------------------------------------------------------------------------- in checkpoint metadata


def config_to_json(config: StateTtlConfig) -> dict[str, Any]:
    """A TTL config as JSON (what a checkpoint records, so a savepoint taken from it later,
    without the job, knows what to clean)."""
    return {
        "ttl_ms": config.ttl_ms,
        "update_type": config.update_type.name,
        "state_visibility": config.state_visibility.name,
        "time_characteristic": config.time_characteristic.name,
        "cleanup_full_snapshot": config.cleanup_full_snapshot,
        "incremental_cleanup_size": config.incremental_cleanup_size,
        "run_cleanup_for_every_record": config.run_cleanup_for_every_record,
        "cleanup_in_background": config.cleanup_in_background,
        "background_interval_ms": config.background_interval_ms,
    }


def config_from_json(data: Mapping[str, Any]) -> StateTtlConfig:
    """The inverse of :func:`config_to_json`."""
    return StateTtlConfig(
        ttl_ms=int(data["ttl_ms"]),
        update_type=UpdateType[data.get("update_type", "OnCreateAndWrite")],
        state_visibility=StateVisibility[data.get("state_visibility", "NeverReturnExpired")],
        time_characteristic=TtlTimeCharacteristic[data.get("time_characteristic", "ProcessingTime")],
        cleanup_full_snapshot=bool(data.get("cleanup_full_snapshot", False)),
        incremental_cleanup_size=int(data.get("incremental_cleanup_size", 0)),
        run_cleanup_for_every_record=bool(data.get("run_cleanup_for_every_record", False)),
        cleanup_in_background=bool(data.get("cleanup_in_background", True)),
        background_interval_ms=data.get("background_interval_ms"),
    )


class _Descriptor:
    """A stand-in descriptor for a state known only by name and TTL (from checkpoint metadata)."""

    def __init__(self, name: str, config: StateTtlConfig) -> None:
        self.name = name
        self.ttl_config = config


def cleanup_from_json(ttl: Mapping[str, Mapping[str, Any]] | None) -> TtlCleanup:
    """The :class:`TtlCleanup` of the TTL configs a checkpoint recorded by state name."""
    return TtlCleanup(_Descriptor(name, config_from_json(c)) for name, c in (ttl or {}).items())  # type: ignore[misc]

