"""Taking a savepoint from a checkpoint: the state of one committed micro-batch, read through
Spark's state data source, written in sparkstate's own format (``savepoint/``).

Everything in a savepoint comes from one committed batch ``N``: the state store's version
``N`` (every key group's meta entry and buckets), the source offsets the offset log records
for ``N`` (where its input ends), the watermark Spark computed after ``N`` (the commit log's
``nextBatchWatermarkMs``, which the next batch runs with) and ``N``'s processing time. A
restore therefore continues exactly where batch ``N + 1`` would have: same offsets, same
watermark, same state and timers.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import pickle
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd

from sparkstate.engine.keygroups import GroupMeta
from sparkstate.errors import SavepointError
from sparkstate.runtime.checkpoint.directory import CheckpointDir
from sparkstate.runtime.checkpoint.storage import is_local, join
from sparkstate.runtime.savepoints.state_reader import hashmap_group_column
from sparkstate.runtime.streaming.processor import BUCKETS_STATE, META_STATE
from sparkstate.savepoint.files import Directory, LocalDirectory, SavepointWriter

#: where the command line keeps savepoints unless told otherwise
DEFAULT_SAVEPOINT_DIR = ".sparkstate/savepoints"


def savepoint_name(job: str, batch: int, when_ms: int | None = None) -> str:
    """``<job>-b<batch>-<UTC time>``: sorts by job, then batch."""
    when = dt.datetime.fromtimestamp((when_ms or time.time() * 1000) / 1000, dt.UTC)
    return f"{job}-b{batch:06d}-{when:%Y%m%dT%H%M%S}"


def directory_of(location: str, spark: Any = None) -> Directory:
    """A savepoint :class:`Directory` for a local path or a Hadoop URI."""
    if is_local(location):
        return LocalDirectory(location)
    from sparkstate.runtime.checkpoint.hadoop_directory import HadoopDirectory

    return HadoopDirectory(location, spark)


def committed_watermark(checkpoint: CheckpointDir, batch: int) -> int:
    """The watermark Spark computed after ``batch`` (what ``batch + 1`` runs with), in ms."""
    try:
        lines = checkpoint.storage.read_text(checkpoint.COMMITS, str(batch)).splitlines()
        return int(json.loads(lines[1]).get("nextBatchWatermarkMs", 0))
    except (OSError, ValueError, IndexError):
        return 0


def batch_timestamp(checkpoint: CheckpointDir, batch: int) -> int | None:
    """The processing time Spark gave ``batch`` (its offset log's ``batchTimestampMs``)."""
    try:
        lines = checkpoint.storage.read_text(checkpoint.OFFSETS, str(batch)).splitlines()
        return int(json.loads(lines[1])["batchTimestampMs"])
    except (OSError, ValueError, IndexError, KeyError):
        return None


def read_records(spark: Any, checkpoint: CheckpointDir, backend: str, batch: int) -> dict[int, list[tuple[Any, dict]]]:
    """Every key group's records at ``batch``, through Spark's state data source (read-only)."""
    from sparkstate.engine.keygroups import GroupMeta

    reader = spark.read.format("statestore").option("path", checkpoint.root).option("batchId", batch)
    blobs: dict[int, list[bytes]] = defaultdict(list)
    if backend == "rocksdb":
        metas = {r[0]: GroupMeta.loads(r[1]) for r in
                 reader.option("stateVarName", META_STATE).load().select("key.kg", "value.v").toLocalIterator()}
        rows = reader.option("stateVarName", BUCKETS_STATE).load().select("key.kg", "user_map_value.v")
        for kg, blob in rows.toLocalIterator():
            if blob:
                blobs[kg].append(blob)
        for kg, meta in metas.items():
            if meta.inline:  # a one-bucket group's bucket (engine/keygroups.py)
                blobs[kg].append(meta.inline)
    else:
        metas = {}
        frame = reader.load()
        for kg, group in frame.select("key.kg", hashmap_group_column(frame)).toLocalIterator():
            meta_blob, buckets = pickle.loads(group)
            metas[kg] = meta = GroupMeta.loads(meta_blob)
            blobs[kg].extend(b for b in [*buckets.values(), meta.inline] if b)
    out: dict[int, list[tuple[Any, dict]]] = {}
    for kg, group_blobs in blobs.items():
        records: list[tuple[Any, dict]] = []
        for blob in group_blobs:
            records.extend(pickle.loads(blob).items())
        if records:
            out[kg] = records
    missing = sorted(set(out) - set(metas))
    if missing:
        raise SavepointError(f"checkpoint {checkpoint.root}, batch {batch}: key groups {missing} have buckets "
                             "but no meta entry; the checkpoint's state is damaged")
    return out


#: what the executors return per key group: its savepoint file, serialised
GROUP_FILE_SCHEMA = "kg int, data binary, keys long"


def group_files(spark: Any, checkpoint: CheckpointDir, backend: str, batch: int, states: list[str],
                expire: SnapshotCleanup | None = None) -> Any:
    """Every key group's savepoint file at ``batch`` as a DataFrame (``GROUP_FILE_SCHEMA``).

    The executors unpickle the buckets and build the Parquet files, group by group and in
    parallel; the driver only receives the compressed files (about 16 bytes per key of a
    running sum) and writes them, so its memory does not grow with the state. With
    ``expire``, the entries of states with ``cleanup_full_snapshot`` that have expired at
    the batch's clocks are left out (``engine/ttl.py``)."""
    from pyspark.sql import functions as F

    reader = spark.read.format("statestore").option("path", checkpoint.root).option("batchId", batch)
    if backend == "rocksdb":
        buckets = reader.option("stateVarName", BUCKETS_STATE).load()
        buckets = buckets.select(F.col("key.kg").alias("kg"), F.col("user_map_value.v").alias("v"))
        # one-bucket groups keep their bucket in the meta entry (engine/keygroups.py)
        metas = reader.option("stateVarName", META_STATE).load()
        inline = metas.select(F.col("key.kg").alias("kg"), F.col("value.v").alias("v")).mapInPandas(
            _inline_buckets, "kg int, v binary")
        return (buckets.unionByName(inline).groupBy("kg")
                .applyInPandas(lambda frame: _bucket_group_file(frame, states, expire), GROUP_FILE_SCHEMA))
    state = reader.load()
    rows = state.select(F.col("key.kg").alias("kg"), F.col(hashmap_group_column(state)).alias("group"))
    return rows.mapInPandas(lambda frames: _row_group_files(frames, states, expire), GROUP_FILE_SCHEMA)


#: what a savepoint's TTL cleanup needs on the executors: the checkpoint's TTL configs by state
#: (``config_to_json``), the batch's processing time and its watermark (ms; None: none yet)
SnapshotCleanup = tuple[dict[str, dict], int, "int | None"]


def snapshot_cleanup(job_meta: dict, processing_time: int | None, watermark_ms: int | None) -> SnapshotCleanup | None:
    """The savepoint's TTL cleanup for a checkpoint's job, or None when no state asks for it."""
    ttl = {n: c for n, c in (job_meta.get("state_ttl_configs") or {}).items() if c.get("cleanup_full_snapshot")}
    if not ttl or processing_time is None:
        return None
    # Spark's watermark starts at 0: until it passes the epoch there is none (KeyGroupRunner.watermark)
    return ttl, processing_time, watermark_ms if watermark_ms and watermark_ms > 0 else None


def _group_frame(kg: int, blobs: Any, states: list[str], expire: SnapshotCleanup | None = None) -> pd.DataFrame:
    from sparkstate.savepoint.format import records_to_table, table_bytes

    records: list[tuple[Any, dict]] = []
    for blob in blobs:
        if blob:
            records.extend(pickle.loads(blob).items())
    if expire is not None:
        from sparkstate.api.functions import MIN_WATERMARK
        from sparkstate.engine.ttl import cleanup_from_json

        ttl, now, watermark = expire
        keep = cleanup_from_json(ttl).snapshot_filter(now, MIN_WATERMARK if watermark is None else watermark)
        if keep is not None:
            records = list(keep(records))
    if not records:
        return pd.DataFrame({"kg": pd.Series([], dtype="int32"), "data": pd.Series([], dtype=object),
                             "keys": pd.Series([], dtype="int64")})
    table = records_to_table(records, states)
    return pd.DataFrame({"kg": pd.Series([kg], dtype="int32"), "data": [table_bytes(table)],
                         "keys": pd.Series([table.num_rows], dtype="int64")})


def _inline_buckets(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    """Meta entries ``(kg, v)`` to the buckets they hold inline, as bucket rows ``(kg, v)``."""
    for frame in frames:
        held = [(kg, GroupMeta.loads(blob).inline) for kg, blob in zip(frame["kg"].tolist(), frame["v"].tolist())]
        held = [(kg, blob) for kg, blob in held if blob]
        yield pd.DataFrame({"kg": pd.Series([kg for kg, _ in held], dtype="int32"), "v": [b for _, b in held]})


def _bucket_group_file(frame: pd.DataFrame, states: list[str], expire: SnapshotCleanup | None = None) -> pd.DataFrame:
    """RocksDB backend: one key group's bucket entries to its file."""
    return _group_frame(int(frame["kg"].iloc[0]), frame["v"], states, expire)


def _row_group_files(frames: Iterator[pd.DataFrame], states: list[str],
                     expire: SnapshotCleanup | None = None) -> Iterator[pd.DataFrame]:
    """Hashmap backend: each state row (a whole key group) to its file."""
    for frame in frames:
        for kg, group in zip(frame["kg"].tolist(), frame["group"].tolist()):
            meta_blob, buckets = pickle.loads(group)
            meta = GroupMeta.loads(meta_blob)  # refuses a layout this version does not read
            yield _group_frame(int(kg), [*buckets.values(), meta.inline], states, expire)


def rocksdb_meta_groups(spark: Any, checkpoint: CheckpointDir, batch: int) -> set[int]:
    """The key groups that have a meta entry at ``batch`` (RocksDB backend), each checked."""
    reader = spark.read.format("statestore").option("path", checkpoint.root).option("batchId", batch)
    rows = reader.option("stateVarName", META_STATE).load().select("key.kg", "value.v").collect()
    for _, blob in rows:
        GroupMeta.loads(blob)  # refuses a layout this version does not read
    return {r[0] for r in rows}


def committed_batch(checkpoint_dir: str | os.PathLike[str], batch: int | None, spark: Any = None,
                    not_a_checkpoint: str = "give the checkpoint directory of a job that ran") -> tuple[CheckpointDir, dict, int]:
    """The checkpoint, its job's metadata and committed batch ``batch`` (default: the last),
    refused when the directory holds no sparkstate checkpoint, its job ran on the native
    window path, or the batch is not one it retains."""
    checkpoint = CheckpointDir.open(checkpoint_dir, spark)
    if not checkpoint.has_metadata():
        raise SavepointError(f"{checkpoint.root} is not a sparkstate checkpoint (it has no sparkstate.json); "
                             + not_a_checkpoint)
    job_meta = checkpoint.read_metadata()
    if job_meta.get("plan") == "native":
        raise SavepointError(
            f"job {job_meta.get('job')!r} ran on the native window path (Spark SQL's own aggregation state, which "
            "has no key groups), so sparkstate cannot read or save its state; run it with window_path='python' "
            "(--window-path python) to take savepoints"
        )
    committed = checkpoint.committed_batches()
    if not committed:
        raise SavepointError(f"checkpoint {checkpoint.root} has no committed batch yet: there is no state to read; "
                             "run the job until a batch commits")
    if batch is None:
        batch = committed[-1]
    elif batch not in committed:
        raise SavepointError(
            f"batch {batch} is not a committed batch the checkpoint {checkpoint.root} retains "
            f"(it retains {committed[0]}..{committed[-1]}); choose one of those with --batch"
        )
    return checkpoint, job_meta, batch


def take_savepoint(
    checkpoint_dir: str,
    *,
    target: str | None = None,
    batch: int | None = None,
    spark: Any = None,
    savepoint_dir: str | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write a savepoint of committed batch ``batch`` (default: the last) of the checkpoint at
    ``checkpoint_dir`` to ``target`` (default: a new ``<savepoint_dir>/<job>-b<batch>-<time>``,
    ``savepoint_dir`` defaulting to ``savepoints/`` beside the checkpoint). Returns the
    savepoint's metadata, ``location`` included."""
    from sparkstate.runtime.session import get_spark

    checkpoint, job_meta, batch = committed_batch(checkpoint_dir, batch, spark)
    spark = spark or get_spark()
    started = time.monotonic()
    # a running query deletes the batches it no longer retains: the read holds the batch's files
    with checkpoint.pinned() as source:
        if not source.storage.exists(source.COMMITS, str(batch)):
            raise SavepointError(
                f"batch {batch} of checkpoint {checkpoint.root} was deleted by the running job before its savepoint "
                "could hold it (Spark keeps the last `retained` batches); take the savepoint of a later batch (the "
                "default: the last one), or retain more batches (with_checkpointing(retained=...))")
        return _write_savepoint(checkpoint, source, job_meta, batch, started, target, spark, savepoint_dir, extra)


def _write_savepoint(checkpoint: CheckpointDir, source: CheckpointDir, job_meta: dict, batch: int, started: float,
                     target: str | None, spark: Any, savepoint_dir: str | None, extra: dict[str, Any] | None
                     ) -> dict[str, Any]:
    """:func:`take_savepoint` of ``checkpoint``'s batch ``batch``, its state and logs read from
    ``source`` (the checkpoint's files, held: :meth:`CheckpointDir.pinned`)."""
    backend = job_meta.get("state_backend", "rocksdb")
    offsets = source.batch_source_offsets(batch) or []
    name = savepoint_name(job_meta["job"], batch)
    if target is None:
        base = savepoint_dir or join(str(Path(checkpoint.root).parent) if is_local(checkpoint.root)
                                     else checkpoint.root.rsplit("/", 1)[0], "savepoints")
        target = join(base, name)
    states = sorted(job_meta.get("state", {}))
    meta = {
        "id": name,
        "job": job_meta["job"],
        "function": job_meta.get("function"),
        "key_columns": job_meta.get("key_columns"),
        "key_groups": job_meta.get("key_groups"),
        "bucket_size": job_meta.get("bucket_size"),
        "state": {n: job_meta["state"][n] for n in states},
        "state_types": job_meta.get("state_types", {}),
        "state_ttl": job_meta.get("state_ttl", {}),
        "window": job_meta.get("window"),
        "source": job_meta.get("source"),
        "source_offset": offsets[0] if offsets else None,
        "source_files": _files_read(checkpoint, job_meta, batch) if _is_file_source(job_meta) else None,
        "batch": batch,
        "watermark_ms": committed_watermark(source, batch),
        "processing_time_ms": batch_timestamp(source, batch),
        "checkpoint": checkpoint.root,
        "state_backend": job_meta.get("state_backend"),
        "partitions": (job_meta.get("settings") or {}).get("parallelism"),
        "time_mode": job_meta.get("time_mode"),
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "sparkstate_version": _version("sparkstate"),
        "spark_version": spark.version,
        **(extra or {}),
    }
    connected = job_meta.get("connected")
    if connected:
        meta["connected"] = connected_position(source, connected, offsets, batch)
    writer = SavepointWriter(directory_of(target, spark), meta, states)
    try:
        if connected and connected.get("kind") == "broadcast":
            content = broadcast_content(spark, source, backend, batch, checkpoint)
            if content is not None:  # the checkpoint's own file (the job's trust: docs/guides/savepoints.md)
                writer.add_broadcast(pickle.loads(content), connected.get("broadcast") or {})
        with_meta = rocksdb_meta_groups(spark, source, batch) if backend == "rocksdb" else None
        expire = snapshot_cleanup(job_meta, meta["processing_time_ms"], meta["watermark_ms"])
        files = group_files(spark, source, backend, batch, states, expire).collect()
        read_s = time.monotonic() - started  # the state read and the files built (on the executors)
        for kg, data, keys in files:
            writer.add_file(kg, data, keys)
        missing = sorted({f.key_group for f in writer.files} - with_meta) if with_meta is not None else []
        if missing:
            raise SavepointError(f"checkpoint {checkpoint.root}, batch {batch}: key groups {missing} have buckets "
                                 "but no meta entry; the checkpoint's state is damaged")
        written = writer.publish()
    except BaseException:
        writer.abort()
        raise
    written["location"] = target
    written["read_seconds"] = read_s
    written["seconds"] = time.monotonic() - started
    return written


def connected_position(checkpoint: CheckpointDir, connected: dict, offsets: list[Any], batch: int) -> dict:
    """Where the second input of a two-input job stood at ``batch``: its source and offset (the
    query's last source, ``query.py``), and for a file source the files it had read, so that a
    restore resumes it as it resumes the first input (``spark_sources.resumes``)."""
    source = connected.get("source")
    out: dict[str, Any] = {"source": source, "source_offset": offsets[-1] if len(offsets) > 1 else None}
    if isinstance(source, dict) and source.get("type") == "FileSource" and len(offsets) > 1:
        out["source_files"] = checkpoint.source_files(len(offsets) - 1, -1, batch)
    return out


def broadcast_refs(spark: Any, checkpoint: CheckpointDir, backend: str, batch: int) -> set[str]:
    """The broadcast state references the key groups' meta entries hold at ``batch``."""
    reader = spark.read.format("statestore").option("path", checkpoint.root).option("batchId", batch)
    if backend == "rocksdb":
        blobs = [r[0] for r in reader.option("stateVarName", META_STATE).load().select("value.v").collect()]
    else:
        frame = reader.load()
        blobs = [pickle.loads(r[0])[0] for r in frame.select(hashmap_group_column(frame)).collect()]
    return {ref for ref in (GroupMeta.loads(b).broadcast for b in blobs if b) if ref is not None}


def broadcast_content(spark: Any, checkpoint: CheckpointDir, backend: str, batch: int,
                      origin: CheckpointDir | None = None) -> bytes | None:
    """The broadcast state of a broadcast job at ``batch`` (the content every key group refers
    to; None: no broadcast element had arrived). ``origin``: the checkpoint whose broadcast
    files to read, when ``checkpoint`` holds only its Spark files (:meth:`CheckpointDir.pinned`)."""
    from sparkstate.engine.broadcast import BroadcastStore

    refs = broadcast_refs(spark, checkpoint, backend, batch)
    checkpoint = origin or checkpoint
    if not refs:
        return None
    assert checkpoint.broadcast_dir is not None, "a broadcast job runs on a local checkpoint only"
    if len(refs) > 1:
        raise SavepointError(
            f"checkpoint {checkpoint.root}, batch {batch}: the key groups refer to {len(refs)} different broadcast "
            "states, where every key group holds the same; the checkpoint's state is damaged"
        )
    store = BroadcastStore(checkpoint.broadcast_dir)
    try:
        with open(store.path(next(iter(refs))), "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise SavepointError(
            f"checkpoint {checkpoint.root}, batch {batch}: the broadcast state file {store.path(next(iter(refs)))} "
            "is missing; restore the checkpoint directory whole from a backup"
        ) from None


def _files_read(checkpoint: CheckpointDir, job_meta: dict, batch: int) -> list[str] | None:
    """The files a file source job's restore must skip besides its position (``source_offset``):
    for a checkpoint restored from an older savepoint, the files that savepoint named; for a
    checkpoint of Spark's file source (a directory Spark lists, or an older sparkstate's), also
    every file its log names up to ``batch``. sparkstate's own file source records its position,
    a file's (modification time, path), in the offset log: a restore resumes after it."""
    before = (job_meta.get("restored_from") or {}).get("source_files") or []
    offsets = checkpoint.batch_source_offsets(batch) or []
    if offsets and isinstance(offsets[0], dict) and "logOffset" in offsets[0]:
        return list(dict.fromkeys([*before, *checkpoint.source_files(0, -1, batch)]))
    return list(before) or None


def _is_file_source(job_meta: dict) -> bool:
    source = job_meta.get("source")
    return isinstance(source, dict) and source.get("type") == "FileSource"


def _version(package: str) -> str:
    from importlib.metadata import version

    try:
        return version(package)
    except Exception:
        return "?"
