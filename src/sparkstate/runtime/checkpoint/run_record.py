"""How the last run of a checkpoint ended, kept in it for ``sparkstate report``.

The metrics endpoint ends with its run, so its final status (Flink's ``FINISHED``,
``CANCELED``, ``FAILED``) and its ``numberOfFailedCheckpoints`` were never seen by anyone;
a run nobody watched had no status at all. The run loop records them instead, in
``<checkpoint>/sparkstate/last-run.json``, when its query ends: the status, when the run
started and ended, the type of the error that failed it (not its message, which may quote
anything the job read), and the batches that failed, counted over every run of the
checkpoint (a failed batch ends its run; the next run replays it). The record is one small
file, rewritten whole at each run's end: it holds a count, not a list, so it does not grow
with the runs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from sparkstate.runtime.checkpoint.directory import CheckpointDir
from sparkstate.runtime.run.result import RunResult


@dataclass(frozen=True)
class RunRecord:
    """The end of a checkpoint's last run."""

    #: ``FINISHED`` (its input done, ``until`` held, or stopped with a savepoint), ``CANCELED``
    #: (stopped before: a timeout, Ctrl-C) or ``FAILED`` (:attr:`RunResult.status`)
    status: str
    #: when the run's query started and ended, ISO 8601 in UTC
    started: str
    ended: str
    #: batches that failed, over every run of the checkpoint (Flink's numberOfFailedCheckpoints)
    failed_checkpoints: int = 0
    #: the type of the error that failed the run (None unless ``FAILED``)
    error: str | None = None

    def describe(self) -> str:
        """One line for the user."""
        error = f" ({self.error})" if self.error else ""
        failed = f"; {self.failed_checkpoints:,} failed checkpoint(s) over the checkpoint's runs" \
            if self.failed_checkpoints else ""
        return f"{self.status}{error}, ended {self.ended.replace('T', ' ').rstrip('Z')} UTC{failed}"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def last_run(checkpoint: CheckpointDir) -> RunRecord | None:
    """The checkpoint's record of its last run; None when it has none (no run ended since
    sparkstate records them) or it cannot be read."""
    try:
        data = json.loads(checkpoint.read_run_record())
        return RunRecord(**{k: data[k] for k in RunRecord.__dataclass_fields__ if k in data})
    except (OSError, ValueError, TypeError):
        return None


@contextmanager
def recorded_run(checkpoint: CheckpointDir, result: RunResult) -> Iterator[None]:
    """Record how the run inside the block ends: ``FAILED`` with the type of an error that
    leaves it (then raised on), ``CANCELED`` for a second Ctrl-C, else ``result.status``. A
    record that cannot be written becomes a warning of a run that went well, and is left
    out for one that failed (its own error is the one to show)."""
    started = _now()
    try:
        yield
    except KeyboardInterrupt:
        _write(checkpoint, started, "CANCELED")
        raise
    except BaseException as exc:
        _write(checkpoint, started, "FAILED", type(exc).__name__)
        raise
    problem = _write(checkpoint, started, result.status)
    if problem is not None:
        result.warnings.append(f"the run's final status could not be recorded in the checkpoint ({problem}); "
                               "`sparkstate report` shows no status for it")


def _write(checkpoint: CheckpointDir, started: str, status: str, error: str | None = None) -> Exception | None:
    """Write the record; returns the error that prevented it, if any."""
    try:
        before = last_run(checkpoint)
        failed = (before.failed_checkpoints if before is not None else 0) + (status == "FAILED")
        record = RunRecord(status, started, _now(), failed, error)
        checkpoint.write_run_record(json.dumps(asdict(record), indent=2))
    except Exception as exc:  # noqa: BLE001 - a full disk or a JVM gone with a failed run: never hide the run's own error
        return exc
    return None
