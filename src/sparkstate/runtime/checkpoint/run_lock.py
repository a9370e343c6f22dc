"""One checkpoint, one run: the lock a run holds on its checkpoint directory from before
``--fresh`` or the database setup until its query has stopped.

Two runs on one checkpoint would both write its offset and commit logs, its state and its
metadata, and a database sink's markers; Spark notices only late, in a race between the two
JVMs. So a run takes the checkpoint's lock first, and a second run fails at once with an
error naming the first (job, pid, host, start time).

* A local directory: ``fcntl.flock`` on ``sparkstate.lock`` in it. The kernel drops the lock
  when the process ends however it ends, so a killed run never leaves the directory locked;
  the file's content (the holder) is only what the error shows.
* Any other file system (HDFS, S3...): a lease file ``sparkstate.lease`` holding the owner's
  host, pid and start time, created only when absent (HDFS does so atomically) and renewed
  every :data:`RENEW_SECONDS` while the run goes on. A lease not renewed for
  :data:`LEASE_SECONDS`, or whose owner is a process of this host that no longer runs, is
  stale and taken over; the run that finds its lease taken stops.

Where the lock cannot keep a run of another host out, the run is refused
(:class:`CheckpointLockError`) unless :data:`UNSAFE_LOCK_ENV` says the user keeps to one run
at a time themselves:

* An NFS mount with ``nolock`` or ``local_lock=all|flock`` (or SMB with ``nobrl``): ``flock``
  there locks this host only, and a run on another host would not see it (found in
  ``/proc/self/mountinfo``; runs of this host still keep each other out).
* An object store (``s3a://``, ``gs://``, ``abfs://``... anything but HDFS): its create is not
  known to be exclusive, so two runs starting together can both write the lease, and the
  one that lost learns it only at its next renewal, up to :data:`RENEW_SECONDS` later, after
  both have written to the checkpoint.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import threading
import time
import uuid
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlparse

from sparkstate.errors import CheckpointInUseError, CheckpointLockError
from sparkstate.runtime.checkpoint.file_lock import try_flock
from sparkstate.runtime.checkpoint.storage import LocalStorage, Storage

LOCK_FILE = "sparkstate.lock"
LEASE_FILE = "sparkstate.lease"
#: files of the lock that ``--fresh`` keeps (deleting a held lock's file would let another run in)
LOCK_FILES = (LOCK_FILE, LEASE_FILE)
#: a lease older than this without renewal is stale (generous: clocks of hosts differ)
LEASE_SECONDS = 120.0
RENEW_SECONDS = 20.0
#: set (``1``) to run where the lock cannot keep a second run out, as one who keeps to one run
#: at a time on the checkpoint
UNSAFE_LOCK_ENV = "SPARKSTATE_UNSAFE_LOCK"
#: the mounts of this process, and what the local lock learns of its directory's from them
MOUNTINFO = "/proc/self/mountinfo"
#: URI schemes of file systems whose create-if-absent is atomic (HDFS's name node decides it)
ATOMIC_CREATE = ("hdfs", "viewfs", "webhdfs", "swebhdfs")
#: mount options under which ``flock`` stays on this host: (file system types, options)
_HOST_ONLY_FLOCK = ((("nfs", "nfs4"), ("nolock", "local_lock=all", "local_lock=flock")),
                    (("cifs", "smb3"), ("nobrl",)))


def _accepted() -> bool:
    return os.environ.get(UNSAFE_LOCK_ENV, "").strip().lower() in ("1", "on", "true", "yes")


def _unescape(field: str) -> str:
    """A mountinfo path: spaces, tabs, newlines and backslashes are written as ``\\ooo``."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mount_of(path: str, mountinfo: str) -> tuple[str, str, set[str]] | None:
    """``(mount point, file system type, options)`` of the mount that holds the absolute ``path``,
    from the text of ``/proc/self/mountinfo`` (the deepest mount point above it; the last one
    mounted where several are stacked); None when no line covers it."""
    found = None
    for line in mountinfo.splitlines():
        fields = line.split(" ")
        if "-" not in fields[6:]:
            continue
        sep = fields.index("-", 6)
        point = _unescape(fields[4])
        if not (path == point or path.startswith(point.rstrip("/") + "/")):
            continue
        if found is None or len(point) >= len(found[0]):
            options = {*fields[5].split(","), *(fields[sep + 3].split(",") if len(fields) > sep + 3 else ())}
            found = (point, fields[sep + 1] if len(fields) > sep + 1 else "", options)
    return found


