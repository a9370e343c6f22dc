"""One checkpoint directory: where it is, how it is reached, and what lies under it.

A run opens its checkpoint directory once (:meth:`CheckpointDir.open`) and hands the object
to everything that reads or writes there; no other module spells a path under it. The layout:

* Spark's own files, read and never written by sparkstate: ``metadata`` (the query's id),
  ``offsets/`` (the offset log, written before a batch), ``commits/`` (the commit log, after
  it), ``sources/`` (a file source's log) and ``state/`` (the state stores' files, measured
  by ``checkpoint_stats.py``);
* ``sparkstate.json``: the job the checkpoint belongs to (checked by ``checkpoint.py``);
* ``sparkstate.lock`` (a local directory) or ``sparkstate.lease`` (any other): the lock of
  the run using the checkpoint (``run_lock.py``);
* ``sparkstate/``: sparkstate's own files: ``checkpoints.jsonl`` (each retained checkpoint's
  figures), ``last-run.json`` (how the last run ended, ``run_record.py``), ``broadcast/`` (a
  broadcast job's broadcast state, ``engine/broadcast.py``), ``reads/`` (the files a savepoint
  is reading, held while it reads: :meth:`CheckpointDir.pinned`), the last savepoint request
  and answer (``savepoint_requests.py``) and, for a moment, a write probe;
* ``side-outputs/<name>/``: side outputs without a sink of their own (Parquet);
* ``sparkstate-sources/``: a list source's events for Spark's Python workers (local
  directories only; every run writes them again);
* ``output/``: the default Parquet output of a job given its checkpoint directory
  (``sparkstate run --checkpoint DIR``), known by the claim in it naming this checkpoint.

Beside each file, a file system may keep a checksum (``.NAME.crc``: Hadoop's local file
system) and a writer a temporary file that takes the name when whole (``.NAME.tmp``:
sparkstate's; ``.NAME.<uuid>.tmp``: Spark's). Nothing else is the checkpoint's: a run refuses
a directory without ``sparkstate.json`` that holds anything else (:meth:`CheckpointDir.check_usable`),
and ``--fresh`` deletes these names only (:meth:`CheckpointDir.clear`), wherever the
directory lives.

A directory that cannot be written (no permission, a read-only mount, a full disk) stops the
job with :class:`CheckpointStorageError`, before Spark starts when it can be seen then, or
when a running job fails on it; what was committed stays, and the next run resumes from it.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import socket
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sparkstate.engine.broadcast import BroadcastStore
from sparkstate.errors import CheckpointMismatchError, CheckpointStorageError
from sparkstate.runtime.checkpoint.run_lock import LOCK_FILES, RunLock, lock_checkpoint, process_alive
from sparkstate.runtime.checkpoint.storage import Entry, LocalStorage, Storage, is_local, normalize, open_storage

#: bytes written to test that a checkpoint directory takes writes: more than a small batch's
#: checkpoint, so that a nearly full disk shows before Spark fails on it
PROBE_BYTES = 1 << 20
_NO_SPACE = {errno.ENOSPC, errno.EDQUOT}
_NOT_WRITABLE = {errno.EACCES, errno.EPERM, errno.EROFS}
#: a job's claim on a Parquet output folder it writes (``fresh.py``; a leading ``_``: Spark and
#: Arrow readers skip it)
CLAIM_FILE = "_sparkstate.json"
#: seconds by which the executors' clocks (which time a broadcast state file) may differ from the
#: driver's (which times Spark's commit log): ``prune_broadcast`` keeps files this much younger
BROADCAST_CLOCK_MARGIN = 60
#: a held read of another host (``sparkstate/reads/<host>-<pid>-<id>``) older than this is taken
#: for a leftover of a process that was killed, and deleted by the next savepoint
STALE_READ_SECONDS = 24 * 3600
#: the random part of the name of Spark's temporary files (``.metadata.<uuid>.tmp``)
_UUID_TAIL = re.compile(r"\.[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


def base_name(name: str) -> str:
    """The entry a checksum or a temporary file stands beside: ``.metadata.crc``,
    ``.metadata.<uuid>.tmp`` and ``..metadata.<uuid>.tmp.crc`` are ``metadata``'s,
    ``.sparkstate.json.tmp`` is ``sparkstate.json``'s; any other name is its own."""
    if name.startswith(".") and name.endswith(".crc"):
        name = name[1:-4]
    if name.startswith(".") and name.endswith(".tmp"):
        name = _UUID_TAIL.sub("", name[1:-4])
    return name


