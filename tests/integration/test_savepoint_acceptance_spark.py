"""Savepoints end to end (issue 13's acceptance): a job runs half its input, a savepoint is taken
of its last committed batch of that half, and the job restarts from it at another partition count
on the other state backend; its output then equals an uninterrupted run's, and so does its final
state (values, timers of both domains). The same for a session-window job, and for an upgraded
function (a state added, a value type changed from int to float).

Processing time would make the output depend on the wall clock, so the function uses it in two
ways whose effect is fixed: a processing-time timer far in the future that must survive (it is
in the final state, compared key by key), and one set in the past that fires at once and emits
only its key and time. The event-time side is checked against a small model of Flink's rule,
not against sparkstate: a timer fires in the first batch whose watermark has reached it, and a
key's timers fire in timestamp order.
"""

from __future__ import annotations

import pytest
from spark_helpers import FAST, same_rows

from sparkstate import (
    EventTimeSessionWindows,
    Job,
    KeyedProcessFunction,
    ListSource,
    MapStateDescriptor,
    MemorySink,
    TimeDomain,
    ValueStateDescriptor,
    WatermarkStrategy,
    agg,
)
from sparkstate.api.state import TIMERS_FIELD
from sparkstate.runtime.savepoints.take import take_savepoint
from sparkstate.savepoint.files import LocalDirectory, open_savepoint

SCHEMA = "ts bigint, k string, v bigint, kind string"
OUTPUT = "k string, what string, ts bigint, n double, wm bigint"
DELAY = 5
FAR = 4_000_000_000_000  # a processing time (year 2096) no test run reaches

# Four batches per half. Event-time timers are set at ts + 10 * v: some come due with the
# watermark the first batch after the half runs with (40 - DELAY = 35), some later, some only
# at the end of input. "ping" sets a processing-time timer in the past (it fires at once).
FIRST = [
    [{"ts": 1, "k": "a", "v": 1, "kind": "x"}, {"ts": 2, "k": "b", "v": 2, "kind": "y"}],
    [{"ts": 10, "k": "a", "v": 2, "kind": "y"}, {"ts": 12, "k": "c", "v": 1, "kind": "x"}],
    [{"ts": 20, "k": "b", "v": 1, "kind": "x"}, {"ts": 22, "k": "a", "v": 1, "kind": "ping"}],
    [{"ts": 30, "k": "c", "v": 3, "kind": "ping"}, {"ts": 40, "k": "d", "v": 1, "kind": "x"},
     {"ts": 25, "k": "b", "v": 1, "kind": "y"}],
]
SECOND = [
    [{"ts": 41, "k": "a", "v": 2, "kind": "x"}, {"ts": 45, "k": "d", "v": 2, "kind": "y"}],
    [{"ts": 60, "k": "b", "v": 3, "kind": "x"}, {"ts": 52, "k": "e", "v": 1, "kind": "ping"}],
    [{"ts": 70, "k": "c", "v": 1, "kind": "y"}, {"ts": 75, "k": "a", "v": 1, "kind": "x"}],
    [{"ts": 90, "k": "e", "v": 2, "kind": "x"}],
]
ALL = FIRST + SECOND


class Everything(KeyedProcessFunction):
    """ValueState, MapState, event-time and processing-time timers."""

    TOTAL: type = int

    def open(self, ctx):
        self.total = ctx.get_state(ValueStateDescriptor("total", self.TOTAL, default=self.TOTAL(0)))
        self.kinds = ctx.get_map_state(MapStateDescriptor("kinds", str, int))
        self.fired = ctx.get_state(ValueStateDescriptor("fired", int, default=0))

    def add(self, v):
        self.total.update(self.total.value() + v)

    def process_element(self, e, ctx):
        self.add(e["v"])
        self.kinds.put(e["kind"], (self.kinds.get(e["kind"]) or 0) + 1)
        timers = ctx.timer_service()
        timers.register_event_time_timer(e["ts"] + 10 * e["v"])
        timers.register_processing_time_timer(FAR + e["ts"])
        if e["kind"] == "ping":
            timers.register_processing_time_timer(e["ts"])
        yield {"k": ctx.get_current_key(), "what": "element", "ts": e["ts"], "n": float(self.total.value()),
               "wm": None}

    def on_timer(self, ts, ctx):
        key = ctx.get_current_key()
        if ctx.time_domain == TimeDomain.PROCESSING_TIME:
            yield {"k": key, "what": "proc", "ts": ts, "n": None, "wm": None}
            return
        self.fired.update(self.fired.value() + 1)
        # n: how many event-time timers this key fired so far (their order); wm: the watermark
        yield {"k": key, "what": "event", "ts": ts, "n": float(self.fired.value()),
               "wm": ctx.timer_service().current_watermark()}


class EverythingUpgraded(Everything):
    """The next version: ``total`` holds floats, and a new state counts events since the upgrade."""

    TOTAL = float

    def open(self, ctx):
        super().open(ctx)
        self.since = ctx.get_state(ValueStateDescriptor("since_upgrade", int, default=0))

    def add(self, v):
        assert isinstance(self.total.value(), float), "total was not migrated to float"
        self.total.update(self.total.value() + v)
        self.since.update(self.since.value() + 1)


