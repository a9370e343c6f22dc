"""Running a job on Spark: the checks before Spark starts, the query, and the loop that
watches it until the input is done, a condition holds, time is up or Ctrl-C.

The checkpoint directory is opened once, as a
:class:`~sparkstate.runtime.checkpoint.directory.CheckpointDir`, and handed to everything that
reads or writes under it. The job's :class:`~sparkstate.api.checkpointing.CheckpointConfig`
is applied to the session (Spark SQL settings set before the query starts) and the query
(``query.py``); the loop accounts each micro-batch that ran and records its checkpoint's
figures (``checkpoint_stats.py``) as its progress arrives.
"""

from __future__ import annotations

import copy
import json
import os
import time
from collections.abc import Callable
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from sparkstate.api.job import JobDescription as Job
from sparkstate.api.job import WindowPath
from sparkstate.connectors.database import bind_job_sinks
from sparkstate.engine.compile import keyed_function
from sparkstate.engine.operator import KeyedOperator
from sparkstate.errors import JobDefinitionError, SparkStateError
from sparkstate.runtime.checkpoint.directory import CheckpointDir
from sparkstate.runtime.checkpoint.fresh import claim_outputs, parquet_sinks, start_fresh
from sparkstate.runtime.checkpoint.metadata import check_or_write, job_metadata
from sparkstate.runtime.checkpoint.run_lock import RunLock
from sparkstate.runtime.checkpoint.run_record import recorded_run
from sparkstate.runtime.checkpoint.stats import CheckpointRecorder, rows_out, state_bytes
from sparkstate.runtime.checkpoint.storage import is_local
from sparkstate.runtime.run.failures import batch_input, clean_failure
from sparkstate.runtime.run.interrupts import ctrl_c_stops
from sparkstate.runtime.run.result import RunResult
from sparkstate.runtime.savepoints.requests import Request, RequestWatch, answer, stop_between_batches
from sparkstate.runtime.streaming.planner import NATIVE, PYTHON, Plan, plan
from sparkstate.runtime.streaming.query import build_query, check_idleness, operator_spec, output_arrow

#: how often a running broadcast job deletes the broadcast state files no retained checkpoint
#: version refers to (``CheckpointDir.prune_broadcast``)
PRUNE_SECONDS = 60.0
#: the RocksDB options (``CheckpointConfig.rocksdb``) runs of this process set on their session
_ROCKSDB_SET: set[str] = set()


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


def _progress_dicts(query: Any) -> list[dict]:
    out = []
    for p in query.recentProgress:
        if isinstance(p, dict):
            observed = p.get("observedMetrics")
            if observed:  # pyspark gives each as a Row: plain data, as the rest
                p = {**p, "observedMetrics": {k: v.asDict() if hasattr(v, "asDict") else v for k, v in observed.items()}}
            out.append(p)
        else:
            out.append(json.loads(p.json))
    return out


#: where a bounded job's inputs end: ``(index of the source in Spark's progress and offset log,
#: the offset read at its end)``; the connected input is the query's last source
Ends = list[tuple[int, int]]


def _input_ends(job: Job, spec: Any) -> Ends | None:
    """Where each input of ``job`` ends, or None when one of them is unbounded (the run then
    ends by ``timeout``, ``until`` or Ctrl-C)."""
    from sparkstate.runtime.streaming.query import connected_job, second_uses_end_marker

    assert job.source_spec is not None
    end = job.source_spec.end_offset(spec.end_watermark is not None)
    if end is None:
        return None
    ends = [(0, end)]
    second = connected_job(job)
    if second is not None:
        assert second.source_spec is not None
        end2 = second.source_spec.end_offset(second_uses_end_marker(job, spec.fn))
        if end2 is None:
            return None
        ends.append((-1, end2))
    return ends


def _end_reached(entries: list[dict], ends: Ends | None) -> bool:
    """True once a completed micro-batch has read every source to its end."""
    if ends is None or not entries:
        return False
    from sparkstate.runtime.io.sources import source_offset

    sources = entries[-1].get("sources") or []
    for index, end in ends:
        offset = source_offset(sources[index]) if sources else None
        if offset is None or offset < end:
            return False
    return True


