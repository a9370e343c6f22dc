"""The second phase of a run: the job's sinks bound and checked before batch 0, each by its
own binding (``io/sinks/``): a database reachable with its tables, Kafka's topics there and
its writers' zombies fenced, a Parquet folder that holds no other checkpoint's batches. Then
the checkpoint's metadata records the job and its writers, and refuses a checkpoint of
another job (before Spark starts, 10 s and more on a small machine)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sparkstate.api.job import JobDescription as Job
from sparkstate.connectors.sinks import ParquetSink, SqliteSink
from sparkstate.runtime.checkpoint.metadata import check_or_write
from sparkstate.runtime.checkpoint.storage import is_uri, normalize
from sparkstate.runtime.run.open import Run
from sparkstate.runtime.streaming.planner import NATIVE


def bind(run: Run) -> None:
    """Bind and check the run's sinks; record the job in its checkpoint's metadata."""
    from sparkstate.runtime.io.sinks import database_writers, prepare_sinks, restore_warnings
    from sparkstate.runtime.session.driver import driver

    if run.spark is not None and driver(run.spark).connect:
        run.job = client_paths(run.job)
    # an unreachable database or a table that does not fit stops the job here, before Spark starts
    run.job = prepare_sinks(run.job, run.checkpoint, native=run.plan.path == NATIVE, restored_from=run.restored_id,
                            partitions=run.partitions, restoring=run.restore is not None)
    if run.restore is not None:
        for note in restore_warnings(run.job, run.restore.savepoint.meta):
            run.notice(note)
    recorded = database_writers(run.job)
    if recorded:
        run.meta["sinks"] = recorded  # what a savepoint of the stopped job records of them
    run.result.warnings += check_or_write(run.checkpoint, run.meta)


def client_paths(job: Job) -> Job:
    """``job`` with its sinks' relative file paths made absolute here. Over Spark Connect the
    server writes them, and would take a relative path as relative to its own working
    directory, not the client's, where the user and the rest of the run look for it."""

    def absolute(sink: Any) -> Any:
        if isinstance(sink, (ParquetSink, SqliteSink)) and not is_uri(sink.path):
            return replace(sink, path=normalize(sink.path))
        return sink

    return replace(job, sink_spec=absolute(job.sink_spec),
                   side_sinks=tuple((name, absolute(sink)) for name, sink in job.side_sinks))