def keyed_job(batches, sink, fn=None, end_of_input=True, backend="rocksdb", partitions=2):
    wm = WatermarkStrategy.for_bounded_out_of_orderness(DELAY).with_timestamp_column("ts")
    return (
        Job("accept-keyed").source(ListSource(batches, SCHEMA, end_of_input=end_of_input), watermark=wm).key_by("k")
        .process(fn or Everything(), output_schema=OUTPUT).sink(sink)
        .with_settings(parallelism=partitions, state_backend=backend, **FAST)
    )


def last_data_batch(result) -> int:
    """The id of the run's last batch that read events (later ones only advanced time)."""
    return max(p["batchId"] for p in result.progress if p.get("events"))


def state_of(checkpoint) -> dict:
    """Every key's final state and timers, read through a savepoint of the last batch."""
    sp = take_savepoint(str(checkpoint), target=str(checkpoint) + "-final")
    return {key: rec for _, key, rec in open_savepoint(LocalDirectory(sp["location"])).all_records()}


def flink_due_timers(first, delay) -> tuple[int, dict[str, list[int]]]:
    """Flink's rule, on the input alone: the watermark after the first half, and per key the
    event-time timers (ts + 10 * v) that it makes due and that no earlier watermark did, in the
    order they fire (timestamp order)."""
    # Flink's bounded-out-of-orderness watermark: the largest timestamp seen, less the delay, less 1
    watermark_before = max(e["ts"] for b in first[:-1] for e in b) - delay - 1
    watermark = max(e["ts"] for b in first for e in b) - delay - 1
    due: dict[str, set[int]] = {}
    for batch in first:
        for e in batch:
            t = e["ts"] + 10 * e["v"]
            if watermark_before < t <= watermark:
                due.setdefault(e["k"], set()).add(t)
    return watermark, {k: sorted(ts) for k, ts in due.items()}


@pytest.fixture(scope="module")
def keyed(spark, tmp_path_factory):
    """The uninterrupted run, and the first half with a savepoint of its last data batch."""
    work = tmp_path_factory.mktemp("accept-keyed")
    full_sink, half_sink = MemorySink(), MemorySink()
    full = keyed_job(ALL, full_sink).run(checkpoint_dir=work / "full", spark=spark)
    assert full.completed
    half = keyed_job(FIRST, half_sink, end_of_input=False).run(checkpoint_dir=work / "half", spark=spark)
    assert half.completed
    batch = last_data_batch(half)
    assert batch == len(FIRST) - 1  # one list per micro-batch: the savepoint's batch is the half's last
    sp = take_savepoint(str(work / "half"), target=str(work / "savepoint"), batch=batch, spark=spark)
    before = [r for b, rows in half_sink.batches.items() if b <= batch for r in rows]
    return {"work": work, "full": full_sink, "before": before, "savepoint": sp, "batch": batch,
            "full_state": state_of(work / "full")}


def test_the_savepoint_holds_both_timer_domains_and_the_watermark(keyed):
    sp = keyed["savepoint"]
    watermark, _ = flink_due_timers(FIRST, DELAY)
    assert sp["watermark_ms"] == watermark and sp["batch"] == len(FIRST) - 1
    records = {k: r for _, k, r in open_savepoint(LocalDirectory(sp["location"])).all_records()}
    assert sorted(records) == ["a", "b", "c", "d"]
    domains = {d for r in records.values() for d, _ in r[TIMERS_FIELD]}
    assert domains == {TimeDomain.EVENT_TIME, TimeDomain.PROCESSING_TIME}
    assert (TimeDomain.PROCESSING_TIME, FAR + 40) in records["d"][TIMERS_FIELD]
    assert records["b"]["kinds"] == {"y": 2, "x": 1} and records["b"]["total"] == 4


@pytest.mark.parametrize("partitions", [1, 2, 4])
def test_restored_on_the_other_backend_at_any_partitions_ends_like_an_uninterrupted_run(keyed, partitions, spark):
    work, sink = keyed["work"], MemorySink()
    ckpt = work / f"restored-{partitions}"
    result = keyed_job(ALL, sink, backend="hashmap", partitions=partitions).run(
        checkpoint_dir=ckpt, spark=spark, from_savepoint=keyed["savepoint"]["location"])
    assert result.completed
    same_rows(keyed["before"] + sink.rows(), keyed["full"].rows())
    # the watermark and the event-time timers come back: those the saved watermark made due fire
    # in the first restored batch, with that watermark, in Flink's order, as in the uninterrupted run
    watermark, due = flink_due_timers(FIRST, DELAY)
    assert due  # the input is built so that some are
    first = [r for r in sink.batches[min(sink.batches)] if r["what"] == "event"]
    uninterrupted = [r for r in keyed["full"].batches[keyed["batch"] + 1] if r["what"] == "event"]
    for rows in (first, uninterrupted):
        assert {r["wm"] for r in rows} == {watermark}
        assert {k: [r["ts"] for r in rows if r["k"] == k] for k in due} == due
    assert sorted(map(repr, first)) == sorted(map(repr, uninterrupted))
    if partitions == 2:  # (once: reading the state takes a Spark job)
        # the final state, timers of both domains included, is the uninterrupted run's
        assert state_of(ckpt) == keyed["full_state"]


