"""Checkpoint configuration, checkpoint directories as paths or URIs, and storage faults (no Spark)."""

from __future__ import annotations

import errno
import os
from datetime import timedelta
from pathlib import Path

import pytest

from sparkstate import CheckpointConfig, CheckpointStorageError, JobDefinitionError
from sparkstate.runtime.checkpoint.directory import CheckpointDir, _storage_error
from sparkstate.runtime.checkpoint.storage import LocalStorage, is_local, join, normalize, open_storage

# ------------------------------------------------------------------ CheckpointConfig


def test_defaults_are_flinks_names_with_sparks_values():
    c = CheckpointConfig()
    assert (c.directory, c.interval_ms, c.retained, c.incremental, c.state_backend) == (None, 500, 100, True, "rocksdb")
    assert c.trigger == "500 milliseconds"
    assert c.spark_conf() == {
        "spark.sql.streaming.minBatchesToRetain": "100",
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    }


@pytest.mark.parametrize(
    "interval, ms",
    [("500 milliseconds", 500), ("2 seconds", 2000), ("1 minute", 60_000), ("1.5 s", 1500), ("250ms", 250),
     ("0 seconds", 0), (timedelta(seconds=3), 3000), (100, 100)],
)
def test_interval_forms(interval, ms):
    assert CheckpointConfig(interval=interval).interval_ms == ms
    assert CheckpointConfig(interval=interval).trigger == f"{ms} milliseconds"


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"directory": ""}, "directory must be a non-empty path or URI"),
        ({"directory": 3}, "directory must be a non-empty path or URI"),
        ({"interval": "soon"}, "interval must be a duration such as '500 milliseconds'"),
        ({"interval": "5 fortnights"}, "interval must be a duration"),
        ({"interval": -1}, "interval must be a whole, non-negative number of milliseconds"),
        ({"interval": "0.5 ms"}, "interval must be a whole"),
        ({"retained": 0}, "retained must be a positive int"),
        ({"retained": True}, "retained must be a positive int"),
        ({"incremental": "yes"}, "incremental must be True or False"),
        ({"state_backend": "memory"}, "state_backend must be 'rocksdb' or 'hashmap', got 'memory'"),
    ],
)
def test_bad_configuration_names_the_argument(changes, message):
    with pytest.raises(JobDefinitionError, match=message):
        CheckpointConfig(**changes)


def test_directory_takes_paths_and_uris():
    assert CheckpointConfig(directory=Path("ckpt")).directory == "ckpt"
    assert CheckpointConfig(directory="s3a://bucket/ckpt").directory == "s3a://bucket/ckpt"


def test_local_paths_and_uris():
    assert is_local("ckpt") and is_local("/tmp/ckpt") and is_local("file:///tmp/ckpt")
    assert not is_local("hdfs://nn:8020/ckpt") and not is_local("s3a://bucket/ckpt")
    assert normalize("file:///tmp/ckpt") == "/tmp/ckpt" and normalize("ckpt") == str(Path("ckpt").absolute())
    assert normalize("hdfs://nn/ckpt/") == "hdfs://nn/ckpt"
    assert join("s3a://bucket/ckpt", "side-outputs") == "s3a://bucket/ckpt/side-outputs"


def test_a_checkpoint_directory_knows_its_layout(tmp_path):
    checkpoint = CheckpointDir.open(f"file://{tmp_path}/")
    assert isinstance(checkpoint.storage, LocalStorage) and checkpoint.root == str(tmp_path)
    assert checkpoint.side_output_dir == f"{tmp_path}/side-outputs"
    assert checkpoint.list_source_dir == f"{tmp_path}/sparkstate-sources"
    assert checkpoint.metadata_path == f"{tmp_path}/sparkstate.json"
    assert checkpoint.stats_log_path == f"{tmp_path}/sparkstate/checkpoints.jsonl"
    assert not CheckpointDir.needs_spark(tmp_path) and CheckpointDir.needs_spark(" s3a://bucket/ckpt/")


def test_a_remote_checkpoint_keeps_no_list_source_events():
    class Remote(LocalStorage):  # a URI's storage, without the JVM
        pass

    checkpoint = CheckpointDir(Remote("s3a://bucket/ckpt"))
    assert checkpoint.side_output_dir == "s3a://bucket/ckpt/side-outputs" and checkpoint.list_source_dir is None


# ------------------------------------------------------------------ storage faults


def test_a_full_disk_is_named_with_the_fix():
    with pytest.raises(OSError) as full:  # the kernel's own ENOSPC
        with open("/dev/full", "wb") as f:
            f.write(b"x")
    assert full.value.errno == errno.ENOSPC
    message = str(_storage_error("/data/ckpt", full.value, 7))
    assert "no space left for checkpoint directory /data/ckpt (No space left on device)" in message
    assert "free space on its disk" in message and "batches up to 7 are committed there and kept" in message