def read_claim(storage: Storage, *parts: str) -> dict | None:
    """The job's claim (``{"job", "checkpoint"}``) in the output folder ``parts`` of ``storage``,
    or None when it has none (or none that reads as one)."""
    try:
        claim = json.loads(storage.read_text(*parts, CLAIM_FILE))
    except (OSError, ValueError):
        return None
    return claim if isinstance(claim, dict) else None


def shown_names(names: list[str]) -> str:
    """Names for a message: the first five, and how many more."""
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


class CheckpointDir:
    """An opened checkpoint directory: its root (what Spark's ``checkpointLocation`` gets),
    its :class:`~sparkstate.runtime.checkpoint.storage.Storage`, the locations under it and the
    operations on them."""

    METADATA_FILE = "sparkstate.json"
    #: sparkstate's own files (besides ``sparkstate.json``)
    OWN_DIR = "sparkstate"
    STATS_LOG = "checkpoints.jsonl"
    RUN_RECORD = "last-run.json"
    WRITE_PROBE = "write-probe"
    SIDE_OUTPUTS = "side-outputs"
    LIST_SOURCES = "sparkstate-sources"
    #: under OWN_DIR: a broadcast job's broadcast state, one file per content
    BROADCAST = "broadcast"
    #: under OWN_DIR: the files savepoints are reading, one folder per read (:meth:`pinned`)
    READS = "reads"
    #: the default Parquet output of a job run with ``--checkpoint DIR`` (``cli.py``)
    DEFAULT_OUTPUT = "output"
    #: Spark's own
    SPARK_METADATA = "metadata"
    OFFSETS = "offsets"
    SOURCES = "sources"
    COMMITS = "commits"
    STATE = "state"
    #: every name of the layout (but ``output/``, which is the job's only when claimed): all
    #: that ``--fresh`` may delete here, checksums and temporary files beside them included
    LAYOUT = frozenset({SPARK_METADATA, OFFSETS, SOURCES, COMMITS, STATE, METADATA_FILE, OWN_DIR, SIDE_OUTPUTS,
                        LIST_SOURCES, *LOCK_FILES})
    #: what a first run leaves before it writes ``sparkstate.json``: the lock and a write probe
    _BEFORE_METADATA = frozenset({METADATA_FILE, OWN_DIR, *LOCK_FILES})

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    @classmethod
    def open(cls, directory: str | os.PathLike, spark: Any = None) -> CheckpointDir:
        """The checkpoint directory at a path or a Hadoop URI, normalized (an absolute local
        path, or the URI). A non-local URI is reached through a Spark session's JVM: ``spark``,
        else the active one, else a new local one."""
        return cls(open_storage(directory, spark))

    @staticmethod
    def needs_spark(directory: str | os.PathLike) -> bool:
        """Whether the directory is reached through Spark's JVM (any file system but a local
        one goes through Hadoop's), so a Spark session must run before it is opened."""
        return not is_local(normalize(directory))

    @property
    def root(self) -> str:
        return self.storage.root

    def __repr__(self) -> str:
        return f"CheckpointDir({self.root!r})"

    # ------------------------------------------------------------------ locations

    @property
    def side_output_dir(self) -> str:
        """Where side outputs without a sink of their own are kept (Parquet, a folder per name)."""
        return self.storage.path(self.SIDE_OUTPUTS)

    @property
    def list_source_dir(self) -> str | None:
        """Where a list source's events are written for Spark's Python workers to read: beside a
        local checkpoint; None (a temporary directory) for any other."""
        return self.storage.path(self.LIST_SOURCES) if is_local(self.root) else None

    @property
    def mailbox_dir(self) -> str:
        """Where a batch run by a Spark Connect server posts what the client's run needs
        (``io/mailbox.py``): ``sparkstate/mailbox/`` of the checkpoint, a path both see."""
        return self.storage.path(self.OWN_DIR, "mailbox")

    @property
    def broadcast_dir(self) -> str | None:
        """Where a broadcast job's broadcast state content is kept (``engine/broadcast.py``):
        ``sparkstate/broadcast/`` of a local checkpoint (executors write it as plain files);
        None for any other."""
        return self.storage.path(self.OWN_DIR, self.BROADCAST) if is_local(self.root) else None

    @property
    def metadata_path(self) -> str:
        return self.storage.path(self.METADATA_FILE)

    @property
    def stats_log_path(self) -> str:
        return self.storage.path(self.OWN_DIR, self.STATS_LOG)

    def exists(self) -> bool:
        return self.storage.exists()

    def lock(self, job: str) -> RunLock:
        """Take the directory's run lock for a run of ``job`` (see ``run_lock.py``):
        :class:`~sparkstate.errors.CheckpointInUseError` naming the run that holds it."""
        try:
            return lock_checkpoint(self.storage, job)
        except OSError as exc:
            raise self.failed_write(exc) from exc

    def is_layout(self, entry: Entry) -> bool:
        """Whether a top-level entry is the checkpoint's (:data:`LAYOUT`, or ``output/`` holding
        the claim of a job run on this checkpoint), not something else that lies here."""
        if base_name(entry.name) in self.LAYOUT:
            return True
        if entry.name != self.DEFAULT_OUTPUT or not entry.is_dir:
            return False
        claim = read_claim(self.storage, entry.name)
        return claim is not None and claim.get("checkpoint") == self.root

    def foreign_entries(self) -> list[str]:
        """What lies here that sparkstate did not write: for a directory without
        ``sparkstate.json``, its entries but what a first run that stopped early leaves (the
        lock, sparkstate's own folder); nothing for a checkpoint with metadata."""
        if self.has_metadata():
            return []
        return sorted(e.name for e in self.storage.list() if base_name(e.name) not in self._BEFORE_METADATA)

    def check_usable(self, fresh: bool = False) -> None:
        """Refuse a directory that is not empty and not a checkpoint (no ``sparkstate.json``),
        naming what it holds: a run would write Spark's and sparkstate's files among another's,
        and a later ``--fresh`` would take it for the job's. Called before the run's lock is taken,
        so nothing is written into such a directory, and again by ``--fresh`` under the lock."""
        foreign = self.foreign_entries()
        if not foreign:
            return
        if fresh:
            raise CheckpointMismatchError(
                f"--fresh keeps {self.root}: it is not a sparkstate checkpoint (no {self.METADATA_FILE}; it holds "
                f"{shown_names(foreign)}), and --fresh deletes only what sparkstate made. Give the job a new or empty "
                "checkpoint directory; nothing was deleted"
            )
        if self.has_offset_log():
            raise CheckpointMismatchError(
                f"{self.root} holds a Spark checkpoint that sparkstate did not write (no {self.METADATA_FILE}; it "
                f"holds {shown_names(foreign)}); use an empty or new checkpoint directory; nothing was changed"
            )
        raise CheckpointMismatchError(
            f"checkpoint directory {self.root} is not empty and not a sparkstate checkpoint (no {self.METADATA_FILE}; "
            f"it holds {shown_names(foreign)}). A run writes Spark's and sparkstate's files into its checkpoint directory, "
            "and `--fresh` deletes them: give the job a new or empty directory (--checkpoint DIR, or checkpoint_dir= "
            "in Python); nothing was changed"
        )

    def clear(self) -> list[str]:
        """Delete the checkpoint's entries (:meth:`is_layout`) but the run's lock (``sparkstate
        run --fresh``, which holds it); returns the names of what else lies here, which is
        kept. ``sparkstate.json`` goes last: a clear cut short leaves a directory still known
        as a checkpoint, which the next ``--fresh`` clears again."""
        kept, doomed = [], []
        for entry in self.storage.list():
            if not self.is_layout(entry):
                kept.append(entry.name)
            elif base_name(entry.name) not in LOCK_FILES:
                doomed.append(entry.name)
        for name in sorted(doomed, key=lambda n: base_name(n) == self.METADATA_FILE):
            self.storage.delete(name)
        return sorted(kept)

    # ------------------------------------------------------------------ sparkstate.json

    def has_metadata(self) -> bool:
        return self.storage.exists(self.METADATA_FILE)

    def read_metadata(self) -> dict:
        """The recorded job metadata (``OSError`` when unreadable, ``ValueError`` when damaged:
        not JSON, or not a JSON object)."""
        meta = json.loads(self.storage.read_text(self.METADATA_FILE))
        if not isinstance(meta, dict):
            raise ValueError(f"expected a JSON object, found {type(meta).__name__}")
        return meta

    def write_metadata(self, meta: dict) -> None:
        self.storage.write_atomic(json.dumps(meta, indent=2, sort_keys=True).encode(), self.METADATA_FILE)

    # ------------------------------------------------------------------ Spark's logs and state files

    def has_offset_log(self) -> bool:
        """Whether Spark has written an offset log here (a batch was planned)."""
        return self.storage.exists(self.OFFSETS)

    def commit_times(self) -> dict[int, int]:
        """``{batch_id: commit time in epoch ms}`` of the batches in Spark's commit log."""
        return {int(e.name): e.mtime_ms for e in self.storage.list(self.COMMITS) if e.name.isdigit()}

    def committed_batches(self) -> list[int]:
        """The batch ids in Spark's commit log, oldest first: the checkpoints it still retains."""
        return sorted(self.commit_times())

    def last_committed_offset(self) -> tuple[int | None, Any]:
        """``(batch_id, first source offset)`` of the last committed micro-batch, or ``(None, None)``."""
        commits = self.committed_batches()
        if not commits:
            return None, None
        batch = commits[-1]
        try:
            lines = self.storage.read_text(self.OFFSETS, str(batch)).splitlines()
            offset = json.loads(lines[2]) if len(lines) > 2 and lines[2] not in ("-", "") else None
        except (OSError, ValueError):
            offset = None
        return batch, offset

    def batch_source_offsets(self, batch: int) -> list[Any] | None:
        """The source offsets (parsed JSON, one per source; None where Spark wrote ``-``) the
        offset log records for ``batch``: where its input ends. None when it has no entry."""
        try:
            lines = self.storage.read_text(self.OFFSETS, str(batch)).splitlines()
        except (OSError, ValueError):
            return None
        out: list[Any] = []
        for line in lines[2:]:
            try:
                out.append(None if line in ("-", "") else json.loads(line))
            except ValueError:
                out.append(None)
        return out

    def source_files(self, source: int, after: int, upto: int) -> list[str]:
        """The files Spark's file source ``source`` (its index in the query) took in its log
        batches ``after + 1`` to ``upto``, from its log under ``sources/`` (compacted or not).

        Spark compacts the log every tenth batch: ``19.compact`` holds the entries of batches
        0 to 19 and replaces their plain files (``19`` is never written; the others it deletes
        in time), so the compact file that covers the range is read with the plain files, and
        entries outside the range are left."""
        names = {e.name for e in self.storage.list(self.SOURCES, str(source))}
        plain = [str(k) for k in range(after + 1, upto + 1) if str(k) in names]
        compact = sorted(int(n.split(".")[0]) for n in names if n.endswith(".compact") and n.split(".")[0].isdigit())
        # a compact file holds every batch up to its own: the first at or past ``upto`` holds the
        # whole range; without one, the last inside the range holds its part (plain files the rest)
        past = [k for k in compact if k >= upto][:1]
        covering = [f"{k}.compact" for k in (past or [k for k in compact if after < k < upto][-1:])]
        files: dict[str, int] = {}
        for name in [*covering, *plain]:
            try:
                lines = self.storage.read_text(self.SOURCES, str(source), name).splitlines()
            except (OSError, ValueError):
                continue
            for line in lines[1:]:
                try:
                    entry = json.loads(line)
                    if after < int(entry["batchId"]) <= upto:
                        files.setdefault(str(entry["path"]), int(entry["batchId"]))
                except (ValueError, KeyError, TypeError):
                    continue
        return sorted(files, key=files.__getitem__)  # by batch, each batch's as its log lists them

    def list_state(self, *parts: str) -> list[Entry]:
        """A directory under ``state/`` (parts relative to it); empty when it does not exist."""
        return self.storage.list(self.STATE, *parts)

    def read_state(self, *parts: str) -> bytes:
        """A file under ``state/`` (parts relative to it)."""
        return self.storage.read_bytes(self.STATE, *parts)

    # ------------------------------------------------------------------ held reads

    #: what Spark's state reader reads of a checkpoint, and what a savepoint reads besides
    _PINNED = (SPARK_METADATA, OFFSETS, COMMITS, SOURCES, STATE)

    @contextmanager
    def pinned(self) -> Iterator[CheckpointDir]:
        """The checkpoint's files as they are now, held until the block ends: a checkpoint
        directory of hard links (``sparkstate/reads/<host>-<pid>-<id>/``) to Spark's metadata,
        offset and commit logs, source logs and state files, deleted afterwards.

        A running query goes on committing batches, and Spark deletes the logs and state
        files of batches it no longer retains (``minBatchesToRetain``); a long read of one
        batch's state (a savepoint) would lose them midway. Spark never changes a file it
        wrote (it writes a new one and renames it), so a link holds exactly the file Spark
        wrote, and costs no copy. A file system without hard links gets copies. A checkpoint
        that is not local is read in place (no links across a Hadoop file system)."""
        if not is_local(self.root):
            yield self
            return
        reads = Path(self.storage.path(self.OWN_DIR, self.READS))
        _delete_stale_reads(reads)
        folder = reads / f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            for name in self._PINNED:
                _link_tree(Path(self.root, name), folder / name)
            yield CheckpointDir(LocalStorage(str(folder)))
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def prune_broadcast(self, keep: frozenset[str] = frozenset()) -> int:
        """Delete the broadcast state files (``engine/broadcast.py``) that no checkpoint version
        Spark retains refers to: those replaced before its oldest retained batch committed,
        less :data:`BROADCAST_CLOCK_MARGIN` for executors' clocks. Nothing goes while a held
        read (a savepoint, which may read an older version) is running. ``keep``: references
        the checkpoint's metadata names (a restored savepoint's). Returns the files deleted."""
        directory = self.broadcast_dir
        commits = self.commit_times()
        if directory is None or not commits:
            return 0
        reads = Path(self.storage.path(self.OWN_DIR, self.READS))
        if reads.is_dir() and any(reads.iterdir()):
            return 0
        saved_before = commits[min(commits)] / 1000 - BROADCAST_CLOCK_MARGIN
        return BroadcastStore(directory).prune(saved_before, keep)

    # ------------------------------------------------------------------ sparkstate/checkpoints.jsonl

    def read_stats_log(self) -> str:
        """The checkpoint figures' log (``FileNotFoundError`` before the first is recorded)."""
        return self.storage.read_text(self.OWN_DIR, self.STATS_LOG)

    def write_stats_log(self, text: str) -> None:
        self.storage.write_atomic(text.encode(), self.OWN_DIR, self.STATS_LOG)

    # ------------------------------------------------------------------ sparkstate/last-run.json

    def read_run_record(self) -> str:
        """How the last run ended (``run_record.py``; ``FileNotFoundError`` before one has)."""
        return self.storage.read_text(self.OWN_DIR, self.RUN_RECORD)

    def write_run_record(self, text: str) -> None:
        self.storage.write_atomic(text.encode(), self.OWN_DIR, self.RUN_RECORD)

    # ------------------------------------------------------------------ storage faults

    def failed_write(self, exc: OSError) -> CheckpointStorageError:
        """The error that stops a job whose write into this directory failed with ``exc``:
        the problem, the fix, and the batches that are kept."""
        return _storage_error(self.root, exc, self.last_committed_offset()[0])

    def _write_problem(self) -> OSError | None:
        """Write and delete a probe file of ``PROBE_BYTES`` in ``sparkstate/``: the error that
        shows the directory cannot take writes now, or None."""
        try:
            self.storage.write_atomic(bytes(PROBE_BYTES), self.OWN_DIR, self.WRITE_PROBE)
            self.storage.delete(self.OWN_DIR, self.WRITE_PROBE)
        except OSError as exc:
            return exc
        return None

    def ensure_writable(self) -> None:
        """Raise :class:`CheckpointStorageError` when the directory cannot take writes (checked
        before Spark starts: a resumed checkpoint is otherwise only read until then)."""
        exc = self._write_problem()
        if exc is not None:
            raise self.failed_write(exc)

    def diagnose_failure(self) -> CheckpointStorageError | None:
        """After a job failed: the storage error when the directory cannot take writes.

        Spark rarely says so itself: RocksDB's changelog is written by the state server thread,
        and when that dies on a full disk the query reports only that the Python worker lost its
        connection (``EOFError``). So the directory is probed instead of the message read.
        """
        exc = self._write_problem()
        if exc is None or exc.errno not in _NO_SPACE | _NOT_WRITABLE:
            return None
        return self.failed_write(exc)


