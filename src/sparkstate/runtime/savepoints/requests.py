"""Savepoints on request: of a running job (while it goes on, or stopping it after a
committed batch) and of a stopped one.

``sparkstate savepoint JOB`` (and :func:`savepoint`) first tries to take the checkpoint's run
lock (``run_lock.py``). When it gets it, no run uses the checkpoint: it takes the savepoint of
a committed batch itself, holding the lock so that no run starts or deletes the checkpoint
meanwhile. When a run holds the lock, it asks that run, through two files in the checkpoint's
own folder (``sparkstate/``):

* ``savepoint-request.json``: the request (an id, whether to stop, the batch, where to write
  it, and when the asker gives up waiting); created only when none is pending, so two askers
  do not overwrite each other;
* ``savepoint-response.json``: the run's answer to that id: ``accepted``, then ``done`` with
  the savepoint's metadata, or ``failed`` with the error.

The run looks for a request between two looks at its query's progress (``run/loop.py``),
takes it (deleting the file), and answers. A stop waits for the query's running batch to
commit (or for it to be idle) and stops it there, running to its end a batch the stop
interrupted (:func:`stop_between_batches`): the savepoint is then the state,
timers, watermark and source offsets of the last batch the sinks wrote, so a restored run
writes nothing twice and misses nothing. A request nobody waits for any more (its asker gave
up) is dropped unanswered; when the run ends before it answers, the asker takes the savepoint
of the stopped checkpoint itself, and a request deleted unanswered (a run starting with
``--fresh`` clears the directory) is left again.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from sparkstate.connectors.credentials import mask
from sparkstate.errors import CheckpointInUseError, SavepointError
from sparkstate.runtime.checkpoint.directory import CheckpointDir
from sparkstate.runtime.checkpoint.run_lock import RunLock, read_holder

REQUEST_FILE = "savepoint-request.json"
RESPONSE_FILE = "savepoint-response.json"
#: how long an asker waits for the running job's answer unless told otherwise
DEFAULT_WAIT_SECONDS = 600.0
#: how long a request may be gone unanswered before the asker leaves it again
LOST_REQUEST_SECONDS = 5.0
#: how long a stop waits for the query to be between two batches (idle, or its batch just
#: committed) before it stops it anyway, inside a batch that long (and runs that batch to its end)
IDLE_WAIT_SECONDS = 30.0


@dataclass(frozen=True)
class Request:
    """A savepoint asked of the run holding a checkpoint."""

    id: str
    stop: bool = False
    batch: int | None = None
    target: str | None = None
    savepoint_dir: str | None = None
    #: epoch seconds after which the asker no longer waits (the run then drops the request)
    expires: float = 0.0
    #: who asked, for messages ("pid P on host H")
    asker: str = ""

    @classmethod
    def new(cls, *, stop: bool = False, batch: int | None = None, target: str | None = None,
            savepoint_dir: str | None = None, wait: float = DEFAULT_WAIT_SECONDS) -> Request:
        return cls(uuid.uuid4().hex[:12], stop, batch, target, savepoint_dir, time.time() + wait,
                   f"pid {os.getpid()} on host {socket.gethostname()}")

    @classmethod
    def parse(cls, text: str) -> Request | None:
        try:
            data = json.loads(text)
            return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})
        except (ValueError, TypeError, KeyError):
            return None

    @property
    def expired(self) -> bool:
        return time.time() > self.expires


def _read(checkpoint: CheckpointDir, name: str) -> str | None:
    try:
        return checkpoint.storage.read_text(CheckpointDir.OWN_DIR, name)
    except (OSError, ValueError):
        return None


def post(checkpoint: CheckpointDir, request: Request) -> None:
    """Leave ``request`` for the run; refused while another asker's request is pending."""
    data = json.dumps(asdict(request)).encode()
    for _ in range(3):
        if checkpoint.storage.create_new(data, CheckpointDir.OWN_DIR, REQUEST_FILE):
            return
        text = _read(checkpoint, REQUEST_FILE)
        if text is None:
            continue  # taken meanwhile
        other = Request.parse(text)
        if other is None or other.expired:
            checkpoint.storage.delete(CheckpointDir.OWN_DIR, REQUEST_FILE)  # its asker gave up
            continue
        raise SavepointError(
            f"another savepoint of {checkpoint.root} is being asked for ({other.asker}, request {other.id}); "
            "wait for it to be answered, then ask again"
        )
    raise SavepointError(f"cannot leave a savepoint request in {checkpoint.root}: it changed while being written; "
                         "ask again")