@pytest.mark.parametrize("code", [errno.EACCES, errno.EPERM, errno.EROFS])
def test_an_unwritable_directory_is_named_with_the_fix(code):
    message = str(_storage_error("/data/ckpt", OSError(code, os.strerror(code)), None))
    assert message.startswith("checkpoint directory /data/ckpt is not writable (")
    assert "make it writable for the user running the job" in message and "no batch was committed yet" in message


def test_the_write_probe_reports_a_full_disk(tmp_path, monkeypatch):
    checkpoint = CheckpointDir.open(tmp_path)
    (tmp_path / "commits").mkdir()
    for b in (0, 1):
        (tmp_path / "commits" / str(b)).write_text("v1\n{}\n")
    checkpoint.ensure_writable()  # writes and removes its probe
    assert not (tmp_path / "sparkstate" / "write-probe").exists()

    def full(self, data, *parts):
        with open("/dev/full", "wb") as f:
            f.write(data)

    monkeypatch.setattr(LocalStorage, "write_atomic", full)
    with pytest.raises(CheckpointStorageError, match="no space left .*batches up to 1 are committed"):
        checkpoint.ensure_writable()
    assert "no space left" in str(checkpoint.diagnose_failure())


def test_open_storage_of_a_local_directory_needs_no_spark(tmp_path):
    store = open_storage(f"file://{tmp_path}")
    assert isinstance(store, LocalStorage) and store.root == str(tmp_path)
    store.write_atomic(b"abc", "sparkstate", "x")
    assert store.read_text("sparkstate", "x") == "abc" and [e.name for e in store.list("sparkstate")] == ["x"]
    store.delete("sparkstate")
    assert store.list("sparkstate") == [] and not store.exists("sparkstate")


def test_rocksdb_options_by_flinks_names_map_to_sparks_settings() -> None:
    from sparkstate.api.checkpointing import CheckpointConfig

    config = CheckpointConfig(rocksdb={
        "state.backend.rocksdb.block.cache-size": "64mb", "state.backend.rocksdb.writebuffer.size": 8 << 20,
        "state.backend.rocksdb.writebuffer.count": 3, "state.backend.rocksdb.memory.fixed-per-slot": "1 gb",
    })
    conf = config.spark_conf()
    prefix = "spark.sql.streaming.stateStore.rocksdb."
    assert conf[prefix + "blockCacheSizeMB"] == "64" and conf[prefix + "writeBufferSizeMB"] == "8"
    assert conf[prefix + "maxWriteBufferNumber"] == "3"
    assert conf[prefix + "maxMemoryUsageMB"] == "1024" and conf[prefix + "boundedMemoryUsage"] == "true"
    assert "blockCacheSizeMB=64" in config.describe_rocksdb()
    assert CheckpointConfig().describe_rocksdb() == "Spark's defaults"
    assert not any(k.startswith(prefix + "block") for k in CheckpointConfig().spark_conf())
    # a size below a megabyte is one (Spark takes whole MB); the config stays hashable
    assert CheckpointConfig(rocksdb={"state.backend.rocksdb.block.cache-size": "100kb"}).spark_conf()[
        prefix + "blockCacheSizeMB"] == "1"
    hash(config)


@pytest.mark.parametrize("options, message", [
    ({"state.backend.rocksdb.block.cache": "64mb"}, "unknown RocksDB option"),
    ({"state.backend.rocksdb.block.cache-size": "lots"}, "takes a size such as '64mb'"),
    ({"state.backend.rocksdb.block.cache-size": "0mb"}, "takes a size"),
    ({"state.backend.rocksdb.writebuffer.count": "2.5"}, "positive whole number"),
    ({"state.backend.rocksdb.writebuffer.count": True}, "positive whole number"),
    ("64mb", "takes a dict"),
])
def test_rocksdb_options_that_are_wrong_are_named(options, message) -> None:
    from sparkstate.api.checkpointing import CheckpointConfig
    from sparkstate.errors import JobDefinitionError

    with pytest.raises(JobDefinitionError, match=message):
        CheckpointConfig(rocksdb=options)


def test_set_splits_rocksdb_options_from_generator_settings() -> None:
    from sparkstate.cli import _split_settings

    rest, rocksdb = _split_settings(("users=5", "state.backend.rocksdb.block.cache-size = 64mb"))
    assert rest == ("users=5",) and rocksdb == {"state.backend.rocksdb.block.cache-size": "64mb"}