def _already_complete(checkpoint: CheckpointDir, ends: Ends | None) -> bool:
    if ends is None:
        return False
    batch, _ = checkpoint.last_committed_offset()
    offsets = checkpoint.batch_source_offsets(batch) if batch is not None else None
    if not offsets:
        return False
    for index, end in ends:
        offset = offsets[index]
        if not (isinstance(offset, dict) and int(offset.get("offset", -1)) >= end):
            return False
    return True


def run_job(
    job: Job,
    *,
    checkpoint_dir: str | os.PathLike[str] | None,
    spark: Any = None,
    on_progress: Callable[[dict], None] | None = None,
    timeout: float | None = None,
    log_file: str | Path | None = None,
    until: Callable[[RunResult], bool] | None = None,
    fresh: bool = False,
    on_notice: Callable[[str], None] | None = None,
    from_savepoint: str | None = None,
    allow_non_restored_state: bool = False,
    trust_savepoint: bool = False,
    spark_ui: bool = False,
) -> RunResult:
    """Run ``job`` until its bounded source is done, ``until(result)`` holds, ``timeout``
    passes, or Ctrl-C. ``fresh`` first deletes the job's checkpoint and outputs (only what
    sparkstate made for the job: see ``fresh.py``); what it kept goes to ``on_notice`` at
    once, and to ``result.warnings``.

    The run holds the checkpoint directory's lock (``run_lock.py``) from before anything is
    deleted or set up until its query has stopped: a second run on the checkpoint fails at
    once, naming this one.

    ``from_savepoint`` starts the new checkpoint from a savepoint's state, watermark and
    source offsets (``restore.py``); it is checked before anything is written, and a run that
    resumes a checkpoint restored from that savepoint just resumes. A savepoint that stores
    pickled values is restored only with ``trust_savepoint`` (``savepoint/values.py``)."""
    from sparkstate.runtime.session import get_spark
    from sparkstate.runtime.session.connect import remote_url

    if checkpoint_dir is None or str(checkpoint_dir).strip() == "":
        raise JobDefinitionError(
            "a checkpoint directory is required: Spark keeps the source offsets and the state there "
            "(Job.run(checkpoint_dir=...), Job.with_checkpointing(directory=...), or --checkpoint on the command line)"
        )
    job.validate()
    check_idleness(job)
    if spark is None and remote_url() is not None:
        spark = get_spark()  # $SPARK_REMOTE: a Connect session, whose server's cores give the partitions
    if CheckpointDir.needs_spark(checkpoint_dir):
        spark = spark or get_spark(ui=spark_ui, parallelism=job.settings.parallelism, log_file=log_file)
    checkpoint = CheckpointDir.open(checkpoint_dir, spark)
    # a directory holding what is not a checkpoint's is refused before the lock's file is written into it
    checkpoint.check_usable(fresh)
    with checkpoint.lock(job.name) as lock:
        return _run_locked(job, checkpoint, lock, spark=spark, on_progress=on_progress, timeout=timeout,
                           log_file=log_file, until=until, fresh=fresh, on_notice=on_notice,
                           from_savepoint=from_savepoint, allow_non_restored_state=allow_non_restored_state,
                           trust_savepoint=trust_savepoint, spark_ui=spark_ui)