def flock_problem(directory: str, mountinfo: str | None = None) -> str | None:
    """Why ``flock`` in ``directory`` would not keep out a run of another host (its mount keeps
    locks on this host), or None; ``mountinfo`` is the text of :data:`MOUNTINFO` (read when
    None; a system without it is taken at its word)."""
    if mountinfo is None:
        try:
            with open(MOUNTINFO, encoding="utf-8", errors="replace") as f:
                mountinfo = f.read()
        except OSError:
            return None
    mount = mount_of(os.path.realpath(directory), mountinfo)
    if mount is None:
        return None
    point, kind, options = mount
    for kinds, host_only in _HOST_ONLY_FLOCK:
        said = sorted(options & set(host_only))
        if kind in kinds and said:
            return f"it is on {point} ({kind}, mounted with {', '.join(said)}), where flock locks only this host"
    return None


def lease_problem(root: str) -> str | None:
    """Why a lease file at ``root`` (a URI) would not keep out a second run starting together
    with this one (its file system's create is not known to be exclusive), or None."""
    scheme = urlparse(root).scheme.lower()
    if not scheme or scheme in ATOMIC_CREATE:
        return None  # HDFS; a path without a scheme is the tests' stand-in on the local disk
    return (f"it is on {scheme}://, whose create is not known to be exclusive: two runs starting together can both "
            f"write the lease file, and the one that lost learns it only at its next renewal, up to "
            f"{RENEW_SECONDS:.0f} s later, after both wrote to the checkpoint")


def _unsafe(root: str, problem: str, fix: str) -> CheckpointLockError:
    return CheckpointLockError(
        f"checkpoint directory {root} cannot be locked against a second run: {problem}. Fix: {fix}; or, if you make "
        f"sure yourself that one run at a time uses this checkpoint, set {UNSAFE_LOCK_ENV}=1 to run with the lock as "
        "it is; nothing was changed"
    )


def _owner(job: str) -> dict:
    now = time.time()
    return {
        "job": job,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "renewed": now,
        "token": uuid.uuid4().hex,
    }


def _describe(holder: dict | None) -> str:
    if not holder:
        return "another run (it has not said who yet)"
    job = f"job {holder.get('job')!r}, " if holder.get("job") else ""
    return f"another run ({job}pid {holder.get('pid')} on host {holder.get('host')}, started {holder.get('started')})"


def _in_use(root: str, holder: dict | None, how: str) -> CheckpointInUseError:
    stop = (f"stop it (kill {holder.get('pid')} on {holder.get('host')})"
            if holder and holder.get("pid") else "stop it")
    return CheckpointInUseError(
        f"checkpoint directory {root} is in use by {_describe(holder)}. One checkpoint takes one run at a time: "
        f"wait for that run to end or {stop}, or give this run another checkpoint directory; nothing was changed{how}"
    )


