"""Savepoints in the harness: an uninterrupted harness gives exactly the rows of a harness
stopped at a random batch, saved, and restored into a new harness (random event streams,
seeded), for a keyed function with timers of both domains and for window jobs; the savepoint
lays records out in the key groups Spark routes their keys to, and Flink's restore rules apply."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from sparkstate import (
    EventTimeSessionWindows,
    Job,
    KeyedProcessFunction,
    ListSource,
    MapStateDescriptor,
    MemorySink,
    SlidingEventTimeWindows,
    StateMigrationError,
    TimeDomain,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
    ValueStateDescriptor,
    WatermarkStrategy,
    agg,
)
from sparkstate.engine.events import Packer
from sparkstate.savepoint.files import LocalDirectory, open_savepoint
from sparkstate.testing import KeyedHarness

SCHEMA = "k string, ts bigint, v double"
BASE = 1_000_000  # event times well after the epoch: Spark's watermark starts at 0
KEYS = [f"k{i}" for i in range(12)]


class Mixed(KeyedProcessFunction):
    """ValueState and MapState, an event-time timer per event and a processing-time timer
    every other event; every timer emits the key's figures."""

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", int, default=0))
        self.buckets = ctx.get_map_state(MapStateDescriptor("buckets", int, float))

    def process_element(self, event, ctx):
        n = self.count.value() + 1
        self.count.update(n)
        b = event["ts"] % 3
        self.buckets.put(b, (self.buckets.get(b) or 0.0) + event["v"])
        timers = ctx.timer_service()
        timers.register_event_time_timer(event["ts"] + 1_500)
        if n % 2 == 0:
            timers.register_processing_time_timer(timers.current_processing_time() + 700)
        yield (ctx.get_current_key(), "event", n, round(sum(self.buckets.values()), 6))

    def on_timer(self, timestamp, ctx):
        kind = "event-timer" if ctx.time_domain() == TimeDomain.EVENT_TIME else "processing-timer"
        yield (ctx.get_current_key(), kind, timestamp, self.count.value())


def keyed_job(key_groups: int = 8) -> Job:
    wm = WatermarkStrategy.for_bounded_out_of_orderness(500).with_timestamp_column("ts")
    return (
        Job("mixed").source(ListSource([], SCHEMA), watermark=wm).key_by("k")
        .process(Mixed(), output_schema="k string, what string, a bigint, b double")
        .sink(MemorySink()).with_settings(key_groups=key_groups, max_event_time_ahead=None)
    )


def window_job(assigner, lateness: int = 0) -> Job:
    wm = WatermarkStrategy.for_bounded_out_of_orderness(300).with_timestamp_column("ts")
    job = Job("windows").source(ListSource([], SCHEMA), watermark=wm).key_by("k").window(assigner)
    if lateness:
        job = job.allowed_lateness(lateness)
    return (
        job.side_output_late_data(MemorySink()).aggregate(agg.count("n"), agg.sum("v", "total"))
        .sink(MemorySink()).with_settings(key_groups=8, max_event_time_ahead=None)
    )


def random_batches(rng: random.Random, batches: int) -> list[list[dict]]:
    out, top = [], BASE
    for _ in range(batches):
        top += rng.randint(0, 800)
        # out of order by up to 1.2 s: some events are late for a 300-500 ms bound
        out.append([{"k": rng.choice(KEYS), "ts": top - rng.randint(0, 1_200), "v": float(rng.randint(1, 9))}
                    for _ in range(rng.randint(0, 12))])
    return out


def run(h: KeyedHarness, batches: list[list[dict]], first: int) -> list[list]:
    """Each batch at processing time 1,000 ms after the last (batch ``i`` at ``(first + i) * 1000``)."""
    return [sorted(map(repr, h.process_batch(b, processing_time=(first + i) * 1_000))) for i, b in enumerate(batches)]


def check_equivalent(job: Job, batches: list[list[dict]], split: int, tmp_path) -> None:
    whole = job.harness()
    expected = run(whole, batches, 1)
    expected.append(sorted(map(repr, whole.finish())))

    first = job.harness()
    got = run(first, batches[:split], 1)
    first.savepoint(tmp_path / "sp", source_offset=split)
    restored = job.harness(from_savepoint=tmp_path / "sp")
    assert restored.restore_notes == []
    got += run(restored, batches[split:], split + 1)
    got.append(sorted(map(repr, restored.finish())))
    assert got == expected
    late = [*first.side_output("late_data"), *restored.side_output("late_data")]
    assert late == whole.side_output("late_data")
    assert restored.records == whole.records


