"""A small, plain model of Flink's event-time rules, the reference the engine is tested against.

Written from the documented behaviour of Flink's ``WindowOperator`` (with ``EventTimeTrigger``),
``MergingWindowSet`` and ``InternalTimerService``, deliberately naive (lists and sets, no
sparkstate code), so that a test comparing it with the harness checks sparkstate against
Flink's rules rather than against itself:

* **timers** are unique per (key, namespace, timestamp); the event-time queue fires, each time
  the watermark *advances*, every timer at or before it in timestamp order, including timers
  an ``onTimer`` registers meanwhile for a time already reached. A timer registered outside
  that loop for a time the watermark has passed waits for the next advance.
* **windows**: an element goes to each window the assigner gives it that is not late
  (``max_timestamp + allowed_lateness <= watermark``); a window fires by its timer at
  ``max_timestamp`` or at once when that time has passed (a late firing), and its state is
  dropped by its cleanup timer at ``max_timestamp + allowed_lateness``. An element no window
  took is late data when ``timestamp + allowed_lateness <= watermark``.
* **sessions**: ``[ts, ts + gap)`` merges with every session it overlaps or touches (a sweep
  over the windows sorted by start). A merge registers the result's firing timer (when its
  end has not passed) and deletes the *merged windows'* firing and cleanup timers, which are
  theirs alone (their namespace), and a timer of a window merged away does nothing.

The micro-batch mapping is sparkstate's: the watermark of batch ``i`` is derived from batches
``< i``, it advances (firing timers) before the batch's elements, and the end of the input is
Flink's final ``Long.MAX_VALUE`` watermark.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MIN_WATERMARK = -(2**63)
MAX_WATERMARK = 2**63 - 1

Window = tuple[int, int]  # [start, end)


def batch_watermarks(batches: list[list[int]], out_of_orderness: int, from_epoch: bool = True) -> list[int]:
    """The watermark each batch sees: Flink's bounded out-of-orderness (largest time so far -
    out_of_orderness - 1 ms) over the batches before it.

    ``from_epoch``: sparkstate's documented difference (Spark's watermark starts at the epoch
    and cannot go below it): no watermark until that value is positive.
    """
    out, top, wm = [], None, MIN_WATERMARK
    for times in batches:
        out.append(wm)
        if times:
            top = max(times) if top is None else max(top, *times)
            candidate = top - out_of_orderness - 1
            if candidate > 0 or not from_epoch:
                wm = max(wm, candidate)
    return out


# --------------------------------------------------------------------------- timer service


class TimerQueue:
    """Flink's event-time timer queue: unique (key, namespace, timestamp) entries, fired in
    timestamp order by :meth:`advance` (ties by key and namespace, for a stable order)."""

    def __init__(self) -> None:
        self.timers: set[tuple[int, Any, Any]] = set()
        self.watermark = MIN_WATERMARK

    def register(self, ts: int, key: Any, namespace: Any = None) -> None:
        self.timers.add((ts, key, namespace))

    def delete(self, ts: int, key: Any, namespace: Any = None) -> None:
        self.timers.discard((ts, key, namespace))

    def advance(self, watermark: int, fire: Callable[[int, Any, Any], None]) -> None:
        """Move the watermark; fire due timers, also those registered while firing."""
        if watermark <= self.watermark:
            return  # Flink forwards only a watermark that is larger than the last
        self.watermark = watermark
        while True:
            due = [t for t in self.timers if t[0] <= watermark]
            if not due:
                return
            first = min(due, key=lambda t: (t[0], repr(t[1]), repr(t[2])))
            self.timers.discard(first)
            fire(*first)


# --------------------------------------------------------------------------- windows


@dataclass
class WindowSpec:
    """One assigner: ``kind`` is ``tumbling``, ``sliding`` or ``session``."""

    kind: str
    size: int = 0
    slide: int = 0
    gap: int = 0
    lateness: int = 0

    def assign(self, ts: int) -> list[Window]:
        if self.kind == "session":
            return [(ts, ts + self.gap)]
        slide = self.size if self.kind == "tumbling" else self.slide
        start = ts - (ts % slide)  # Python's % is non-negative: also right before the epoch
        out = []
        while start > ts - self.size:
            out.append((start, start + self.size))
            start -= slide
        return out


@dataclass
class FlinkWindows:
    """Flink's window operator for one :class:`WindowSpec`, with count and sum contents."""

    spec: WindowSpec
    queue: TimerQueue = field(default_factory=TimerQueue)
    #: (key, window) -> the values in it
    contents: dict[tuple[Any, Window], list[float]] = field(default_factory=dict)
    #: key -> its sessions (merging windows only)
    sessions: dict[Any, set[Window]] = field(default_factory=dict)
    #: emitted rows ``(key, start, end, n, total)`` and late elements, in order
    rows: list[tuple] = field(default_factory=list)
    late: list[tuple[Any, int, float]] = field(default_factory=list)
    #: early firing at the end of each batch (Flink SQL's early fire, the batch as its delay)
    early: bool = False
    #: early firing: the (key, window) pairs an on-time element changed in this batch, in order
    changed: dict[tuple[Any, Window], None] = field(default_factory=dict)

    @property
    def watermark(self) -> int:
        return self.queue.watermark

    def _late(self, w: Window) -> bool:
        return w[1] - 1 + self.spec.lateness <= self.watermark

    def _emit(self, key: Any, w: Window) -> None:
        values = self.contents.get((key, w))
        if values:
            self.rows.append((key, w[0], w[1], len(values), float(sum(values))))

    def advance(self, watermark: int) -> None:
        self.queue.advance(watermark, self._on_timer)

    def _on_timer(self, ts: int, key: Any, w: Window) -> None:
        if self.spec.kind == "session" and w not in self.sessions.get(key, ()):
            return  # a window merged away: nothing to do
        if ts == w[1] - 1:
            self._emit(key, w)
        if ts == w[1] - 1 + self.spec.lateness:  # cleanup: state, trigger timer, the window itself
            self.contents.pop((key, w), None)
            self.queue.delete(w[1] - 1, key, w)
            if self.spec.kind == "session":
                self.sessions[key].discard(w)
                if not self.sessions[key]:
                    del self.sessions[key]

    def element(self, key: Any, ts: int, value: float) -> None:
        took = False
        for w in self.spec.assign(ts):
            if self.spec.kind == "session":
                w = self._merge_session(key, w)
            if self._late(w):
                if self.spec.kind == "session":
                    self.sessions[key].discard(w)  # retired at once
                    if not self.sessions[key]:
                        del self.sessions[key]
                continue
            took = True
            self.contents.setdefault((key, w), []).append(value)
            if w[1] - 1 <= self.watermark:
                self._emit(key, w)  # the trigger fires at once: a late firing
            else:
                self.queue.register(w[1] - 1, key, w)
                if self.early:
                    self.changed[(key, w)] = None
            self.queue.register(w[1] - 1 + self.spec.lateness, key, w)
        if not took and ts + self.spec.lateness <= self.watermark:
            self.late.append((key, ts, value))

    def _merge_session(self, key: Any, new: Window) -> Window:
        """Add ``new`` to the key's sessions; return the session it now belongs to."""
        sessions = self.sessions.setdefault(key, set())
        ordered = sorted([*sessions, new])
        groups: list[list[Window]] = []
        for w in ordered:  # the sweep: a window joins the group whose cover it overlaps or touches
            if groups and w[0] <= max(x[1] for x in groups[-1]):
                groups[-1].append(w)
            else:
                groups.append([w])
        group = next(g for g in groups if new in g)
        result = (min(w[0] for w in group), max(w[1] for w in group))
        merged = [w for w in group if w != new]
        if not merged:
            sessions.add(new)
            return new
        if merged == [result]:
            return result  # inside an existing session: no merge happens
        if result[1] - 1 > self.watermark:
            self.queue.register(result[1] - 1, key, result)
        values: list[float] = []
        for m in merged:
            self.queue.delete(m[1] - 1, key, m)
            self.queue.delete(m[1] - 1 + self.spec.lateness, key, m)
            values += self.contents.pop((key, m), [])
            sessions.discard(m)
        sessions.add(result)
        if values:
            self.contents[(key, result)] = values
        return result

    def fire_early(self) -> None:
        """The end of a batch: each changed (key, window)'s contents so far, in window order."""
        for key, w in sorted(self.changed, key=lambda kw: kw[1]):
            self._emit(key, w)
        self.changed.clear()

    def state_left(self) -> bool:
        return bool(self.contents or self.sessions)


