"""The stream-join seed jobs on Spark: enrich (a KeyedCoProcessFunction) and click-purchase-join
(an interval join) give the harness's rows, across a stop and a resume from the checkpoint."""

from __future__ import annotations

from spark_helpers import FAST, same_rows

from sparkstate import MemorySink
from sparkstate.jobs import JOBS


def harness_in_spark_batches(job) -> list[dict]:
    """The job on the harness in the micro-batches Spark reads: ``max_batch`` offsets of each
    generator per batch (the settings below make both inputs end in the same batch)."""
    g1, g2 = job.source_spec, job.connected.source
    assert g1.events // g1.max_batch == g2.events // g2.max_batch, "both inputs end in one batch"
    h = job.harness()
    out: list[dict] = []
    for b in range(g1.events // g1.max_batch):
        out += h.process_batch(g1.events_as_dicts(b * g1.max_batch, (b + 1) * g1.max_batch),
                               second=g2.events_as_dicts(b * g2.max_batch, (b + 1) * g2.max_batch))
    return out + h.finish()


def test_enrich_on_spark_resumes_from_its_checkpoint_and_matches_the_harness(spark, checkpoint):
    # 300 first profiles over 2 batches: payments wait for them, and some give up after 0.2 s
    job = JOBS["enrich"].job(events=3_000, max_batch=1_000, merchants=300, profile_updates=1, max_wait_s=0.2,
                             max_out_of_orderness_ms=500)
    sink = MemorySink()
    job = job.sink(sink).with_settings(key_groups=8, **FAST)
    first = job.run(checkpoint_dir=checkpoint, spark=spark, until=lambda r: r.batches >= 1)
    # the run stops after the batch during which it saw one done: a quick pipeline may finish a second
    assert first.events in (1_000, 2_000)
    second = job.run(checkpoint_dir=checkpoint, spark=spark)
    assert second.completed and second.events == 3_000 - first.events
    expected = harness_in_spark_batches(job)
    assert len(expected) == 3_000 and any(r["profile_revision"] is None for r in expected)
    same_rows(sink.rows(), expected)


def test_interval_join_on_spark_matches_the_harness(spark, checkpoint):
    job = JOBS["click-purchase-join"].job(events=3_000, max_batch=1_000, active_users=30, events_per_second=5)
    sink = MemorySink()
    result = job.sink(sink).with_settings(key_groups=8, **FAST).run(checkpoint_dir=checkpoint, spark=spark)
    assert result.completed and result.events == 3_000
    expected = harness_in_spark_batches(job)
    assert len(expected) > 100
    same_rows(sink.rows(), expected)


def test_an_input_that_has_seen_nothing_holds_the_watermark_at_min_as_on_the_harness(spark, checkpoint):
    """Spark's ``min`` policy counts an input without data as 0 (no watermark): the job's
    watermark waits for both inputs, as Flink's does (Long.MIN_VALUE) and the harness's."""
    from datetime import timedelta

    from sparkstate import Job, ListSource, WatermarkStrategy
    from sparkstate.api.connected import KeyedCoProcessFunction

    class Watermarks(KeyedCoProcessFunction):
        def process_element1(self, e, ctx):
            yield {"side": 1, "ts": e["ts"], "wm": ctx.timer_service().current_watermark()}

        def process_element2(self, e, ctx):
            yield {"side": 2, "ts": e["ts"], "wm": ctx.timer_service().current_watermark()}

    ws = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(0)).with_timestamp_column("ts")
    first = [[{"k": "a", "ts": t}] for t in (10_000, 20_000, 30_000, 40_000)]
    second: list[list[dict]] = [[], [], [{"m": "a", "ts": 15_000}], []]  # silent for two batches
    sink = MemorySink()
    job = (
        Job("silent-second")
        .source(ListSource(first, "k string, ts bigint", "ts", end_of_input=False), watermark=ws)
        .key_by("k")
        .connect(ListSource(second, "m string, ts bigint", "ts", end_of_input=False), key_by="m", watermark=ws)
        .process(Watermarks(), output_schema="side int, ts bigint, wm bigint")
        .sink(sink)
        .with_settings(key_groups=4, **FAST)
    )
    assert job.run(checkpoint_dir=checkpoint, spark=spark).completed
    h = job.harness()
    expected = [row for a, b in zip(first, second) for row in h.process_batch(a, second=b)]
    min_wm = -(2**63)
    assert [r["wm"] for r in sorted(expected, key=lambda r: r["ts"])] == [min_wm, min_wm, min_wm, min_wm, 14_999]
    same_rows(sink.rows(), expected)
