"""Jobs on a Spark cluster from one driver process, as a user's script runs them
(``tests/e2e/test_cluster.py``): ``python cluster_jobs.py MASTER NAME...``.

A NAME of a seed job runs it on its generator, with its checkpoint and Parquet output under
``NAME/`` of the working folder (relative paths: the driver's, which the executors, working in
their workers' folders, must not take for theirs); the test compares the output. ``cases``
runs behavioural cases (``tests/behaviour_cases.py``) of each family (map state,
processing-time and event-time timers together, broadcast state, two keyed inputs with
timers; event-time timers alone: the rate-limit seed job) and checks their rows against the
harness's here; the other cases differ from these in the function only, which runs the same on
a cluster's executors."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import behaviour_cases  # noqa: E402
from pyspark import cloudpickle  # noqa: E402

from sparkstate import MemorySink, ParquetSink  # noqa: E402
from sparkstate.jobs import JOBS  # noqa: E402

# the executors cannot import modules from tests/: the cases' functions travel by value
cloudpickle.register_pickle_by_value(behaviour_cases)

EVENTS, MAX_BATCH = 40_000, 20_000
CASES = ["map", "both-domains", "broadcast-rules", "co-process-timers"]
FAST = {"trigger_interval": "200 milliseconds"}


def run_cases(master: str) -> None:
    from behaviour_cases import CASES_BY_NAME, assert_harness_rows

    for case in (CASES_BY_NAME[name] for name in CASES):
        sink = MemorySink()
        result = case.job(sink).with_settings(**FAST).run(checkpoint_dir=f"cases/{case.name}", master=master,
                                                          spark_ui=False)
        assert result.completed, case.name
        expected = assert_harness_rows(case, sink.rows())
        print(f"case {case.name}: {len(expected)} rows as on the harness", flush=True)


if __name__ == "__main__":
    master, *names = sys.argv[1:]
    for name in names:
        if name == "cases":
            run_cases(master)
            continue
        job = (JOBS[name].job(events=EVENTS, merchants=500, max_batch=MAX_BATCH).sink(ParquetSink(f"{name}/output"))
               .with_settings(key_groups=8, **FAST))
        result = job.run(checkpoint_dir=f"{name}/checkpoint", master=master, spark_ui=False)
        assert result.completed and result.events == EVENTS, result
        print(f"{name}: {result.events} events in {result.batches} batches", flush=True)