def run_windows(
    spec: WindowSpec, batches: list[list[tuple[Any, int, float]]], out_of_orderness: int = 0, early: bool = False,
) -> tuple[list[list[tuple]], list[tuple], FlinkWindows]:
    """The rows each batch emits (the last list: the end of the input), the late elements,
    and the model after the end. ``batches`` hold ``(key, ts, value)``; ``early``: windows
    also fire at the end of each batch for the keys it changed."""
    model = FlinkWindows(spec, early=early)
    per_batch: list[list[tuple]] = []
    watermarks = batch_watermarks([[ts for _, ts, _ in b] for b in batches], out_of_orderness)
    for wm, batch in zip(watermarks, batches):
        before = len(model.rows)
        model.advance(wm)
        for key, ts, value in batch:
            model.element(key, ts, value)
        model.fire_early()
        per_batch.append(model.rows[before:])
    before = len(model.rows)
    model.advance(MAX_WATERMARK)
    per_batch.append(model.rows[before:])
    return per_batch, model.late, model


# --------------------------------------------------------------------------- timers of a keyed function


@dataclass
class TimerProgram:
    """What a keyed function does with event-time timers, as plain data both the model and a
    ``KeyedProcessFunction`` follow: each element registers ``ts + d`` for ``d`` in
    ``on_element`` (negative: behind its own time, maybe behind the watermark) and deletes
    ``ts + d`` for ``d`` in ``delete``; ``on_timer(ts)`` registers ``ts + d`` for each ``d``
    that ``chain(ts)`` gives (a due time when ``d <= 0``)."""

    on_element: tuple[int, ...]
    delete: tuple[int, ...]
    chain: Callable[[int], tuple[int, ...]]


def run_timers(program: TimerProgram, batches: list[list[tuple[Any, int]]], out_of_orderness: int = 0) -> list[list[tuple]]:
    """Flink's rules for ``program`` over ``(key, ts)`` batches: per batch (and the end), the
    rows ``("timer", key, ts)`` in firing order and ``("element", key, ts)``."""
    queue = TimerQueue()
    out: list[tuple] = []

    def fire(ts: int, key: Any, _ns: Any) -> None:
        out.append(("timer", key, ts))
        for d in program.chain(ts):
            queue.register(ts + d, key)

    per_batch = []
    watermarks = batch_watermarks([[ts for _, ts in b] for b in batches], out_of_orderness)
    for wm, batch in zip(watermarks, batches):
        before = len(out)
        queue.advance(wm, fire)
        for key, ts in batch:
            out.append(("element", key, ts))
            for d in program.on_element:
                queue.register(ts + d, key)
            for d in program.delete:
                queue.delete(ts + d, key)
        per_batch.append(out[before:])
    before = len(out)
    queue.advance(MAX_WATERMARK, fire)
    per_batch.append(out[before:])
    return per_batch