def test_an_upgraded_function_migrates_int_to_float_and_starts_a_new_state_empty(keyed, spark):
    work, sink = keyed["work"], MemorySink()
    result = keyed_job(ALL, sink, fn=EverythingUpgraded(), partitions=3).run(
        checkpoint_dir=work / "upgraded", spark=spark, from_savepoint=keyed["savepoint"]["location"])
    assert result.completed
    assert any("'since_upgrade'" in w and "starts empty" in w for w in result.warnings), result.warnings
    assert any("'total'" in w and "migrate" in w for w in result.warnings), result.warnings
    same_rows(keyed["before"] + sink.rows(), keyed["full"].rows())
    state = state_of(work / "upgraded")
    full = keyed["full_state"]
    assert state.keys() == full.keys()
    for key, rec in state.items():
        assert type(rec["total"]) is float and rec["total"] == full[key]["total"]
        assert rec["since_upgrade"] == sum(1 for b in SECOND for e in b if e["k"] == key) or (
            "since_upgrade" not in rec and not any(e["k"] == key for b in SECOND for e in b))
        assert {n: v for n, v in rec.items() if n not in ("total", "since_upgrade")} == {
            n: v for n, v in full[key].items() if n != "total"}


# --------------------------------------------------------------------------- session windows

MIN = 60_000
GAP = 10 * MIN
WIN_SCHEMA = "ts bigint, k string, v double"
# sessions open across the savepoint (u, w), one that an event after it merges with one before
# (u at 16 and 25 minutes), and late events before it (y) and after it (x, late for the saved watermark)
WIN_FIRST = [
    [{"ts": 0, "k": "u", "v": 1.0}, {"ts": 25 * MIN, "k": "u", "v": 2.0}, {"ts": 3 * MIN, "k": "w", "v": 1.0}],
    [{"ts": 30 * MIN, "k": "w", "v": 4.0}, {"ts": 2 * MIN, "k": "y", "v": 5.0}],  # y: late
]
WIN_SECOND = [
    [{"ts": 16 * MIN, "k": "u", "v": 1.0}, {"ts": MIN, "k": "x", "v": 9.0}, {"ts": 35 * MIN, "k": "w", "v": 1.0}],
    [{"ts": 90 * MIN, "k": "u", "v": 1.0}],
]


def session_job(batches, sink, late, end_of_input=True, backend="hashmap", partitions=2):
    wm = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_column("ts")
    return (
        Job("accept-sessions").source(ListSource(batches, WIN_SCHEMA, end_of_input=end_of_input), watermark=wm)
        .key_by("k").window(EventTimeSessionWindows.with_gap(GAP)).side_output_late_data(late)
        .aggregate(agg.count("n"), agg.sum("v", "total")).sink(sink)
        .with_settings(parallelism=partitions, state_backend=backend, window_path="python", **FAST)
    )


def test_session_windows_and_the_watermark_come_back(spark, tmp_path):
    full, full_late = MemorySink(), MemorySink()
    assert session_job(WIN_FIRST + WIN_SECOND, full, full_late).run(checkpoint_dir=tmp_path / "full", spark=spark).completed
    half, half_late = MemorySink(), MemorySink()
    r = session_job(WIN_FIRST, half, half_late, end_of_input=False).run(checkpoint_dir=tmp_path / "half", spark=spark)
    batch = last_data_batch(r)
    sp = take_savepoint(str(tmp_path / "half"), target=str(tmp_path / "sp"), batch=batch, spark=spark)
    assert sp["keys"] > 0 and sp["watermark_ms"] == 30 * MIN - 1
    out, late = MemorySink(), MemorySink()
    job = session_job(WIN_FIRST + WIN_SECOND, out, late, backend="rocksdb", partitions=1)
    assert job.run(checkpoint_dir=tmp_path / "restored", spark=spark, from_savepoint=sp["location"]).completed
    before = [row for b, rows in half.batches.items() if b <= batch for row in rows]
    same_rows(before + out.rows(), full.rows())
    # x at minute 1 is late for the saved watermark (minute 30) as it was uninterrupted
    assert half_late.rows() == [{"ts": 2 * MIN, "k": "y", "v": 5.0}]
    assert late.rows() == [{"ts": MIN, "k": "x", "v": 9.0}]
    assert half_late.rows() + late.rows() == full_late.rows()
    # u's session of minutes 16 to 35 merged an event after the savepoint with one before it
    assert sorted((r["k"], r["n"], r["total"]) for r in full.rows()) == [
        ("u", 1, 1.0), ("u", 1, 1.0), ("u", 2, 3.0), ("w", 1, 1.0), ("w", 2, 5.0)]
