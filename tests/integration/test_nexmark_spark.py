"""Nexmark queries and computed keys on Spark: the harness's rows, RocksDB state, a restart."""

from __future__ import annotations

import pytest
from spark_helpers import FAST, harness_like_spark, same_rows

from sparkstate import Job, KeyedProcessFunction, ListSource, MemorySink, ValueStateDescriptor
from sparkstate.jobs import JOBS

MAX_BATCH = 10_000


def last_per_key(rows: list[dict], key: str) -> dict:
    out = {}
    for r in rows:
        out[r[key]] = r
    return out


@pytest.mark.parametrize("query, settings, compare", [
    # one computed key for the whole stream, a window's bids at the window's end
    (7, {"events": 40_000, "events_per_second": 2_000}, "rows"),
    # a computed key on both inputs of a connected job; an upsert stream per category
    (4, {"events": 40_000}, "id"),
    # a computed key with its type ("string"), the day; an upsert stream per day
    (15, {"events": 40_000, "events_per_second": 0.4}, "day"),
])
def test_nexmark_query_on_spark_gives_the_harness_result(query, settings, compare, spark, checkpoint):
    job = JOBS[f"nexmark-q{query}"].job(max_batch=MAX_BATCH, **settings)
    sink = MemorySink()
    result = job.sink(sink).with_settings(**FAST).run(checkpoint_dir=checkpoint, spark=spark)
    assert result.completed
    if compare == "rows":
        expected = harness_like_spark(job, MAX_BATCH)
        assert len(expected) > 0
        same_rows(sink.rows(), expected)
    else:
        from nexmark_reference import run

        expected = last_per_key(run(job, batch=MAX_BATCH), compare)
        assert len(expected) > 1 or query == 15
        assert last_per_key(sink.rows(), compare) == expected


class CountPerTens(KeyedProcessFunction):
    def open(self, ctx):
        self.n = ctx.get_state(ValueStateDescriptor("n", int, default=0))

    def process_element(self, event, ctx):
        n = self.n.value() + 1
        self.n.update(n)
        yield {"tens": ctx.get_current_key(), "n": n}


def test_a_computed_key_keeps_its_state_across_a_restart_and_its_failures_are_dead_letters(spark, checkpoint):
    batches = [
        [{"v": 1}, {"v": 12}, {"v": None}, {"v": 15}],
        [{"v": 17}, {"v": 3}, {"v": -1}],
        [{"v": 11}, {"v": 2}],
    ]

    def tens(event):
        if event["v"] < 0:
            return [event["v"]]  # not a scalar: a dead letter too
        return event["v"] // 10

    def job_of(sink, dead):
        return (Job("computed-key").source(ListSource(batches, "v bigint")).key_by(tens=tens)
                .process(CountPerTens(), output_schema="tens bigint, n bigint")
                .sink(sink).dead_letters(dead).with_settings(state_backend="rocksdb", **FAST))

    first, dead = MemorySink(), MemorySink()
    job_of(first, dead).run(checkpoint_dir=checkpoint, spark=spark, until=lambda r: r.batches >= 1)
    second, dead2 = MemorySink(), MemorySink()
    job_of(second, dead2).run(checkpoint_dir=checkpoint, spark=spark)
    rows = first.rows() + second.rows()
    harness = job_of(MemorySink(), MemorySink()).harness()
    expected = [r for b in batches for r in harness.process_batch(b)]
    same_rows(rows, expected)
    assert {"tens": 1, "n": 4} in rows  # 12, 15, 17, 11: the count went on after the restart
    reasons = sorted(d["reason"] for d in dead.rows() + dead2.rows())
    assert len(reasons) == 2
    assert "the computed key 'tens' raised TypeError" in reasons[0]
    assert "the computed key 'tens' returned list [-1]: a key is an int, float, str or bool" in reasons[1]
    assert len(first.rows()) == 3  # the first run stopped after its first batch: a restart mid-stream


def test_a_nexmark_job_reads_the_generated_json_lines_as_it_reads_its_generator(spark, checkpoint, tmp_path):
    """`sparkstate nexmark generate`'s files, read through the views other systems read:
    the same events, so q20's join gives the harness's rows."""
    from nexmark_reference import run

    from sparkstate.connectors.nexmark import write_json_lines
    from sparkstate.jobs.nexmark.common import reading_files

    job = JOBS["nexmark-q20"].job(events=30_000)
    list(write_json_lines(job.source_spec, tmp_path / "files", files=3))
    sink = MemorySink()
    bids = job.source_spec.events_between(0, 30_000)
    result = reading_files(job, str(tmp_path / "files")).sink(sink).with_settings(**FAST).run(
        checkpoint_dir=checkpoint, spark=spark, until=lambda r: r.events >= bids, timeout=300)
    assert result.events == bids
    expected = run(job, batch=10_000)
    assert len(expected) > 100
    same_rows(sink.rows(), expected)
