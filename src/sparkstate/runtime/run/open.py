"""The first phase of a run: the checks before anything is written, the checkpoint and its
lock, the plan and the operator's spec, the restore of a savepoint and ``--fresh``.

Everything here that can refuse the run does so before Spark runs a query and before the
checkpoint or the job's outputs change: a bad job, a checkpoint of another job or one in use,
a savepoint that does not fit. ``--fresh`` deletes only once the job is known to be well formed.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sparkstate.api.job import JobDescription as Job
from sparkstate.api.job import WindowPath
from sparkstate.connectors.database import bind_job_sinks
from sparkstate.engine.compile import keyed_function
from sparkstate.engine.operator import KeyedOperator
from sparkstate.errors import JobDefinitionError
from sparkstate.runtime.checkpoint.directory import CheckpointDir
from sparkstate.runtime.checkpoint.fresh import parquet_sinks, start_fresh
from sparkstate.runtime.checkpoint.metadata import job_metadata
from sparkstate.runtime.checkpoint.run_lock import RunLock
from sparkstate.runtime.checkpoint.storage import is_local, normalize
from sparkstate.runtime.run.result import RunResult
from sparkstate.runtime.streaming.planner import NATIVE, PYTHON, Plan, plan
from sparkstate.runtime.streaming.query import check_idleness, operator_spec


@dataclass(frozen=True)
class Options:
    """What the caller asked of a run (``Job.run``'s arguments)."""

    on_progress: Callable[[dict], None] | None = None
    timeout: float | None = None
    log_file: str | Path | None = None
    until: Callable[[RunResult], bool] | None = None
    fresh: bool = False
    on_notice: Callable[[str], None] | None = None
    from_savepoint: str | None = None
    allow_non_restored_state: bool = False
    trust_savepoint: bool = False
    spark_ui: bool = False


@dataclass
class Run:
    """A run as its phases hand it on: each phase fills in what it decided."""

    job: Job
    checkpoint: CheckpointDir
    lock: RunLock
    options: Options
    spark: Any
    result: RunResult
    plan: Plan = field(default_factory=lambda: Plan(PYTHON, ()))
    spec: Any = None
    descriptors: Any = ()
    partitions: int = 0
    meta: dict = field(default_factory=dict)
    restore: Any = None  # the savepoint being restored (``savepoints/restore.py``), if any
    restored_id: str | None = None  # the savepoint id the checkpoint's writers carry
    was_restored: str | None = None  # the savepoint the checkpoint was restored from before this run

    def session(self, parallelism: int | None = None) -> Any:
        """The run's Spark session, started now if it has none yet."""
        from sparkstate.runtime.session import get_spark

        if self.spark is None:
            o = self.options
            self.spark = get_spark(ui=o.spark_ui, parallelism=parallelism, log_file=o.log_file)
        return self.spark

    def notice(self, note: str) -> None:
        """A note for the user: at once (``on_notice``), and in the result's warnings."""
        self.result.warnings.append(note)
        if self.options.on_notice is not None:
            self.options.on_notice(note)


def open_checkpoint(job: Job, checkpoint_dir: str | os.PathLike[str] | None, spark: Any,
                    options: Options) -> tuple[CheckpointDir, Any]:
    """Check ``job`` and open its checkpoint directory (not yet locked); returns it and the
    session, when one was needed to reach it (or ``$SPARK_REMOTE`` asks for a Connect one)."""
    from sparkstate.runtime.session import get_spark
    from sparkstate.runtime.session.connect import remote_url
    from sparkstate.runtime.session.driver import driver

    if checkpoint_dir is None or str(checkpoint_dir).strip() == "":
        raise JobDefinitionError(
            "a checkpoint directory is required: Spark keeps the source offsets and the state there "
            "(Job.run(checkpoint_dir=...), Job.with_checkpointing(directory=...), or --checkpoint on the command line)"
        )
    job.validate()
    check_idleness(job)
    if spark is None and remote_url() is not None:
        spark = get_spark()  # $SPARK_REMOTE: a Connect session, whose server's cores give the partitions
    if spark is not None and driver(spark).connect:
        blockers = connect_blockers(job)
        if blockers:
            raise JobDefinitionError(f"job {job.name!r} cannot run over Spark Connect: " + "; ".join(blockers))
    if CheckpointDir.needs_spark(checkpoint_dir):
        spark = spark or get_spark(ui=options.spark_ui, parallelism=job.settings.parallelism, log_file=options.log_file)
    checkpoint = CheckpointDir.open(checkpoint_dir, spark)
    # a directory holding what is not a checkpoint's is refused before the lock's file is written into it
    checkpoint.check_usable(options.fresh)
    return checkpoint, spark


def connect_blockers(job: Any) -> list[str]:
    """What of ``job`` cannot run over Spark Connect, each with the reason (empty: all can).

    A Parquet sink of side outputs (or dead letters) on a non-local path is written by
    sparkstate's own code in the batch function, which over Connect runs on the server without
    a JVM handle to reach Hadoop's file systems."""
    from sparkstate.connectors import database
    from sparkstate.connectors.sinks import ParquetSink

    side = {**database.side_sinks(job), "dead_letters": database.dead_letter_sink(job)}
    return [
        f"side output {name!r} goes to {sink.path}, which sparkstate writes itself through Hadoop's file system, out "
        "of reach over Spark Connect: give it a local (or shared, mounted) folder, or a database sink"
        for name, sink in side.items() if isinstance(sink, ParquetSink) and not is_local(sink.path)
    ]



def broadcast_dir(checkpoint: CheckpointDir) -> str:
    """Where the executors of a broadcast job write its broadcast state (plain files, so the
    checkpoint must be a local path: on a cluster, a shared file system mounted at the same
    path on every machine)."""
    directory = checkpoint.broadcast_dir
    if directory is None:
        raise JobDefinitionError(
            f"checkpoint {checkpoint.root}: a job with broadcast state needs its checkpoint on a file system path "
            "(a local directory, or on a cluster a shared file system mounted at the same path everywhere): the "
            "executors write the broadcast state there as plain files, once for all key groups. Use such a path "
            "with --checkpoint / checkpoint_dir="
        )
    return directory


def open_run(job: Job, checkpoint: CheckpointDir, lock: RunLock, spark: Any, options: Options) -> Run:
    """Plan the locked run: its path, the operator's spec, its partitions and the checkpoint's
    metadata; check and prepare a savepoint's restore; then ``--fresh``."""
    from sparkstate.runtime.io.sources import source_columns
    from sparkstate.runtime.session.classic import active_session, local_cores, submitted
    from sparkstate.runtime.session.driver import driver

    run = Run(job, checkpoint, lock, options, spark, RunResult(job=job.name, checkpoint_dir=checkpoint.root))
    source = job.source_spec
    assert source is not None, "a validated job has a source"
    if job.output is None:
        # built-in window aggregates whose output follows from the source's columns, which
        # only Spark knows for a streaming DataFrame
        columns = None
        if source.schema_ddl is None:
            columns = source_columns(run.session(job.settings.parallelism), source)
        job = run.job = job.with_output_from(columns)
    run.plan = plan(job)
    if options.from_savepoint is not None and run.plan.path == NATIVE and job.settings.window_path == WindowPath.AUTO:
        # the native path keeps Spark SQL's own state, which a savepoint's cannot be written into
        run.plan = Plan(PYTHON, ("it restores a savepoint (the native path cannot take its state)",))
    # a window job's function is compiled here, once; the native path never runs it but
    # records its name and state in the checkpoint's metadata like the Python path
    function = keyed_function(job)
    # declared state, from a copy: the job's function object stays unopened for Spark to ship
    run.descriptors = KeyedOperator(copy.deepcopy(function), job.key_columns).open()
    # resolving the output's Arrow schema needs Spark: it comes once Spark runs
    spec = operator_spec(job, function, output_arrow=None, descriptors=run.descriptors)
    if job.connected is not None and job.connected.is_broadcast:
        spec = replace(spec, broadcast_dir=broadcast_dir(checkpoint))  # refused here, before anything is written
    run.spec = spec
    run.spark = run.spark or active_session()
    if run.spark is None and submitted():
        run.session()  # spark-submit's session: its partitions are the default
    if job.settings.parallelism:
        run.partitions = job.settings.parallelism
    elif run.spark is not None and submitted():
        run.partitions = int(run.spark.conf.get("spark.sql.shuffle.partitions"))
    elif run.spark is not None:
        run.partitions = driver(run.spark).default_parallelism()
    else:
        run.partitions = local_cores(None)  # what the session get_spark starts will have
    run.result.plan = run.plan.path
    run.meta = job_metadata(job, spec, run.descriptors, {"parallelism": run.partitions}, run.plan.path)
    # the savepoint the checkpoint was restored from: its database writers' identities carry it
    run.was_restored = restored_id(checkpoint)
    broadcast_content = _restore(run) if options.from_savepoint is not None and (
        options.fresh or not _resumes_restore(checkpoint, options.from_savepoint)) else None
    run.restored_id = (_savepoint_id(run.restore.identity()) if run.restore is not None
                       else (None if options.fresh else run.was_restored))
    if options.fresh:
        # after the job is known to be well formed, so that a bad job deletes nothing; the
        # markers of the old checkpoint's writers go, and any of the writers this run starts
        if not all(is_local(s.path) for s in parquet_sinks(job)):
            run.session(job.settings.parallelism)
        writers = (run.restored_id, restored_id(checkpoint, committed=False))
        for note in start_fresh(bind_job_sinks(job, run.was_restored), checkpoint, run.spark, writers, run.partitions):
            run.notice(note)
    if broadcast_content is not None and run.spec.broadcast_dir is not None:
        # the savepoint's broadcast state, once in the new checkpoint: every key group starts from it
        from sparkstate.engine.broadcast import BroadcastStore

        run.spec = replace(run.spec, initial_broadcast=BroadcastStore(run.spec.broadcast_dir).save_content(broadcast_content))
    elif run.restore is None and run.spec.broadcast_dir is not None:
        run.spec = replace(run.spec, initial_broadcast=_restored_broadcast(checkpoint))
    return run


def _restore(run: Run) -> bytes | None:
    """Check the savepoint ``run`` restores against the job, before ``--fresh`` deletes
    anything (a savepoint that does not fit changes nothing); returns its broadcast state."""
    from sparkstate.runtime.io.sources import restore_notes
    from sparkstate.runtime.savepoints.restore import prepare_restore

    job, options, result = run.job, run.options, run.result
    assert options.from_savepoint is not None and job.source_spec is not None
    connected = job.connected
    restore = run.restore = prepare_restore(
        options.from_savepoint, run.meta, run.descriptors, run.checkpoint,
        allow_non_restored_state=options.allow_non_restored_state, trusted=options.trust_savepoint,
        broadcast=tuple(connected.broadcast) if connected and connected.is_broadcast else (),
        spark=run.spark, fresh=options.fresh)
    run.meta["restored_from"] = restore.identity()
    result.warnings += [*restore.notes, *restore_notes(job.source_spec, restore.savepoint.meta)]
    broadcast_content = None
    if connected is not None:
        from sparkstate.runtime.streaming.query import connected_start
        from sparkstate.savepoint.broadcast import declared_broadcast, restored_broadcast

        saved_second = connected_start(restore.savepoint.meta)
        if saved_second is not None:
            result.warnings += restore_notes(connected.source, saved_second)
        broadcast_content, notes = restored_broadcast(
            restore.savepoint, declared_broadcast(connected), allow_non_restored_state=options.allow_non_restored_state,
            decoder=restore.plan.decoder)
        result.warnings += notes
        if broadcast_content is not None:
            from sparkstate.engine.broadcast import content_ref

            # recorded, so that a later run of the restored checkpoint starts a key group
            # that has not run yet from it too
            run.meta["restored_from"]["broadcast"] = content_ref(broadcast_content)
    run.spec = replace(run.spec, restore=restore.plan, restored_watermark_ms=restore.watermark_ms)
    return broadcast_content


def _resumes_restore(checkpoint: CheckpointDir, location: str) -> bool:
    """Whether the checkpoint was started from this savepoint and has committed batches since:
    running it again with the same ``from_savepoint`` resumes it."""
    if not checkpoint.has_metadata() or not checkpoint.committed_batches():
        return False
    try:
        restored = checkpoint.read_metadata().get("restored_from") or {}
    except (OSError, ValueError):
        return False
    return bool(restored) and str(restored.get("savepoint", "")).rstrip("/") == normalize(location).rstrip("/")


def restored_id(checkpoint: CheckpointDir, committed: bool = True) -> str | None:
    """The id of the savepoint the checkpoint was restored from (``committed``: only when it
    has committed batches since, which a run resumes), or None."""
    if not checkpoint.has_metadata() or (committed and not checkpoint.committed_batches()):
        return None
    try:
        restored = checkpoint.read_metadata().get("restored_from")
    except (OSError, ValueError):
        return None
    return _savepoint_id(restored) if isinstance(restored, dict) else None


def _restored_broadcast(checkpoint: CheckpointDir) -> str | None:
    """The broadcast state a restored checkpoint's key groups start from (its reference), if any."""
    if not checkpoint.has_metadata():
        return None
    try:
        restored = checkpoint.read_metadata().get("restored_from") or {}
    except (OSError, ValueError):
        return None
    ref = restored.get("broadcast") if isinstance(restored, dict) else None
    return ref if isinstance(ref, str) else None


def _savepoint_id(restored: dict) -> str | None:
    """A savepoint's id as ``Restore.identity()`` records it (its folder's name when it has none)."""
    if restored.get("id"):
        return str(restored["id"])
    location = str(restored.get("savepoint") or "").rstrip("/")
    return location.rsplit("/", 1)[-1] or None
