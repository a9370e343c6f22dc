"""Two-phase window aggregation: combining a batch's events per key and window before the shuffle.

A hot key (one auction with half the bids, one group for a global per-window maximum) sends
its events to one key group, so one task does all of its window work while the packing step,
which runs once per source partition, has the machine's other cores. Flink's answer is
*local/global aggregation* (its SQL tuning guide's ``table.optimizer.agg-phase-strategy``):
each task combines its input per key into an accumulator before the shuffle, and the
keyed task merges accumulators. :class:`LocalCombiner` is that first phase in sparkstate's
packing step (``engine/events.py``): per packed batch it folds the events of each
``(key, window)`` into one accumulator with the window function's ``add`` and sends that
*partial* instead of the events; the window operator (``engine/windows.py``) merges it into the
window's contents with ``merge``.

Invariants:

* only a batch's hot keys are combined (:meth:`LocalCombiner.hot`: a key with an eighth of
  the batch's events or more); the events of its other keys, and every batch without a hot
  key, travel as events, as in one phase. A key's events of one packed batch are all in its
  partial or all events, so each key sees its events in one phase's order;
* a partial holds the events of one key and one window, from one packed batch of one
  source partition, added in their arrival order; a blob of partials merges where its batch
  arrived among the key group's events (``(part, seq)`` order), so a window's contents are
  ``merge(contents, partial)`` where they were ``add(e1, ... add(en, contents))``. The
  window function's ``merge`` must make those the same, as Flink asks of
  ``AggregateFunction.merge`` (sum, count, min, max, sets, top-N);
* a partial's time (the packed row's ``ts``) is its events' latest, so the watermark is the
  one the events give;
* only what would behave the same is combined (:func:`combine_blockers`): event-time
  tumbling or sliding windows (session windows merge per key; processing-time windows are
  assigned when they run), ``aggregate`` with a ``merge`` of its own, built-in aggregates or
  ``reduce`` (a reduce function is its own merge), no allowed lateness (a late firing fires
  once per element), event time from a column. A window that is late when its partial
  arrives drops it whole, as each of its events would be dropped;
* the events themselves travel beside their partials as Arrow (*combined events*), which the
  operator does not read unless the batch's earliest event is behind the watermark: then it
  sends the late ones (every window of theirs late) to the late-data side output, as Flink's
  ``WindowOperator`` does (with no lateness, an element is late exactly when its windows are);
* events without a readable event time are not combined: they travel as events and become
  dead letters at the operator, as before.

The accumulators travel pickled (cloudpickle: a user's accumulator class may live in
``__main__``) from the packing step to the operator of the same query, inside Spark's
shuffle; they are never read from a checkpoint, a savepoint or an input file.

``JobSettings.pre_aggregate`` (default on) turns it off; ``sparkstate explain`` says whether a
job combines and, if not, why.
"""

from __future__ import annotations

import pickle
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import cloudpickle
import numpy as np
import pyarrow as pa

from sparkstate.api.agg import BuiltinAggregates
from sparkstate.api.functions import TimeDomain
from sparkstate.api.state import AggregateFunction
from sparkstate.api.windows import WindowAssigner, WindowKind, solo_range
from sparkstate.errors import ProcessFunctionError

#: the partial's columns beside the key columns: its window and its pickled accumulator
PARTIAL_START = "__sparkstate_window_start"
PARTIAL_END = "__sparkstate_window_end"
PARTIAL_ACC = "__sparkstate_accumulator"
#: the schema metadata that marks a packed blob as partials (not events), and as the events
#: that partials already hold (for late data only)
PARTIALS_METADATA = {b"sparkstate": b"partials"}
COMBINED_METADATA = {b"sparkstate": b"combined"}


def combine_blockers(job: Any) -> list[str]:
    """Why ``job``'s window aggregation cannot be combined before the shuffle (empty: it can)."""
    if job.window_assigner is None or job.window_kind is None:
        return ["it is not a window job"]
    out = []
    if not job.settings.pre_aggregate:
        out.append("pre_aggregate=False was asked for")
    assigner: WindowAssigner = job.window_assigner
    if assigner.time != TimeDomain.EVENT_TIME or assigner.merging:
        out.append(f"its windows are {assigner.describe()} (combining: tumbling or sliding event-time windows)")
    if job.window_kind == WindowKind.PROCESS:
        out.append("its window function is process() over all elements (combining: aggregate or reduce)")
    elif job.window_kind == WindowKind.AGGREGATE and not _merges(job.window_function):
        out.append(f"{type(job.window_function).__name__} does not define merge (combining merges accumulators)")
    if job.lateness_ms:
        out.append("it allows lateness (a late firing fires once per element)")
    if job.connected is not None:
        out.append("it has a second input")
    if job.watermark is not None and job.watermark.timestamp_assigner is not None:
        out.append("its event time comes from a Python function (combining reads a timestamp column)")
    return out


