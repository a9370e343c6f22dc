"""The Spark side of a keyed function: one key group per call.

Spark groups the packed input by key group and calls sparkstate once per group and
micro-batch, and again for groups that asked to be woken without input (a processing-time
timer came due, or an event-time timer may have come due because the watermark moved). Each
call loads the group's meta entry and the buckets it needs
(:mod:`sparkstate.engine.keygroups`), runs the batch through the shared
:class:`~sparkstate.engine.operator.KeyedOperator`, and writes back the touched buckets.

Two Spark operators carry this, one per state backend:

* ``rocksdb`` - ``transformWithStateInPandas`` (:class:`KeyGroupProcessor`): meta and
  buckets are separate state-store entries, read and written one by one, so a batch pays
  only for the buckets it touches; a group of one bucket keeps it in its meta entry, one
  entry in all. Spark's processing-time timers wake idle groups.
* ``hashmap`` - ``applyInPandasWithState`` (:class:`KeyGroupFunction`), because Spark's
  transformWithState refuses the in-memory (HDFS-backed) store: the group's meta and buckets
  are one state row, rewritten when the group changes (still-pickled buckets are copied, not
  re-serialised). Processing-time timeouts wake idle groups.

Why one Spark time mode bridges both of Flink's timer domains: Spark fixes one time mode per
operator. sparkstate keeps both kinds of timers in its own records and uses Spark's
processing-time wake-ups only to get called, so a function may use event-time and
processing-time timers together.
"""

from __future__ import annotations

import gc
import pickle
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pandas as pd
import pyarrow as pa
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import BinaryType, IntegerType, StructField, StructType

from sparkstate.api.functions import MAX_WATERMARK, MIN_WATERMARK, KeyedProcessFunction
from sparkstate.api.schema import Schema
from sparkstate.api.state import Record
from sparkstate.engine.broadcast import BroadcastStore
from sparkstate.engine.events import has_map, unpack_events
from sparkstate.engine.keygroups import (
    PICKLE_PROTOCOL,
    GroupMeta,
    KeyGroupStore,
    bucket_address,
    bucket_hash,
    dumps_state,
)
from sparkstate.engine.operator import Events, KeyedOperator, timer_minimums
from sparkstate.engine.output import arrow_table
from sparkstate.engine.ttl import TtlCleanup
from sparkstate.fault_points import STATE_UPDATED, fault_point

#: side rows: the side output's name, and the row pickled (main rows have nulls here)
SIDE_COLUMN = "__side"
SIDE_ROW_COLUMN = "__side_row"
META_STATE = "meta"
BUCKETS_STATE = "buckets"
#: the state row of the hashmap backend's applyInPandasWithState
GROUP_STATE_SCHEMA = "group binary"
#: the ``part`` of a packed row that carries a key group's state from a savepoint (its blob:
#: the savepoint's Parquet file of the group), read in the first batch of a restored run
RESTORE_PART = -1
#: ``part`` offsets that tag the rows of a two-input job's connected input (``query.py``): a
#: second keyed input's rows have ``part`` in ``[SECOND_PART, BROADCAST_PART)``, a broadcast
#: input's ``part >= BROADCAST_PART`` (the first input's are its partition index, below both)
SECOND_PART = 1 << 20
BROADCAST_PART = 2 << 20


