"""A sample of the randomised window cases on Spark, against the Flink model
(``tests/flink_model.py``): sliding windows with slide < size < 2 x slide, sessions with
allowed lateness above the gap, and event times around the epoch."""

from __future__ import annotations

import pytest
from flink_cases import random_window_case, rows
from spark_helpers import FAST

from sparkstate import MemorySink

#: seeds the harness got wrong before the fixes of issue 12 (§8), one per rule
SAMPLE = [
    random_window_case(27),  # sliding 4 s every 3 s, lateness 1 s, late events
    random_window_case(142),  # sessions, gap 300 ms, lateness 2.5 s
    random_window_case(1008, near_epoch=True),  # tumbling over times before and after the epoch
]


@pytest.mark.parametrize("case", SAMPLE, ids=[f"{c.name}-{c.spec.kind}" for c in SAMPLE])
def test_spark_matches_the_flink_model(case, spark, checkpoint):
    sink, late = MemorySink(), MemorySink()
    result = case.job(sink, late=late).with_settings(**FAST).run(checkpoint_dir=checkpoint, spark=spark)
    assert result.completed
    want, want_late, _ = case.expected()
    assert sorted(rows(sink.rows())) == sorted(r for batch in want for r in batch)
    assert sorted((e["k"], e["ts"], e["v"]) for e in late.rows()) == sorted(want_late)
