"""Reading what a run left, with Spark (read-only): the checkpoint's state through Spark's
state data source, and the latest output rows of a Parquet sink.

Each key group's meta entry knows how many keys the group holds; summing them gives the number
of keys in state, which Spark's own metrics (state-store entries, i.e. buckets) do not show.
Both readers use the session the run left active and give None without one, so the command
line shows what it can without starting Spark.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

from sparkstate.engine.keygroups import GroupMeta
from sparkstate.runtime.checkpoint.storage import normalize
from sparkstate.runtime.streaming.processor import META_STATE


def group_metas(spark: Any, checkpoint_dir: str | Path, state_backend: str) -> dict[int, GroupMeta]:
    """The meta entry of every key group in the checkpoint's last committed batch."""
    # absolute: over Spark Connect the server would take a relative path as relative to its own directory
    reader = spark.read.format("statestore").option("path", normalize(checkpoint_dir))
    if state_backend == "rocksdb":
        rows = reader.option("stateVarName", META_STATE).load().select("key.kg", "value.v").collect()
        return {r[0]: GroupMeta.loads(r[1]) for r in rows}
    frame = reader.load()
    rows = frame.select("key.kg", hashmap_group_column(frame)).collect()
    return {r[0]: GroupMeta.loads(pickle.loads(r[1])[0]) for r in rows}


def hashmap_group_column(frame: Any) -> str:
    """The column of a key group's pickled state in the state data source's rows of the
    hashmap backend (``applyInPandasWithState``): Spark nests the state in ``groupState``
    (beside ``timeoutTimestamp`` when the query has timeouts)."""
    names = frame.schema["value"].dataType.names
    return "value.group" if "group" in names else "value.groupState.group"


def count_keys(spark: Any, checkpoint_dir: str | Path, state_backend: str) -> int | None:
    """Keys holding state or timers, or None when the checkpoint cannot be read (yet)."""
    try:
        return sum(m.n_keys for m in group_metas(spark, checkpoint_dir, state_backend).values())
    except Exception:  # no committed batch yet, or a checkpoint of another layout
        return None


def state_keys(checkpoint_dir: str, state_backend: str) -> int | None:
    """:func:`count_keys` with the active Spark session; None when there is none."""
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    return count_keys(spark, checkpoint_dir, state_backend) if spark is not None else None


def latest_rows(path: str, key: str, order: str | None, limit: int = 10) -> list[dict[str, Any]] | None:
    """The Parquet output's latest row per ``key``, the top ``limit`` by ``order`` (default:
    ``key``); None without an active Spark session or Spark's output there, [] when it is empty."""
    import pyspark.sql.functions as F
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    if spark is None or not Path(path, "_spark_metadata").exists():
        return None
    df = spark.read.parquet(normalize(path))
    if df.isEmpty():
        return []
    order = order or key
    latest = (
        df.groupBy(key)
        .agg(F.max_by(F.struct(*df.columns), F.col(order)).alias("row"))
        .select("row.*")
        .orderBy(F.col(order).desc())
        .limit(limit)
    )
    return [r.asDict() for r in latest.collect()]