def take(checkpoint: CheckpointDir) -> Request | None:
    """The pending request, removed so that it is served once (the run's side); a request whose
    asker stopped waiting, or that cannot be read, is removed and not served."""
    text = _read(checkpoint, REQUEST_FILE)
    if text is None:
        return None
    checkpoint.storage.delete(CheckpointDir.OWN_DIR, REQUEST_FILE)
    request = Request.parse(text)
    return None if request is None or request.expired else request


def withdraw(checkpoint: CheckpointDir, request: Request) -> bool:
    """Remove ``request`` if the run has not taken it yet; whether it was still there."""
    text = _read(checkpoint, REQUEST_FILE)
    mine = text is not None and (Request.parse(text) or Request("")).id == request.id
    if mine:
        checkpoint.storage.delete(CheckpointDir.OWN_DIR, REQUEST_FILE)
    return mine


def answer(checkpoint: CheckpointDir, request: Request, status: str, **fields: Any) -> None:
    """The run's answer to ``request``: ``accepted``, ``done`` (``savepoint=`` its metadata) or
    ``failed`` (``error=``)."""
    body = {"id": request.id, "status": status, **fields}
    try:
        checkpoint.storage.write_atomic(json.dumps(body, default=str).encode(), CheckpointDir.OWN_DIR, RESPONSE_FILE)
    except OSError:
        pass  # the asker times out and says so; the run goes on


def read_answer(checkpoint: CheckpointDir, request: Request) -> dict | None:
    text = _read(checkpoint, RESPONSE_FILE)
    try:
        body = json.loads(text) if text is not None else None
    except ValueError:
        return None
    return body if isinstance(body, dict) and body.get("id") == request.id else None


# --------------------------------------------------------------------------- the run's side


class RequestWatch:
    """Looks for a request at most every ``every`` seconds (a local directory: at every look
    of the run loop; a remote one costs a round trip)."""

    def __init__(self, checkpoint: CheckpointDir) -> None:
        from sparkstate.runtime.checkpoint.storage import is_local

        self.checkpoint = checkpoint
        self.every = 0.0 if is_local(checkpoint.root) else 2.0
        self._next = 0.0

    def poll(self) -> Request | None:
        now = time.monotonic()
        if now < self._next:
            return None
        self._next = now + self.every
        return take(self.checkpoint)


def batch_logs(checkpoint: CheckpointDir) -> tuple[int | None, int | None]:
    """``(last planned, last committed)`` batch ids: the offset log's and the commit log's."""
    def top(log: str) -> int | None:
        return max((int(e.name) for e in checkpoint.storage.list(log) if e.name.isdigit()), default=None)

    return top(CheckpointDir.OFFSETS), top(CheckpointDir.COMMITS)


def interrupted_batch(checkpoint: CheckpointDir) -> int | None:
    """The batch the offset log holds and the commit log does not (a stop interrupted it), or None."""
    planned, committed = batch_logs(checkpoint)
    if planned is None or (committed is not None and planned <= committed):
        return None
    return planned


def _trigger_ended(query: Any) -> tuple[Any, Any] | None:
    """Which trigger the query last finished (its last progress report's batch and time)."""
    p = query.lastProgress
    return None if p is None else (p["batchId"], p["timestamp"])


def _wait_idle(query: Any, seconds: float) -> None:
    """Until the query is between two batches: it is idle, or a trigger ended since the call
    (a batch committed; with batches back to back the next one starts at once, and a stop may
    interrupt it), or ``seconds`` passed (a batch that long is interrupted)."""
    deadline = time.monotonic() + seconds
    try:
        before = _trigger_ended(query)
    except Exception:
        return  # the query stopped meanwhile
    while query.isActive and time.monotonic() < deadline:
        try:
            if not query.status.get("isTriggerActive", True) or _trigger_ended(query) != before:
                return
        except Exception:
            return
        time.sleep(0.01)


