"""The behavioural cases on real Spark (RocksDB, checkpointed): same rows as the harness."""

from __future__ import annotations

import pytest
from behaviour_cases import CASES, assert_harness_rows, canonical, run_on_harness

from sparkstate import MemorySink

FAST = {"trigger_interval": "100 milliseconds"}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case_matches_harness(case, spark, checkpoint):
    sink = MemorySink()
    result = case.job(sink).with_settings(**FAST).run(checkpoint_dir=checkpoint, spark=spark)
    assert result.completed
    assert_harness_rows(case, sink.rows())
    assert result.output_rows == len(sink.rows())  # rows out counted for every kind of job


@pytest.mark.parametrize("name", ["value", "event-timers", "both-domains"])
def test_hashmap_backend_gives_the_same_rows(name, spark, checkpoint):
    from behaviour_cases import CASES_BY_NAME

    case = CASES_BY_NAME[name]
    sink = MemorySink()
    result = case.job(sink).with_settings(state_backend="hashmap", **FAST).run(checkpoint_dir=checkpoint, spark=spark)
    assert result.completed
    assert canonical(sink.rows()) == canonical(run_on_harness(case))
    assert result.output_rows == len(sink.rows())