@dataclass(frozen=True)
class OperatorSpec:
    """Everything the Spark side needs, shipped to executors with it."""

    fn: KeyedProcessFunction
    key_columns: tuple[str, ...]
    timestamp_column: str | None
    output: Schema
    output_arrow: Any  # pyarrow.Schema of the output, resolved on the driver
    bucket_size: int
    #: a watermark exists: the job has a watermark strategy, or its bounded source ends with
    #: the end-of-input marker (then, as in Flink, event-time timers fire at the end)
    event_time: bool
    #: Spark's watermark once it has seen the end-of-input marker (None: the source has none)
    end_watermark: int | None = None
    #: the side outputs the job can produce; when there are any, side rows travel in the
    #: output as ``(SIDE_COLUMN, SIDE_ROW_COLUMN)`` and a dispatcher splits them off
    side_outputs: tuple[str, ...] = ()
    #: the watermark strategy's timestamp function, when event time is not a column
    timestamp_assigner: Any = None
    #: a restored run: how the savepoint's records become this job's (``runtime/savepoints/restore.py``)
    restore: Any = None
    #: a restored run: the watermark (Spark's, ms) the savepoint's next batch would have run with
    restored_watermark_ms: int = 0
    #: a state has a time-to-live: its expiry needs the batch's processing time, which Spark
    #: gives (and records in its offset log, so a replayed batch sees it again) only in
    #: processing-time mode; otherwise the processor falls back to the wall clock
    state_ttl: bool = False
    #: the job's second input (``JobDescription.connected``), if any
    connected: Any = None
    #: a broadcast job: where the broadcast state's content files live (``engine/broadcast.py``)
    broadcast_dir: str | None = None
    #: a broadcast job restored from a savepoint: the reference of the savepoint's broadcast
    #: state, which a key group without a meta entry yet starts from
    initial_broadcast: str | None = None
    #: a one-bucket key group keeps its bucket in its meta entry on the RocksDB backend
    #: (``engine/keygroups.py``); off, groups are written as before that layout existed
    inline_buckets: bool = True

    @property
    def output_ddl(self) -> str:
        """The operator's output struct: the job's output, plus the side-output columns."""
        if not self.side_outputs:
            return self.output.ddl
        return f"{self.output.ddl}, {SIDE_COLUMN} string, {SIDE_ROW_COLUMN} binary"

    @property
    def needs_clock(self) -> bool:
        """Timers, a watermark or state TTL are in play, so Spark must run in processing-time mode."""
        return self.event_time or self.state_ttl or type(self.fn).defines_on_timer()

    @property
    def time_mode(self) -> str:
        return "ProcessingTime" if self.needs_clock else "None"


# --------------------------------------------------------------------------- output


def to_frame(
    rows: list, schema: Schema, arrow: pa.Schema, arrow_backed: bool = True, side: list | None = None
) -> pd.DataFrame:
    """Emitted rows as a pandas DataFrame of the output schema (checked in Arrow first).

    With ``side`` (a list, maybe empty: the job has side outputs), side-output rows follow
    the main rows, in the two side columns. transformWithState takes Arrow-backed pandas
    columns, labelled by position, and converts them back to Arrow without copying;
    applyInPandasWithState needs plain numpy columns, labelled by name.

    Why by position for transformWithState: it matches string labels to the schema's names by
    selecting them, a copy of the frame that was most of the cost of converting a key group's
    few rows (a call per key group and micro-batch: at 100 events a batch, most of the output's
    cost); other labels it takes in order.
    """
    table = arrow_table(rows, schema, arrow)
    if side is not None:
        table = _with_side(table, side)
    if not arrow_backed:
        return table.to_pandas(**_maps(table))
    if not any(pa.types.is_nested(f.type) for f in table.schema):
        # Arrow-backed columns straight from the table: a third of to_pandas's time
        return pd.DataFrame({i: pd.arrays.ArrowExtensionArray(c) for i, c in enumerate(table.columns)}, copy=False)
    # Spark's converters expect Python dicts for map columns, so nested columns stay plain.
    frame = table.to_pandas(types_mapper=_arrow_dtype, **_maps(table))
    frame.columns = pd.RangeIndex(table.num_columns)
    return frame


def _maps(table: pa.Table) -> dict[str, str]:
    """to_pandas's option that makes map columns dicts, when the table has any."""
    return {"maps_as_pydicts": "strict"} if any(has_map(f.type) for f in table.schema) else {}


def _with_side(table: pa.Table, side: list) -> pa.Table:
    n = table.num_rows
    table = table.append_column(SIDE_COLUMN, pa.nulls(n, pa.string())).append_column(SIDE_ROW_COLUMN, pa.nulls(n, pa.binary()))
    if not side:
        return table
    m = len(side)
    cols = [pa.nulls(m, f.type) for f in table.schema][:-2]
    cols.append(pa.array([name for name, _ in side], pa.string()))
    cols.append(pa.array([pickle.dumps(row, protocol=PICKLE_PROTOCOL) for _, row in side], pa.binary()))
    # one chunk per column: Spark converts Arrow-backed pandas columns chunk by chunk
    return pa.concat_tables([table, pa.Table.from_arrays(cols, schema=table.schema)]).combine_chunks()


def _arrow_dtype(t: pa.DataType) -> Any:
    return None if pa.types.is_nested(t) else pd.ArrowDtype(t)


