"""The Spark suite's cases, run over Spark Connect: the same tests, with ``spark`` a Connect
client of the suite's server (``conftest.py``). At least one case of each family: every kind of
keyed state, timers, two inputs and broadcast state, windows with late data and dead letters,
TTL across a restart, and the PostgreSQL and Kafka sinks stopped and restarted mid-stream."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from behaviour_cases import CASES_BY_NAME
from pyspark import cloudpickle

sys.path.insert(0, str(Path(__file__).parents[1] / "integration"))  # as pytest imports them there

import test_behaviour_spark as behaviour  # noqa: E402
import test_db_sinks_spark as db_sinks  # noqa: E402
import test_kafka_sink_spark as kafka_sink  # noqa: E402
import test_ttl_spark as ttl  # noqa: E402
import test_two_inputs_spark as two_inputs  # noqa: E402
import test_windows_spark as windows  # noqa: E402

# their functions and classes reach the server's Python workers by value, as in their own modules
for module in (behaviour, db_sinks, kafka_sink, ttl, two_inputs, windows):
    cloudpickle.register_pickle_by_value(sys.modules[module.__name__])

#: one behavioural case of each family (the Classic suite runs them all): state kinds, timers in
#: both domains, broadcast state, two keyed inputs with timers
FAMILIES = ["value", "map", "aggregating", "both-domains", "broadcast-rules", "co-process-timers"]


@pytest.mark.parametrize("case", [CASES_BY_NAME[n] for n in FAMILIES], ids=FAMILIES)
def test_case_matches_harness(case, spark, checkpoint):
    behaviour.test_case_matches_harness(case, spark, checkpoint)

test_late_data_and_dead_letters_go_to_side_outputs = windows.test_late_data_and_dead_letters_go_to_side_outputs
test_sliding_windows_agree_between_paths = windows.test_sliding_windows_agree_between_paths
test_ttl_on_spark_decides_as_the_harness_across_a_restart = ttl.test_ttl_on_spark_decides_as_the_harness_across_a_restart
test_broadcast_job_restarted_then_rescaled_gives_the_uninterrupted_output = (
    two_inputs.test_broadcast_job_restarted_then_rescaled_gives_the_uninterrupted_output)
test_kafka_sink_restarted_replayed_restored_and_started_over = (
    kafka_sink.test_kafka_sink_restarted_replayed_restored_and_started_over)


@pytest.mark.parametrize("mode", ["append"])
def test_running_sum_into_postgresql_stopped_crashed_and_restarted_is_exactly_once(mode, spark, postgres_db, checkpoint):
    db_sinks.test_running_sum_into_postgresql_stopped_crashed_and_restarted_is_exactly_once(
        mode, spark, postgres_db, checkpoint)