def _run_locked(
    job: Job,
    checkpoint: CheckpointDir,
    lock: RunLock,
    *,
    spark: Any,
    on_progress: Callable[[dict], None] | None,
    timeout: float | None,
    log_file: str | Path | None,
    until: Callable[[RunResult], bool] | None,
    fresh: bool,
    on_notice: Callable[[str], None] | None,
    from_savepoint: str | None = None,
    allow_non_restored_state: bool = False,
    trust_savepoint: bool = False,
    spark_ui: bool = False,
) -> RunResult:
    from sparkstate.runtime.io.sinks import check_file_sink, database_writers, open_database_sinks, restore_warnings
    from sparkstate.runtime.io.sources import (
        batch_events,
        input_waiting,
        restore_notes,
        restored_offset,
        source_columns,
    )
    from sparkstate.runtime.session import get_spark
    from sparkstate.runtime.session.classic import active_session, local_cores, state_store_class, submitted
    from sparkstate.runtime.session.driver import driver

    source = job.source_spec
    assert source is not None, "a validated job has a source"
    if job.output is None:
        # built-in window aggregates whose output follows from the source's columns, which
        # only Spark knows for a streaming DataFrame
        columns = None
        if source.schema_ddl is None:
            spark = spark or get_spark(ui=spark_ui, parallelism=job.settings.parallelism, log_file=log_file)
            columns = source_columns(spark, source)
        job = job.with_output_from(columns)
    chosen = plan(job)
    if from_savepoint is not None and chosen.path == NATIVE and job.settings.window_path == WindowPath.AUTO:
        # the native path keeps Spark SQL's own state, which a savepoint's cannot be written into
        chosen = Plan(PYTHON, ("it restores a savepoint (the native path cannot take its state)",))
    # a window job's function is compiled here, once; the native path never runs it but
    # records its name and state in the checkpoint's metadata like the Python path
    function = keyed_function(job)
    # declared state, from a copy: the job's function object stays unopened for Spark to ship
    descriptors = KeyedOperator(copy.deepcopy(function), job.key_columns).open()
    result = RunResult(job=job.name, checkpoint_dir=checkpoint.root)
    # resolving the output's Arrow schema needs Spark: it comes once Spark runs
    spec = operator_spec(job, function, output_arrow=None, descriptors=descriptors)
    if job.connected is not None and job.connected.is_broadcast:
        spec = replace(spec, broadcast_dir=broadcast_dir(checkpoint))  # refused here, before anything is written
    spark = spark or active_session()
    if spark is None and submitted():
        spark = get_spark(ui=spark_ui, log_file=log_file)  # spark-submit's session: its partitions are the default
    if job.settings.parallelism:
        partitions = job.settings.parallelism
    elif spark is not None and submitted():
        partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
    elif spark is not None:
        partitions = driver(spark).default_parallelism()
    else:
        partitions = local_cores(None)  # what the session get_spark starts will have
    settings = {"parallelism": partitions}
    result.plan = chosen.path
    meta = job_metadata(job, spec, descriptors, settings, chosen.path)
    # the savepoint the checkpoint was restored from: its database writers' identities carry it
    was_restored = _restored_id(checkpoint)
    restore = None
    broadcast_content: bytes | None = None
    if from_savepoint is not None and (fresh or not _resumes_restore(checkpoint, from_savepoint)):
        from sparkstate.runtime.savepoints.restore import prepare_restore

        # checked before --fresh deletes anything: a savepoint that does not fit changes nothing
        connected = job.connected
        restore = prepare_restore(from_savepoint, meta, descriptors, checkpoint,
                                  allow_non_restored_state=allow_non_restored_state, trusted=trust_savepoint,
                                  broadcast=tuple(connected.broadcast) if connected and connected.is_broadcast else (),
                                  spark=spark, fresh=fresh)
        meta["restored_from"] = restore.identity()
        result.warnings += [*restore.notes, *restore_notes(source, restore.savepoint.meta)]
        if job.connected is not None:
            from sparkstate.runtime.streaming.query import connected_start
            from sparkstate.savepoint.broadcast import declared_broadcast, restored_broadcast

            saved_second = connected_start(restore.savepoint.meta)
            if saved_second is not None:
                result.warnings += restore_notes(job.connected.source, saved_second)
            broadcast_content, notes = restored_broadcast(
                restore.savepoint, declared_broadcast(job.connected), allow_non_restored_state=allow_non_restored_state,
                decoder=restore.plan.decoder)
            result.warnings += notes
            if broadcast_content is not None:
                from sparkstate.engine.broadcast import content_ref

                # recorded, so that a later run of the restored checkpoint starts a key group
                # that has not run yet from it too
                meta["restored_from"]["broadcast"] = content_ref(broadcast_content)
        spec = replace(spec, restore=restore.plan, restored_watermark_ms=restore.watermark_ms)
    restored_id = _savepoint_id(restore.identity()) if restore is not None else (None if fresh else was_restored)
    if fresh:
        # after the job is known to be well formed, so that a bad job deletes nothing; the
        # markers of the old checkpoint's writers go, and any of the writers this run starts
        if not all(is_local(s.path) for s in parquet_sinks(job)):
            spark = spark or get_spark(ui=spark_ui, parallelism=job.settings.parallelism, log_file=log_file)
        writers = (restored_id, _restored_id(checkpoint, committed=False))
        for note in start_fresh(bind_job_sinks(job, was_restored), checkpoint, spark, writers, partitions):
            result.warnings.append(note)
            if on_notice is not None:
                on_notice(note)
    if broadcast_content is not None and spec.broadcast_dir is not None:
        # the savepoint's broadcast state, once in the new checkpoint: every key group starts from it
        from sparkstate.engine.broadcast import BroadcastStore

        spec = replace(spec, initial_broadcast=BroadcastStore(spec.broadcast_dir).save_content(broadcast_content))
    elif restore is None and spec.broadcast_dir is not None:
        spec = replace(spec, initial_broadcast=_restored_broadcast(checkpoint))
    # an unreachable database or a table that does not fit stops the job here, before Spark starts
    job = open_database_sinks(job, checkpoint, native=chosen.path == NATIVE, restored_from=restored_id,
                              partitions=partitions)
    check_file_sink(job, checkpoint, restoring=restore is not None)
    if restore is not None:
        for note in restore_warnings(job, restore.savepoint.meta):
            result.warnings.append(note)
            if on_notice is not None:
                on_notice(note)
    recorded = database_writers(job)
    if recorded:
        meta["sinks"] = recorded  # what a savepoint of the stopped job records of them
    # a checkpoint of another job, a finished run and a read-only or full directory are
    # found before Spark starts (10 s and more on a small machine)
    result.warnings += check_or_write(checkpoint, meta)

    marker = spec.end_watermark is not None
    end = _input_ends(job, spec)
    if _already_complete(checkpoint, end):
        result.completed = result.already_complete = True
        return result
    checkpoint.ensure_writable()

    spark = spark or get_spark(ui=spark_ui, parallelism=partitions, log_file=log_file)
    ui = driver(spark).ui_url()
    if ui and on_notice is not None:
        on_notice(f"Spark UI: {ui}")
    claim_outputs(job, checkpoint, spark)
    spec = replace(spec, output_arrow=output_arrow(job))

    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", state_store_class(job.settings.state_backend))
    conf = job.settings.checkpoint.spark_conf()
    # a RocksDB option an earlier job of this session set, and this one does not, is Spark's default again
    for key in _ROCKSDB_SET - set(conf):
        spark.conf.unset(key)
    for key, value in conf.items():
        spark.conf.set(key, value)
    _ROCKSDB_SET.update(k for k in conf if k.startswith("spark.sql.streaming.stateStore.rocksdb.") and
                        "changelogCheckpointing" not in k)
    if chosen.path == NATIVE:
        from sparkstate.runtime.streaming.native_windows import build_native_query

        writer = build_native_query(job, spark, checkpoint, marker, result.batch_side_outputs, result.warnings,
                                    refused_counts=result.batch_refused)
    else:
        writer = build_query(job, spec, spark, checkpoint, result.batch_side_outputs, result.warnings, restore,
                             refused_counts=result.batch_refused)

    recorder = CheckpointRecorder(checkpoint)
    # a restored run's first batch starts at the savepoint's offset, not at 0
    first_offset = restored_offset(source, restore.savepoint.meta if restore is not None else None)
    requests = RequestWatch(checkpoint)
    seen = -1
    shown = None  # the last savepoint on_notice was told of
    pruned = time.monotonic()
    keep_broadcast = frozenset([spec.initial_broadcast] if spec.initial_broadcast else [])

    last_report: tuple | None = ()  # (batch id, time) of the last report looked at (None: none yet)

    def take_progress() -> None:
        nonlocal seen, pruned, last_report
        # one report is fetched from the JVM on each look, and Spark's recent ones (up to 100,
        # each a py4j call and a JSON parse) only when it is new: the loop looks ten times a
        # second, and the recent ones cost the driver a core's tenth on a long run
        last = query.lastProgress
        report = None if last is None else (last["batchId"], last["timestamp"])
        if report == last_report:
            return
        last_report = report
        for p in _progress_dicts(query):
            if p["batchId"] > seen and _ran(p):
                seen = p["batchId"]
                _account(result, p, batch_events(job.source_spec, p, first_offset))
                p["inputWaiting"] = input_waiting(job.source_spec, p)
                _record_checkpoint(result, recorder, p)
                if on_progress is not None:
                    on_progress(p)
        if spec.broadcast_dir is not None and time.monotonic() - pruned > PRUNE_SECONDS:
            pruned = time.monotonic()
            try:
                checkpoint.prune_broadcast(keep_broadcast)
            except OSError as exc:  # the job goes on; the files stay until a later try succeeds
                note = f"old broadcast state files in {spec.broadcast_dir} could not be deleted: {exc}"
                if note not in result.warnings:
                    result.warnings.append(note)

    started = time.monotonic()
    # how the run ends goes into the checkpoint: the metrics endpoint ends with the run
    with recorded_run(checkpoint, result), ctrl_c_stops() as interrupted:
        query = writer.start()
        try:
            while True:
                take_progress()
                if not query.isActive:
                    exc = query.exception()
                    if exc is not None:
                        problem = checkpoint.diagnose_failure()
                        if problem is not None:
                            raise problem from None
                        batch, _ = checkpoint.last_committed_offset()
                        read = batch_input(checkpoint, 0 if batch is None else batch + 1)
                        raise clean_failure(exc, checkpoint.root, batch, read) from None
                    result.completed = True
                    break
                if _end_reached(result.progress, end) or (until is not None and until(result)):
                    result.completed = True
                    break
                if timeout is not None and time.monotonic() - started > timeout:
                    break
                lock.check()
                if interrupted.is_set():
                    result.warnings.append("interrupted: the run stopped; run again to resume from the checkpoint")
                    break
                request = requests.poll()
                if request is not None:
                    query, stopped = _serve(request, query, writer, job, checkpoint, spark, result)
                    take_progress()  # the batches up to the savepoint's (and one a stop ran to its end)
                    if result.savepoint is not None and result.savepoint.get("location") != shown and on_notice is not None:
                        shown = result.savepoint.get("location")
                        on_notice(describe_savepoint(result.savepoint)
                                  + ("; the job stopped after it" if stopped else "; the job goes on"))
                    if stopped:
                        break
                    continue
                time.sleep(0.1)
        finally:
            # the run's time is the input's processing time; stopping the query is not part of it
            result.seconds = time.monotonic() - started
            try:
                query.stop()
            except Exception:
                pass
    take_progress()  # a batch that committed between the last look and the stop
    return result


