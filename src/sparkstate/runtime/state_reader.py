"""Reading a checkpoint's state with Spark's state data source (read-only).

Each key group's meta entry knows how many keys the group holds; summing them gives the number
of keys in state, which Spark's own metrics (state-store entries, i.e. buckets) do not show.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

from sparkstate.engine.keygroups import GroupMeta
from sparkstate.runtime.spark_processor import META_STATE


def group_metas(spark: Any, checkpoint_dir: str | Path, state_backend: str) -> dict[int, GroupMeta]:
    """The meta entry of every key group in the checkpoint's last committed batch."""
    reader = spark.read.format("statestore").option("path", str(checkpoint_dir))
    if state_backend == "rocksdb":
        rows = reader.option("stateVarName", META_STATE).load().select("key.kg", "value.v").collect()
        return {r[0]: GroupMeta.loads(r[1]) for r in rows}
    rows = reader.load().select("key.kg", "value.group").collect()
    return {r[0]: GroupMeta.loads(pickle.loads(r[1])[0]) for r in rows}


def count_keys(spark: Any, checkpoint_dir: str | Path, state_backend: str) -> int | None:
    """Keys holding state or timers, or None when the checkpoint cannot be read (yet)."""
    try:
        return sum(m.n_keys for m in group_metas(spark, checkpoint_dir, state_backend).values())
    except Exception:  # no committed batch yet, or a checkpoint of another layout
        return None