SEEDS = range(6)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_keyed_function_with_timers_runs_the_same_through_a_savepoint(seed, tmp_path):
    rng = random.Random(seed)
    batches = random_batches(rng, 12)
    check_equivalent(keyed_job(), batches, rng.randint(0, len(batches)), tmp_path)


WINDOWS = {
    "tumbling, lateness": (TumblingEventTimeWindows.of(timedelta(seconds=1)), 600),
    "sliding": (SlidingEventTimeWindows.of(timedelta(seconds=2), timedelta(milliseconds=500)), 0),
    "session, lateness": (EventTimeSessionWindows.with_gap(timedelta(milliseconds=700)), 400),
    "processing time": (TumblingProcessingTimeWindows.of(timedelta(seconds=2)), 0),
}


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", sorted(WINDOWS))
def test_windows_run_the_same_through_a_savepoint(kind, seed, tmp_path):
    rng = random.Random(seed)
    batches = random_batches(rng, 12)
    assigner, lateness = WINDOWS[kind]
    check_equivalent(window_job(assigner, lateness), batches, rng.randint(1, len(batches) - 1), tmp_path)


def test_a_harness_savepoint_puts_each_key_in_the_group_spark_routes_it_to(tmp_path):
    """Spark routes an event to a key group by the packer's hashes of its key column: each
    record (and each key of a window pane) must be in that group's file."""
    import pyarrow as pa

    batches = random_batches(random.Random(7), 6)
    for job in (keyed_job(key_groups=16), window_job(TumblingEventTimeWindows.of(timedelta(seconds=1)))):
        h = job.harness()
        for b in batches:
            h.process_batch(b)
        meta = h.savepoint(tmp_path / job.name)
        groups = meta["key_groups"]
        packer = Packer(["k"], groups, "ts")
        schema = pa.schema([("k", pa.string()), ("ts", pa.int64()), ("v", pa.float64())])
        rows = packer.pack(pa.RecordBatch.from_pylist([{"k": k, "ts": BASE, "v": 1.0} for k in KEYS], schema=schema), 0, 0)
        routed = {}
        for kg, blob in zip(rows.column("kg").to_pylist(), rows.column("blob").to_pylist()):
            for k in pa.ipc.open_stream(blob).read_all().column("k").to_pylist():
                routed[k] = kg
        sp = open_savepoint(LocalDirectory(tmp_path / job.name))
        assert len(sp.key_groups) > 1
        for kg, key, rec in sp.all_records():
            user_keys = list(rec["windows"]) if job.name == "windows" else [key]
            assert user_keys and all(routed[k] == kg for k in user_keys), (kg, key)


def test_a_harness_restore_follows_flinks_rules(tmp_path):
    h = keyed_job().harness()
    h.process_batch([{"k": "a", "ts": BASE, "v": 1.0}], processing_time=1_000)
    h.savepoint(tmp_path / "sp")

    class Fewer(Mixed):
        def open(self, ctx):
            self.count = ctx.get_state(ValueStateDescriptor("count", int, default=0))
            self.buckets = {}
            self.seen = ctx.get_state(ValueStateDescriptor("seen", bool, default=False))

    def harness(fn, **kwargs):
        job = keyed_job()
        return KeyedHarness(fn, "k", watermark_strategy=job.watermark, job_name="mixed", **kwargs)

    with pytest.raises(StateMigrationError, match="no longer declares: 'buckets'"):
        harness(Fewer(), from_savepoint=tmp_path / "sp", key_groups=8)
    with pytest.raises(StateMigrationError, match="it has 8 key groups and the job 16"):
        harness(Mixed(), from_savepoint=tmp_path / "sp", key_groups=16)
    restored = harness(Fewer(), from_savepoint=tmp_path / "sp", key_groups=8, allow_non_restored_state=True)
    assert restored.state("a") == {"count": 1}
    assert any("'seen'" in n and "starts empty" in n for n in restored.restore_notes)
    assert restored.timers("a") == [(TimeDomain.EVENT_TIME, BASE + 1_500)]
    assert restored.watermark == h.watermark and restored.processing_time == 1_000
    # the class method reads the same
    same = KeyedHarness.from_savepoint(tmp_path / "sp", Mixed(), "k", watermark_strategy=keyed_job().watermark)
    assert same.records == h.records and same.key_groups == 8