def packed_rows(frames: Iterator[pd.DataFrame]) -> tuple[list[tuple[int, int, bytes | None]], list[bytes]]:
    """The packed event rows, and the savepoint state of the group (restore rows: their blobs)."""
    rows: list[tuple[int, int, bytes | None]] = []
    for frame in frames:
        rows.extend(zip(frame["part"].tolist(), frame["seq"].tolist(), frame["blob"].tolist()))
    restore = [blob for part, _, blob in rows if part == RESTORE_PART and blob is not None]
    if restore:
        rows = [r for r in rows if r[0] != RESTORE_PART]
    return rows, restore


@dataclass
class GroupInput:
    """One key group's rows of a micro-batch, unpacked: the first input's events, a connected
    input's (``second`` keyed or ``broadcast``; None when the job has none or the batch brought
    none), and the savepoint state of a restored run's first batch."""

    events: Events
    restore: list[bytes]
    second: Events | None = None
    broadcast: Events | None = None


def unpack_input(frames: Iterator[pd.DataFrame]) -> GroupInput:
    rows, restore = packed_rows(frames)
    if not any(part >= SECOND_PART for part, _, _ in rows):
        return GroupInput(unpack_events(rows), restore)
    first = [r for r in rows if r[0] < SECOND_PART]
    second = [r for r in rows if SECOND_PART <= r[0] < BROADCAST_PART]
    broadcast = [r for r in rows if r[0] >= BROADCAST_PART]
    return GroupInput(
        unpack_events(first), restore, unpack_events(second) if second else None,
        unpack_events(broadcast) if broadcast else None,
    )


NO_INPUT = GroupInput([], [])


# --------------------------------------------------------------------------- shared core


class GroupState(Protocol):
    """Where one key group's meta and buckets live (differs between the two operators)."""

    #: whether a one-bucket group keeps its bucket in its meta entry (``GroupMeta.inline``)
    inline: bool

    def read_meta(self) -> bytes | None: ...

    def read_bucket(self, b: int) -> bytes | None: ...

    def write(self, buckets: list[tuple[int, bytes]], meta: bytes | None, deleted: Sequence[int] = ()) -> None: ...

    def schedule(self, meta: GroupMeta, now: int, expired: int | None) -> None: ...


