"""Seed jobs on a Spark cluster from one driver process, as a user's script runs them
(``tests/e2e/test_cluster.py``): ``python cluster_jobs.py MASTER NAME...``, each job with its
checkpoint and Parquet output under ``NAME/`` of the working folder (relative paths: the
driver's, which the executors, working in their workers' folders, must not take for theirs)."""

from __future__ import annotations

import sys

from sparkstate import ParquetSink
from sparkstate.jobs import JOBS

EVENTS, MAX_BATCH = 40_000, 20_000

if __name__ == "__main__":
    master, *names = sys.argv[1:]
    for name in names:
        job = (JOBS[name].job(events=EVENTS, merchants=500, max_batch=MAX_BATCH).sink(ParquetSink(f"{name}/output"))
               .with_settings(key_groups=8, trigger_interval="200 milliseconds"))
        result = job.run(checkpoint_dir=f"{name}/checkpoint", master=master, spark_ui=False)
        assert result.completed and result.events == EVENTS, result
        print(f"{name}: {result.events} events in {result.batches} batches", flush=True)
