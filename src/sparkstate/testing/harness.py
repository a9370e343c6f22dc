"""Run a keyed function in-process, without Spark, with clocks the test controls.

The harness drives the same :class:`~sparkstate.engine.operator.KeyedOperator` as the Spark
runtime, batch by batch, so a function behaves the same in a unit test and in a job. By
default every record is pickled and unpickled after each batch, as the Spark runtime does
when it writes state to RocksDB: a value that cannot be checkpointed fails here first, and a
reference kept across batches sees the same (detached) copy it would see in Spark.

A harness writes a savepoint (:meth:`KeyedHarness.savepoint`) and starts from one
(``from_savepoint=``, :meth:`KeyedHarness.from_savepoint`) in the format of a Spark run's
(``sparkstate.savepoint``): records laid out in key groups as Spark lays them out, the
watermark and processing time, checked against the function by Flink's restore rules. So an
upgrade is unit-tested without Spark, and a savepoint moves between the harness and Spark.
"""

from __future__ import annotations

import datetime as dt
import os
import pickle
from collections.abc import Iterable, Sequence
from typing import Any

from sparkstate.api.functions import DEAD_LETTERS, MAX_WATERMARK, MIN_WATERMARK, Event, KeyedProcessFunction, TimeDomain
from sparkstate.api.job import DEFAULT_KEY_GROUPS, ConnectedInput
from sparkstate.api.keys import ComputedKey
from sparkstate.api.schema import Schema
from sparkstate.api.state import HELD_FIELD, INTERNAL_FIELDS, TIMERS_FIELD, Record
from sparkstate.api.time import WatermarkStrategy
from sparkstate.engine.combine import LocalCombiner
from sparkstate.engine.events import (
    END_OF_INPUT_MS,
    EventColumns,
    EventList,
    admit,
    key_group_of,
    timestamp_reader,
    with_computed_keys,
)
from sparkstate.engine.keygroups import dumps_state
from sparkstate.engine.operator import Events, KeyedOperator, due_timer_limits, to_epoch_millis
from sparkstate.engine.output import arrow_table, python_rows
from sparkstate.engine.ttl import TtlCleanup
from sparkstate.engine.windows import WINDOWS_STATE, WindowOperator
from sparkstate.errors import JobDefinitionError
from sparkstate.savepoint.broadcast import declared_broadcast, restored_broadcast
from sparkstate.savepoint.compat import restore_plan
from sparkstate.savepoint.files import LocalDirectory, SavepointWriter, open_savepoint
from sparkstate.savepoint.migration import ttl_descriptions, type_info, value_type


def _columnar(events: list[Event]) -> Events:
    """Events as the operator gets them on Spark: columns, when they share their keys."""
    if events and all(type(ev) is dict and ev.keys() == events[0].keys() for ev in events):
        return EventColumns.of(events)
    return events


def _largest_time(events: Iterable[Event], read: Any) -> int | None:
    stamps = [t for ev in events if isinstance(ev, dict) and type(t := to_epoch_millis(read(ev))) is int]
    return max(stamps) if stamps else None


