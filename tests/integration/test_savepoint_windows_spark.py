"""Windows restored mid-stream on Spark: the window contents, their timers and the watermark
come back, so late events after the restore are late exactly as in an uninterrupted run (a
late firing within the allowed lateness, the late-data side output beyond it), on another
backend and partition count. (Sliding and processing-time windows, and many random streams,
are checked on the harness: tests/unit/testing/test_harness_savepoint.py.)"""

from __future__ import annotations

from datetime import timedelta

import pytest
from spark_helpers import FAST

from sparkstate import EventTimeSessionWindows, Job, ListSource, MemorySink, TumblingEventTimeWindows, WatermarkStrategy, agg
from sparkstate.runtime.savepoints.take import take_savepoint

SCHEMA = "k string, ts bigint, v double"
BATCHES = [
    [{"k": "a", "ts": 1_000, "v": 1.0}, {"k": "b", "ts": 1_500, "v": 2.0}, {"k": "c", "ts": 2_500, "v": 3.0}],
    [{"k": "a", "ts": 3_200, "v": 4.0}, {"k": "b", "ts": 4_100, "v": 5.0}],  # watermark 3,799 after it
    # the savepoint is taken here: both events are late for the restored watermark, the first
    # within the allowed lateness (a late firing), the second beyond it (late data)
    [{"k": "c", "ts": 2_600, "v": 6.0}, {"k": "a", "ts": 500, "v": 7.0}],
    [{"k": "b", "ts": 7_000, "v": 8.0}],
]
WINDOWS = {
    "tumbling": TumblingEventTimeWindows.of(timedelta(seconds=1)),
    "session": EventTimeSessionWindows.with_gap(timedelta(milliseconds=700)),
}


def window_job(kind: str, out: MemorySink, late: MemorySink) -> Job:
    wm = WatermarkStrategy.for_bounded_out_of_orderness(300).with_timestamp_column("ts")
    return (
        Job(f"w-{kind}").source(ListSource(BATCHES, SCHEMA), watermark=wm).key_by("k").window(WINDOWS[kind])
        .allowed_lateness(timedelta(milliseconds=1_000)).side_output_late_data(late)
        .aggregate(agg.count("n"), agg.sum("v", "total")).sink(out).with_settings(**FAST)
    )


def after(sink: MemorySink, batch: int) -> list[list[str]]:
    """The rows of the batches after ``batch``, batch by batch (in any order within a batch:
    key groups run in parallel)."""
    last = max((b for b, rows in sink.batches.items() if rows), default=-1)
    return [sorted(map(repr, sink.batches.get(b, []))) for b in range(batch + 1, last + 1)]


@pytest.mark.parametrize("kind", sorted(WINDOWS))
def test_windows_restored_mid_stream_give_the_rows_of_an_uninterrupted_run(kind, spark, tmp_path):
    out, late = MemorySink(), MemorySink()
    assert window_job(kind, out, late).run(checkpoint_dir=tmp_path / "full", spark=spark).completed
    assert late.rows() and any(after(out, 1))  # the test's point: rows and late data after the savepoint
    sp = take_savepoint(str(tmp_path / "full"), target=str(tmp_path / "sp"), batch=1, spark=spark)
    assert sp["watermark_ms"] == 3_799

    out2, late2 = MemorySink(), MemorySink()
    restored = window_job(kind, out2, late2).with_settings(parallelism=1, state_backend="hashmap")
    result = restored.run(checkpoint_dir=tmp_path / "restored", spark=spark, from_savepoint=str(tmp_path / "sp"))
    assert result.completed and result.plan == "python" and result.events == 3
    # the restored run's batch 0 is the uninterrupted run's batch 2
    assert after(out2, -1) == after(out, 1)
    assert after(late2, -1) == after(late, 1)
