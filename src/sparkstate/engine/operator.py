"""The engine-neutral core: runs one ``KeyedProcessFunction`` over per-key records.

Both engines, the in-process test harness and the Spark runtime, drive this class, so the
semantics below hold on both by construction:

A micro-batch sees one watermark ``W`` and one processing time ``T``. For every key group
it runs, in order:

1. timers that are already due: event-time timers ``<= W`` in timestamp order, then
   processing-time timers ``<= T`` in timestamp order (the two clocks are not comparable, so
   the order between domains is fixed rather than by timestamp);
2. the batch's elements, in arrival order, each with its key's record current;
3. processing-time timers registered during steps 1-2 for a time that has already passed,
   repeatedly, until none is due (Flink fires such timers as soon as it can; here "as soon
   as it can" is the end of the same micro-batch).

Event-time timers follow Flink's timer queue: one registered in an event-time ``on_timer``
for a time the watermark has passed fires in the same step, in timestamp order among the
due timers (171, 172, 201 when 171's ``on_timer`` registers 172); one registered anywhere
else for such a time waits until the watermark next advances, as Flink fires it only at its
next watermark, and deleting it before then cancels it (the record's ``HELD_FIELD`` holds
the watermark it waits to pass).

Two inputs (``sparkstate.api.connected``): between steps 1 and 2 come the connected input's
elements in arrival order: broadcast elements (``process_broadcast_element``, against the key
group's copy of the broadcast state; every key group gets every broadcast element, and only
the group the engine names emits their rows and side rows) or the second keyed input's
(``process_element2``); step 2 is then the first input's (``process_element1``).

A record is a plain dict ``{state name: value, TIMERS_FIELD: {(domain, ts), ...}}``. The
engine decides where records live (a dict in the harness, RocksDB buckets in Spark); this
class only reads and mutates the dicts it is handed and remembers which keys it touched.
"""

from __future__ import annotations

import copy
import datetime as _dt
import heapq
import pickle
import reprlib
import types
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import count
from operator import itemgetter
from typing import TYPE_CHECKING, Any, TypeAlias

from sparkstate.api.connected import BroadcastContext, KeyedBroadcastProcessFunction, KeyedCoProcessFunction
from sparkstate.api.functions import (
    DEAD_LETTERS,
    MIN_WATERMARK,
    Context,
    Event,
    KeyedProcessFunction,
    OnTimerContext,
    RuntimeContext,
    TimeDomain,
    TimerService,
)
from sparkstate.api.state import HELD_FIELD, INTERNAL_FIELDS, TIMERS_FIELD, KeyScope, Record, StateDescriptor
from sparkstate.api.time import TimestampAssigner, epoch_millis
from sparkstate.engine.events import EventColumns, UnreadableTime, dead_letter_text, timestamp_reader
from sparkstate.errors import (
    JobDefinitionError,
    KeyColumnError,
    ProcessFunctionError,
    SparkStateError,
    StateAccessError,
    TimerError,
)

if TYPE_CHECKING:
    from sparkstate.api.job import ConnectedInput

#: on_timer may register already-due timers; after this many rounds in one batch it is a loop.
MAX_TIMER_ROUNDS = 10_000

#: what a function returned instead of yielding rows (a single row is not a list of rows)
_SINGLE_ROW = (dict, str, bytes, tuple)
_GENERATOR = types.GeneratorType
#: TimeDomain by its int value, without the enum's slower call
_DOMAINS = (TimeDomain.EVENT_TIME, TimeDomain.PROCESSING_TIME)

_short = reprlib.Repr()
_short.maxstring = 120
_short.maxother = 120
_short.maxdict = 12
_short.maxlist = 12


def to_epoch_millis(value: Any) -> Any:
    """Datetimes become epoch ms (:func:`~sparkstate.api.time.epoch_millis`: naive ones are
    UTC, rounded down); anything else is returned as is."""
    return epoch_millis(value) if isinstance(value, _dt.datetime) else value


def key_getter(key_columns: Sequence[str]) -> Callable[[Event], Any]:
    """A function from an event dict to its key: a scalar for one column, a tuple for several."""
    if len(key_columns) == 1:
        return itemgetter(key_columns[0])
    getter = itemgetter(*key_columns)
    return lambda ev: getter(ev)


