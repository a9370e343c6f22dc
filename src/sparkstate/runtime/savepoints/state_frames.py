"""Offline state on Spark: a stopped job's checkpoint read into the reader's frames, state as
Spark DataFrames, and bootstrapped savepoints written to any Hadoop URI.

``read_checkpoint`` reads one committed batch through Spark's state data source (read-only,
``savepoints.read_records``) and gives the same :class:`~sparkstate.savepoint.reader.StateReader`
as a savepoint: ``read_checkpoint(".sparkstate/running-sum/checkpoint").state("total")``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from typing import Any

import pandas as pd

from sparkstate.errors import SavepointError
from sparkstate.savepoint.reader import StateReader, read_savepoint, reader_of_records


def read_checkpoint(checkpoint_dir: str | os.PathLike[str], batch: int | None = None, spark: Any = None) -> StateReader:
    """The state of committed batch ``batch`` (default: the last) of a job's checkpoint, for
    reading like a savepoint's. The job should be stopped: a running job's newer batches are
    not seen, and the batches it no longer retains cannot be read."""
    from sparkstate.runtime.savepoints.take import batch_timestamp, committed_batch, committed_watermark, read_records
    from sparkstate.runtime.session import get_spark

    checkpoint, meta, batch = committed_batch(
        checkpoint_dir, batch, spark, "nor a savepoint (no _savepoint.json); give a job's checkpoint directory or a savepoint")
    spark = spark or get_spark()
    groups = read_records(spark, checkpoint, meta.get("state_backend", "rocksdb"), batch)
    offsets = checkpoint.batch_source_offsets(batch) or []
    meta = {**meta, "batch": batch, "keys": sum(len(r) for r in groups.values()),
            "watermark_ms": committed_watermark(checkpoint, batch),
            "processing_time_ms": batch_timestamp(checkpoint, batch),
            "source_offset": offsets[0] if offsets else None, "checkpoint": checkpoint.root}
    return reader_of_records(meta, groups, f"{checkpoint.root} (batch {batch})")


def to_spark(spark: Any, frame: pd.DataFrame) -> Any:
    """A reader's frame as a Spark DataFrame. Columns Spark cannot type (dataclasses, mixed
    values) become JSON text (a dataclass as its fields)."""
    if not len(frame):  # nothing to infer types from
        return spark.createDataFrame([], ", ".join(f"`{c}` string" for c in frame.columns))
    try:
        return spark.createDataFrame(frame)
    except Exception:
        pass
    plain = frame.copy()
    for name in plain.columns:
        if plain[name].dtype == object:
            plain[name] = [None if v is None else _json(v) for v in plain[name]]
    return spark.createDataFrame(plain)


def _json(value: Any) -> str:
    def default(v: Any) -> Any:
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            return dataclasses.asdict(v)
        if isinstance(v, (set, frozenset, tuple)):
            return list(v)
        return repr(v)

    return value if isinstance(value, str) else json.dumps(value, default=default, ensure_ascii=False)


def read_state_spark(spark: Any, location: str, name: str, batch: int | None = None) -> Any:
    """State ``name`` of a savepoint (or of a checkpoint's committed batch) as a Spark DataFrame."""
    return to_spark(spark, open_state(location, batch=batch, spark=spark).state(name))


def open_state(location: str | os.PathLike[str], batch: int | None = None, spark: Any = None, *,
               trusted: bool = False) -> StateReader:
    """A savepoint, or a checkpoint's committed batch (``batch``; through Spark), for reading
    (``trusted``: a savepoint's pickled values may be unpickled, ``read_savepoint``)."""
    from sparkstate.runtime.checkpoint.storage import is_local, normalize
    from sparkstate.runtime.savepoints.take import directory_of

    where = str(location)
    local = is_local(where)
    where = normalize(where) if local else where  # a file:// URI as its path
    directory = directory_of(where, None if local else _spark(spark))
    if directory.exists("_savepoint.json") or not directory.exists():
        if batch is not None:
            raise SavepointError(f"{where} is a savepoint: it holds one batch, --batch applies to checkpoints")
        return read_savepoint(directory, trusted=trusted)
    return read_checkpoint(where, batch, spark)


def _spark(spark: Any) -> Any:
    from sparkstate.runtime.session import get_spark

    return spark or get_spark()


def write_savepoint(job: Any, state: Mapping[str, Any], path: str, *, timers: Any = None, spark: Any = None) -> dict[str, Any]:
    """:func:`sparkstate.savepoint.bootstrap.write_savepoint` to a local path or any Hadoop URI
    (``hdfs://``, ``s3a://``...), from pandas or Spark DataFrames."""
    from sparkstate.runtime.checkpoint.storage import is_local, normalize
    from sparkstate.runtime.savepoints.take import directory_of
    from sparkstate.savepoint.bootstrap import write_savepoint as write

    local = is_local(path)
    directory = directory_of(normalize(path) if local else path, None if local else _spark(spark))
    meta = write(job, state, directory, timers=timers)
    meta["location"] = path
    return meta
