"""Two-phase window aggregation (``engine/combine.py``): when it applies, what the packing step
sends, and that the rows and late data are those of one phase on random batches."""

from __future__ import annotations

import random
from datetime import timedelta

import pyarrow as pa
import pytest

from sparkstate import AggregateFunction, Job, ListSource, NoopSink, WatermarkStrategy, agg
from sparkstate.api.windows import (
    EventTimeSessionWindows,
    ProcessWindowFunction,
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
)
from sparkstate.engine.combine import combine_blockers, combiner_for, read_partials
from sparkstate.engine.events import Packer, unpack_events
from sparkstate.errors import JobDefinitionError, ProcessFunctionError
from sparkstate.runtime.streaming.planner import explain

SCHEMA = "ts bigint, k string, v bigint"
WATERMARK = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(milliseconds=300)).with_timestamp_column("ts")


class Counts(AggregateFunction):
    """Counts per value: a dict, merged by adding (order-free)."""

    def create_accumulator(self):
        return {}

    def add(self, event, acc):
        acc[event["v"]] = acc.get(event["v"], 0) + 1
        return acc

    def merge(self, a, b):
        out = dict(a)
        for v, n in b.items():
            out[v] = out.get(v, 0) + n
        return out

    def get_result(self, acc):
        return {"counts": ",".join(f"{v}:{n}" for v, n in sorted(acc.items()))}


class NoMerge(AggregateFunction):
    def create_accumulator(self):
        return 0

    def add(self, event, acc):
        return acc + 1

    def get_result(self, acc):
        return {"n": acc}


class Rows(ProcessWindowFunction):
    def process(self, key, context, elements):
        yield {"k": key, "end": context.window.end, "n": elements[0]["n"]}


def windowed(assigner=None, batches=((),), **settings):
    return (Job("combine").source(ListSource([list(b) for b in batches], SCHEMA), watermark=WATERMARK).key_by("k")
            .window(assigner or TumblingEventTimeWindows.of(timedelta(seconds=1))).with_settings(**settings))


def test_window_aggregates_that_merge_are_combined_by_default():
    assert combiner_for(windowed().aggregate(agg.count("n"), agg.sum("v")).sink(NoopSink())) is not None
    assert combiner_for(windowed().aggregate(Counts(), output_schema="k string, counts string").sink(NoopSink()))
    assert combiner_for(windowed().reduce(lambda a, b: b, output_schema=SCHEMA).sink(NoopSink()))
    sliding = windowed(SlidingEventTimeWindows.of(timedelta(seconds=2), timedelta(seconds=1)))
    assert combiner_for(sliding.aggregate(agg.count("n")).sink(NoopSink())) is not None


@pytest.mark.parametrize("make, reason", [
    (lambda: windowed(pre_aggregate=False).aggregate(agg.count("n")), "pre_aggregate=False was asked for"),
    (lambda: windowed(EventTimeSessionWindows.with_gap(timedelta(seconds=1))).aggregate(agg.count("n")),
     "its windows are event-time session"),
    (lambda: windowed(TumblingProcessingTimeWindows.of(timedelta(seconds=1))).aggregate(agg.count("n")),
     "its windows are tumbling processing-time"),
    (lambda: windowed().aggregate(NoMerge(), output_schema="k string, n bigint"), "NoMerge does not define merge"),
    (lambda: windowed().process(Rows(), output_schema="k string, end bigint, n bigint"), "process()"),
    (lambda: windowed().allowed_lateness(timedelta(seconds=1)).aggregate(agg.count("n")), "it allows lateness"),
])
def test_what_is_not_combined_says_why(make, reason):
    job = make().sink(NoopSink())
    assert combiner_for(job) is None
    assert any(reason in b for b in combine_blockers(job)), combine_blockers(job)
    assert "combine:    one phase (every event to the operator) because" in explain(job)


def test_pre_aggregate_must_be_a_bool():
    with pytest.raises(JobDefinitionError, match="pre_aggregate must be True or False, got 'yes'"):
        windowed(pre_aggregate="yes")


