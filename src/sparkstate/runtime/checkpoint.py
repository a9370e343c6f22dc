"""What sparkstate keeps in a checkpoint directory beside Spark's own files.

``sparkstate.json`` records the job a checkpoint belongs to (function, key, key groups, state
layout, state descriptors). Restarting with something incompatible would silently misread the
state, so it is refused with a message that says what differs and what to do. Spark's own
offset and commit logs are read (never written) to tell whether a bounded job has finished.

A directory that cannot be written (no permission, a read-only mount, a full disk) stops the
job with :class:`CheckpointStorageError`, before Spark starts when it can be seen then, or
when a running job fails on it; what was committed stays, and the next run resumes from it.
"""

from __future__ import annotations

import errno
import json
import os
from typing import Any

from sparkstate.errors import CheckpointMismatchError, CheckpointStorageError
from sparkstate.runtime.planner import plan
from sparkstate.runtime.storage import Storage, open_storage

METADATA_FILE = "sparkstate.json"
#: sparkstate's own files inside a checkpoint directory (besides ``sparkstate.json``)
OWN_DIR = "sparkstate"
#: bytes written to test that a checkpoint directory takes writes: more than a small batch's
#: checkpoint, so that a nearly full disk shows before Spark fails on it
PROBE_BYTES = 1 << 20
_NO_SPACE = {errno.ENOSPC, errno.EDQUOT}
_NOT_WRITABLE = {errno.EACCES, errno.EPERM, errno.EROFS}
FORMAT_VERSION = 1

#: fields that must match for the state in a checkpoint to be read correctly
_MUST_MATCH = {
    "function": "the keyed function",
    "source": "the source",
    "key_columns": "the key columns",
    "key_groups": "the number of key groups",
    "bucket_size": "the state bucket size",
    "time_mode": "the Spark time mode (timers/watermark use)",
    "state_backend": "the state backend",
    "plan": "the execution path (python or native; see sparkstate explain)",
}

_DEFAULTS = {"plan": "python"}

def source_identity(source: Any) -> dict:
    """What a checkpoint's offsets mean: the same offsets must give the same events again."""
    return source.identity()


def job_metadata(job: Any, spec: Any, descriptors: list, settings: dict) -> dict:
    fn = spec.fn
    return {
        "format": FORMAT_VERSION,
        "job": job.name,
        # the class name only: a script's function is __main__.X when run, module.X when imported
        "function": type(fn).__qualname__,
        "source": source_identity(job.source_spec),
        "key_columns": list(spec.key_columns),
        "key_groups": job.settings.key_groups,
        "bucket_size": spec.bucket_size,
        "time_mode": spec.time_mode,
        "state_backend": job.settings.state_backend,
        "plan": plan(job).path,
        "state": {d.name: d.describe() for d in descriptors},
        "settings": settings,
    }


def _storage(checkpoint: str | os.PathLike | Storage) -> Storage:
    return checkpoint if isinstance(checkpoint, Storage) else open_storage(checkpoint)