def process_alive(pid: int) -> bool:
    """Whether a process of this host with id ``pid`` runs (or may: one of another user)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True
    return True


def _parse(text: str) -> dict | None:
    try:
        holder = json.loads(text)
    except ValueError:
        return None
    return holder if isinstance(holder, dict) else None


class RunLock:
    """A held lock on a checkpoint directory; :meth:`release` (or ``with``) lets it go."""

    def __init__(self, storage: Storage, job: str) -> None:
        self.storage = storage
        self.job = job
        self.owner = _owner(job)
        #: set when another run took this run's lease over (a non-local directory only)
        self.lost = threading.Event()
        self._fd: int | None = None
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    # ------------------------------------------------------------------ taking it

    def acquire(self) -> RunLock:
        """Take the lock; :class:`CheckpointLockError` where it cannot keep another host's run
        out (unless :data:`UNSAFE_LOCK_ENV` accepts that), :class:`CheckpointInUseError` when
        another run holds it."""
        local = isinstance(self.storage, LocalStorage)
        if not _accepted():
            root = self.storage.root
            problem = flock_problem(root) if local else lease_problem(root)
            if problem is not None:
                raise _unsafe(root, problem, "put the checkpoint on a local disk, or mount the share with locking "
                              "(without nolock, local_lock=all|flock or nobrl)" if local else
                              "put the checkpoint on HDFS, or on a local or shared disk path")
        if local:
            self._flock()
        else:
            self._lease()
        return self

    def _flock(self) -> None:
        os.makedirs(self.storage.root, exist_ok=True)
        path = os.path.join(self.storage.root, LOCK_FILE)
        fd = try_flock(path, json.dumps(self.owner).encode())
        if fd is None:
            with open(path, "rb") as f:
                holder = _parse(f.read(4096).decode("utf-8", "replace"))
            raise _in_use(self.storage.root, holder, "")
        self._fd = fd

    def _read_lease(self) -> dict | None:
        try:
            return _parse(self.storage.read_text(LEASE_FILE)) or {}
        except FileNotFoundError:
            return None

    def _stale(self, holder: dict) -> bool:
        if holder.get("host") == socket.gethostname() and isinstance(holder.get("pid"), int):
            if not process_alive(holder["pid"]):
                return True
        renewed = holder.get("renewed")
        return not isinstance(renewed, (int, float)) or time.time() - renewed > LEASE_SECONDS

    def _lease(self) -> None:
        how = f" (a lease not renewed for {LEASE_SECONDS:.0f} s is taken over)"
        for _ in range(3):
            if self.storage.create_new(json.dumps(self.owner).encode(), LEASE_FILE):
                # on a store whose create is not exclusive, the last writer wins: check it is this run
                if (self._read_lease() or {}).get("token") != self.owner["token"]:
                    raise _in_use(self.storage.root, self._read_lease(), how)
                self._renewer = threading.Thread(target=self._renew, name="sparkstate-lease", daemon=True)
                self._renewer.start()
                return
            holder = self._read_lease()
            if holder is None:
                continue  # released meanwhile
            if not self._stale(holder):
                raise _in_use(self.storage.root, holder, how)
            # stale: take it over, unless another run did so since it was read
            if self._read_lease() == holder:
                self.storage.delete(LEASE_FILE)
        raise _in_use(self.storage.root, self._read_lease(), how)

    def _renew(self) -> None:
        while not self._stop.wait(RENEW_SECONDS):
            try:
                holder = self._read_lease()
                if holder is None or holder.get("token") != self.owner["token"]:
                    self.lost.set()
                    return
                self.owner["renewed"] = time.time()
                self.storage.write_atomic(json.dumps(self.owner).encode(), LEASE_FILE)
            except OSError:
                continue  # a passing storage fault: the next renewal tries again

    def check(self) -> None:
        """Raise when another run has taken this run's lease over (it was not renewed in time)."""
        if self.lost.is_set():
            raise CheckpointInUseError(
                f"checkpoint directory {self.storage.root} was taken over by {_describe(self._read_lease())}: "
                f"this run's lease was not renewed for {LEASE_SECONDS:.0f} s. This run stops; the batches it "
                "committed are kept"
            )

    # ------------------------------------------------------------------ letting it go

    def release(self) -> None:
        self._stop.set()
        if self._fd is not None:
            # the file stays: deleting it would let a third run lock a new file beside a waiting one
            with contextlib.suppress(OSError):
                os.close(self._fd)  # closing drops the flock
            self._fd = None
        elif self._renewer is not None:
            self._renewer.join(timeout=5)
            self._renewer = None
            with contextlib.suppress(OSError):
                if (self._read_lease() or {}).get("token") == self.owner["token"]:
                    self.storage.delete(LEASE_FILE)

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def read_holder(storage: Storage) -> dict | None:
    """What the lock's file says of the run holding it (job, pid, host, start time), or None."""
    try:
        return _parse(storage.read_text(LOCK_FILE if isinstance(storage, LocalStorage) else LEASE_FILE))
    except (OSError, ValueError):
        return None


def lock_checkpoint(storage: Storage, job: str) -> RunLock:
    """Take the lock of the checkpoint directory at ``storage`` for a run of ``job``;
    :class:`CheckpointInUseError` naming the holder when another run has it."""
    return RunLock(storage, job).acquire()