class KeyedHarness:
    """A keyed function, its state and its timers, driven by hand.

    Example::

        >>> from sparkstate.jobs.running_sum import RunningSum
        >>> h = KeyedHarness(RunningSum(), key_by="merchant_id")
        >>> h.process_element({"merchant_id": "m1", "amount": 5.0})
        [('m1', 1, 5.0)]
        >>> h.state("m1")
        {'count': 1, 'total': 5.0}

    Each ``process_batch`` call is one micro-batch. The watermark of a batch is derived, as in
    Spark, from the largest timestamp of the batches before it (unless given); with two inputs,
    Flink's rule (the smaller of theirs, an input without events holding it at MIN unless idle:
    docs/guides/joins.md, "Idle inputs"). Processing time stays where the test last set it.

    Events no key's state may take go to the ``dead_letters`` side output before the function
    sees them, as on Spark: a null key, an event time outside the range Spark holds (1677 to
    2262), and, with ``max_event_time_ahead`` (ms; ``Job.harness`` passes the job's setting),
    an event time further ahead of processing time than that. A harness whose processing time
    was never set (neither here nor in a batch) applies no such bound: its clock stands at 0,
    1970, and every realistic event would be ahead of it.

    ``from_savepoint`` starts the harness from a savepoint's state, watermark and processing
    time (a Spark run's or a harness's), under Flink's restore rules: a state the function no
    longer declares is refused unless ``allow_non_restored_state``; one it adds starts empty;
    a compatible value type change is migrated; pickled values (``trust_savepoint``) as on
    Spark. ``job_name``, ``key_groups`` and ``source`` (its identity) are what a savepoint
    records of the job (``Job.harness`` passes the job's).
    """

    def __init__(
        self,
        fn: KeyedProcessFunction,
        key_by: str | Sequence[str],
        *,
        watermark_strategy: WatermarkStrategy | None = None,
        output_schema: Any = None,
        processing_time: int | None = None,
        serialize_state: bool = True,
        max_event_time_ahead: int | None = None,
        from_savepoint: str | os.PathLike[str] | None = None,
        allow_non_restored_state: bool = False,
        trust_savepoint: bool = False,
        job_name: str | None = None,
        key_groups: int | None = None,
        source: dict[str, Any] | None = None,
        connected: ConnectedInput | None = None,
        computed_keys: Sequence[ComputedKey] = (),
        combiner: LocalCombiner | None = None,
    ) -> None:
        keys = [key_by] if isinstance(key_by, str) else list(key_by)
        #: a window job's two-phase aggregation, as on Spark (``engine/combine.py``): each
        #: batch's events combined per key and window before the operator merges them
        self.combiner = combiner
        #: computed key columns (``key_by(name=function)``), added to each first-input event
        self.computed_keys = tuple(computed_keys)
        if watermark_strategy is not None and not watermark_strategy.has_timestamps:
            raise JobDefinitionError(
                "the watermark strategy needs a timestamp column or assigner: .with_timestamp_column('ts')"
            )
        self.watermark_strategy = watermark_strategy
        ws = watermark_strategy
        self.operator = KeyedOperator(
            fn, keys, ws.timestamp_column if ws else None, timestamp_assigner=ws.timestamp_assigner if ws else None,
            connected=connected,
        )
        self._read_time = timestamp_reader(ws.timestamp_column, ws.timestamp_assigner) if ws else None
        #: the second input (``Job.connect`` / ``interval_join``), its time reader and its largest time
        self.connected = connected
        ws2 = connected.watermark if connected is not None else None
        self._read_time2 = timestamp_reader(ws2.timestamp_column, ws2.timestamp_assigner) if ws2 else None
        self._max_ts2: int | None = None
        #: the broadcast states (name -> map) of a broadcast job: every key group's copy, alike
        self.broadcast_states: dict[str, dict[Any, Any]] | None = (
            {} if connected is not None and connected.is_broadcast else None
        )
        self.descriptors = self.operator.open()
        #: TTL cleanup as on Spark, per key group (``engine/ttl.py``); a key group's keys in
        #: the order they got state, its incremental cursor and its next sweep
        self.ttl_cleanup = TtlCleanup(self.descriptors)
        self._ttl_groups: dict[int, _TtlGroup] | None = None
        self._kg_cache: dict[Any, int] = {}
        self.schema = Schema.of(output_schema) if output_schema is not None else None
        self._arrow = self.schema.arrow if self.schema is not None else None
        self.records: dict[Any, Record] = {}
        self.processing_time = processing_time or 0
        #: whether the test set processing time (the max_event_time_ahead bound needs a clock)
        self._clock_set = processing_time is not None
        self.max_event_time_ahead = max_event_time_ahead
        self.watermark = MIN_WATERMARK
        self._max_ts: int | None = None
        #: per input, the processing time of the last batch that brought it an event (or of
        #: the first batch, before any): ``WatermarkStrategy.with_idleness`` measures from it
        self._last_event_at: list[int | None] = [None, None]
        self._serialize = serialize_state
        #: every row emitted so far, in order
        self.output: list[Any] = []
        #: side-output rows by tag name (``dead_letters``, ``late_data``, the function's own tags)
        self.side_outputs: dict[str, list[Any]] = {}
        self.job_name = job_name
        self.key_groups = key_groups
        self.source = source
        #: notes of the restore (states dropped, added or migrated), as a Spark run warns
        self.restore_notes: list[str] = []
        if from_savepoint is not None:
            self._restore(str(from_savepoint), allow_non_restored_state, trust_savepoint)

    @classmethod
    def from_savepoint(
        cls, path: str | os.PathLike[str], fn: KeyedProcessFunction, key_by: str | Sequence[str], **kwargs: Any
    ) -> KeyedHarness:
        """A harness of ``fn`` started from the savepoint at ``path`` (see the class's doc)."""
        return cls(fn, key_by, from_savepoint=path, **kwargs)

    # ------------------------------------------------------------------ driving

    def process_batch(
        self,
        events: Iterable[Event],
        *,
        processing_time: int | None = None,
        watermark: int | None = None,
        second: Iterable[Event] | None = None,
        broadcast: Iterable[Event] | None = None,
    ) -> list[Any]:
        """Run one micro-batch; return the rows it emitted.

        ``second`` are the batch's elements of a connected keyed input (``process_element2``),
        ``broadcast`` those of a broadcast input (``process_broadcast_element``); they run before
        ``events`` (see ``sparkstate.api.connected``).

        With an output schema the rows are dicts checked against it, exactly as Spark's
        ``MemorySink`` returns them (timestamps as epoch ms, maps as dicts).
        """
        if processing_time is not None:
            self.processing_time = max(self.processing_time, processing_time)
            self._clock_set = True
        if watermark is not None:
            self.watermark = max(self.watermark, watermark)
        self._last_event_at = [self.processing_time if t is None else t for t in self._last_event_at]
        self._combine_watermarks()  # an input may have become idle since the last batch
        given = [{k: to_epoch_millis(v) for k, v in ev.items()} if isinstance(ev, dict) else ev for ev in events]
        given, dead = with_computed_keys(given, self.computed_keys)
        now = self.processing_time if self._clock_set else None
        given, more = admit(given, self.operator.key_columns, self._read_time, now, self.max_event_time_ahead)
        dead += more
        if dead:
            self.side_outputs.setdefault(DEAD_LETTERS.name, []).extend(dead)
        admitted, partials = given, None
        hot = self._hot(given) if self.combiner is not None and self._read_time is not None else None
        if hot:
            assert self.combiner is not None and self._read_time is not None
            given, partials, combined = self.combiner.combine_events(given, self.operator._key_of, self._read_time, hot)
        evs = _columnar(given)
        if partials:
            if not isinstance(evs, EventColumns):
                evs = EventList(evs)
                evs.dead_letters = []
            evs.partials, evs.combined = [(0, partials)], [combined]
        evs2: Events | None = None
        if second is not None:
            if self.connected is None or self.connected.is_broadcast:
                raise JobDefinitionError("process_batch(second=...) needs a harness with a connected keyed input")
            given2 = [{k: to_epoch_millis(v) for k, v in ev.items()} if isinstance(ev, dict) else ev for ev in second]
            given2, dead2 = with_computed_keys(given2, self.connected.computed_keys)
            given2, more2 = admit(given2, self.connected.key_columns, self._read_time2, now, self.max_event_time_ahead)
            dead2 += more2
            if dead2:
                self.side_outputs.setdefault(DEAD_LETTERS.name, []).extend(dead2)
            evs2 = _columnar(given2)
        bevs: list[Event] | None = None
        if broadcast is not None:
            if self.broadcast_states is None:
                raise JobDefinitionError("process_batch(broadcast=...) needs a harness with a broadcast input")
            bevs = [{k: to_epoch_millis(v) for k, v in ev.items()} if isinstance(ev, dict) else ev for ev in broadcast]
        op = self.operator
        records = self.records
        op.begin_batch(
            self.watermark, self.processing_time, lambda key: records.setdefault(key, {}),
            broadcast=self.broadcast_states, all_records=lambda: list(records.items()),
        )
        candidates = [
            (k, r) for k, r in records.items() if due_timer_limits(r, self.watermark, self.processing_time)
        ]
        rows = op.run_batch(evs, candidates, second=evs2, broadcast=bevs)
        for name, row in op.take_side():
            self.side_outputs.setdefault(name, []).append(row)
        touched = op.take_touched()
        groups = self._clean_ttl(touched, evs, evs2) if self.ttl_cleanup else None
        for key, rec in touched.items():
            if not rec:
                records.pop(key, None)
            elif self._serialize:
                records[key] = pickle.loads(dumps_state({key: rec}))[key]
            if groups is not None:
                groups.setdefault(self._group_of(key), _TtlGroup(records)).note(key, bool(rec))
        if self.broadcast_states is not None and self._serialize and self.scope_changed_broadcast():
            self.broadcast_states = pickle.loads(dumps_state(self.broadcast_states))
        self._advance_watermark(admitted if partials else evs, evs2)
        if self.schema is not None:
            # the same conversion as on Spark: type errors name the column; timestamps come
            # back as epoch ms and maps as dicts, as Spark's MemorySink returns them
            rows = python_rows(arrow_table(rows, self.schema, self._arrow)) if rows else []
        self.output.extend(rows)
        return rows

    def _hot(self, events: list[Event]) -> set[Any]:
        """The keys the combiner takes in this batch (hot keys, as on Spark); none in a batch
        with an event the key cannot be read from, whose clear error is the operator's to raise."""
        assert self.combiner is not None
        try:
            keys = [self.operator._key_of(ev) for ev in events]
        except (KeyError, TypeError, IndexError):
            return set()
        return self.combiner.hot_keys(keys)

    def scope_changed_broadcast(self) -> bool:
        """Whether the last batch's broadcast elements changed the broadcast state."""
        return self.operator.scope.broadcast_changed

    def _clean_ttl(self, touched: dict[Any, Record], events: Events, second: Events | None = None) -> dict[int, _TtlGroup]:
        """The TTL cleanup of every key group this batch ran, as Spark runs it: the groups of
        the touched keys, and idle groups whose background sweep is due (Spark wakes them)."""
        cleanup = self.ttl_cleanup
        group_of = self._group_of
        groups = self._ttl_groups
        now, watermark = self.processing_time, self.operator.scope.watermark
        if groups is None:  # first use (after a restore, say): index the records by key group
            groups = self._ttl_groups = {}
            for key in self.records:
                groups.setdefault(group_of(key), _TtlGroup(self.records)).note(key, True)
            for group in groups.values():  # restored TTL'd state is swept too
                group.sweep_at = cleanup.first_sweep(group.segment(0).values(), now)
        runs: dict[int, dict[Any, Record]] = {}
        for key, rec in touched.items():
            runs.setdefault(group_of(key), {})[key] = rec
        for kg, group in groups.items():
            if kg not in runs and group.sweep_at is not None and group.sweep_at <= now:
                runs[kg] = {}
        elements: dict[int, int] = {}
        if cleanup.per_record:
            op = self.operator
            for given, key_of in ((events, op._key_of), (second or (), op._key_of2 or op._key_of)):
                for ev in given:
                    kg = group_of(key_of(ev))
                    elements[kg] = elements.get(kg, 0) + 1
        for kg, part in runs.items():
            group = groups.setdefault(kg, _TtlGroup(self.records))
            cleanup.run_group(group, group, len(group.keys), part, elements.get(kg, 0), now, watermark)
            touched.update(part)
        return groups

    def _group_of(self, key: Any) -> int:
        kg = self._kg_cache.get(key)
        if kg is None:
            kg = self._kg_cache[key] = key_group_of(key, self._key_groups())
        return kg

    def _advance_watermark(self, events: Events, second: Events | None = None) -> None:
        """After a batch: each input's largest event time and when it last had an event, then
        the job's watermark (:meth:`_combine_watermarks`)."""
        if self.watermark_strategy is None or self._read_time is None:
            return
        top = _largest_time(events, self._read_time)
        if top is not None:
            self._max_ts = top if self._max_ts is None else max(self._max_ts, top)
        if len(events):
            self._last_event_at[0] = self.processing_time
        if self._watermarked_second():
            assert self._read_time2 is not None
            top2 = _largest_time(second or (), self._read_time2)
            if top2 is not None:
                self._max_ts2 = top2 if self._max_ts2 is None else max(self._max_ts2, top2)
            if second is not None and len(second):
                self._last_event_at[1] = self.processing_time
        self._combine_watermarks()

    def _watermarked_second(self) -> bool:
        c = self.connected
        return c is not None and c.watermark is not None and self._read_time2 is not None

    def _combine_watermarks(self) -> None:
        """The job's watermark, Flink's rule: the smallest of the watermarks of its inputs that
        are not idle at this processing time (``WatermarkStrategy.with_idleness``), where an
        input that has seen no event time yet has ``MIN_WATERMARK``; it never goes back, and
        stays where it is while every input is idle. Spark's ``min`` policy over the inputs'
        watermarks does the same without idleness (it counts an input without data as 0, which
        reads as no watermark)."""
        strategy = self.watermark_strategy
        if strategy is None or self._read_time is None:
            return
        inputs = [(strategy, self._max_ts, self._last_event_at[0])]
        if self._watermarked_second():
            assert self.connected is not None and self.connected.watermark is not None
            inputs.append((self.connected.watermark, self._max_ts2, self._last_event_at[1]))
        now = self.processing_time
        marks = [
            MIN_WATERMARK if top is None else ws.watermark_for(top)
            for ws, top, last in inputs
            if last is None or not ws.idle(last, now)
        ]
        if marks:
            watermark = min(marks)
            if watermark > 0:
                # as on Spark, whose watermark starts at the epoch: there is none until it
                # passes it (see ``KeyGroupRunner.watermark``)
                self.watermark = max(self.watermark, watermark)

    def process_element(self, event: Event, *, processing_time: int | None = None, watermark: int | None = None) -> list[Any]:
        """One event as a batch of its own."""
        return self.process_batch([event], processing_time=processing_time, watermark=watermark)

    def process_element2(
        self, event: Event, *, processing_time: int | None = None, watermark: int | None = None
    ) -> list[Any]:
        """One event of the connected keyed input as a batch of its own."""
        return self.process_batch([], second=[event], processing_time=processing_time, watermark=watermark)

    def process_broadcast_element(
        self, event: Event, *, processing_time: int | None = None, watermark: int | None = None
    ) -> list[Any]:
        """One broadcast element as a batch of its own."""
        return self.process_batch([], broadcast=[event], processing_time=processing_time, watermark=watermark)

    def advance_processing_time(self, to: int) -> list[Any]:
        """Move processing time to ``to`` (epoch ms) and fire the timers that became due."""
        return self.process_batch([], processing_time=to)

    def advance_watermark(self, to: int) -> list[Any]:
        """Move the watermark to ``to`` and fire the event-time timers that became due."""
        return self.process_batch([], watermark=to)

    def finish(self) -> list[Any]:
        """End of a bounded input: a final maximal watermark fires every event-time timer."""
        return self.advance_watermark(MAX_WATERMARK)

    def close(self) -> None:
        self.operator.close()

    # ------------------------------------------------------------------ inspection

    def side_output(self, tag: Any) -> list[Any]:
        """Rows emitted so far to a side output (an ``OutputTag`` or its name)."""
        return list(self.side_outputs.get(getattr(tag, "name", tag), []))

    def keys(self) -> list[Any]:
        """Keys that hold state or timers."""
        return list(self.records)

    def state(self, key: Any) -> dict[str, Any]:
        """The key's state values by name (timers left out)."""
        return {k: v for k, v in self.records.get(key, {}).items() if k not in INTERNAL_FIELDS}

    def timers(self, key: Any) -> list[tuple[TimeDomain, int]]:
        """The key's pending timers, sorted by time."""
        timers = self.records.get(key, {}).get(TIMERS_FIELD, ())
        return sorted(((TimeDomain(d), ts) for d, ts in timers), key=lambda t: (t[1], t[0]))

    # ------------------------------------------------------------------ savepoints

    def savepoint(
        self, path: str | os.PathLike[str], *, source_offset: int | None = None, connected_offset: int | None = None,
    ) -> dict[str, Any]:
        """Write the harness's state, timers, watermark and processing time as a savepoint at
        ``path`` (a new directory), laid out in key groups as a Spark run lays them out; a
        Spark run restores it like one of its own. ``source_offset``: where a restored Spark
        run's generator or list source resumes (a list source: the batches already
        processed); ``connected_offset``: the same for a second input. A broadcast job's
        broadcast state is written once. Returns the savepoint's metadata."""
        groups = self._key_groups()
        meta: dict[str, Any] = {
            "id": os.path.basename(os.path.abspath(path)),
            "job": self._job_name(),
            "function": type(self.operator.fn).__qualname__,
            "key_columns": list(self.operator.key_columns),
            "key_groups": groups,
            "state": {d.name: d.describe() for d in self.descriptors},
            "state_types": {d.name: type_info(value_type(d)) for d in self.descriptors},
            "state_ttl": ttl_descriptions(self.descriptors),
            "source": self.source,
            "source_offset": None if source_offset is None else {"offset": source_offset},
            "source_files": None,
            "batch": None,
            "watermark_ms": self._spark_watermark(),
            "processing_time_ms": self.processing_time,
            "checkpoint": None,
            "taken_by": "harness",
            "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }
        by_group: dict[int, list[tuple[Any, Record]]] = {}
        pairs: Iterable[tuple[Any, Record]] = self.records.items()
        keep = self.ttl_cleanup.snapshot_filter(self.processing_time, self.watermark)
        if keep is not None:  # cleanup_full_snapshot: expired entries stay out (of the savepoint only)
            pairs = keep((key, _state_copy(rec)) for key, rec in pairs)
        for key, rec in pairs:
            for kg, part in self._split(key, rec, groups):
                by_group.setdefault(kg, []).append((key, part))
        c = self.connected
        if c is not None:
            meta["connected"] = {"source": c.source.identity(),
                                 "source_offset": None if connected_offset is None else {"offset": connected_offset}}
        writer = SavepointWriter(LocalDirectory(path), meta, sorted(d.name for d in self.descriptors))
        try:
            if self.broadcast_states:
                writer.add_broadcast(self.broadcast_states, declared_broadcast(c))
            for kg in sorted(by_group):
                writer.add_group(kg, by_group[kg])
            return writer.publish()
        except BaseException:
            writer.abort()
            raise

    def _job_name(self) -> str:
        return self.job_name or type(self.operator.fn).__name__

    def _key_groups(self) -> int:
        return self.key_groups or DEFAULT_KEY_GROUPS

    def _panes(self) -> bool:
        """Whether records are window panes keyed ``(start, end)`` holding every key's
        contents (non-merging windows), rather than one record per key."""
        fn = self.operator.fn
        return isinstance(fn, WindowOperator) and not fn.assigner.merging

    def _split(self, key: Any, rec: Record, groups: int) -> list[tuple[int, Record]]:
        """A record as the key groups hold it on Spark: a key's record in its key's group; a
        window pane in the group of each key it holds, with that group's keys only."""
        if not self._panes():
            return [(key_group_of(key, groups), rec)]
        contents = rec.get(WINDOWS_STATE) or {}
        parts: dict[int, dict[Any, Any]] = {}
        for user_key, acc in contents.items():
            parts.setdefault(key_group_of(user_key, groups), {})[user_key] = acc
        return [(kg, {**rec, WINDOWS_STATE: part}) for kg, part in parts.items()]

    def _end_watermark(self) -> int:
        """Spark's watermark once the end-of-input marker went by (see ``OperatorSpec``)."""
        ooo = self.watermark_strategy.max_out_of_orderness_ms if self.watermark_strategy else 0
        return END_OF_INPUT_MS - ooo - 1

    def _spark_watermark(self) -> int:
        """The watermark as a Spark run's savepoint records it (Spark's, which starts at 0)."""
        if self.watermark >= MAX_WATERMARK:
            return self._end_watermark()
        return max(self.watermark, 0)

    def _restore(self, path: str, allow_non_restored_state: bool, trusted: bool) -> None:
        savepoint = open_savepoint(LocalDirectory(path))
        meta = savepoint.meta
        # a harness not built from a job takes the savepoint's job name and key groups
        self.job_name = self.job_name or meta.get("job")
        self.key_groups = self.key_groups or meta.get("key_groups")
        job_meta = {"job": self.job_name, "key_columns": list(self.operator.key_columns), "key_groups": self.key_groups}
        c = self.connected
        plan, notes = restore_plan(savepoint, job_meta, self.descriptors, trusted=trusted,
                                   allow_non_restored_state=allow_non_restored_state,
                                   broadcast=tuple(c.broadcast) if c is not None and c.is_broadcast else ())
        content, more = restored_broadcast(savepoint, declared_broadcast(c), decoder=plan.decoder,
                                           allow_non_restored_state=allow_non_restored_state)
        notes = [*notes, *more]
        if self.broadcast_states is not None:
            self.broadcast_states = pickle.loads(content) if content is not None else {}
        self.restore_notes = notes
        for kg in savepoint.key_groups:
            for key, rec in plan.records(savepoint.group_bytes(kg)):
                self._merge(key, rec)
        wm = int(meta.get("watermark_ms") or 0)
        if wm >= self._end_watermark():
            self.watermark = MAX_WATERMARK
        elif wm > 0:
            # (the largest event time seen before stays unknown: the watermark only rises, so
            # the one it gave is all a later batch needs)
            self.watermark = wm
        self.processing_time = max(self.processing_time, int(meta.get("processing_time_ms") or 0))

    def _merge(self, key: Any, rec: Record) -> None:
        """Add a restored record: a window pane comes in parts, one per key group."""
        have = self.records.get(key)
        if have is None:
            self.records[key] = rec
            return
        if WINDOWS_STATE in rec:
            have.setdefault(WINDOWS_STATE, {}).update(rec[WINDOWS_STATE])
        if TIMERS_FIELD in rec:
            have[TIMERS_FIELD] = set(have.get(TIMERS_FIELD, set())) | set(rec[TIMERS_FIELD])
        if HELD_FIELD in rec:
            have[HELD_FIELD] = max(have.get(HELD_FIELD, rec[HELD_FIELD]), rec[HELD_FIELD])


class _TtlGroup:
    """A key group of the harness's records as the TTL cleanup walks it: one segment holding
    the group's keys in the order they got state, with the group's cursor and next sweep."""

    def __init__(self, records: dict[Any, Record]) -> None:
        self.records = records
        self.keys: dict[Any, None] = {}
        self.ttl_cursor: tuple[int, int] = (0, 0)
        self.sweep_at: int | None = None

    def note(self, key: Any, holds: bool) -> None:
        if holds:
            self.keys.setdefault(key, None)
        else:
            self.keys.pop(key, None)

    def segments(self) -> int:
        return 1

    def segment(self, b: int) -> dict[Any, Record]:
        records = self.records
        return {key: records[key] for key in self.keys if key in records}


def _state_copy(rec: Record) -> Record:
    """A record whose lists and dicts (TTL'd List and Map state) the snapshot cleanup may
    change without changing ``rec``."""
    return {k: v.copy() if type(v) in (list, dict) else v for k, v in rec.items()}