def _serve(request: Request, query: Any, writer: Any, job: Job, checkpoint: CheckpointDir, spark: Any,
           result: RunResult) -> tuple[Any, bool]:
    """Take the savepoint ``request`` asks for (``savepoint_requests.py``), answer it and put it
    on ``result.savepoint``; with ``request.stop``, stop the query after a committed batch
    first. Returns the query (a stopped or restarted one) and whether the run ends with the
    savepoint."""
    from sparkstate.runtime.io.sinks import database_writers
    from sparkstate.runtime.savepoints.take import take_savepoint
    from sparkstate.runtime.streaming.query import checkpointed

    answer(checkpoint, request, "accepted")
    if result.plan == NATIVE:
        answer(checkpoint, request, "failed", error=(
            f"job {job.name!r} runs on the native window path (Spark SQL's own aggregation state, which has no key "
            "groups), so its state cannot be saved; run it with --window-path python to take savepoints"))
        return query, False
    try:
        if request.stop:
            query, note = stop_between_batches(query, lambda: writer.trigger(once=True).start(), checkpoint)
            if query.exception() is not None:
                answer(checkpoint, request, "failed", error="the job failed while stopping; see the run's output")
                return query, False  # the loop reports the failure
            if note:
                result.warnings.append(note)
        writers = database_writers(job, tops=True)
        meta = take_savepoint(checkpoint.root, target=request.target, batch=request.batch, spark=spark,
                              savepoint_dir=request.savepoint_dir, extra={"sinks": writers} if writers else None)
    except Exception as exc:
        answer(checkpoint, request, "failed", error=str(exc) if isinstance(exc, SparkStateError) else repr(exc))
        note = f"a savepoint was asked for ({request.asker}) and failed: {exc}"
        if request.stop and not query.isActive and query.exception() is None:
            note += "; the job goes on"  # stopped for the savepoint: started again with its own trigger
            query = checkpointed(writer, job, checkpoint).start()
        result.warnings.append(note)
        return query, False
    summary = {k: v for k, v in meta.items() if k != "files"}
    answer(checkpoint, request, "done", savepoint=summary)
    result.savepoint = summary
    result.stopped_with_savepoint = request.stop
    return query, request.stop