#: a key group's events as the engines hand them in: event dicts, or their columns
Events: TypeAlias = "Sequence[Event] | EventColumns"
#: runs one key group's batch at once: ``(operator, events, due candidates) -> rows``
GroupRunner: TypeAlias = Callable[["KeyedOperator", Events, Iterable[tuple[Any, Record]]], list[Any]]


class BuiltinFunction(KeyedProcessFunction):
    """A keyed function the engine provides itself (the window operator), not a user's.

    The operator attaches itself after ``open``: a built-in reads the batch's scope (clocks,
    the current key and record, side outputs, timers that became due) directly rather than
    through the user-facing contexts, and it may take over whole key groups by returning a
    :data:`GroupRunner` from :meth:`group_runner` (the operator then runs it instead of steps
    1-3 of the module docs, and the runner must keep their order and rules).
    """

    def attach(self, operator: KeyedOperator) -> None:
        """Called once by ``operator`` after :meth:`open`."""

    def group_runner(self) -> GroupRunner | None:
        """What runs a key group's batch at once, or None to be called per element and timer."""
        return None


class KeyedOperator:
    """Executes a keyed function over records handed in by an engine (see module docs)."""

    def __init__(
        self,
        fn: KeyedProcessFunction,
        key_columns: Sequence[str],
        timestamp_column: str | None = None,
        event_time: bool = True,
        timestamp_assigner: TimestampAssigner | None = None,
        connected: ConnectedInput | None = None,
    ) -> None:
        if not isinstance(fn, KeyedProcessFunction):
            raise JobDefinitionError(f"expected a KeyedProcessFunction instance, got {fn!r}")
        self.fn = fn
        self.name = type(fn).__name__
        self.key_columns = list(key_columns)
        self.timestamp_column = timestamp_column
        self.scope = KeyScope()
        self.scope.timers_enabled = type(fn).defines_on_timer()
        self.scope.event_time = event_time
        self.runtime_context = RuntimeContext(self.scope, self.name)
        self.timer_service = TimerService(self.scope, self.name)
        self.ctx = Context(self.scope, self.timer_service)
        self.timer_ctx = OnTimerContext(self.scope, self.timer_service)
        self._key_of = key_getter(self.key_columns)
        self.timestamp_assigner = timestamp_assigner
        self._ts_of = timestamp_reader(timestamp_column, timestamp_assigner)
        #: key -> record of every key read or written since the last ``take_touched``
        self.touched: dict[Any, Record] = {}
        self._load: Callable[[Any], Record] = lambda key: {}
        self._opened = False
        self._run_key_group: GroupRunner | None = None
        #: every record of the key group (for ``apply_to_keyed_state``), set per batch
        self._all_records: Callable[[], Iterable[tuple[Any, Record]]] = lambda: ()
        #: while a broadcast element runs: each record its ``apply_to_keyed_state`` visited, a
        #: copy of it from before, and whether the batch had touched it (to undo a rejection)
        self._keyed_undo: dict[Any, tuple[Record, Record, bool]] | None = None
        self.connected = connected
        self.bctx = BroadcastContext(self.scope, self.timer_service)
        self.bctx.applier = self._apply_to_keyed_state  # type: ignore[assignment]
        self._key_of2: Callable[[Event], Any] | None = None
        self._ts_of2: Callable[[Event], Any] | None = None
        if connected is not None:
            if connected.is_broadcast:
                self.scope.broadcast_descriptors = {d.name: d for d in connected.broadcast}
            else:
                ws = connected.watermark
                self._key_of2 = key_getter(connected.key_columns)
                self._ts_of2 = timestamp_reader(ws.timestamp_column, ws.timestamp_assigner) if ws else None

    # ------------------------------------------------------------------ lifecycle

    def open(self) -> list[StateDescriptor]:
        """Call the function's ``open``; return the state descriptors it registered."""
        if not self._opened:
            try:
                self.fn.open(self.runtime_context)
                if isinstance(self.fn, BuiltinFunction):
                    self.fn.attach(self)
                    self._run_key_group = self.fn.group_runner()
            except SparkStateError:
                raise
            except Exception as exc:
                raise ProcessFunctionError(f"{self.name}.open failed: {type(exc).__name__}: {exc}") from exc
            self._opened = True
        return self.runtime_context.descriptors

    def close(self) -> None:
        if self._opened:
            self._opened = False
            try:
                self.fn.close()
            except Exception as exc:
                raise ProcessFunctionError(f"{self.name}.close failed: {type(exc).__name__}: {exc}") from exc

    # ------------------------------------------------------------------ batches

    def begin_batch(
        self, watermark: int, processing_time: int, load: Callable[[Any], Record], *,
        broadcast: dict[str, dict[Any, Any]] | None = None,
        all_records: Callable[[], Iterable[tuple[Any, Record]]] | None = None,
    ) -> None:
        """Set the batch's clocks and how to fetch the record of a key not touched yet; for a
        broadcast job, the key group's broadcast states (changed in place) and how to visit
        every record of the group (``apply_to_keyed_state``)."""
        scope = self.scope
        scope.watermark = MIN_WATERMARK if watermark is None else watermark
        scope.processing_time = processing_time
        scope.due = []
        scope.side = []
        scope.broadcast = broadcast
        scope.broadcast_changed = False
        self._load = load
        if all_records is not None:
            self._all_records = all_records
        self.touched = {}

    def take_touched(self) -> dict[Any, Record]:
        """The records touched since ``begin_batch``; the engine persists them."""
        touched, self.touched = self.touched, {}
        self.scope.rec = None
        self.scope.key = None
        return touched

    def run_batch(
        self, events: Events, due_candidates: Iterable[tuple[Any, Record]] = (), *,
        second: Events | None = None, broadcast: Events | None = None, emit_broadcast: bool = True,
    ) -> list[Any]:
        """Steps 1-3 of the module docs for one key group; returns the emitted rows.

        ``second`` are the second keyed input's elements, ``broadcast`` the broadcast input's;
        ``emit_broadcast`` says whether this group emits what the broadcast elements produce
        (exactly one group of a batch does).

        Records the sources could not read (``events.dead_letters``, see ``packing``) go to the
        dead-letter output first: they reach no key, so no step sees them.
        """
        side = self.scope.side
        for given, emits in ((events, True), (second, True), (broadcast, emit_broadcast)):
            rejected = getattr(given, "dead_letters", None) if given is not None else None
            if rejected and emits:
                side.extend((DEAD_LETTERS.name, row) for row in rejected)
        if self._run_key_group is not None:  # a built-in function that runs a whole key group at once
            return self._run_key_group(self, events, due_candidates)
        out = self.fire_due(due_candidates)
        if broadcast:
            rows = self.process_broadcast(broadcast, emit_broadcast)
            if emit_broadcast:
                out.extend(rows)
        if second:
            out.extend(self.process(second, input2=True))
        out.extend(self.process(events))
        if self.scope.due:
            out.extend(self.fire_due(()))
        return out

    def process_broadcast(self, elements: Iterable[Event], emit: bool = True) -> list[Any]:
        """Run ``process_broadcast_element`` on each broadcast element in order.

        An element the function rejects (it raises) changes no state: its broadcast writes and
        its keyed writes (``apply_to_keyed_state``: values, timers) are undone, and it goes to
        the dead letters with the reason (from the emitting group only); the batch goes on.
        Without ``emit``, its rows and side rows are dropped.
        """
        fn = self.fn
        if not isinstance(fn, KeyedBroadcastProcessFunction):
            raise JobDefinitionError(f"{self.name} got broadcast elements but is not a KeyedBroadcastProcessFunction")
        scope = self.scope
        states = scope.broadcast
        if states is None:
            raise StateAccessError(f"{self.name}: the engine gave no broadcast state for the broadcast elements")
        out: list[Any] = []
        bctx = self.bctx
        for ev in elements:
            scope.key = None
            scope.rec = None
            scope.timestamp = None
            before = {name: dict(m) for name, m in states.items()}
            changed = scope.broadcast_changed
            side_len, due_len = len(scope.side), len(scope.due)
            self._keyed_undo = {}
            try:
                result = fn.process_broadcast_element(ev, bctx)
                rows = [] if result is None else list(self._rows("process_broadcast_element", result))
            except Exception as exc:
                for name in list(states):
                    if name not in before:
                        del states[name]
                for name, m in before.items():
                    states[name] = m
                scope.broadcast_changed = changed
                self._undo_keyed_writes(self._keyed_undo)
                del scope.due[due_len:]
                del scope.side[side_len:]
                if emit:
                    reason = f"{self.name}.process_broadcast_element rejected it: {type(exc).__name__}: {exc}"
                    scope.side.append((DEAD_LETTERS.name, {"raw": dead_letter_text(ev), "reason": reason}))
                continue
            finally:
                self._keyed_undo = None
            if emit:
                out.extend(rows)
            else:
                del scope.side[side_len:]
        scope.key = None
        scope.rec = None
        return out

    def _undo_keyed_writes(self, undo: dict[Any, tuple[Record, Record, bool]] | None) -> None:
        """Put back the records a rejected broadcast element visited, in place (the engine
        holds them), and forget the keys it alone touched."""
        for key, (rec, saved, was_touched) in (undo or {}).items():
            rec.clear()
            rec.update(saved)
            if not was_touched:
                self.touched.pop(key, None)

    def _rows(self, phase: str, result: Any) -> Any:
        if type(result) is not _GENERATOR and isinstance(result, _SINGLE_ROW):
            raise self._single_row(phase, result)
        return result

    def _apply_to_keyed_state(self, desc: StateDescriptor, function: Callable[[Any, Any], None]) -> None:
        """``apply_to_keyed_state``: ``function(key, handle)`` for every key of the group that
        holds a value of ``desc``'s state."""
        known = self.runtime_context._states.get(getattr(desc, "name", None))  # type: ignore[arg-type]
        if known is None or known[0] != desc:
            declared = ", ".join(repr(n) for n in self.runtime_context._states) or "none"
            raise StateAccessError(
                f"{self.name}.apply_to_keyed_state({desc!r}): not a state the function declared in open "
                f"(declared: {declared})"
            )
        handle = known[1]
        scope = self.scope
        touched = self.touched
        name = desc.name
        undo = self._keyed_undo
        try:
            for key, rec in list(self._all_records()):
                rec = touched.get(key, rec)
                if name not in rec:
                    continue
                if undo is not None and key not in undo:  # as it was before the element, should it be rejected
                    undo[key] = (rec, _copy_record(rec), key in touched)
                touched[key] = rec
                scope.key = key
                scope.rec = rec
                function(key, handle)
        finally:
            scope.key = None
            scope.rec = None

    def _record_for(self, key: Any, event: Any) -> Record:
        """The record of a key not touched yet in this batch (loaded, pruned, remembered)."""
        if key is None or (type(key) is tuple and None in key):
            raise self.null_key(event)
        rec = self._load(key)
        if rec:
            # state a newer version of the function no longer declares is dropped when its
            # key is next touched (Flink's "allow non-restored state")
            declared = self.runtime_context._states
            stale = [f for f in rec if f not in declared and f not in INTERNAL_FIELDS]
            for f in stale:
                del rec[f]
        self.touched[key] = rec
        return rec

    def keyed_events(self, events: Iterable[Event], input2: bool = False) -> Iterator[tuple[Any, Record, Event]]:
        """Each event with its key and record, ``scope`` set to them and to its event time.

        Events without a usable event time go to the dead-letter output here and are skipped.
        """
        scope = self.scope
        key_of = self._key_of2 if input2 and self._key_of2 is not None else self._key_of
        ts_of = self._ts_of2 if input2 else self._ts_of
        touched = self.touched
        for ev in events:
            try:
                key = key_of(ev)
            except (KeyError, TypeError, IndexError) as exc:
                raise self.no_key_column(ev) from exc
            rec = touched.get(key)
            if rec is None:
                rec = self._record_for(key, ev)
            if ts_of is not None:
                t = ts_of(ev)
                if type(t) is not int:
                    t = self._event_time_of(ev, t)
                    if t is None:
                        continue  # a dead letter
                scope.timestamp = t
            else:
                scope.timestamp = None
            scope.key = key
            scope.rec = rec
            yield key, rec, ev

    def process(self, events: Iterable[Event], input2: bool = False) -> list[Any]:
        """Run ``process_element`` on each event in order (``process_element2`` for the second input)."""
        out: list[Any] = []
        extend = out.extend
        ctx = self.ctx
        fn = self.fn
        process_element = fn.process_element
        phase = "process_element"
        if isinstance(fn, KeyedCoProcessFunction):
            process_element = fn.process_element2 if input2 else fn.process_element1
            phase = "process_element2" if input2 else "process_element1"
        for key, _, ev in self.keyed_events(events, input2):
            try:
                result = process_element(ev, ctx)
                if result is not None:
                    if type(result) is not _GENERATOR and isinstance(result, _SINGLE_ROW):
                        raise self._single_row(phase, result)
                    extend(result)
            except SparkStateError:
                raise
            except Exception as exc:
                raise self._user_error(phase, key, ev, exc) from exc
        return out

    def _event_time_of(self, ev: Event, t: Any) -> int | None:
        """An event time that is not epoch ms yet: a datetime is converted; anything else
        (missing, unparseable) sends the event to the dead-letter output with the reason."""
        if isinstance(t, _dt.datetime):
            return epoch_millis(t)
        if isinstance(t, int) and not isinstance(t, bool):
            return int(t)
        if isinstance(t, UnreadableTime):
            reason = t.reason
        elif self.timestamp_assigner is not None:
            reason = f"timestamp assigner returned {_short.repr(t)}, not epoch ms or a datetime"
        elif t is None:
            reason = f"no event time: column {self.timestamp_column!r} is null"
        else:
            reason = f"event time {_short.repr(t)} in column {self.timestamp_column!r} is not a timestamp"
        self.scope.side.append((DEAD_LETTERS.name, {"raw": dead_letter_text(ev), "reason": reason}))
        return None

    def take_side(self) -> list[tuple[str, Any]]:
        """Side-output rows ``(tag name, row)`` emitted since the last call."""
        side, self.scope.side = self.scope.side, []
        return side

    def fire_due(self, candidates: Iterable[tuple[Any, Record]]) -> list[Any]:
        """Fire every due timer of ``candidates`` (and of records that registered due timers).

        One queue ordered by domain then timestamp, as Flink's timer queue: a timer that an
        ``on_timer`` registers for a time already due joins the queue and fires in its turn.
        """
        out: list[Any] = []
        scope = self.scope
        tctx = self.timer_ctx
        on_timer = self.fn.on_timer
        touched = self.touched
        domains = _DOMAINS
        #: (domain, ts, seq, depth, key, rec); depth counts timers registering due timers
        queue: list[tuple[int, int, int, int, Any, Record]] = []
        seq = count()
        pending = list(candidates)
        if scope.due:
            pending.extend(scope.due)
            scope.due = []
        self._queue_due(queue, pending, seq, 0)
        heapq.heapify(queue)
        try:
            while queue:
                domain, ts, _, depth, key, rec = heapq.heappop(queue)
                timers = rec.get(TIMERS_FIELD)
                entry = (domain, ts)
                if not timers or entry not in timers:
                    continue  # deleted by an earlier timer, or queued twice
                timers.discard(entry)
                if not timers:
                    del rec[TIMERS_FIELD]
                    rec.pop(HELD_FIELD, None)
                touched.setdefault(key, rec)
                scope.key = key
                scope.rec = rec
                scope.timestamp = ts
                tctx.domain = domains[domain]
                scope.in_event_timer = not domain
                try:
                    result = on_timer(ts, tctx)
                    if result is not None:
                        if type(result) is not _GENERATOR and isinstance(result, _SINGLE_ROW):
                            raise self._single_row("on_timer", result)
                        out.extend(result)
                except SparkStateError:
                    raise
                except Exception as exc:
                    raise self._user_error("on_timer", key, f"timer at {ts} ({tctx.domain.name})", exc) from exc
                if scope.due:
                    if depth >= MAX_TIMER_ROUNDS:
                        raise TimerError(
                            f"{self.name}.on_timer kept registering timers that were already due "
                            f"({MAX_TIMER_ROUNDS} rounds in one batch, key {scope.key!r}). A timer that re-arms "
                            "itself in on_timer repeats forever once a bounded input's final watermark "
                            "(MAX_WATERMARK) is reached: stop re-arming when current_watermark() == MAX_WATERMARK"
                        )
                    added: list[tuple[int, int, int, int, Any, Record]] = []
                    self._queue_due(added, scope.due, seq, depth + 1)
                    scope.due = []
                    for item in added:
                        heapq.heappush(queue, item)
        finally:
            scope.in_event_timer = False
        return out

    def _queue_due(
        self, queue: list[tuple[int, int, int, int, Any, Record]], records: Iterable[tuple[Any, Record]],
        seq: Iterator[int], depth: int,
    ) -> None:
        """Append the due timers of ``records`` to ``queue``.

        Event-time timers held behind the watermark (``HELD_FIELD``) are due only once the
        watermark has advanced past the one they were registered at; then the hold ends.
        """
        scope = self.scope
        watermark, now = scope.watermark, scope.processing_time
        for key, rec in records:
            timers = rec.get(TIMERS_FIELD)
            if not timers:
                continue
            event_limit = watermark
            held = rec.get(HELD_FIELD)
            if held is not None:
                if held < watermark:
                    del rec[HELD_FIELD]  # the watermark advanced: the held timers are due
                    self.touched.setdefault(key, rec)
                else:
                    event_limit = MIN_WATERMARK - 1  # all event-time timers due now are held
            for domain, ts in timers:
                if ts <= (now if domain else event_limit):
                    queue.append((domain, ts, next(seq), depth, key, rec))

    def no_key_column(self, event: Any) -> KeyColumnError:
        """The error for an event that lacks a key column."""
        return KeyColumnError(f"{self.name}: event {_short.repr(event)} has no key column {self.key_columns}")

    def null_key(self, event: Any) -> KeyColumnError:
        """The error for an event whose key column is null."""
        return KeyColumnError(f"{self.name}: event {_short.repr(event)} has no value for key column(s) {self.key_columns}")

    def _single_row(self, phase: str, result: Any) -> ProcessFunctionError:
        return ProcessFunctionError(
            f"{self.name}.{phase} returned a {type(result).__name__} ({_short.repr(result)}); "
            "yield each output row, or return a list of rows"
        )

    def _user_error(self, phase: str, key: Any, what: Any, exc: Exception) -> ProcessFunctionError:
        what_s = what if isinstance(what, str) else f"event {_short.repr(what)}"
        return ProcessFunctionError(
            f"{self.name}.{phase} failed for key {key!r} on {what_s}: {type(exc).__name__}: {exc}"
        )


def _copy_record(rec: Record) -> Record:
    """A deep copy of a record (by pickle, as the engine stores records; deepcopy for what
    pickle cannot take, which the harness allows without serialisation)."""
    try:
        copied: Record = pickle.loads(pickle.dumps(rec, protocol=pickle.HIGHEST_PROTOCOL))
    except Exception:
        copied = copy.deepcopy(rec)
    return copied


def due_timer_limits(rec: Record, watermark: int, processing_time: int) -> bool:
    """True when the record holds a timer that is due at these clocks."""
    timers = rec.get(TIMERS_FIELD)
    if not timers:
        return False
    limits = (watermark, processing_time)
    return any(ts <= limits[d] for d, ts in timers)


def timer_minimums(records: Iterable[Record]) -> tuple[int | None, int | None]:
    """The earliest event-time and processing-time timers over ``records`` (None if none)."""
    mins: list[int | None] = [None, None]
    for rec in records:
        timers = rec.get(TIMERS_FIELD)
        if timers:
            for d, ts in timers:
                m = mins[d]
                if m is None or ts < m:
                    mins[d] = ts
    return mins[0], mins[1]

