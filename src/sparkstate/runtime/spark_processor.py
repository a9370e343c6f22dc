"""The Spark ``StatefulProcessor`` that runs a keyed function, one key group per call.

Spark groups the packed input by key group and calls ``handleInputRows`` once per group and
micro-batch; it calls ``handleExpiredTimer`` for groups that asked to be woken without input
(a processing-time timer came due, or an event-time timer may have come due because the
watermark moved). Each call loads the group's meta entry and the buckets it needs
(:mod:`sparkstate.runtime.keygroups`), runs the batch through the shared
:class:`~sparkstate.runtime.operator.KeyedOperator`, and writes back the touched buckets.

Why one Spark time mode bridges both of Flink's timer domains: Spark fixes one time mode per
operator. sparkstate keeps both kinds of timers in its own records and uses Spark's
processing-time timers only as a wake-up call per key group, so a function may use
event-time and processing-time timers together.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass
from typing import Any, Iterator

import pandas as pd
import pyarrow as pa
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

from sparkstate.api.functions import MIN_WATERMARK, KeyedProcessFunction
from sparkstate.api.schema import Schema
from sparkstate.errors import OutputSchemaError
from sparkstate.runtime.keygroups import GroupMeta, KeyGroupStore
from sparkstate.runtime.operator import KeyedOperator
from sparkstate.runtime.packing import unpack_events

META_STATE = "meta"
BUCKETS_STATE = "buckets"


@dataclass(frozen=True)
class OperatorSpec:
    """Everything the processor needs, shipped to executors with it."""

    fn: KeyedProcessFunction
    key_columns: tuple[str, ...]
    timestamp_column: str | None
    output: Schema
    output_arrow: Any  # pyarrow.Schema of the output, resolved on the driver
    bucket_size: int
    event_time: bool

    @property
    def time_mode(self) -> str:
        """Spark's time mode: processing time whenever timers or a watermark are in play."""
        if self.event_time or type(self.fn).defines_on_timer():
            return "ProcessingTime"
        return "None"


def _column(values: list, field: pa.Field) -> pa.Array:
    target = field.type
    if pa.types.is_timestamp(target):
        sample = next((v for v in values if v is not None), None)
        if isinstance(sample, int) and not isinstance(sample, bool):  # epoch ms, the API's convention
            return pa.array(values, pa.int64()).cast(pa.timestamp("ms", tz=target.tz)).cast(target)
    return pa.array(values, type=target)


def to_frame(rows: list, schema: Schema, arrow: pa.Schema) -> pd.DataFrame:
    """Emitted rows as a pandas DataFrame of the output schema.

    Columns are built as Arrow arrays (so a value that does not fit its column fails here,
    with the column's name) and handed to Spark as Arrow-backed pandas columns, which Spark
    converts back to Arrow without copying.
    """
    cols = schema.columns(rows)
    arrays = []
    for field in arrow:
        values = cols[field.name]
        try:
            arrays.append(_column(values, field))
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError) as exc:
            bad = next((v for v in values if not _fits(v, field)), None)
            raise OutputSchemaError(
                f"output column {field.name!r} is {schema.types[schema.names.index(field.name)]} "
                f"but a row has {type(bad).__name__} {bad!r} ({exc})"
            ) from None
    return pa.Table.from_arrays(arrays, schema=arrow).to_pandas(types_mapper=pd.ArrowDtype)


def _fits(value: Any, field: pa.Field) -> bool:
    try:
        _column([value], field)
        return True
    except Exception:
        return False


class KeyGroupProcessor(StatefulProcessor):
    """Spark's side of a keyed function (see the module docs)."""

    def __init__(self, spec: OperatorSpec) -> None:
        self.spec = spec

    def init(self, handle: StatefulProcessorHandle) -> None:
        spec = self.spec
        self._handle = handle
        self._meta = handle.getValueState(META_STATE, "v binary")
        self._buckets = handle.getMapState(BUCKETS_STATE, "b int", "v binary")
        self._op = KeyedOperator(spec.fn, spec.key_columns, spec.timestamp_column)
        self._op.open()

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        packed = []
        for frame in rows:
            packed.extend(zip(frame["part"].tolist(), frame["seq"].tolist(), frame["blob"].tolist()))
        return self._run(key[0], unpack_events(packed), timerValues, None)

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[pd.DataFrame]:
        return self._run(key[0], [], timerValues, expiredTimerInfo.getExpiryTimeInMs())

    def close(self) -> None:
        self._op.close()

    # ------------------------------------------------------------------ one key group

    def _clocks(self, timer_values: TimerValues) -> tuple[int, int]:
        watermark = MIN_WATERMARK
        if self.spec.event_time:
            wm = timer_values.getCurrentWatermarkInMs()
            # Spark reports 0 until the first watermark exists; Flink's is Long.MIN_VALUE.
            if wm > 0:
                watermark = wm
        now = timer_values.getCurrentProcessingTimeInMs()
        if now < 0:  # time mode "None": Spark gives no clock
            now = int(time.time() * 1000)
        return watermark, now

    def _run(self, kg: int, events: list, timer_values: TimerValues, expired: int | None) -> Iterator[pd.DataFrame]:
        # A key group allocates many short-lived dicts and no cycles; the cyclic GC would scan
        # them over and over (about 10% of the time). It runs again between key groups.
        gc.disable()
        try:
            frame = self._run_group(kg, events, timer_values, expired)
        finally:
            gc.enable()
        if frame is not None:
            yield frame

    def _run_group(self, kg: int, events: list, timer_values: TimerValues, expired: int | None) -> pd.DataFrame | None:
        watermark, now = self._clocks(timer_values)
        stored = self._meta.get()
        meta = GroupMeta.loads(stored[0] if stored else None)
        store = KeyGroupStore(meta, self._read_bucket, self.spec.bucket_size)
        op = self._op
        op.begin_batch(watermark, now, store.record_for)
        rows = op.run_batch(events, store.due_candidates(watermark, now))
        writes = store.flush(op.take_touched())
        for b, blob in writes:
            self._buckets.updateValue((b,), (blob,))
        wake_changed = self._schedule_wake(meta, now, expired)
        if writes or wake_changed or stored is None:
            self._meta.update((meta.dumps(),))
        return to_frame(rows, self.spec.output, self.spec.output_arrow) if rows else None

    def _read_bucket(self, b: int) -> bytes | None:
        value = self._buckets.getValue((b,))
        return value[0] if value else None

    def _schedule_wake(self, meta: GroupMeta, now: int, expired: int | None) -> bool:
        """Keep exactly one Spark timer per key group, at the group's next wake-up time."""
        desired = meta.next_wake(now)
        old = meta.wake
        if desired == old and old != expired:
            return False
        if old is not None and old != expired:
            # also when old <= now: deleting it spares a second call for this group this batch
            self._handle.deleteTimer(old)
        if desired is not None:
            self._handle.registerTimer(desired)
        meta.wake = desired
        return True
