"""Windows as a built-in keyed function: Flink's ``WindowOperator`` on sparkstate's keyed state.

A windowed job compiles (``engine/compile.py``) to :class:`WindowOperator`, a
:class:`~sparkstate.engine.operator.BuiltinFunction`: its state is ordinary keyed state, so
windows get everything keyed functions have (key groups, RocksDB buckets, timers that survive
restarts, the harness) with no engine code of their own; as a built-in it reads the
operator's batch scope directly and runs whole key groups for non-merging windows. A window's *contents* are an
accumulator (``aggregate``), the reduced element (``reduce``) or the list of elements
(``process``). Where they live depends on the assigner:

* tumbling and sliding windows keep one record per window (a *pane*) and key group, keyed
  ``(start, end)``: ``windows`` maps each key with elements in the window to its contents, and
  the record holds the window's firing and cleanup timers. A window fires for all its keys at
  once, with one timer, and no per-key record is read or written;
* session windows merge per key, so their state is per key: ``windows`` maps the key's
  sessions ``(start, end)`` to their contents, with a timer per session.

Window aggregates whose function merges may arrive *combined* (``engine/combine.py``): one
accumulator per key and window of a source batch, which the pane merges instead of adding
the events, with the events beside them for the late-data rule alone.

The semantics are Flink's (``WindowOperator`` with ``EventTimeTrigger`` /
``ProcessingTimeTrigger``):

* a window ``[start, end)`` fires when the watermark reaches ``end - 1``, by an event-time
  timer at that time;
* a window is *late* once ``end - 1 + allowed_lateness <= watermark``; an element no window
  took (all late, or none: between sliding windows with gaps) goes to the late-data side
  output when ``timestamp + allowed_lateness <= watermark``;
* an element for a window that has fired but is not late yet fires the window again at once,
  with the element added (Flink's late firing);
* a window's state is dropped at ``end - 1 + allowed_lateness`` (its cleanup timer);
* session windows ``[ts, ts + gap)`` merge with every window they overlap or touch, merging
  their contents and moving their timers (a key's timers are one set of times, so a time
  another session of the key still needs stays).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from itertools import count, repeat
from operator import itemgetter
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pyarrow as pa

from sparkstate.api.agg import BuiltinAggregates
from sparkstate.api.functions import MIN_WATERMARK, Context, Event, OnTimerContext, OutputTag, RuntimeContext, TimeDomain
from sparkstate.api.state import TIMERS_FIELD, AggregateFunction, KeyScope, MapStateDescriptor, Record
from sparkstate.api.windows import (
    EventTimeSessionWindows,
    ProcessWindowFunction,
    TimeWindow,
    WindowAssigner,
    WindowContext,
    WindowKind,
    solo_range,
)
from sparkstate.engine.combine import read_partials
from sparkstate.engine.events import EventColumns
from sparkstate.engine.operator import BuiltinFunction, Events, GroupRunner, KeyedOperator
from sparkstate.errors import CheckpointMismatchError, JobDefinitionError, ProcessFunctionError, SparkStateError

WINDOWS_STATE = "windows"
WINDOW_START = "window_start"
WINDOW_END = "window_end"
EVENT, PROC = int(TimeDomain.EVENT_TIME), int(TimeDomain.PROCESSING_TIME)

if TYPE_CHECKING:

    class _KeyedScope(KeyScope):
        """The operator's scope as the window operator reads it: it reads ``rec`` and
        ``timestamp`` only in ``process_element`` and ``on_timer``, where the operator has
        made a key current, and session windows (the only ones with ``process_element``) are
        event-time windows."""

        rec: Record
        timestamp: int


class WindowOperator(BuiltinFunction):
    """Runs ``assigner`` windows with one window function (``reduce``, ``aggregate`` or ``process``)."""

    def __init__(
        self,
        assigner: WindowAssigner,
        kind: WindowKind,
        function: Any,  # by kind: an AggregateFunction, a reduce function or a ProcessWindowFunction
        key_columns: tuple[str, ...],
        allowed_lateness: int = 0,
        late_tag: OutputTag | None = None,
        window_process: ProcessWindowFunction | None = None,
        output_names: tuple[str, ...] = (),
        early: bool = False,
    ) -> None:
        if kind not in tuple(WindowKind):
            raise JobDefinitionError(f"unknown window function kind {kind!r}; one of {[k.value for k in WindowKind]}")
        self.assigner = assigner
        self.kind = kind
        self.function = function
        self.key_columns = tuple(key_columns)
        self.allowed_lateness = allowed_lateness if assigner.time == TimeDomain.EVENT_TIME else 0
        self.late_tag = late_tag
        self.window_process = window_process
        #: the output schema's column order (built-in aggregates then emit tuples in it)
        self.output_names = tuple(output_names)
        #: early firing (``JobDescription.early_fire``): non-merging windows only
        self.early = early and not assigner.merging

    def open(self, ctx: RuntimeContext) -> None:
        ctx.get_map_state(MapStateDescriptor(WINDOWS_STATE, tuple, object))
        #: early firing: window -> the keys changed in this batch (emitted at its end)
        self._changed: dict[tuple[int, int], dict[Any, None]] = {}
        self._event_time = self.assigner.time == TimeDomain.EVENT_TIME
        self._domain = EVENT if self._event_time else PROC
        #: the session gap (sessions are the only merging windows)
        self._gap = self.assigner.gap if isinstance(self.assigner, EventTimeSessionWindows) else 0
        fn = self.function
        # every kind as (create, add): a window's first element goes to add(value, create())
        if self.kind == WindowKind.AGGREGATE:
            agg: AggregateFunction[Any, Any, Any] = fn
            self._create: Callable[[], Any] = agg.create_accumulator
            self._add: Callable[[Any, Any], Any] = agg.add
            self._merge: Callable[[Any, Any], Any] = agg.merge
        elif self.kind == WindowKind.REDUCE:
            self._create = _nothing
            self._add = lambda ev, acc: dict(ev) if acc is None else fn(acc, ev)
            self._merge = fn
        else:
            self._create = list
            self._add = _append
            self._merge = lambda a, b: a + b
        #: built-ins read their input columns straight from columnar events, no dicts
        self._column_add = fn.tuple_add() if isinstance(fn, BuiltinAggregates) else None
        if len(self.key_columns) == 1:
            only = self.key_columns[0]
            self._key_row: Callable[[Any], dict[str, Any]] = lambda key: {only: key}
        else:
            cols = self.key_columns
            self._key_row = lambda key: dict(zip(cols, key))
        self._bounds = self.assigner.bounds
        self._solo = solo_range(self.assigner)
        #: built-in aggregates make the whole output row in one generated call
        self._row = (
            fn.window_row(self.key_columns, WINDOW_START, WINDOW_END, self.output_names)
            if isinstance(fn, BuiltinAggregates) and self.window_process is None else None
        )

    def attach(self, operator: KeyedOperator) -> None:
        self._scope = cast("_KeyedScope", operator.scope)

    def group_runner(self) -> GroupRunner | None:
        # non-merging windows: the operator hands whole key groups to _run_panes instead of
        # calling process_element and on_timer per event and per timer
        return None if self.assigner.merging else self._run_panes

    # ------------------------------------------------------------------ elements

    def process_element(self, value: Event, ctx: Context) -> list[Any]:
        """One element into its session (merging windows); other windows run a whole key
        group at once in :meth:`_run_panes`."""
        scope = self._scope
        rec = scope.rec
        windows = rec.get(WINDOWS_STATE)
        if windows is None:
            windows = rec[WINDOWS_STATE] = {}
        out: list[Any] = []
        placed = self._add_to_session(value, scope.timestamp, scope.watermark, windows, out)
        if not windows:
            del rec[WINDOWS_STATE]
        if not placed and self.late_tag is not None:
            scope.side.append((self.late_tag.name, value))
        return out

    def _add_to_session(self, value: Event, ts: int, watermark: int, windows: dict[tuple[int, int], Any], out: list[Any]) -> bool:
        lateness = self.allowed_lateness
        start, end = ts, ts + self._gap
        overlapping = sorted(w for w in windows if w[0] <= end and w[1] >= start)
        for s, e in overlapping:
            start, end = min(start, s), max(end, e)
        end_ts = end - 1
        if end_ts + lateness <= watermark:
            return False
        rec = self._scope.rec
        acc = None
        for w in overlapping:
            part = windows.pop(w)
            acc = part if acc is None else self._merge(acc, part)
        if overlapping:
            self._untimer_merged(rec, windows, overlapping)
        key = (start, end)
        acc = windows[key] = self._add(value, self._create() if acc is None else acc)
        if end_ts <= watermark:
            out.extend(self._emit(self._scope.key, key, acc))
        else:
            self._timer(rec, end_ts)
        if lateness:
            self._timer(rec, end_ts + lateness)
        return True

    # ------------------------------------------------------------------ panes: a whole key group

    def _run_panes(self, op: KeyedOperator, events: Events, candidates: Iterable[tuple[Any, Record]]) -> list[Any]:
        """Steps 1-3 of the operator's batch contract for non-merging windows, in one pass.

        Non-merging windows keep their state by *pane*: one record per window of the key
        group, keyed ``(start, end)``, holding ``{key: contents}`` for every key with elements
        in it, and the window's two timers (firing and cleanup). An element is a dict update;
        firing a window is one timer and one pass over its pane. Flink's rules are as in the
        module docs; only the layout differs from per-key windows.
        """
        scope = self._scope
        self._changed = {}  # a key group's own; nothing is left of a batch that failed
        out = self._fire_panes(op, candidates)
        partials = getattr(events, "partials", None)
        if partials:
            # a blob of partials merges where it arrived among the events (order-sensitive
            # functions see one phase's order): here those before any event, below the rest
            self._late_combined(op, events.combined)  # type: ignore[union-attr]
            partials = list(partials)
            while partials and partials[0][0] == 0:
                self._merge_partials(op, partials.pop(0)[1])
        if not len(events):
            if self._changed:
                out.extend(self._fire_early(op))
            return out
        next_at = partials[0][0] if partials else -1
        keys, times, values, event_at, add = self._inputs(op, events)
        watermark = scope.watermark if self._event_time else MIN_WATERMARK
        now = scope.processing_time
        create, bounds, late_tag = self._create, self._bounds, self.late_tag
        solo_lo, solo_hi = self._solo
        lateness = self.allowed_lateness
        #: the open panes this batch has written to, by window
        live: dict[tuple[int, int], dict[Any, Any]] = {}
        # the last on-time window that is an element's only window: the next element in
        # [lo, hi), where every time has that window alone (``self._solo``), belongs to it,
        # with no window computation
        lo = hi = 0
        cur: dict[Any, Any] = {}
        #: early firing: the keys each window's on-time elements changed in this batch
        early = self.early
        changed = self._changed
        cur_changed: dict[Any, None] = {}
        key: Any = None
        i = -1
        try:
            for i, key, t, v in zip(count(), keys, times, values):
                if i == next_at:
                    while partials and partials[0][0] == i:
                        self._merge_partials(op, partials.pop(0)[1])
                    next_at = partials[0][0] if partials else -1
                if type(t) is not int:
                    t = op._event_time_of(event_at(i), t)
                    if t is None:
                        continue  # a dead letter
                if lo <= t < hi:
                    acc = cur.get(key)
                    cur[key] = add(v, create() if acc is None else acc)
                    if early:
                        cur_changed[key] = None
                    continue
                placed = False
                ws = bounds(t)
                for w in ws:
                    contents = live.get(w)
                    if contents is None:
                        contents = self._pane(op, w, watermark, now)
                        if contents is None:
                            continue  # late: this window has fired and been cleaned up
                        if w[1] - 1 <= watermark:
                            # late firing within the allowed lateness: the window fires again
                            # at once with the element added (not cached: rare, and each fires)
                            acc = contents.get(key)
                            acc = contents[key] = add(v, create() if acc is None else acc)
                            out.extend(self._emit(key, w, acc))
                            placed = True
                            continue
                        live[w] = contents
                    placed = True
                    acc = contents.get(key)
                    contents[key] = add(v, create() if acc is None else acc)
                    if early:
                        changed.setdefault(w, {})[key] = None
                    if len(ws) == 1:
                        lo, hi, cur = w[0] + solo_lo, w[0] + solo_hi, contents
                        if early:
                            cur_changed = changed[w]
                if not placed and late_tag is not None and t + lateness <= watermark:
                    # Flink's late element: no window took it and its time is behind the
                    # watermark by the allowed lateness (a time between sliding windows with
                    # gaps, in no window at all, is dropped while it is not late)
                    scope.side.append((late_tag.name, event_at(i)))
        except SparkStateError:
            raise
        except Exception as exc:
            raise op._user_error("process_element", key, event_at(i) if i >= 0 else None, exc) from exc
        for _, rest in partials or ():  # blobs of partials after the last event
            self._merge_partials(op, rest)
        if changed:
            out.extend(self._fire_early(op))
        if scope.due:
            out.extend(self._fire_panes(op, ()))
        return out

    def _merge_partials(self, op: KeyedOperator, partials: Any) -> None:
        """Merge one blob of combined inputs (``engine/combine.py``: an accumulator per key and
        window of a source batch; a packed table on Spark, a list of partials in the harness)
        into their windows' contents. A partial whose window is late is dropped whole:
        with no allowed lateness (the combiner's condition), each of its events is late exactly
        when its window is."""
        watermark, now = self._scope.watermark, self._scope.processing_time
        merge = self._merge
        live: dict[tuple[int, int], dict[Any, Any]] = {}
        key: Any = None
        try:
            if not isinstance(partials, list):
                partials = read_partials(partials, self.key_columns)
            for key, w, part in partials:
                contents = live.get(w)
                if contents is None:
                    contents = self._pane(op, w, watermark, now)
                    if contents is None:
                        continue  # late: this window has fired
                    live[w] = contents
                acc = contents.get(key)
                contents[key] = part if acc is None else merge(acc, part)
                if self.early:
                    self._changed.setdefault(w, {})[key] = None
        except SparkStateError:
            raise
        except Exception as exc:
            raise op._user_error("merge", key, "a combined window input", exc) from exc

    def _fire_early(self, op: KeyedOperator) -> list[Any]:
        """Early firing: each window's current result for every key its on-time elements (or
        partials) changed in this batch, in window order, then in the order the keys changed.
        The window still fires as usual when the watermark passes its end."""
        changed, self._changed = self._changed, {}
        scope = self._scope
        # a processing-time window ending now fires below, with the same row: not twice
        limit = scope.watermark if self._event_time else scope.processing_time
        out: list[Any] = []
        key: Any = None
        w: tuple[int, int] = (0, 0)
        try:
            for w in sorted(changed):
                if w[1] - 1 <= limit:
                    continue
                rec = op.touched.get(w)
                contents = rec.get(WINDOWS_STATE) if rec is not None else None
                if not contents:
                    continue
                for key in changed[w]:
                    scope.key = key
                    out.extend(self._emit(key, w, contents[key]))
        except SparkStateError:
            raise
        except Exception as exc:
            raise op._user_error("early firing", key, f"window {w}", exc) from exc
        return out

    def _late_combined(self, op: KeyedOperator, given: list[Any]) -> None:
        """Send the combined events that are late to the late-data side output: those behind
        the watermark with every window of theirs late (Flink's rule, with no lateness as the
        combiner requires). Their partials were dropped with their windows; the events are
        read only when the batch's earliest is behind the watermark."""
        watermark, late_tag, bounds = self._scope.watermark, self.late_tag, self._bounds
        if late_tag is None or watermark == MIN_WATERMARK:
            return
        side = self._scope.side
        for events in given:
            if isinstance(events, list):
                timed = [(ev, op._ts_of(ev)) for ev in events]  # type: ignore[misc]
            else:
                col = op.timestamp_column
                times = events.column(col).to_numpy() if col is not None and events.num_rows else None
                if times is None or times.min() > watermark:
                    continue
                behind = events.take(pa.array(np.flatnonzero(times <= watermark))).to_pylist()
                timed = [(ev, ev[col]) for ev in behind]
            for ev, t in timed:
                if t <= watermark and all(w[1] - 1 <= watermark for w in bounds(t)):
                    side.append((late_tag.name, ev))

    def _inputs(
        self, op: KeyedOperator, events: Events,
    ) -> tuple[Sequence[Any], Iterable[Any], Iterable[Any], Callable[[int], Event], Callable[[Any, Any], Any]]:
        """The batch's keys, raw times and window-function inputs as parallel sequences, the
        event at an index (for side outputs and errors), and the add function for the inputs.

        Columnar events give built-in aggregates tuples of just their input columns; anything
        else gets the event dicts.
        """
        cols = self.key_columns
        add = self._add
        event_at: Callable[[int], Event]
        if isinstance(events, EventColumns) and op.timestamp_assigner is not None:
            events = list(events)  # the assigner reads each event as a dict: make them once
        if isinstance(events, EventColumns):
            keycols = [events.column(c) for c in cols]
            if any(c is None for c in keycols):
                raise op.no_key_column(events.row(0))
            keys: Any = keycols[0] if len(cols) == 1 else list(zip(*keycols))
            times: Any = (events.column(op.timestamp_column) if op.timestamp_column else None) or repeat(None)
            column_add = self._column_add
            inputs = [events.column(c) for c in self.function.input_columns] if column_add else None
            if column_add is not None and inputs is not None and all(c is not None for c in inputs):
                values: Any = zip(*inputs) if inputs else repeat(())
                add = column_add
            else:
                values = events
            event_at = events.row
        else:
            evs = events  # a list (the operator's contract)
            try:
                keys = list(map(op._key_of, evs))
            except (KeyError, TypeError, IndexError) as exc:
                bad = next(ev for ev in evs if not _has_key(op._key_of, ev))
                raise op.no_key_column(bad) from exc
            times = list(map(op._ts_of, evs)) if op._ts_of is not None else repeat(None)
            values = evs
            event_at = evs.__getitem__
        if not self._event_time:
            times = repeat(self._scope.processing_time)
        missing = None in keys if len(cols) == 1 else any(None in k for k in keys)
        if missing:
            i = next(i for i, k in enumerate(keys) if k is None or (type(k) is tuple and None in k))
            raise op.null_key(event_at(i))
        return keys, times, values, event_at, add

    def _pane(self, op: KeyedOperator, w: tuple[int, int], watermark: int, now: int) -> dict[Any, Any] | None:
        """Window ``w``'s pane contents (its record loaded or made, with its timers), or None
        when the window is late."""
        end_ts = w[1] - 1
        lateness = self.allowed_lateness
        if end_ts + lateness <= watermark:
            return None
        rec = op.touched.get(w)
        if rec is None:
            rec = op._record_for(w, w)
        contents: dict[Any, Any] | None = rec.get(WINDOWS_STATE)
        if contents is None:
            contents = rec[WINDOWS_STATE] = {}
            domain = self._domain
            timers = rec[TIMERS_FIELD] = {(domain, end_ts + lateness)}
            if end_ts > watermark:
                timers.add((domain, end_ts))
                if not self._event_time and end_ts <= now:  # a processing-time window ending now
                    self._scope.due.append((w, rec))
        return contents

    def _fire_panes(self, op: KeyedOperator, candidates: Iterable[tuple[Any, Record]]) -> list[Any]:
        """Fire the due timers of ``candidates`` (and of panes that registered due ones), in
        timestamp order: a firing timer emits its window's rows, a cleanup timer frees it."""
        scope = self._scope
        limit = scope.watermark if self._event_time else scope.processing_time
        domain = self._domain
        due = []
        for w, rec in (*candidates, *scope.due) if scope.due else candidates:
            if type(w) is not tuple or len(w) != 2 or WINDOWS_STATE not in rec:
                raise CheckpointMismatchError(
                    f"window state for key {w!r} is in a layout this version of sparkstate does not read "
                    "(per-key windows of an earlier version); start the job with a fresh checkpoint"
                )
            for d, ts in rec.get(TIMERS_FIELD, ()):
                if ts <= limit and d == domain:
                    due.append((ts, w, rec))
        scope.due = []
        if not due:
            return []
        due.sort(key=itemgetter(0))
        out: list[Any] = []
        touched = op.touched
        row, lateness = self._row, self.allowed_lateness
        key = None
        try:
            for ts, w, rec in due:
                timers = rec.get(TIMERS_FIELD)
                if not timers or (domain, ts) not in timers:
                    continue  # listed twice (a candidate that also registered a due timer)
                timers.discard((domain, ts))
                touched.setdefault(w, rec)
                contents = rec[WINDOWS_STATE]
                if w[1] - 1 == ts:
                    s, e = w
                    if row is not None:
                        out.extend([row(k, s, e, acc) for k, acc in contents.items()])
                    else:
                        for key, acc in contents.items():
                            scope.key = key
                            out.extend(self._emit(key, w, acc))
                if w[1] - 1 + lateness == ts:
                    rec.clear()  # finally done: the pane and its timers are freed
        except SparkStateError:
            raise
        except Exception as exc:
            raise op._user_error("on_timer", key, f"timer at {ts}", exc) from exc
        return out

    # ------------------------------------------------------------------ timers

    def _timer(self, rec: Record, ts: int) -> None:
        entry = (self._domain, ts)
        timers = rec.get(TIMERS_FIELD)
        if timers is None:
            rec[TIMERS_FIELD] = {entry}
        elif entry not in timers:
            timers.add(entry)
        else:
            return
        scope = self._scope
        if ts <= (scope.watermark if self._domain == EVENT else scope.processing_time):
            scope.due.append((scope.key, rec))

    def _untimer_merged(self, rec: Record, windows: dict[tuple[int, int], Any], merged: list[tuple[int, int]]) -> None:
        """Delete the firing and cleanup timers of the sessions ``merged`` away, except the
        times another session of the key (in ``windows``) still needs.

        Flink keeps timers per window; here a key's timers are one set of times, so with an
        allowed lateness larger than the gap, one session's cleanup time can be another's
        firing time (``end - 1 + lateness == end' - 1``), and that timer must stay.
        """
        lateness = self.allowed_lateness
        used = {e - 1 for _, e in windows}
        if lateness:
            used.update([e - 1 + lateness for _, e in windows])
        for _, e in merged:
            if e - 1 not in used:
                self._untimer(rec, e - 1)
            if lateness and e - 1 + lateness not in used:
                self._untimer(rec, e - 1 + lateness)

    def _untimer(self, rec: Record, ts: int) -> None:
        timers = rec.get(TIMERS_FIELD)
        if timers:
            timers.discard((self._domain, ts))
            if not timers:
                del rec[TIMERS_FIELD]

    def on_timer(self, timestamp: int, ctx: OnTimerContext) -> list[Any]:
        scope = self._scope
        rec = scope.rec
        windows = rec.get(WINDOWS_STATE)
        if not windows:
            return []
        lateness = self.allowed_lateness
        if len(windows) == 1:  # the common case: no sort, no loop
            ((key, acc),) = windows.items()
            end_ts = key[1] - 1
            out = self._emit(scope.key, key, acc) if end_ts == timestamp else []
            if end_ts + lateness == timestamp:
                del rec[WINDOWS_STATE]
            return out
        out = []
        for key in sorted(windows):
            end_ts = key[1] - 1
            if end_ts == timestamp:
                out.extend(self._emit(scope.key, key, windows[key]))
            if end_ts + lateness == timestamp:
                del windows[key]  # finally done: free its state
        if not windows:
            del rec[WINDOWS_STATE]
        return out

    # ------------------------------------------------------------------ output

    def _emit(self, key: Any, window: tuple[int, int], acc: Any) -> list[Any]:
        kind = self.kind
        # a process function, alone or after an aggregate (Flink's aggregate(agg, windowFunction))
        process: ProcessWindowFunction | None = self.function if kind == WindowKind.PROCESS else self.window_process
        if process is not None:
            elements = list(acc) if kind == WindowKind.PROCESS else [self.function.get_result(acc)]
            rows = process.process(key, WindowContext(TimeWindow(*window), self._scope), elements)
            return list(rows) if rows is not None else []
        if self._row is not None:
            return [self._row(key, window[0], window[1], acc)]
        if kind == WindowKind.REDUCE:
            row = dict(acc)
        else:
            result = self.function.get_result(acc)
            if not isinstance(result, dict):
                raise ProcessFunctionError(
                    f"{type(self.function).__name__}.get_result returned {type(result).__name__} {result!r}; "
                    "a window aggregate must return a dict of output columns"
                )
            row = self._key_row(key)
            row.update(result)
        row[WINDOW_START] = window[0]
        row[WINDOW_END] = window[1]
        return [row]


def _append(ev: Event, acc: list[Event]) -> list[Event]:
    acc.append(ev)
    return acc


def _nothing() -> None:
    return None


def _has_key(key_of: Callable[[Event], Any], ev: Any) -> bool:
    try:
        key_of(ev)
        return True
    except (KeyError, TypeError, IndexError):
        return False