def describe_savepoint(meta: dict) -> str:
    """One line for the user: where a savepoint is and what it holds."""
    from sparkstate.runtime.run.terminal import human_bytes

    return (f"savepoint {meta.get('location')}: batch {meta.get('batch')}, {meta.get('keys', 0):,} keys, "
            f"{human_bytes(meta.get('bytes') or 0)}, taken in {meta.get('seconds', 0.0):.1f} s")


def _resumes_restore(checkpoint: CheckpointDir, location: str) -> bool:
    """Whether the checkpoint was started from this savepoint and has committed batches since:
    running it again with the same ``from_savepoint`` resumes it."""
    if not checkpoint.has_metadata() or not checkpoint.committed_batches():
        return False
    try:
        restored = checkpoint.read_metadata().get("restored_from") or {}
    except (OSError, ValueError):
        return False
    return bool(restored) and str(restored.get("savepoint", "")).rstrip("/") == _normal(location)


def _restored_id(checkpoint: CheckpointDir, committed: bool = True) -> str | None:
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


def _normal(location: str) -> str:
    from sparkstate.runtime.checkpoint.storage import normalize

    return normalize(location).rstrip("/")


def _record_checkpoint(result: RunResult, recorder: CheckpointRecorder, p: dict) -> None:
    """Measure and log the checkpoint of a committed batch; the figures go on the result and,
    as ``p["checkpoint"]``, to the progress line."""
    try:
        stats = recorder.record(p)
    except OSError as exc:
        raise recorder.checkpoint.failed_write(exc) from exc
    if stats is not None:
        result.add_checkpoint(stats)
        # its fields are numbers and text: a shallow copy (``asdict``'s deep one costs more than the rest)
        p["checkpoint"] = {f.name: getattr(stats, f.name) for f in fields(stats)}