def stop_between_batches(
    query: Any,
    run_one_batch: Callable[[], Any],
    checkpoint: CheckpointDir,
    *,
    idle_wait: float = IDLE_WAIT_SECONDS,
    attempts: int = 3,
    batch_wait: float = 600.0,
) -> tuple[Any, str | None]:
    """Stop ``query`` after a committed batch: it is stopped as soon as it is idle or the batch
    it runs commits (or after ``idle_wait`` seconds of one batch), so a job whose batches follow
    each other without a pause stops within two batches too. A batch the stop interrupted
    (planned in the offset log, not committed, maybe partly written by a sink: with batches back
    to back, the next one has often started) is run to its end by ``run_one_batch()`` (the query
    started again with a trigger of one batch, which runs exactly the interrupted one). Returns the last
    query (stopped; a failed one carries its exception) and a warning when the batch could not
    be completed in ``attempts`` tries."""
    for _ in range(attempts):
        _wait_idle(query, idle_wait)
        query.stop()
        if query.exception() is not None or interrupted_batch(checkpoint) is None:
            return query, None
        query = run_one_batch()
        query.awaitTermination(batch_wait)
        if query.isActive:
            query.stop()
        if query.exception() is not None or interrupted_batch(checkpoint) is None:
            return query, None
    batch = interrupted_batch(checkpoint)
    return query, (f"the stop interrupted batch {batch}, and running it to its end failed {attempts} times: the "
                   f"savepoint is of batch {batch - 1 if batch else '-'}, and a sink may hold part of batch {batch}'s "
                   "output, which a restored run writes again")


# --------------------------------------------------------------------------- the asker's side


def describe_holder(holder: dict | None) -> str:
    if not holder:
        return "a run"
    job = f"job {holder.get('job')!r}, " if holder.get("job") else ""
    return f"the run of {job}pid {holder.get('pid')} on host {holder.get('host')}"


