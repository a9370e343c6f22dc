"""Windows as a built-in keyed function: Flink's ``WindowOperator`` on sparkstate's keyed state.

A windowed job compiles to :class:`WindowOperator`, an ordinary ``KeyedProcessFunction``, so
windows get everything keyed functions have (key groups, RocksDB buckets, timers that survive
restarts, the harness) with no engine code of their own. Per key, the state ``windows`` maps
``(start, end)`` to the window's contents: an accumulator (``aggregate``), the reduced element
(``reduce``) or the list of elements (``process``).

The semantics are Flink's (``WindowOperator`` with ``EventTimeTrigger`` /
``ProcessingTimeTrigger``):

* a window ``[start, end)`` fires when the watermark reaches ``end - 1``, by an event-time
  timer at that time;
* a window is *late* once ``end - 1 + allowed_lateness <= watermark``; an element whose
  windows are all late goes to the late-data side output;
* an element for a window that has fired but is not late yet fires the window again at once,
  with the element added (Flink's late firing);
* a window's state is dropped at ``end - 1 + allowed_lateness`` (its cleanup timer);
* session windows ``[ts, ts + gap)`` merge with every window they overlap or touch, merging
  their contents and moving their timers.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any, Callable, Iterable

from sparkstate.api.agg import BuiltinAggregates
from sparkstate.api.functions import MIN_WATERMARK, KeyedProcessFunction, OutputTag, TimeDomain
from sparkstate.api.state import TIMERS_FIELD, AggregateFunction, MapStateDescriptor
from sparkstate.api.windows import ProcessWindowFunction, TimeWindow, WindowAssigner, WindowContext
from sparkstate.errors import ProcessFunctionError, SparkStateError

WINDOWS_STATE = "windows"
WINDOW_START = "window_start"
WINDOW_END = "window_end"
EVENT, PROC = int(TimeDomain.EVENT_TIME), int(TimeDomain.PROCESSING_TIME)


class WindowOperator(KeyedProcessFunction):
    """Runs ``assigner`` windows with one window function (``reduce``, ``aggregate`` or ``process``)."""

    def __init__(
        self,
        assigner: WindowAssigner,
        kind: str,
        function: Any,
        key_columns: tuple[str, ...],
        allowed_lateness: int = 0,
        late_tag: OutputTag | None = None,
        window_process: ProcessWindowFunction | None = None,
    ) -> None:
        if kind not in ("reduce", "aggregate", "process"):
            raise ValueError(f"unknown window function kind {kind!r}")
        self.assigner = assigner
        self.kind = kind
        self.function = function
        self.key_columns = tuple(key_columns)
        self.allowed_lateness = allowed_lateness if assigner.time == "event" else 0
        self.late_tag = late_tag
        self.window_process = window_process

    def open(self, ctx: Any) -> None:
        ctx.get_map_state(MapStateDescriptor(WINDOWS_STATE, tuple, object))
        self._scope = ctx._scope
        self._event_time = self.assigner.time == "event"
        self._domain = EVENT if self._event_time else PROC
        fn = self.function
        if self.kind == "aggregate":
            agg: AggregateFunction = fn
            create, add = agg.create_accumulator, agg.add
            self._add: Callable[[Any, dict], Any] = lambda acc, ev: add(ev, create() if acc is None else acc)
            self._merge: Callable[[Any, Any], Any] = agg.merge
        elif self.kind == "reduce":
            self._add = lambda acc, ev: dict(ev) if acc is None else fn(acc, ev)
            self._merge = fn
        else:
            self._add = _append
            self._merge = lambda a, b: a + b
        if len(self.key_columns) == 1:
            only = self.key_columns[0]
            self._key_row: Callable[[Any], dict] = lambda key: {only: key}
        else:
            cols = self.key_columns
            self._key_row = lambda key: dict(zip(cols, key))
        self._bounds = self.assigner.bounds
        if not self.assigner.merging:
            # KeyedOperator hands whole key groups to _run_group instead of calling
            # process_element and on_timer per event and per timer
            self.run_key_group = self._run_group
        #: built-in aggregates make the whole output row in one generated call
        self._row = (
            fn.window_row(self.key_columns, WINDOW_START, WINDOW_END)
            if isinstance(fn, BuiltinAggregates) and self.window_process is None else None
        )

    # ------------------------------------------------------------------ elements

    def process_element(self, value: dict, ctx: Any) -> list:
        """One element into its session (merging windows); other windows run a whole key
        group at once in :meth:`_run_group`."""
        scope = self._scope
        rec = scope.rec
        windows = rec.get(WINDOWS_STATE)
        if windows is None:
            windows = rec[WINDOWS_STATE] = {}
        out: list = []
        placed = self._add_to_session(value, scope.timestamp, scope.watermark, windows, out)
        if not windows:
            del rec[WINDOWS_STATE]
        if not placed and self.late_tag is not None:
            scope.side.append((self.late_tag.name, value))
        return out

    def _add_to_session(self, value: dict, ts: int, watermark: int, windows: dict, out: list) -> bool:
        lateness = self.allowed_lateness
        start, end = ts, ts + self.assigner.gap  # type: ignore[attr-defined]
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
            self._untimer(rec, w[1] - 1)
            if lateness:
                self._untimer(rec, w[1] - 1 + lateness)
        key = (start, end)
        acc = windows[key] = self._add(acc, value)
        if end_ts <= watermark:
            out.extend(self._emit(self._scope.key, key, acc))
        else:
            self._timer(rec, end_ts)
        if lateness:
            self._timer(rec, end_ts + lateness)
        return True

    # ------------------------------------------------------------------ a whole key group

    def _run_group(self, op: Any, events: Iterable[dict], candidates: Iterable[tuple[Any, dict]]) -> list:
        """Steps 1-3 of the operator's batch contract for non-merging windows, in one pass.

        Flink's rules as in the module docs, without the keyed operator's per-event and
        per-timer calls: a new window registers its timers once, and due timers fire here.
        """
        scope = self._scope
        out = self._fire_due(op, candidates)
        lateness = self.allowed_lateness
        event_time = self._event_time
        watermark = scope.watermark if event_time else MIN_WATERMARK
        domain, add, bounds, late_tag = self._domain, self._add, self._bounds, self.late_tag
        agg_add = self.function.add if self.kind == "aggregate" else None
        create = self.function.create_accumulator if agg_add is not None else None
        value: Any = None
        try:
            for key, rec, value in op.keyed_events(events):
                ts = scope.timestamp if event_time else scope.processing_time
                windows = rec.get(WINDOWS_STATE)
                placed = False
                for w in bounds(ts):
                    end_ts = w[1] - 1
                    if end_ts + lateness <= watermark:
                        continue  # this window is late: it has fired and been cleaned up
                    placed = True
                    if windows is None:
                        windows = rec[WINDOWS_STATE] = {}
                    acc = windows.get(w)
                    fresh = acc is None
                    if agg_add is not None:  # aggregate: the AggregateFunction's add, no wrapper
                        acc = windows[w] = agg_add(value, create() if fresh else acc)
                    else:
                        acc = windows[w] = add(acc, value)
                    if end_ts <= watermark:
                        out.extend(self._emit(key, w, acc))  # late firing, within the lateness
                        if fresh:
                            self._timer(rec, end_ts + lateness)
                    elif fresh:  # an existing window already has its timers
                        timers = rec.get(TIMERS_FIELD)
                        if timers is None:
                            timers = rec[TIMERS_FIELD] = set()
                        timers.add((domain, end_ts))
                        if lateness:
                            timers.add((domain, end_ts + lateness))
                        if end_ts <= ts:  # a processing-time window ending this very millisecond
                            scope.due.append((key, rec))
                if not placed and late_tag is not None:
                    scope.side.append((late_tag.name, value))
        except SparkStateError:
            raise
        except Exception as exc:
            raise op._user_error("process_element", scope.key, value, exc) from exc
        if scope.due:
            out.extend(self._fire_due(op, ()))
        return out

    def _fire_due(self, op: Any, candidates: Iterable[tuple[Any, dict]]) -> list:
        """Fire this operator's due timers of ``candidates`` (and of records that registered
        due ones), in timestamp order."""
        scope = self._scope
        limit = scope.watermark if self._event_time else scope.processing_time
        domain = self._domain
        due = []
        for key, rec in (*candidates, *scope.due) if scope.due else candidates:
            timers = rec.get(TIMERS_FIELD)
            if timers:
                for d, ts in timers:
                    if ts <= limit and d == domain:
                        due.append((ts, key, rec))
        scope.due = []
        if not due:
            return []
        due.sort(key=itemgetter(0))
        out: list = []
        touched = op.touched
        row, lateness = self._row, self.allowed_lateness
        ts = None
        try:
            for ts, key, rec in due:
                timers = rec.get(TIMERS_FIELD)
                if not timers or (domain, ts) not in timers:
                    continue  # listed twice (a candidate that also registered a due timer)
                timers.discard((domain, ts))
                if not timers:
                    del rec[TIMERS_FIELD]
                touched.setdefault(key, rec)
                windows = rec.get(WINDOWS_STATE)
                if row is not None and windows is not None and len(windows) == 1:
                    # on_timer's common case, inlined: a key's only window, built-in aggregates
                    ((w, acc),) = windows.items()
                    if w[1] - 1 == ts:
                        out.append(row(key, w[0], w[1], acc))
                    if w[1] - 1 + lateness == ts:
                        del rec[WINDOWS_STATE]
                    continue
                scope.key, scope.rec, scope.timestamp = key, rec, ts
                out.extend(self.on_timer(ts, None))
        except SparkStateError:
            raise
        except Exception as exc:
            raise op._user_error("on_timer", scope.key, f"timer at {ts}", exc) from exc
        return out

    # ------------------------------------------------------------------ timers

    def _timer(self, rec: dict, ts: int) -> None:
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

    def _untimer(self, rec: dict, ts: int) -> None:
        timers = rec.get(TIMERS_FIELD)
        if timers:
            timers.discard((self._domain, ts))
            if not timers:
                del rec[TIMERS_FIELD]

    def on_timer(self, timestamp: int, ctx: Any) -> list:
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

    def _emit(self, key: Any, window: tuple[int, int], acc: Any) -> list:
        kind = self.kind
        if kind == "process" or self.window_process is not None:
            if kind == "process":
                fn: ProcessWindowFunction = self.function
                elements = list(acc)
            else:
                fn, elements = self.window_process, [self.function.get_result(acc)]  # type: ignore[assignment]
            rows = fn.process(key, WindowContext(TimeWindow(*window), self._scope), elements)
            return list(rows) if rows is not None else []
        if self._row is not None:
            return [self._row(key, window[0], window[1], acc)]
        if kind == "reduce":
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


def _append(acc: list | None, ev: dict) -> list:
    if acc is None:
        return [ev]
    acc.append(ev)
    return acc