class KeyGroupRunner:
    """Runs one key group's micro-batch against a :class:`GroupState`."""

    def __init__(self, spec: OperatorSpec, arrow_backed: bool = True) -> None:
        self.spec = spec
        self.arrow_backed = arrow_backed
        self.op = KeyedOperator(
            spec.fn, spec.key_columns, spec.timestamp_column, event_time=spec.event_time,
            timestamp_assigner=spec.timestamp_assigner, connected=spec.connected,
        )
        self.cleanup = TtlCleanup(self.op.open())
        self.broadcast = (
            BroadcastStore(spec.broadcast_dir)
            if spec.connected is not None and spec.connected.is_broadcast and spec.broadcast_dir is not None
            else None
        )

    def run(
        self, given: GroupInput, watermark: int, now: int, state: GroupState, expired: int | None = None,
        kg: int = 0,
    ) -> pd.DataFrame | None:
        """One key group's micro-batch (``kg``: the group's id; group 0 emits what the
        broadcast elements produce, every other group applies them silently)."""
        # A key group allocates many short-lived dicts and no cycles; the cyclic GC would scan
        # them over and over (about 10% of the time). It runs again between key groups.
        gc.disable()
        try:
            stored = state.read_meta()
            first_call = stored is None
            if given.restore and stored is None:
                stored = self._restore(given.restore, state, now)
            meta = GroupMeta.loads(stored)
            store = KeyGroupStore(meta, state.read_bucket, self.spec.bucket_size)
            op = self.op
            bstore = self.broadcast
            states = None
            if bstore is not None:
                if first_call:  # a group's first call: the restored savepoint's broadcast state, if any
                    meta.broadcast = self.spec.initial_broadcast
                states = bstore.load(meta.broadcast)
            op.begin_batch(watermark, now, store.record_for, broadcast=states, all_records=store.all_records)
            rows = op.run_batch(
                given.events, store.due_candidates(watermark, now), second=given.second, broadcast=given.broadcast,
                emit_broadcast=kg == 0,
            )
            if bstore is not None and states is not None and op.scope.broadcast_changed:
                meta.broadcast = bstore.save(states)
            side = op.take_side()
            touched = op.take_touched()
            if self.cleanup:
                elements = len(given.events) + len(given.second or ())
                self.cleanup.run_group(store, meta, meta.n_keys, touched, elements, now, watermark, store.adopt)
            writes, deleted = store.flush_entries(touched) if state.inline else (store.flush(touched), [])
            state.schedule(meta, now, expired)
            dumped = meta.dumps()
            state.write(writes, dumped if dumped != stored else None, deleted)  # meta rarely changes alone
            fault_point(STATE_UPDATED)
            if not rows and not side:
                return None
            return to_frame(
                rows, self.spec.output, self.spec.output_arrow, self.arrow_backed,
                side if self.spec.side_outputs else None,
            )
        finally:
            gc.enable()

    def _restore(self, blobs: list[bytes], state: GroupState, now: int | None = None) -> bytes:
        """Write the group's records from the savepoint into the (empty) state store, laid out
        in buckets as this run's bucket size wants; the meta entry written is returned.

        The layout is the one :meth:`KeyGroupStore.flush` would reach by splitting bucket after
        bucket (linear hashing places a key by the final bucket count alone), computed at once:
        a restore of millions of keys must not split its way there."""
        records: dict[Any, Record] = {}
        for blob in blobs:
            for key, rec in self.spec.restore.records(blob):
                held = records.get(key)
                if held is None:
                    records[key] = rec
                else:
                    held.update(rec)
        records = {key: rec for key, rec in records.items() if rec}  # as flush drops empty records
        meta = GroupMeta(n_keys=len(records))
        meta.n_buckets = n = max(1, -(-len(records) // self.spec.bucket_size))
        if now is not None:  # restored TTL'd state is swept too, one interval from now
            meta.sweep_at = self.cleanup.first_sweep(records.values(), now)
        buckets: dict[int, dict[Any, Record]] = {}
        for key, rec in records.items():
            b = bucket_address(bucket_hash(key), n)
            bucket = buckets.get(b)
            if bucket is None:
                bucket = buckets[b] = {}
            bucket[key] = rec
        for b, bucket in buckets.items():
            ev, pt = timer_minimums(bucket.values())
            if ev is not None:
                meta.event_min[b] = ev
            if pt is not None:
                meta.proc_min[b] = pt
        writes = [(b, dumps_state(buckets[b])) for b in sorted(buckets)]
        if state.inline and n == 1 and writes and not meta.event_min:  # as KeyGroupStore.flush_entries
            meta.inline, writes = writes[0][1], []
        dumped = meta.dumps()
        state.write(writes, dumped)
        return dumped

    def close(self) -> None:
        self.op.close()

    def watermark(self, reported: int) -> int:
        """Spark's watermark in Flink's terms."""
        spec = self.spec
        # a restored run goes on from the savepoint's watermark; Spark's own starts again at 0
        # and reaches it after the first batch (the restore rows carry it as their event time)
        reported = max(reported, spec.restored_watermark_ms)
        if spec.end_watermark is not None and reported >= spec.end_watermark:
            return MAX_WATERMARK  # the end-of-input marker went by: Flink's final watermark
        # Spark reports 0 (or -1) until the first watermark exists; Flink's is Long.MIN_VALUE.
        # Spark's watermark cannot go below 0, so a true watermark at or before the epoch
        # reads as none: the harness does the same (KeyedHarness._advance_watermark), so
        # both engines agree on event times at or before the epoch.
        return reported if spec.event_time and reported > 0 else MIN_WATERMARK


def group_id(key: Any) -> int:
    """The key group id of Spark's grouping key (a one-field tuple or row)."""
    return int(key[0]) if isinstance(key, (tuple, list)) else int(key)


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


# --------------------------------------------------------------------------- rocksdb: transformWithState


class _TwsState:
    def __init__(self, processor: KeyGroupProcessor) -> None:
        self.p = processor
        self.inline = processor.spec.inline_buckets

    def read_meta(self) -> bytes | None:
        value = self.p._meta.get()
        return value[0] if value else None

    def read_bucket(self, b: int) -> bytes | None:
        value = self.p._buckets.getValue((b,))
        return value[0] if value else None

    def write(self, buckets: list[tuple[int, bytes]], meta: bytes | None, deleted: Sequence[int] = ()) -> None:
        for b, blob in buckets:
            self.p._buckets.updateValue((b,), (blob,))
        for b in deleted:
            self.p._buckets.removeKey((b,))
        if meta is not None:
            self.p._meta.update((meta,))

    def schedule(self, meta: GroupMeta, now: int, expired: int | None) -> None:
        """Keep exactly one Spark timer per key group, at the group's next wake-up time."""
        desired = meta.next_wake(now)
        old = meta.wake
        if desired == old and old != expired:
            return
        handle = self.p._handle
        if old is not None and old != expired:
            # also when old <= now: deleting it spares a second call for this group this batch
            handle.deleteTimer(old)
        if desired is not None:
            handle.registerTimer(desired)
        meta.wake = desired


# The state variables' schemas as types: a DDL string is parsed by a round trip to the JVM, in
# every task
_BLOB = StructType([StructField("v", BinaryType())])
_BUCKET = StructType([StructField("b", IntegerType())])


class KeyGroupProcessor(StatefulProcessor):
    """The ``transformWithStateInPandas`` processor (RocksDB backend)."""

    def __init__(self, spec: OperatorSpec) -> None:
        self.spec = spec

    def init(self, handle: StatefulProcessorHandle) -> None:
        self._handle = handle
        self._meta = handle.getValueState(META_STATE, _BLOB)
        self._buckets = handle.getMapState(BUCKETS_STATE, _BUCKET, _BLOB)
        self._runner = KeyGroupRunner(self.spec)
        self._state = _TwsState(self)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        return self._run(unpack_input(rows), timerValues, None, key)

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[pd.DataFrame]:
        return self._run(NO_INPUT, timerValues, expiredTimerInfo.getExpiryTimeInMs(), key)

    def _run(self, given: GroupInput, timer_values: TimerValues, expired: int | None, key: Any) -> Iterator[pd.DataFrame]:
        runner = self._runner
        now = timer_values.getCurrentProcessingTimeInMs()
        frame = runner.run(
            given,
            runner.watermark(timer_values.getCurrentWatermarkInMs()),
            now if now >= 0 else _wall_clock_ms(),  # time mode "None" gives no clock
            self._state,
            expired,
            group_id(key),
        )
        if frame is not None:
            yield frame

    def close(self) -> None:
        self._runner.close()


# --------------------------------------------------------------------------- hashmap: applyInPandasWithState


class _RowState:
    """A key group as one state row: ``pickle((meta, {bucket: blob}))`` (already one entry, so
    its buckets are never inline)."""

    inline = False

    def __init__(self, state: Any) -> None:
        self.state = state
        if state.exists:
            self.meta, self.buckets = pickle.loads(state.get[0])
        else:
            self.meta, self.buckets = None, {}

    def read_meta(self) -> bytes | None:
        return self.meta

    def read_bucket(self, b: int) -> bytes | None:
        return self.buckets.get(b)

    def write(self, buckets: list[tuple[int, bytes]], meta: bytes | None, deleted: Sequence[int] = ()) -> None:
        if meta is None and not buckets:
            return
        self.buckets.update(buckets)
        if meta is not None:
            self.meta = meta
        self.state.update((pickle.dumps((self.meta, self.buckets), protocol=PICKLE_PROTOCOL),))

    def schedule(self, meta: GroupMeta, now: int, expired: int | None) -> None:
        # Spark resets a group's timeout on every call, so it is set again each time.
        desired = meta.next_wake(now)
        if desired is not None:
            self.state.setTimeoutDuration(max(1, desired - now))


class KeyGroupFunction:
    """The ``applyInPandasWithState`` function (hashmap backend).

    Spark unpickles it once per task, so the user's ``open`` runs once per task, as with the
    RocksDB backend. (Spark gives this operator no end-of-task hook, so ``close`` is not called.)
    """

    def __init__(self, spec: OperatorSpec) -> None:
        self.spec = spec
        self._runner: KeyGroupRunner | None = None

    def __getstate__(self) -> dict:
        return {"spec": self.spec, "_runner": None}

    def __call__(self, key: Any, frames: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
        if self._runner is None:
            self._runner = KeyGroupRunner(self.spec, arrow_backed=False)
        runner = self._runner
        given = NO_INPUT if state.hasTimedOut else unpack_input(frames)
        watermark = runner.watermark(state.getCurrentWatermarkMs()) if self.spec.event_time else MIN_WATERMARK
        now = state.getCurrentProcessingTimeMs() if self.spec.needs_clock else _wall_clock_ms()
        frame = runner.run(given, watermark, now, _RowState(state), kg=group_id(key))
        if frame is not None:
            yield frame