def savepoint(
    checkpoint_dir: str | os.PathLike[str],
    *,
    stop: bool = False,
    batch: int | None = None,
    target: str | None = None,
    savepoint_dir: str | None = None,
    wait: float = DEFAULT_WAIT_SECONDS,
    spark: Any = None,
    log_file: str | os.PathLike[str] | None = None,
    job: str | None = None,
    on_wait: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Take a savepoint of the job whose checkpoint is ``checkpoint_dir``: asked of the run
    that holds the checkpoint (``stop``: the run stops after a committed batch), or, when no run
    does, taken from the stopped checkpoint (``batch``: any committed batch it retains; default
    the last). Returns the savepoint's metadata (``location``, ``batch``, ``keys``, ``bytes``,
    ``seconds``...), with ``taken_by`` (the run, or this process), ``stopped`` (a run was
    stopped) and ``running`` (the run goes on). ``job``: the job the checkpoint must belong to.
    ``on_wait`` gets what the wait is for, once."""
    from sparkstate.runtime.checkpoint.storage import is_local, normalize

    if stop and batch is not None:
        raise SavepointError("--stop takes the savepoint of the last batch the run commits; --batch N is for a "
                             "savepoint of a stopped job or of a running one that goes on. Give one of the two")
    target = normalize(target) if target is not None and is_local(target) else target
    savepoint_dir = normalize(savepoint_dir) if savepoint_dir is not None and is_local(savepoint_dir) else savepoint_dir
    if CheckpointDir.needs_spark(checkpoint_dir) and spark is None:
        spark = _spark(log_file)
    checkpoint = CheckpointDir.open(checkpoint_dir, spark)
    if not checkpoint.has_metadata():
        what = "does not exist" if not checkpoint.exists() else "is not a sparkstate checkpoint (no sparkstate.json)"
        raise SavepointError(f"checkpoint directory {checkpoint.root} {what}: give the checkpoint directory of a job "
                             "that ran (--checkpoint DIR)")
    try:
        owner = checkpoint.read_metadata().get("job")
    except (OSError, ValueError):
        owner = None  # take_savepoint says what is wrong with it
    if job is not None and owner not in (None, job):
        raise SavepointError(f"checkpoint {checkpoint.root} belongs to job {owner!r}, not {job!r}: give {job!r}'s "
                             "checkpoint directory (--checkpoint DIR)")
    job = job or str(owner or "savepoint")
    if target is not None and _exists(target, spark):
        raise SavepointError(f"savepoint {target} already exists; savepoints are never overwritten: choose another "
                             "--target (or none: a new name is made)")
    lock = _try_lock(checkpoint, job)
    if lock is not None:
        with lock:
            return _offline(checkpoint, batch, target, savepoint_dir, spark, log_file, stopped=False)
    request = Request.new(stop=stop, batch=batch, target=target, savepoint_dir=savepoint_dir, wait=wait)
    post(checkpoint, request)
    try:
        holder = describe_holder(read_holder(checkpoint.storage))
        if on_wait is not None:
            on_wait(f"{holder} holds {checkpoint.root}: asked it for a savepoint"
                    + (" and to stop after its next committed batch" if stop else " (the job goes on)"))
        return _await(checkpoint, request, holder, wait, batch, target, savepoint_dir, spark, log_file, job)
    except KeyboardInterrupt:
        withdraw(checkpoint, request)  # nobody waits for it now: a run that has not taken it never will
        raise


def _await(checkpoint: CheckpointDir, request: Request, holder: str, wait: float, batch: int | None,
           target: str | None, savepoint_dir: str | None, spark: Any, log_file: Any, job: str) -> dict[str, Any]:
    deadline = time.monotonic() + wait
    accepted = False
    missing_since: float | None = None
    while time.monotonic() < deadline:
        reply = read_answer(checkpoint, request)
        status = (reply or {}).get("status")
        if status is None and _read(checkpoint, REQUEST_FILE) is None:
            # gone unanswered: a run answers at once what it takes, so the request was deleted
            # with the directory's own folder (a run starting with --fresh): leave it again
            missing_since = missing_since or time.monotonic()
            if time.monotonic() - missing_since > LOST_REQUEST_SECONDS:
                post(checkpoint, request)
                missing_since = None
        else:
            missing_since = None
        if status == "done":
            return {**reply["savepoint"], "taken_by": holder, "stopped": request.stop,  # type: ignore[index]
                    "running": not request.stop}
        if status == "failed":
            raise SavepointError(f"{holder} could not take the savepoint: {reply['error']}")  # type: ignore[index]
        accepted = accepted or status == "accepted"
        lock = _try_lock(checkpoint, job)
        if lock is not None:
            # the run ended before it answered: the checkpoint is stopped now
            with lock:
                if read_answer(checkpoint, request) is None:
                    withdraw(checkpoint, request)
                    return _offline(checkpoint, batch, target, savepoint_dir, spark, log_file, stopped=request.stop,
                                    by=f"{holder} ended before it answered")
            continue
        time.sleep(0.2)
    if withdraw(checkpoint, request):
        raise SavepointError(
            f"{holder} did not take the savepoint request within {wait:g} s (a run looks for requests once its "
            "query runs: it may still be starting Spark, or be a sparkstate older than this command). The request is "
            "withdrawn; ask again, with a longer --timeout if the run is busy"
        )
    raise SavepointError(
        f"{holder} took the savepoint request{' and is stopping' if request.stop and accepted else ''} but has not "
        f"answered within {wait:g} s; it may still write the savepoint (into {savepoint_dir or target or 'its default'}"
        "): look there, or ask again with a longer --timeout"
    )


def _offline(checkpoint: CheckpointDir, batch: int | None, target: str | None, savepoint_dir: str | None,
             spark: Any, log_file: Any, *, stopped: bool, by: str = "") -> dict[str, Any]:
    from sparkstate.runtime.savepoints.take import take_savepoint

    spark = spark or _spark(log_file)
    meta = take_savepoint(checkpoint.root, target=target, batch=batch, spark=spark, savepoint_dir=savepoint_dir,
                          extra=recorded_sinks(checkpoint))
    return {**meta, "taken_by": by or "this process (no run holds the checkpoint)", "stopped": stopped,
            "running": False}


def recorded_sinks(checkpoint: CheckpointDir) -> dict[str, Any]:
    """The database writers the checkpoint's metadata records (``sinks``), for a savepoint of
    a stopped job (a running one adds each writer's top marker)."""
    try:
        sinks = checkpoint.read_metadata().get("sinks")
    except (OSError, ValueError):
        return {}
    if isinstance(sinks, list):  # masked again: a checkpoint written before URLs of any shape were masked may hold a password
        sinks = [{k: mask(v) if k in ("database", "kafka") else v for k, v in e.items()} if isinstance(e, dict) else e
                 for e in sinks]
    return {"sinks": sinks} if sinks else {}


def _try_lock(checkpoint: CheckpointDir, job: str) -> RunLock | None:
    try:
        return checkpoint.lock(job)
    except CheckpointInUseError:
        return None


def _exists(location: str, spark: Any) -> bool:
    from sparkstate.runtime.checkpoint.storage import is_local
    from sparkstate.runtime.savepoints.take import directory_of

    if spark is None and not is_local(location):
        return False  # the writer refuses it later, without a Spark session started for this
    directory = directory_of(location, spark)
    return directory.exists() and bool(directory.names())


def _spark(log_file: Any) -> Any:
    from sparkstate.runtime.session import get_spark

    return get_spark(log_file=log_file)