def _link_tree(source: Path, target: Path) -> None:
    """Hard-link every file under ``source`` (a file or a folder) to the same place under
    ``target``; copy where the file system takes no links. A file deleted meanwhile is skipped
    (Spark's cleanup of a batch it no longer retains)."""
    if source.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        _link(source, target)
        return
    for folder, _, files in os.walk(source):
        here = target / os.path.relpath(folder, source)
        here.mkdir(parents=True, exist_ok=True)
        for name in files:
            _link(Path(folder, name), here / name)


def _link(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except FileNotFoundError:
        pass
    except OSError:  # no hard links here (EXDEV, EPERM): a copy holds the file as well
        try:
            shutil.copy2(source, target)
        except FileNotFoundError:
            pass


def _delete_stale_reads(reads: Path) -> None:
    """Delete held reads whose process is gone (this host's), or another host's older than
    :data:`STALE_READ_SECONDS` (whose process cannot be asked)."""
    try:
        entries = list(os.scandir(reads))
    except OSError:
        return
    host = socket.gethostname()
    for entry in entries:
        owner, _, rest = entry.name.rpartition("-")[0].rpartition("-")
        pid = rest if rest.isdigit() else ""
        try:
            old = time.time() - entry.stat().st_mtime > STALE_READ_SECONDS
        except OSError:
            continue
        if (owner == host and pid and int(pid) != os.getpid() and not process_alive(int(pid))) or (owner != host and old):
            shutil.rmtree(entry.path, ignore_errors=True)


def _storage_error(root: str, exc: OSError, last_batch: int | None) -> CheckpointStorageError:
    detail = exc.strerror or str(exc)
    if exc.errno in _NO_SPACE:
        problem = f"no space left for checkpoint directory {root} ({detail})"
        fix = ("free space on its disk (or raise the quota), or copy the whole directory to a larger "
               "disk and run with the copy")
    elif exc.errno in _NOT_WRITABLE:
        problem = f"checkpoint directory {root} is not writable ({detail})"
        fix = ("make it writable for the user running the job (its permissions, a read-only mount, "
               "an immutable attribute), or copy the whole directory to a writable place and run with the copy")
    elif exc.errno == errno.ENOTDIR:
        problem = f"checkpoint directory {root} cannot be created: part of its path is a file ({detail})"
        fix = "choose a directory you can write to"
    else:
        where = f": {exc.filename}" if exc.filename and exc.filename != root else ""
        problem = f"cannot write to checkpoint directory {root} ({detail}{where})"
        fix = "choose a directory you can write to"
    kept = ("no batch was committed yet" if last_batch is None
            else f"batches up to {last_batch} are committed there and kept")
    return CheckpointStorageError(f"{problem}. Fix: {fix}; then run again to resume ({kept}; a failing batch commits nothing).")
