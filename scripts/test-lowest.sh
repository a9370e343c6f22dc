#!/usr/bin/env bash
# Tests sparkstate on the lowest versions it supports (requirements-lowest.txt: PySpark 4.2.0,
# pandas 2.2.0, pyarrow 18.0.0, ... the floors of pyproject.toml's ranges), so that a range's
# lower bound is a fact and not a guess. Installs them into ./.venv-lowest (made when missing;
# safe to run again), then runs the unit suite and one Spark test of each family: keyed state,
# timers, broadcast, the hashmap backend, windows (Python and native paths), TTL, joins, a
# restart from a checkpoint, the checkpoint's record, a savepoint taken and restored, the SQLite
# sink, the Kafka source (a local noida-db broker, scripts/kafka.sh) and the file source.
# Extra arguments go to both pytest runs, e.g. `scripts/test-lowest.sh -x`.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v java >/dev/null 2>&1; then
  echo "sparkstate needs Java 17 (Spark runs on it): run scripts/setup.sh, or install openjdk-17-jre-headless" >&2
  exit 1
fi
PYTHON=${PYTHON:-python3}
[ -x .venv-lowest/bin/python ] || "$PYTHON" -m venv .venv-lowest
.venv-lowest/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
.venv-lowest/bin/python -m pip install -q --disable-pip-version-check -r requirements-lowest.txt
.venv-lowest/bin/python -m pip install -q --disable-pip-version-check --no-deps -e .
# the Spark workers' imports, compiled once (scripts/setup.sh says why)
.venv-lowest/bin/python -m compileall -q src >/dev/null
# scripts/kafka.sh runs the broker of this virtualenv's noida-db
export PYTHON=$PWD/.venv-lowest/bin/python

# one test of each family, each among the quicker of its file (about 4 minutes in all)
SPARK_TESTS=(
  "tests/integration/test_behaviour_spark.py::test_case_matches_harness[value]"
  "tests/integration/test_behaviour_spark.py::test_case_matches_harness[both-domains]"
  "tests/integration/test_behaviour_spark.py::test_case_matches_harness[broadcast-rules]"
  "tests/integration/test_behaviour_spark.py::test_hashmap_backend_gives_the_same_rows[event-timers]"
  "tests/integration/test_windows_spark.py::test_rows_out_are_the_rows_the_sink_holds[python]"
  "tests/integration/test_windows_spark.py::test_rows_out_are_the_rows_the_sink_holds[native]"
  "tests/integration/test_ttl_spark.py::test_ttl_on_spark_decides_as_the_harness_across_a_restart[rocksdb]"
  "tests/integration/test_joins_spark.py::test_interval_join_on_spark_matches_the_harness"
  "tests/integration/test_restart.py::test_restart_mid_stream_continues_the_state[value]"
  "tests/integration/test_checkpoints_spark.py::test_every_batch_records_its_checkpoint[rocksdb]"
  "tests/integration/test_savepoint_acceptance_spark.py::test_the_savepoint_holds_both_timer_domains_and_the_watermark"
  "tests/integration/test_savepoint_acceptance_spark.py::test_restored_on_the_other_backend_at_any_partitions_ends_like_an_uninterrupted_run[2]"
  "tests/integration/test_db_sinks_spark.py::test_session_windows_into_sqlite_with_side_tables_restarted_midway"
  "tests/integration/test_kafka_source_spark.py::test_kafka_timestamps_drive_event_time_timers_as_on_the_harness"
  "tests/integration/test_text_sources_spark.py::test_files_of_json_lines_run_exactly_once_across_runs"
)

status=0
# exit code 5: the arguments selected no test of that run (-k). The one test deselected sets its
# case up with AdminClient.delete_records, which confluent-kafka has from 2.5 only
.venv-lowest/bin/python -m pytest tests/unit -q -m "not spark" -p no:cacheprovider -n 2 --durations=5 \
  --deselect tests/unit/connectors/test_kafka_source.py::test_records_deleted_by_retention_are_an_error_naming_them_and_the_options "$@" \
  || { rc=$?; [ "$rc" -eq 5 ] || status=$rc; }
.venv-lowest/bin/python -m pytest "${SPARK_TESTS[@]}" -q -p no:cacheprovider --durations=15 "$@" \
  || { rc=$?; [ "$rc" -eq 5 ] || status=$rc; }
exit "$status"
