"""RocksDB's tuning by Flink's names reaches Spark's RocksDB state store for the run that asks
for it, and not for the next run of the same session that does not."""

from __future__ import annotations

import pytest

from sparkstate import Job, NoopSink, UpiPayments
from sparkstate.jobs.running_sum import OUTPUT, RunningSum
from sparkstate.runtime.streaming.planner import explain

pytestmark = pytest.mark.spark

PREFIX = "spark.sql.streaming.stateStore.rocksdb."


def _job(name: str) -> Job:
    return (Job(name).source(UpiPayments(events=20_000, merchants=200, max_batch=10_000)).key_by("merchant_id")
            .process(RunningSum(), output_schema=OUTPUT).sink(NoopSink()))


def test_rocksdb_options_apply_to_their_run_only(spark, tmp_path) -> None:
    tuned = _job("tuned").with_checkpointing(rocksdb={
        "state.backend.rocksdb.block.cache-size": "16mb", "state.backend.rocksdb.writebuffer.count": 3,
        "state.backend.rocksdb.memory.fixed-per-slot": "256mb",
    })
    assert "rocksdb:    state.backend.rocksdb.block.cache-size=16mb (blockCacheSizeMB=16)" in explain(tuned)
    during: list[dict] = []

    def read(_p: dict) -> None:
        during.append({k: spark.conf.get(PREFIX + k, None) for k in
                       ("blockCacheSizeMB", "maxWriteBufferNumber", "maxMemoryUsageMB", "boundedMemoryUsage")})

    result = tuned.run(checkpoint_dir=tmp_path / "tuned", spark=spark, on_progress=read)
    assert result.events == 20_000 and during
    assert during[-1] == {"blockCacheSizeMB": "16", "maxWriteBufferNumber": "3", "maxMemoryUsageMB": "256",
                          "boundedMemoryUsage": "true"}
    during.clear()
    plain = _job("plain").run(checkpoint_dir=tmp_path / "plain", spark=spark, on_progress=read)
    assert plain.events == 20_000
    assert during[-1] == {"blockCacheSizeMB": None, "maxWriteBufferNumber": None, "maxMemoryUsageMB": None,
                          "boundedMemoryUsage": None}
