"""Restoring a savepoint into a new run: the checks made before Spark runs anything, and the
restore rows that carry each key group's saved state into the first micro-batch.

A restored run starts a new checkpoint. Its first batch reads, besides the source's events,
one *restore row* per key group that holds state: the group's savepoint file, read by Spark's
own file source (so a Hadoop URI works like a local path, and the rows are in the new
checkpoint's offset log: a first batch that fails is replayed with them, a committed one never
again). Every such group is therefore called in the first batch; the processor writes its
records into the empty state store, laid out for this run (any number of partitions, either
backend), before the batch's events run. The rows' event time is the savepoint's watermark
plus the watermark delay, so Spark's own watermark reaches the saved one after that batch;
until then the processor uses the saved one (``OperatorSpec.restored_watermark_ms``).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from sparkstate.errors import SavepointError
from sparkstate.runtime.checkpoint.directory import CheckpointDir
from sparkstate.runtime.checkpoint.storage import join
from sparkstate.savepoint.compat import RestorePlan, restore_plan
from sparkstate.savepoint.files import Savepoint, open_savepoint
from sparkstate.savepoint.format import STATE_DIR

#: Spark's binaryFile format (a streaming file source must be given its schema)
BINARY_FILE_SCHEMA = "path string, modificationTime timestamp, length long, content binary"


@dataclass(frozen=True)
class Restore:
    """A savepoint checked against the job it restores into."""

    savepoint: Savepoint
    plan: RestorePlan
    notes: tuple[str, ...]

    @property
    def watermark_ms(self) -> int:
        return int(self.savepoint.meta.get("watermark_ms") or 0)

    @property
    def source_offset(self) -> Any:
        return self.savepoint.meta.get("source_offset")

    def identity(self) -> dict[str, Any]:
        """What the new checkpoint records of where its state came from."""
        meta = self.savepoint.meta
        out = {"savepoint": self.savepoint.location, "id": meta.get("id"), "batch": meta.get("batch"),
               "checkpoint": meta.get("checkpoint")}
        if meta.get("source_files"):
            # the files read before the savepoint, which the new checkpoint's file source log
            # does not name: a savepoint of the new checkpoint must still skip them
            out["source_files"] = list(meta["source_files"])
        return out


def prepare_restore(
    location: str,
    job_meta: dict[str, Any],
    descriptors: list,
    checkpoint: CheckpointDir,
    *,
    allow_non_restored_state: bool = False,
    trusted: bool = False,
    broadcast: tuple = (),
    spark: Any = None,
    fresh: bool = False,
) -> Restore:
    """Open and check a savepoint for the job (``job_meta``: ``checkpoint.job_metadata``):
    refused, before anything is written or deleted, when it is missing, damaged, of another
    job or format, holds pickled values and is not ``trusted``, or does not fit the job's
    state (``savepoint/compat.py``; ``broadcast``: the job's broadcast states). ``fresh``:
    the checkpoint's committed batches are about to be deleted (``--fresh``), so they are no
    reason to refuse."""
    from sparkstate.runtime.savepoints.take import directory_of

    if job_meta.get("plan") == "native":
        raise SavepointError(
            f"job {job_meta['job']!r} would run on the native window path, which keeps Spark SQL's own state and "
            "cannot take a savepoint's; restore it with window_path='python' (--window-path python)"
        )
    if not fresh and checkpoint.committed_batches():
        raise SavepointError(
            f"checkpoint {checkpoint.root} already has committed batches: a restore starts a new checkpoint. "
            "Give another checkpoint directory (--checkpoint DIR, checkpoint_dir=...), or add --fresh (fresh=True) to "
            "replace this one and the job's output (the savepoint keeps the state); nothing was changed"
        )
    savepoint = open_savepoint(directory_of(location, spark))
    savepoint.meta["location"] = savepoint.location
    plan, notes = restore_plan(savepoint, job_meta, descriptors, allow_non_restored_state=allow_non_restored_state,
                               trusted=trusted, broadcast=broadcast)
    return Restore(savepoint, plan, tuple(notes))


def restore_rows(spark: Any, restore: Restore, delay_ms: int) -> Any:
    """The restore rows as a streaming DataFrame of the packed schema (one per key group)."""
    from pyspark.sql import functions as F

    from sparkstate.runtime.streaming.processor import RESTORE_PART

    watermark = restore.watermark_ms
    ts_ms = watermark + delay_ms if watermark > 0 else 0
    files = (spark.readStream.format("binaryFile").schema(BINARY_FILE_SCHEMA).option("pathGlobFilter", "kg-*.parquet")
             .load(join(restore.savepoint.location, STATE_DIR)))
    return files.select(
        F.regexp_extract("path", r"kg-(\d+)\.parquet$", 1).cast("int").alias("kg"),
        F.lit(RESTORE_PART).cast("int").alias("part"),
        F.lit(0).cast("int").alias("seq"),
        F.lit(dt.datetime.fromtimestamp(ts_ms / 1000, dt.UTC)).cast("timestamp").alias("ts"),
        F.col("content").alias("blob"),
    )
