"""Two-phase window aggregation on Spark (``engine/combine.py``): the packing step combines,
the keyed operator merges, and the rows, late data and restarts are those of one phase."""

from __future__ import annotations

from datetime import timedelta

import pytest
from spark_helpers import FAST, harness_like_spark, same_rows

from sparkstate import AggregateFunction, Job, ListSource, MemorySink, WatermarkStrategy
from sparkstate.api.windows import SlidingEventTimeWindows
from sparkstate.jobs import JOBS
from sparkstate.runtime.streaming.planner import explain

MAX_BATCH = 8_000


@pytest.mark.parametrize("query, rate", [(5, 2_000), (15, 0.4)], ids=["q5", "q15"])
@pytest.mark.parametrize("pre_aggregate", [True, False])
def test_nexmark_on_spark_gives_the_harness_rows_with_and_without_combining(query, rate, pre_aggregate, spark, checkpoint):
    """One hot key (the whole stream): q5's five sliding windows per bid with a dict
    accumulator; q15's one-day windows (two days at 0.4 events/s), firing early every
    micro-batch, with sighting maps."""
    job = JOBS[f"nexmark-q{query}"].job(max_batch=MAX_BATCH, events=40_000, events_per_second=rate)
    job = job.with_settings(pre_aggregate=pre_aggregate)
    sink = MemorySink()
    result = job.sink(sink).with_settings(**FAST).run(checkpoint_dir=checkpoint, spark=spark)
    assert result.completed
    expected = harness_like_spark(job.with_settings(pre_aggregate=False), MAX_BATCH)
    if query == 5:
        assert len(expected) >= 10
        same_rows(sink.rows(), expected)
        return
    # q15 fires early: its rows are a day's figures so far at the end of each micro-batch,
    # whose bounds Spark chooses; the last row of each day is the final one
    def last(rows):
        return {r["day"]: r for r in rows}

    assert len(last(expected)) == 2 and len(sink.rows()) > 2
    assert last(sink.rows()) == last(expected)


class TotalAndDistinct(AggregateFunction):
    """A sum and a set of items: ``merge`` adds and unions (an order-free aggregate)."""

    def create_accumulator(self):
        return [0, set()]

    def add(self, event, acc):
        acc[0] += event["v"]
        acc[1].add(event["item"])
        return acc

    def merge(self, a, b):
        return [a[0] + b[0], a[1] | b[1]]

    def get_result(self, acc):
        return {"total": acc[0], "items": len(acc[1])}


OUTPUT = "k string, window_start bigint, window_end bigint, total bigint, items bigint"


@pytest.mark.parametrize("early", [False, True], ids=["on-time", "early-firing"])
def test_combined_windows_keep_late_data_and_state_across_a_restart(early, spark, checkpoint):
    # two keys, a hot one; sliding windows; late events behind the watermark; a restart after
    # the second batch, with partials of open windows in the checkpointed state; early
    # firing: each batch also emits the windows it changed, before and after the restart
    def hot(start, stop, step, v, items):
        return [{"ts": t, "k": "hot", "v": v, "item": t % items} for t in range(start, stop, step)]

    batches = [
        hot(0, 90_000, 500, 1, 7) + [{"ts": 1_000, "k": "b", "v": 5, "item": 1}],
        hot(90_000, 150_000, 700, 2, 5) + [{"ts": 85_000, "k": "b", "v": 9, "item": 2}],
        [{"ts": 10_000, "k": "hot", "v": 100, "item": 99}, {"ts": 149_000, "k": "b", "v": 1, "item": 3}],  # 10_000: late
        hot(150_000, 200_000, 900, 3, 3),
    ]
    watermark = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(seconds=5)).with_timestamp_column("ts")

    def job_of(sink, late):
        job = (Job("two-phase").source(ListSource(batches, "ts bigint, k string, v bigint, item bigint"), watermark=watermark)
               .key_by("k").window(SlidingEventTimeWindows.of(timedelta(minutes=1), timedelta(seconds=20))))
        return ((job.early_fire() if early else job)
                .aggregate(TotalAndDistinct(), output_schema=OUTPUT)
                .side_output_late_data(late).sink(sink).with_settings(state_backend="rocksdb", **FAST))

    assert "combine:    two-phase" in explain(job_of(MemorySink(), MemorySink()))
    first, late1 = MemorySink(), MemorySink()
    job_of(first, late1).run(checkpoint_dir=checkpoint, spark=spark, until=lambda r: r.batches >= 2)
    second, late2 = MemorySink(), MemorySink()
    job_of(second, late2).run(checkpoint_dir=checkpoint, spark=spark)
    h = job_of(MemorySink(), MemorySink()).with_settings(pre_aggregate=False).harness()
    expected = [r for b in batches for r in h.process_batch(b)] + h.finish()
    same_rows(first.rows() + second.rows(), expected)
    late = late1.rows() + late2.rows()
    assert late == h.side_outputs["late_data"] == [{"ts": 10_000, "k": "hot", "v": 100, "item": 99}]
    assert any(r["k"] == "hot" and r["items"] == 7 for r in expected)
    if early:  # the first batch's open windows were emitted before any could fire
        assert any(r["window_end"] > 90_000 for r in first.rows())