def _ran(progress: dict) -> bool:
    """Whether a progress report is of a micro-batch that ran. A trigger that found no new
    input reports the *next* batch id without running it; counting it would hide the real
    batch of that id (its events and side outputs) when it comes."""
    return "addBatch" in (progress.get("durationMs") or {})


def _account(result: RunResult, p: dict, events: int) -> None:
    """Add a batch that ran to ``result``, and complete its progress report ``p`` with
    sparkstate's own figures: ``events`` read, ``sideOutputs`` and ``rowsOut`` written."""
    from sparkstate.runtime.io.sinks import observed_rows_out

    p["events"] = events
    out = observed_rows_out(p)
    # taken, not read: the count is the batch's alone, and a run of months must not keep one per batch
    refused = result.batch_refused.pop(p.get("batchId", -1), 0)
    if out is not None:
        p["rowsOut"] = max(0, out - refused)
    result.add_progress(p)  # its side outputs too: kept for the last batches only, in totals for all
    result.batches += 1
    result.events += events
    if events and result.first_batch_seconds == 0.0:
        result.first_batch_seconds = p.get("durationMs", {}).get("triggerExecution", 0) / 1000.0
    sink_rows = rows_out(p)
    if sink_rows is not None:
        result.output_rows = (result.output_rows or 0) + sink_rows
    ops = p.get("stateOperators") or []
    if ops:
        result.state_rows = ops[0].get("numRowsTotal")
        result.state_bytes = state_bytes(ops[0])

