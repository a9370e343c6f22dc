"""Seed jobs with timers on Spark: the same rows as on the harness."""

from __future__ import annotations

import pytest

from behaviour_cases import canonical
from spark_helpers import FAST, harness_like_spark
from sparkstate import MemorySink
from sparkstate.jobs import JOBS


@pytest.mark.parametrize(
    "name, settings",
    [
        ("inactivity-alert", {"events": 20_000}),
        ("rate-limit", {"events": 20_000}),
        ("feature-map", {"events": 3_000, "payers": 100}),
    ],
)
def test_seed_job_on_spark_matches_harness(name, settings, spark, checkpoint):
    max_batch = 5_000
    job = JOBS[name].job(max_batch=max_batch, **settings)
    events = settings["events"]
    sink = MemorySink()
    result = job.sink(sink).with_settings(**FAST).run(checkpoint_dir=checkpoint, spark=spark)
    assert result.completed and result.events == events
    expected = harness_like_spark(job, max_batch)
    assert len(sink.rows()) == len(expected) > 0
    assert canonical(sink.rows()) == canonical(expected)
