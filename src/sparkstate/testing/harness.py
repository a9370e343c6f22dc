"""Run a keyed function in-process, without Spark, with clocks the test controls.

The harness drives the same :class:`~sparkstate.engine.operator.KeyedOperator` as the Spark
runtime, batch by batch, so a function behaves the same in a unit test and in a job. By
default every record is pickled and unpickled after each batch, as the Spark runtime does
when it writes state to RocksDB: a value that cannot be checkpointed fails here first, and a
reference kept across batches sees the same (detached) copy it would see in Spark.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Sequence
from typing import Any

from sparkstate.api.functions import DEAD_LETTERS, MAX_WATERMARK, MIN_WATERMARK, Event, KeyedProcessFunction, TimeDomain
from sparkstate.api.schema import Schema
from sparkstate.api.state import INTERNAL_FIELDS, TIMERS_FIELD, Record
from sparkstate.api.time import WatermarkStrategy
from sparkstate.engine.events import EventColumns, admit
from sparkstate.engine.keygroups import dumps_state
from sparkstate.engine.operator import Events, KeyedOperator, due_timer_limits, timestamp_reader, to_epoch_millis
from sparkstate.engine.output import arrow_table, python_rows
from sparkstate.errors import JobDefinitionError


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
    Spark, from the largest timestamp of the batches before it (unless given); processing
    time stays where the test last set it.

    Events no key's state may take go to the ``dead_letters`` side output before the function
    sees them, as on Spark: a null key, an event time outside the range Spark holds (1677 to
    2262), and, with ``max_event_time_ahead`` (ms; ``Job.harness`` passes the job's setting),
    an event time further ahead of processing time than that. A harness whose processing time
    was never set (neither here nor in a batch) applies no such bound: its clock stands at 0,
    1970, and every realistic event would be ahead of it.
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
    ) -> None:
        keys = [key_by] if isinstance(key_by, str) else list(key_by)
        if watermark_strategy is not None and not watermark_strategy.has_timestamps:
            raise JobDefinitionError(
                "the watermark strategy needs a timestamp column or assigner: .with_timestamp_column('ts')"
            )
        self.watermark_strategy = watermark_strategy
        ws = watermark_strategy
        self.operator = KeyedOperator(
            fn, keys, ws.timestamp_column if ws else None, timestamp_assigner=ws.timestamp_assigner if ws else None
        )
        self._read_time = timestamp_reader(ws.timestamp_column, ws.timestamp_assigner) if ws else None
        self.descriptors = self.operator.open()
        self.schema = Schema.of(output_schema) if output_schema is not None else None
        self._arrow = self.schema.arrow if self.schema is not None else None
        self.records: dict[Any, Record] = {}
        self.processing_time = processing_time or 0
        #: whether the test set processing time (the max_event_time_ahead bound needs a clock)
        self._clock_set = processing_time is not None
        self.max_event_time_ahead = max_event_time_ahead
        self.watermark = MIN_WATERMARK
        self._max_ts: int | None = None
        self._serialize = serialize_state
        #: every row emitted so far, in order
        self.output: list[Any] = []
        #: side-output rows by tag name (``dead_letters``, ``late_data``, the function's own tags)
        self.side_outputs: dict[str, list[Any]] = {}

    # ------------------------------------------------------------------ driving

    def process_batch(
        self,
        events: Iterable[Event],
        *,
        processing_time: int | None = None,
        watermark: int | None = None,
    ) -> list[Any]:
        """Run one micro-batch; return the rows it emitted.

        With an output schema the rows are dicts checked against it, exactly as Spark's
        ``MemorySink`` returns them (timestamps as epoch ms, maps as dicts).
        """
        if processing_time is not None:
            self.processing_time = max(self.processing_time, processing_time)
            self._clock_set = True
        if watermark is not None:
            self.watermark = max(self.watermark, watermark)
        given = [{k: to_epoch_millis(v) for k, v in ev.items()} if isinstance(ev, dict) else ev for ev in events]
        now = self.processing_time if self._clock_set else None
        given, dead = admit(given, self.operator.key_columns, self._read_time, now, self.max_event_time_ahead)
        if dead:
            self.side_outputs.setdefault(DEAD_LETTERS.name, []).extend(dead)
        evs: Events = given
        if given and all(type(ev) is dict and ev.keys() == given[0].keys() for ev in given):
            evs = EventColumns.of(given)  # columnar, as events reach the operator on Spark
        op = self.operator
        records = self.records
        op.begin_batch(self.watermark, self.processing_time, lambda key: records.setdefault(key, {}))
        candidates = [
            (k, r) for k, r in records.items() if due_timer_limits(r, self.watermark, self.processing_time)
        ]
        rows = op.run_batch(evs, candidates)
        for name, row in op.take_side():
            self.side_outputs.setdefault(name, []).append(row)
        for key, rec in op.take_touched().items():
            if not rec:
                records.pop(key, None)
            elif self._serialize:
                records[key] = pickle.loads(dumps_state({key: rec}))[key]
        self._advance_watermark(evs)
        if self.schema is not None:
            # the same conversion as on Spark: type errors name the column; timestamps come
            # back as epoch ms and maps as dicts, as Spark's MemorySink returns them
            rows = python_rows(arrow_table(rows, self.schema, self._arrow)) if rows else []
        self.output.extend(rows)
        return rows

    def _advance_watermark(self, events: Events) -> None:
        strategy, read = self.watermark_strategy, self._read_time
        if strategy is None or read is None:
            return
        stamps = [t for ev in events if isinstance(ev, dict) and type(t := to_epoch_millis(read(ev))) is int]
        if stamps:
            top = max(stamps)
            self._max_ts = top if self._max_ts is None else max(self._max_ts, top)
            watermark = strategy.watermark_for(self._max_ts)
            if watermark > 0:
                # as on Spark, whose watermark starts at the epoch: there is none until it
                # passes it (see ``KeyGroupRunner.watermark``)
                self.watermark = max(self.watermark, watermark)

    def process_element(self, event: Event, **clocks: int) -> list[Any]:
        """One event as a batch of its own."""
        return self.process_batch([event], **clocks)

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