def check_or_write(checkpoint_dir: str | os.PathLike | Storage, meta: dict) -> list[str]:
    """Write the metadata of a new checkpoint, or check it against an existing one.

    Returns warnings (settings that the checkpoint overrides); raises on incompatibilities.
    """
    store = _storage(checkpoint_dir)
    root = store.root
    have_meta = store.exists(METADATA_FILE)
    if not have_meta or not committed_batches(store):
        # nothing committed yet (a new checkpoint, or a first run that failed early): no state
        # exists that another configuration could misread
        if not have_meta and store.exists("offsets"):
            raise CheckpointMismatchError(
                f"{root} holds a Spark checkpoint that sparkstate did not write; "
                "use an empty or new checkpoint directory"
            )
        try:
            store.write_atomic(json.dumps(meta, indent=2, sort_keys=True).encode(), METADATA_FILE)
        except OSError as exc:
            raise failed_write(store, exc) from exc
        return []
    try:
        old = json.loads(store.read_text(METADATA_FILE))
    except (OSError, ValueError) as exc:
        raise CheckpointMismatchError(f"cannot read {store.path(METADATA_FILE)}: {exc}") from exc
    problems = []
    if old.get("job") != meta["job"]:
        problems.append(f"it belongs to job {old.get('job')!r}, not {meta['job']!r}")
    for field, label in _MUST_MATCH.items():
        default = _DEFAULTS.get(field)  # what checkpoints written before the field existed mean
        was, now = old.get(field, default), meta.get(field, default)
        if was == now:
            continue
        if isinstance(was, dict) and isinstance(now, dict):
            diff = ", ".join(f"{k} {was.get(k)!r} -> {now.get(k)!r}" for k in sorted(set(was) | set(now)) if was.get(k) != now.get(k))
            problems.append(f"{label} changed ({diff})")
        else:
            problems.append(f"{label} changed from {was!r} to {now!r}")
    for name, was in old.get("state", {}).items():
        now = meta["state"].get(name)
        if now is not None and now != was:
            problems.append(f"state {name!r} changed from {was} to {now}")
    if problems:
        raise CheckpointMismatchError(
            f"checkpoint {root} cannot be used for this job: " + "; ".join(problems)
            + ". Run it as before, or start from a new checkpoint directory (state starts empty; "
            "`sparkstate run --fresh` deletes the old one)."
        )
    warnings = [
        f"state {name!r} ({was}) is no longer declared: its values are dropped as their keys are next touched"
        for name, was in old.get("state", {}).items()
        if name not in meta["state"]
    ]
    for key, value in meta.get("settings", {}).items():
        was = old.get("settings", {}).get(key)
        if was is not None and was != value:
            warnings.append(
                f"{key}: the checkpoint was written with {was!r}; Spark keeps that value on restart, "
                f"so {value!r} is ignored"
            )
    return warnings


def last_committed_offset(checkpoint_dir: str | os.PathLike | Storage) -> tuple[int | None, Any]:
    """``(batch_id, first source offset)`` of the last committed micro-batch, or ``(None, None)``."""
    store = _storage(checkpoint_dir)
    commits = committed_batches(store)
    if not commits:
        return None, None
    batch = commits[-1]
    try:
        lines = store.read_text("offsets", str(batch)).splitlines()
        offset = json.loads(lines[2]) if len(lines) > 2 and lines[2] not in ("-", "") else None
    except (OSError, ValueError):
        offset = None
    return batch, offset


def committed_batches(checkpoint_dir: str | os.PathLike | Storage) -> list[int]:
    """The batch ids in Spark's commit log, oldest first: the checkpoints it still retains."""
    return sorted(int(e.name) for e in _storage(checkpoint_dir).list("commits") if e.name.isdigit())


# ---------------------------------------------------------------------- storage faults


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


def failed_write(store: Storage, exc: OSError) -> CheckpointStorageError:
    """The error that stops a job whose write into ``store`` failed with ``exc``: the problem,
    the fix, and the batches that are kept."""
    return _storage_error(store.root, exc, last_committed_offset(store)[0])


def write_problem(store: Storage) -> OSError | None:
    """Write and delete a probe file of ``PROBE_BYTES`` in the checkpoint's ``sparkstate/``
    folder: the error that shows the directory cannot take writes now, or None."""
    try:
        store.write_atomic(bytes(PROBE_BYTES), OWN_DIR, "write-probe")
        store.delete(OWN_DIR, "write-probe")
    except OSError as exc:
        return exc
    return None


def ensure_writable(store: Storage) -> None:
    """Raise :class:`CheckpointStorageError` when the checkpoint directory cannot take writes
    (checked before Spark starts: a resumed checkpoint is otherwise only read until then)."""
    exc = write_problem(store)
    if exc is not None:
        raise failed_write(store, exc)


def diagnose_failure(store: Storage) -> CheckpointStorageError | None:
    """After a job failed: the storage error when its checkpoint directory cannot take writes.

    Spark rarely says so itself: RocksDB's changelog is written by the state server thread,
    and when that dies on a full disk the query reports only that the Python worker lost its
    connection (``EOFError``). So the directory is probed instead of the message read.
    """
    exc = write_problem(store)
    if exc is None or exc.errno not in _NO_SPACE | _NOT_WRITABLE:
        return None
    return failed_write(store, exc)
