"""Checkpoint configuration in one place, with Flink's names where they fit.

In sparkstate every micro-batch is a checkpoint: Spark writes the batch's source offsets, the
watermark and every state store's new version into the checkpoint directory, and commits the
batch only when all of them are written. So Flink's checkpoint interval is the micro-batch
trigger, its retained checkpoints are the batches Spark keeps, and its incremental RocksDB
checkpoints are Spark's changelog checkpointing.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from datetime import timedelta

from sparkstate.api.time import to_millis
from sparkstate.errors import JobDefinitionError

#: Spark's default for ``spark.sql.streaming.minBatchesToRetain``
DEFAULT_RETAINED = 100
DEFAULT_INTERVAL = "500 milliseconds"
STATE_BACKENDS = ("rocksdb", "hashmap")

#: RocksDB's tuning, by Flink's names: name -> (Spark's ``spark.sql.streaming.stateStore.rocksdb.*``
#: setting, what it takes). Sizes are Flink's MemorySize text ("64mb", "1 gb", bytes), in whole MB for Spark.
ROCKSDB_OPTIONS: dict[str, tuple[str, str]] = {
    "state.backend.rocksdb.block.cache-size": ("blockCacheSizeMB", "size"),
    "state.backend.rocksdb.writebuffer.size": ("writeBufferSizeMB", "size"),
    "state.backend.rocksdb.writebuffer.count": ("maxWriteBufferNumber", "count"),
    # Flink bounds a slot's RocksDB memory (block cache, write buffers, index and filter blocks)
    # with one shared cache; Spark's boundedMemoryUsage does the same across an executor's stores
    "state.backend.rocksdb.memory.fixed-per-slot": ("maxMemoryUsageMB", "size"),
}
_SPARK_ROCKSDB = "spark.sql.streaming.stateStore.rocksdb."
_UNITS = {"": 1, "b": 1, "bytes": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
          "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}


def _rocksdb_value(name: str, value: object) -> int:
    """A RocksDB option's value as Spark takes it: whole MB for sizes (rounded up), a count."""
    kind = ROCKSDB_OPTIONS[name][1]
    text = str(value).strip().lower()
    if kind == "count":
        if isinstance(value, bool) or not re.fullmatch(r"[0-9]+", text) or int(text) < 1:
            raise JobDefinitionError(f"{name} takes a positive whole number, got {value!r}")
        return int(text)
    m = re.fullmatch(r"([0-9]+)\s*([a-z]*)", text)
    if isinstance(value, bool) or m is None or m.group(2) not in _UNITS or int(m.group(1)) < 1:
        raise JobDefinitionError(f"{name} takes a size such as '64mb', '1gb' or a number of bytes, got {value!r}")
    return max(1, -(-int(m.group(1)) * _UNITS[m.group(2)] // (1 << 20)))


#: a URI scheme such as ``file:``, ``hdfs:`` or ``s3a:`` (two letters at least: not a drive letter)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:")


def interval_millis(interval: str | timedelta | int, what: str = "interval") -> int:
    """``"500 milliseconds"``, ``"2 s"``, ``timedelta(seconds=1)`` or int milliseconds, as whole,
    non-negative int ms (:func:`~sparkstate.api.time.to_millis` with text, exactly)."""
    return to_millis(interval, what, text=True, exact=True)


def is_uri(directory: str) -> bool:
    """Whether ``directory`` names its file system (``file:``, ``hdfs:``, ``s3a:``...)."""
    return bool(_SCHEME.match(directory))


@dataclass(frozen=True)
class CheckpointConfig:
    """Where and how a job checkpoints (Flink's ``CheckpointConfig`` and state backend settings).

    * ``directory`` - the checkpoint directory (Flink's ``execution.checkpointing.dir``): a
      local path (the default kind), or any Hadoop-compatible URI (``file:///...``,
      ``hdfs://namenode/...``, ``s3a://bucket/...``). ``Job.run(checkpoint_dir=...)`` overrides it.
    * ``interval`` - how often a checkpoint is taken (Flink's
      ``execution.checkpointing.interval``). Each micro-batch is one checkpoint, so this is
      the micro-batch trigger; ``0`` starts the next batch as soon as one ends.
    * ``retained`` - how many checkpoints are kept (Flink's
      ``execution.checkpointing.num-retained``): Spark's
      ``spark.sql.streaming.minBatchesToRetain``, whose default 100 is kept. Older batches'
      logs and state files are deleted (state files at Spark's next state-store maintenance,
      every 60 s by default).
    * ``incremental`` - incremental RocksDB checkpoints (Flink's
      ``execution.checkpointing.incremental``): Spark's changelog checkpointing, where a
      checkpoint writes only the changed entries and a full snapshot is uploaded in the
      background every 10 checkpoints. On by default. With it off every checkpoint is a
      RocksDB snapshot (Spark uploads only the SST files the checkpoint directory does not
      hold yet). The hashmap backend always writes deltas. Changing it between runs of one
      checkpoint is safe: Spark reads both formats.
    * ``state_backend`` - ``"rocksdb"`` (Flink's ``state.backend.type``: the
      ``EmbeddedRocksDBStateBackend``, the default) or ``"hashmap"`` (``HashMapStateBackend``:
      Spark's in-memory store). Fixed for the life of a checkpoint.
    * ``rocksdb`` - RocksDB's tuning by Flink's names (:data:`ROCKSDB_OPTIONS`):
      ``state.backend.rocksdb.block.cache-size``, ``...writebuffer.size``,
      ``...writebuffer.count`` and ``...memory.fixed-per-slot`` (a bound on all of RocksDB's
      memory: Spark's ``boundedMemoryUsage`` with ``maxMemoryUsageMB``). Each maps to Spark's
      ``spark.sql.streaming.stateStore.rocksdb.*`` setting; unset ones keep Spark's defaults.
      They may change between runs of one checkpoint.
    """

    directory: str | os.PathLike[str] | None = None
    interval: str | timedelta | int = DEFAULT_INTERVAL
    retained: int = DEFAULT_RETAINED
    incremental: bool = True
    state_backend: str = "rocksdb"
    rocksdb: dict[str, str | int] | None = field(default=None, hash=False)

    def __post_init__(self) -> None:
        if self.rocksdb is not None:
            if not isinstance(self.rocksdb, dict):
                raise JobDefinitionError(f"rocksdb takes a dict of Flink's RocksDB option names, got {self.rocksdb!r}")
            unknown = sorted(set(self.rocksdb) - set(ROCKSDB_OPTIONS))
            if unknown:
                raise JobDefinitionError(f"unknown RocksDB option(s) {', '.join(map(str, unknown))}; sparkstate maps "
                                         f"{', '.join(ROCKSDB_OPTIONS)}")
            for name, value in self.rocksdb.items():
                _rocksdb_value(name, value)
            object.__setattr__(self, "rocksdb", dict(self.rocksdb))
        if self.directory is not None:
            if not isinstance(self.directory, (str, os.PathLike)) or not str(self.directory).strip():
                raise JobDefinitionError(
                    "directory must be a non-empty path or URI (e.g. 'checkpoints/job', 'hdfs://nn/ckpt'), "
                    f"got {self.directory!r}"
                )
            object.__setattr__(self, "directory", os.fspath(self.directory))
        interval_millis(self.interval)
        if not isinstance(self.retained, int) or isinstance(self.retained, bool) or self.retained < 1:
            raise JobDefinitionError(f"retained must be a positive int (checkpoints to keep), got {self.retained!r}")
        if not isinstance(self.incremental, bool):
            raise JobDefinitionError(f"incremental must be True or False, got {self.incremental!r}")
        if self.state_backend not in STATE_BACKENDS:
            raise JobDefinitionError(f"state_backend must be 'rocksdb' or 'hashmap', got {self.state_backend!r}")

    @property
    def interval_ms(self) -> int:
        return interval_millis(self.interval)

    @property
    def trigger(self) -> str:
        """The interval as Spark's ``trigger(processingTime=...)`` takes it."""
        return f"{self.interval_ms} milliseconds"

    def spark_conf(self) -> dict[str, str]:
        """The Spark SQL settings that apply this configuration to a query (set before it starts)."""
        conf = {
            "spark.sql.streaming.minBatchesToRetain": str(self.retained),
            "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": str(self.incremental).lower(),
        }
        for name, value in (self.rocksdb or {}).items():
            conf[_SPARK_ROCKSDB + ROCKSDB_OPTIONS[name][0]] = str(_rocksdb_value(name, value))
            if ROCKSDB_OPTIONS[name][0] == "maxMemoryUsageMB":
                conf[_SPARK_ROCKSDB + "boundedMemoryUsage"] = "true"
        return conf

    def describe_rocksdb(self) -> str:
        """The RocksDB options set, as Flink names them and as Spark gets them (``explain``)."""
        if not self.rocksdb:
            return "Spark's defaults"
        return ", ".join(f"{n}={v} ({ROCKSDB_OPTIONS[n][0]}={_rocksdb_value(n, v)})" for n, v in self.rocksdb.items())