def _merges(function: Any) -> bool:
    if isinstance(function, BuiltinAggregates):
        return True
    return isinstance(function, AggregateFunction) and type(function).merge is not AggregateFunction.merge


def combiner_for(job: Any) -> LocalCombiner | None:
    """The packing step's combiner for ``job``, or None when it does not combine."""
    if combine_blockers(job):
        return None
    return LocalCombiner(job.window_assigner, job.window_kind, job.window_function, tuple(job.key_columns))


#: a batch is combined when one key holds at least this share of its events
HOT_KEY_SHARE = 1 / 8


class LocalCombiner:
    """Combines a batch's events per ``(key, window)`` into partials (see the module docs)."""

    @staticmethod
    def hot(counts: np.ndarray, events: int) -> np.ndarray:
        """Which keys of a batch of ``events`` to combine, by their counts of events: those
        with a large share of them (an array of bools).

        Combining costs the packing step about what it saves the operator; it pays where the
        operator's work is skewed: a key whose share of the events is above a partition's
        share makes its partition the batch's straggler, and combining spreads that work over
        the source's partitions. A share of 1/8 is a hot key for up to 8 partitions. The other
        keys travel as events, as in one phase (measured: combining 100,000 merchants cost
        the packing step 10 times more than it saved; combining q16's thousands of cold
        channels beside its four hot ones made it 20% slower than one phase).
        """
        return counts >= events * HOT_KEY_SHARE

    def hot_keys(self, keys: Sequence[Any]) -> set[Any]:
        """:meth:`hot` for a batch's keys (the harness's events): the keys to combine."""
        counted = Counter(keys)
        threshold = len(keys) * HOT_KEY_SHARE
        return {k for k, n in counted.items() if n >= threshold}

    def __init__(self, assigner: WindowAssigner, kind: WindowKind, function: Any, key_columns: tuple[str, ...]) -> None:
        self.assigner = assigner
        self.kind = kind
        self.function = function
        self.key_columns = key_columns

    def _steps(self) -> tuple[Callable[[], Any], Callable[[Any, Any], Any]]:
        """The window function's ``create`` and ``add``, as the window operator runs them."""
        fn = self.function
        if self.kind == WindowKind.REDUCE:
            return _nothing, lambda ev, acc: dict(ev) if acc is None else fn(acc, ev)
        return fn.create_accumulator, fn.add

    def fold(self, keys: Sequence[Any], times: Sequence[int], values: Sequence[Any],
             create: Callable[[], Any], add: Callable[[Any, Any], Any], event_at: Callable[[int], Any],
             ) -> list[tuple[Any, tuple[int, int], list[Any]]]:
        """``(key, window, [accumulator, latest time, index of its first event])`` of each
        key and window the events are in."""
        bounds = self.assigner.bounds
        solo_lo, solo_hi = solo_range(self.assigner)
        windows: dict[tuple[int, int], dict[Any, list[Any]]] = {}
        # as the window operator does: the next element in [lo, hi), where every time has the
        # last single window alone, belongs to it, with no window computation
        lo = hi = 0
        cur: dict[Any, list[Any]] = {}
        i = -1
        try:
            for i, (key, t, v) in enumerate(zip(keys, times, values)):
                if lo <= t < hi:
                    g = cur.get(key)
                    if g is None:
                        cur[key] = [add(v, create()), t, i]
                    else:
                        g[0] = add(v, g[0])
                        if t > g[1]:
                            g[1] = t
                    continue
                ws = bounds(t)
                for w in ws:
                    contents = windows.get(w)
                    if contents is None:
                        contents = windows[w] = {}
                    g = contents.get(key)
                    if g is None:
                        contents[key] = [add(v, create()), t, i]
                    else:
                        g[0] = add(v, g[0])
                        if t > g[1]:
                            g[1] = t
                    if len(ws) == 1:
                        lo, hi, cur = w[0] + solo_lo, w[0] + solo_hi, contents
        except Exception as exc:
            raise ProcessFunctionError(
                f"{type(self.function).__name__}: adding event {event_at(i)!r} to its window failed in the packing "
                f"step (two-phase aggregation): {type(exc).__name__}: {exc}; fix the function, or set "
                "pre_aggregate=False to see the failure in the keyed operator instead"
            ) from exc
        return [(key, w, g) for w, contents in windows.items() for key, g in contents.items()]

    def split(
        self, body: pa.RecordBatch, times: np.ndarray, rows: list[dict[str, Any]] | None = None,
    ) -> tuple[pa.RecordBatch, np.ndarray]:
        """The packing step's half: ``body``'s events (the hot keys' events with an event time,
        ``times``) as partials, a batch with the key columns, the window and the pickled
        accumulator, and each partial's latest time. ``rows``: the events as dicts, when the
        packing step has made them already."""
        create, add = self._steps()
        fn = self.function
        values: Sequence[Any]
        if isinstance(fn, BuiltinAggregates):  # tuples of just the input columns, as the operator reads them
            columns = [body.column(c).to_pylist() for c in fn.input_columns]
            values, add = (list(zip(*columns)) if columns else [()] * body.num_rows), fn.tuple_add()
        else:
            values = rows if rows is not None else body.to_pylist()
        cols = self.key_columns
        keycols = [body.column(c).to_pylist() for c in cols]
        keys = keycols[0] if len(cols) == 1 else list(zip(*keycols))
        groups = self.fold(keys, times.tolist(), values, create, add, lambda i: body.slice(i, 1).to_pylist()[0])
        firsts = pa.array([g[2] for _, _, g in groups], pa.int64())
        partials = pa.RecordBatch.from_arrays(
            [body.column(c).take(firsts) for c in cols] + [
                pa.array([w[0] for _, w, _ in groups], pa.int64()),
                pa.array([w[1] for _, w, _ in groups], pa.int64()),
                pa.array([_dumps(g[0]) for _, _, g in groups], pa.binary()),
            ],
            names=[*cols, PARTIAL_START, PARTIAL_END, PARTIAL_ACC],
        )
        latest = np.fromiter((g[1] for _, _, g in groups), dtype=np.int64, count=len(groups))
        return partials, latest

    def combine_events(
        self, events: list[Any], key_of: Callable[[Any], Any], time_of: Callable[[Any], Any], hot: set[Any],
    ) -> tuple[list[Any], list[Partial], list[Any]]:
        """The harness's half, over event dicts: the events of keys not in ``hot`` and those
        without an event time, the partials of the others (each accumulator copied by pickle,
        as the shuffle copies it), and those others (combined events, for late data)."""
        timed, rest, times = [], [], []
        for ev in events:
            t = time_of(ev) if isinstance(ev, dict) else None
            if type(t) is int and key_of(ev) in hot:
                timed.append(ev)
                times.append(t)
            else:
                rest.append(ev)
        create, add = self._steps()
        groups = self.fold([key_of(ev) for ev in timed], times, timed, create, add, timed.__getitem__)
        partials = [(key, w, pickle.loads(_dumps(g[0]))) for key, w, g in groups]  # noqa: S301
        return rest, partials, timed


#: one partial as the window operator merges it: ``(key, (start, end), accumulator)``
Partial = tuple[Any, tuple[int, int], Any]


def read_partials(table: pa.Table, key_columns: Sequence[str]) -> list[Partial]:
    """A packed blob of partials as ``(key, window, accumulator)`` triples. The accumulators
    are unpickled: this query's own packing step pickled them (see the module docs)."""
    keycols = [table.column(c).to_pylist() for c in key_columns]
    keys = keycols[0] if len(key_columns) == 1 else list(zip(*keycols))
    starts, ends = table.column(PARTIAL_START).to_pylist(), table.column(PARTIAL_END).to_pylist()
    accs = table.column(PARTIAL_ACC).to_pylist()
    return [(k, (s, e), pickle.loads(a)) for k, s, e, a in zip(keys, starts, ends, accs)]  # noqa: S301


def _dumps(acc: Any) -> bytes:
    """An accumulator pickled: by pickle, or cloudpickle for what pickle cannot reach (a class
    that came from the driver's ``__main__``); cloudpickle is several times slower."""
    try:
        return pickle.dumps(acc, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, AttributeError, TypeError):
        data: bytes = cloudpickle.dumps(acc)
        return data


def _nothing() -> None:
    return None
