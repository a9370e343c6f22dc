"""The fourth phase of a run: the loop that watches the started query until its input is
done, a condition holds, time is up, Ctrl-C, or a savepoint request stops it.

Each look reads the query's last progress report; a new one has the recent reports fetched,
each batch that ran accounted (``accounting.py``) and its checkpoint's figures recorded. Over
Spark Connect the batches' letters (``io/mailbox.py``) are taken first. A broadcast job's
unreferenced broadcast state files are pruned once a minute. Requests for savepoints from
other processes (``savepoints/requests.py``) are served between two looks.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sparkstate.api.job import JobDescription as Job
from sparkstate.errors import SparkStateError
from sparkstate.runtime.checkpoint.directory import CheckpointDir
from sparkstate.runtime.checkpoint.run_record import recorded_run
from sparkstate.runtime.checkpoint.stats import CheckpointRecorder
from sparkstate.runtime.io.mailbox import Mailbox
from sparkstate.runtime.run.accounting import account, progress_dicts, ran, record_checkpoint
from sparkstate.runtime.run.failures import batch_input, clean_failure
from sparkstate.runtime.run.finish import finish
from sparkstate.runtime.run.interrupts import ctrl_c_stops
from sparkstate.runtime.run.open import Run
from sparkstate.runtime.run.result import RunResult
from sparkstate.runtime.savepoints.requests import Request, RequestWatch, answer, stop_between_batches
from sparkstate.runtime.session.connect import abandon, server_lost, server_lost_error
from sparkstate.runtime.session.driver import driver
from sparkstate.runtime.streaming.planner import NATIVE

#: how often a running broadcast job deletes the broadcast state files no retained checkpoint
#: version refers to (``CheckpointDir.prune_broadcast``)
PRUNE_SECONDS = 60.0

#: where a bounded job's inputs end: ``(index of the source in Spark's progress and offset log,
#: the offset read at its end)``; the connected input is the query's last source
Ends = list[tuple[int, int]]


def input_ends(job: Job, spec: Any) -> Ends | None:
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


def end_reached(entries: list[dict], ends: Ends | None) -> bool:
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


def already_complete(checkpoint: CheckpointDir, ends: Ends | None) -> bool:
    """Whether the checkpoint's last committed batch read every input to its end."""
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


class Watch:
    """What the loop has seen of the query's progress, and the look that takes a new report."""

    def __init__(self, run: Run, mailbox: Mailbox | None) -> None:
        from sparkstate.runtime.io.sources import restored_offset

        self.run, self.mailbox = run, mailbox
        assert run.job.source_spec is not None, "a validated job has a source"
        self.recorder = CheckpointRecorder(run.checkpoint)
        # a restored run's first batch starts at the savepoint's offset, not at 0
        self.first_offset = restored_offset(run.job.source_spec, run.restore.savepoint.meta if run.restore else None)
        self.seen = -1
        self.last_report: tuple | None = ()  # (batch id, time) of the last report looked at (None: none yet)
        self.pruned = time.monotonic()
        spec = run.spec
        self.keep_broadcast = frozenset([spec.initial_broadcast] if spec.initial_broadcast else [])

    def take_progress(self, query: Any) -> None:
        """Account the batches the query reported since the last look."""
        from sparkstate.runtime.io.sinks import deliver
        from sparkstate.runtime.io.sources import batch_events, input_waiting

        run, result = self.run, self.run.result
        # one report is fetched from the JVM on each look, and Spark's recent ones (up to 100,
        # each a py4j call and a JSON parse) only when it is new: the loop looks ten times a
        # second, and the recent ones cost the driver a core's tenth on a long run
        last = query.lastProgress
        report = None if last is None else (last["batchId"], last["timestamp"])
        if report == self.last_report:
            return
        self.last_report = report
        if self.mailbox is not None:
            deliver(self.mailbox, run.job, result.batch_side_outputs, result.batch_refused, result.warnings)
        source = run.job.source_spec
        for p in progress_dicts(query):
            if p["batchId"] > self.seen and ran(p):
                self.seen = p["batchId"]
                account(result, p, batch_events(source, p, self.first_offset))
                p["inputWaiting"] = input_waiting(source, p)
                record_checkpoint(result, self.recorder, p)
                if run.options.on_progress is not None:
                    run.options.on_progress(p)
        self._prune()

    def _prune(self) -> None:
        directory = self.run.spec.broadcast_dir
        if directory is None or time.monotonic() - self.pruned <= PRUNE_SECONDS:
            return
        self.pruned = time.monotonic()
        try:
            self.run.checkpoint.prune_broadcast(self.keep_broadcast)
        except OSError as exc:  # the job goes on; the files stay until a later try succeeds
            note = f"old broadcast state files in {directory} could not be deleted: {exc}"
            if note not in self.run.result.warnings:
                self.run.result.warnings.append(note)


def watch(run: Run, writer: Any, mailbox: Mailbox | None, ends: Ends | None) -> RunResult:
    """Start the query and watch it until the run ends; returns the run's result."""
    job, checkpoint, result, options = run.job, run.checkpoint, run.result, run.options
    looks = Watch(run, mailbox)
    requests = RequestWatch(checkpoint)
    shown = None  # the last savepoint on_notice was told of
    started = time.monotonic()
    until: Callable[[RunResult], bool] | None = options.until
    lost = False  # the Spark Connect server stopped answering: its query is gone with it
    # how the run ends goes into the checkpoint: the metrics endpoint ends with the run
    with recorded_run(checkpoint, result), ctrl_c_stops() as interrupted:
        query = writer.start()
        try:
            while True:
                looks.take_progress(query)
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
                if end_reached(result.progress, ends) or (until is not None and until(result)):
                    result.completed = True
                    break
                if options.timeout is not None and time.monotonic() - started > options.timeout:
                    break
                run.lock.check()
                if interrupted.is_set():
                    result.warnings.append("interrupted: the run stopped; run again to resume from the checkpoint")
                    break
                request = requests.poll()
                if request is not None:
                    query, stopped = _serve(request, query, writer, job, checkpoint, run.spark, result)
                    looks.take_progress(query)  # the batches up to the savepoint's (and one a stop ran to its end)
                    if result.savepoint is not None and result.savepoint.get("location") != shown and options.on_notice:
                        shown = result.savepoint.get("location")
                        options.on_notice(describe_savepoint(result.savepoint)
                                          + ("; the job stopped after it" if stopped else "; the job goes on"))
                    if stopped:
                        break
                    continue
                time.sleep(0.1)
        except Exception as exc:
            if not (driver(run.spark).connect and server_lost(exc)):
                raise
            lost = True
            abandon(run.spark)
            raise server_lost_error(exc, job.name, checkpoint.root) from None
        finally:
            finish(query, result, started, stop=not lost)
    looks.take_progress(query)  # a batch that committed between the last look and the stop
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


