"""Seed jobs with timers on Spark: the same rows as on the harness."""

from __future__ import annotations

import pytest
from spark_helpers import FAST, harness_like_spark, same_rows

from sparkstate import MemorySink
from sparkstate.jobs import JOBS


@pytest.mark.parametrize(
    "name, settings",
    [
        ("inactivity-alert", {"events": 20_000}),
        ("rate-limit", {"events": 20_000}),
        ("feature-map", {"events": 3_000, "payers": 100}),
        # windows: a merging session window with a map column, and aggregate + window function
        ("sessions", {"events": 20_000, "users": 300, "active_users": 40, "shift_minutes": 3, "events_per_second": 5}),
        ("hot-items", {"events": 20_000, "categories": 3}),
        # the native path (Spark SQL, when asked for) against the harness
        ("taxi-zone-revenue", {"events": 20_000, "window_path": "native"}),
    ],
)
def test_seed_job_on_spark_matches_harness(name, settings, spark, checkpoint):
    max_batch = 5_000
    settings = dict(settings)
    path = settings.pop("window_path", "auto")
    job = JOBS[name].job(max_batch=max_batch, **settings).with_settings(window_path=path)
    events = settings["events"]
    sink = MemorySink()
    result = job.sink(sink).with_settings(**FAST).run(checkpoint_dir=checkpoint, spark=spark)
    assert result.completed and result.events == events
    expected = harness_like_spark(job, max_batch)
    assert len(sink.rows()) == len(expected) > 0
    same_rows(sink.rows(), expected)