def test_the_packing_step_sends_a_partial_per_key_and_window_and_the_events_beside_it():
    job = windowed(SlidingEventTimeWindows.of(timedelta(seconds=2), timedelta(seconds=1))).aggregate(
        agg.count("n"), agg.sum("v", "total")).sink(NoopSink())
    packer = Packer(job.key_columns, 4, "ts", combiner=combiner_for(job))
    rows = [{"ts": t, "k": "hot" if t % 3 else f"k{t % 2}", "v": t} for t in range(0, 3_000, 100)]
    rows.append({"ts": None, "k": "hot", "v": 1})  # no event time: travels as an event
    packed = packer.pack(pa.RecordBatch.from_pylist(rows, schema=pa.schema(
        [("ts", pa.int64()), ("k", pa.string()), ("v", pa.int64())])), 0, 0)
    totals: dict = {}
    late_candidates = events = 0
    for kg in set(packed.column("kg").to_pylist()):
        blobs = [(0, 0, b) for g, b in zip(packed.column("kg").to_pylist(), packed.column("blob").to_pylist()) if g == kg]
        unpacked = unpack_events(blobs)
        events += len(unpacked)
        late_candidates += sum(t.num_rows for t in unpacked.combined)
        for _, table in unpacked.partials:
            for key, w, acc in read_partials(table, ("k",)):
                assert (key, w) not in totals  # one partial per key and window of a batch
                totals[(key, w)] = acc
    assert events == 1 and late_candidates == len(rows) - 1
    want: dict = {}
    for r in rows[:-1]:
        for start in (r["ts"] // 1000 * 1000, r["ts"] // 1000 * 1000 - 1000):
            n, s = want.get((r["k"], (start, start + 2000)), (0, 0))
            want[(r["k"], (start, start + 2000))] = (n + 1, s + r["v"])
    assert {k: tuple(v) for k, v in totals.items()} == want


def test_an_add_that_fails_in_the_packing_step_names_the_event_and_the_switch():
    class Broken(Counts):
        def add(self, event, acc):
            raise ValueError("no")

    job = windowed().aggregate(Broken(), output_schema="k string, counts string").sink(NoopSink())
    packer = Packer(job.key_columns, 4, "ts", combiner=combiner_for(job))
    batch = pa.RecordBatch.from_pylist([{"ts": 5, "k": "a", "v": 1}])
    with pytest.raises(ProcessFunctionError, match=r"Broken: adding event \{'ts': 5, 'k': 'a', 'v': 1\} to its window "
                       r"failed in the packing step \(two-phase aggregation\): ValueError: no; .*pre_aggregate=False"):
        packer.pack(batch, 0, 0)


def random_batches(seed: int) -> list[list[dict]]:
    rnd = random.Random(seed)
    batches, t = [], 0
    for _ in range(rnd.randint(2, 6)):
        batch = []
        for _ in range(rnd.randint(0, 40)):
            t += rnd.randint(0, 120)
            # mostly one hot key; some events far behind (late), some a little (out of order)
            ts = t - rnd.choice([0, 0, 0, 50, 250, 2_500])
            batch.append({"ts": ts, "k": "hot" if rnd.random() < 0.7 else rnd.choice("abc"), "v": rnd.randint(0, 3)})
        batches.append(batch)
    return batches


@pytest.mark.parametrize("seed", range(40))
def test_combining_gives_the_rows_and_late_data_of_one_phase(seed):
    rnd = random.Random(seed)
    assigner = rnd.choice([
        TumblingEventTimeWindows.of(timedelta(milliseconds=500)),
        SlidingEventTimeWindows.of(timedelta(milliseconds=1_000), timedelta(milliseconds=250)),
        SlidingEventTimeWindows.of(timedelta(milliseconds=200), timedelta(milliseconds=300)),  # gaps between windows
    ])
    batches = random_batches(seed)
    functions = [
        lambda j: j.aggregate(Counts(), output_schema="k string, counts string, window_start bigint, window_end bigint"),
        lambda j: j.aggregate(agg.count("n"), agg.sum("v", "total"), agg.max("v", "top")),
        lambda j: j.reduce(lambda a, b: {**a, "v": a["v"] + b["v"], "ts": max(a["ts"], b["ts"])},
                           output_schema=SCHEMA + ", window_start bigint, window_end bigint"),
    ]
    for make in functions:
        results = []
        for on in (True, False):
            job = make(windowed(assigner, batches, pre_aggregate=on)).sink(NoopSink())
            assert (combiner_for(job) is not None) == on
            h = job.harness()
            rows = [r for b in batches for r in h.process_batch(b)] + h.finish()
            results.append((sorted(map(repr, rows)), sorted(map(repr, h.side_outputs.get("late_data", [])))))
        assert results[0] == results[1]


def test_only_a_batchs_hot_keys_are_combined_the_rest_travel_as_events():
    job = windowed().aggregate(agg.count("n")).sink(NoopSink())
    packer = Packer(job.key_columns, 4, "ts", combiner=combiner_for(job))
    schema = pa.schema([("ts", pa.int64()), ("k", pa.string()), ("v", pa.int64())])
    spread = pa.RecordBatch.from_pylist([{"ts": i, "k": f"k{i}", "v": 1} for i in range(80)], schema=schema)
    hot = pa.RecordBatch.from_pylist([{"ts": i, "k": "hot" if i % 8 == 0 else f"k{i}", "v": 1} for i in range(80)],
                                     schema=schema)
    for batch, combined in ((spread, False), (hot, True)):
        blobs = [(0, 0, b) for b in packer.pack(batch, 0, 0).column("blob").to_pylist()]
        unpacked = [unpack_events([b]) for b in blobs]
        assert any(u.partials for u in unpacked) == combined
        assert sum(len(u) for u in unpacked) == (70 if combined else 80)  # the hot key's 10 are combined
        events = [ev["k"] for u in unpacked for ev in u]
        assert "hot" not in events and len(set(events)) == len(events)


def _last_values(job, parts: list[list[dict]]) -> dict:
    """Each key's reduced row of the window [0, 1000) when ``parts`` are one batch's source
    partitions, packed (and combined where that pays) and run through the operator."""
    from sparkstate.engine.compile import keyed_function
    from sparkstate.engine.operator import KeyedOperator

    schema = pa.schema([("ts", pa.int64()), ("k", pa.string()), ("v", pa.int64())])
    packer = Packer(job.key_columns, 1, "ts", combiner=combiner_for(job))
    rows = []
    for part, events in enumerate(parts):
        packed = packer.pack(pa.RecordBatch.from_pylist(events, schema=schema), part, 0)
        rows += [(part, 0, b) for b in packed.column("blob").to_pylist()]
    op = KeyedOperator(keyed_function(job), ["k"], "ts")
    op.open()
    store: dict = {}
    op.begin_batch(None, 0, lambda k: store.setdefault(k, {}))
    op.run_batch(unpack_events(rows), [])
    op.take_touched()
    op.begin_batch(10_000, 0, lambda k: store.setdefault(k, {}))
    return {r["k"]: r["v"] for r in op.run_batch(unpack_events([]), list(store.items()))}


def test_blobs_of_partials_merge_where_they_arrived_among_the_events():
    """One partition's batch combined, the other's not: an order-sensitive reduce (the last
    value) sees the events in one phase's order, partition by partition."""
    job = windowed().reduce(lambda a, b: b, output_schema=SCHEMA + ", window_start bigint, window_end bigint"
                            ).sink(NoopSink())
    spread = [{"ts": 10 + i, "k": "hot" if i == 0 else f"k{i}", "v": 100 + i} for i in range(10)]  # not combined
    hot = [{"ts": 20 + i, "k": "hot", "v": i} for i in range(10)]  # combined
    assert _last_values(job, [spread, hot])["hot"] == 9
    assert _last_values(job, [hot, spread])["hot"] == 100
    assert _last_values(job, [hot, spread])["k3"] == 103


def test_an_event_without_its_key_column_gets_the_operators_error_in_the_harness():
    from sparkstate.errors import KeyColumnError

    h = windowed().aggregate(agg.count("n")).sink(NoopSink()).harness()
    with pytest.raises(KeyColumnError):
        h.process_batch([{"ts": 1, "k": "a", "v": 1}, {"ts": 2, "v": 1}])
