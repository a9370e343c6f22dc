"""On Spark: a batch that fails says what it read (the input files of the failing batch); the
default side outputs in the checkpoint follow its retention; a checkpoint reached through
Hadoop is guarded by a lease, and its metadata survives a write cut short."""

from __future__ import annotations

import json
import os

import pytest
from spark_helpers import FAST

from sparkstate import (
    FileSource,
    Job,
    JobFailedError,
    KeyedProcessFunction,
    ListSource,
    MemorySink,
    UpiPayments,
    WatermarkStrategy,
)


class Picky(KeyedProcessFunction):
    def process_element(self, e, ctx):
        if e["amount"] == 13.0:
            raise ValueError("unlucky amount")
        yield {"merchant_id": ctx.get_current_key(), "amount": e["amount"]}


def test_a_failing_batch_names_its_files(spark, checkpoint, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    for i, (name, amount) in enumerate((("good.json", 1.0), ("poison.json", 13.0))):
        path = folder / name
        path.write_text(json.dumps({"merchant_id": f"m{i}", "amount": amount}) + "\n")
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))  # one file per batch, oldest first
    job = (
        Job("picky").source(FileSource(str(folder), UpiPayments.schema_ddl, max_files_per_trigger=1))
        .key_by("merchant_id").process(Picky(), output_schema="merchant_id string, amount double")
        .sink(MemorySink()).with_settings(state_backend="hashmap", **FAST)
    )
    with pytest.raises(JobFailedError) as failure:
        job.run(checkpoint_dir=checkpoint, spark=spark, timeout=180)
    message = " ".join(str(failure.value).split())
    assert "unlucky amount" in message and "'m1'" in message  # the error, with its key
    assert f"batches up to 0 are committed in {checkpoint}. Batch 1 read file {folder / 'poison.json'}." in message
    assert "batch 1 is run again on the same input" in message


class Total(KeyedProcessFunction):
    def process_element(self, e, ctx):
        yield {"k": ctx.get_current_key(), "v": e["v"]}


@pytest.mark.parametrize("through_hadoop", [False, True], ids=["local", "hadoop"])
def test_default_side_outputs_keep_the_batches_the_checkpoint_retains(spark, checkpoint, monkeypatch, through_hadoop):
    # each batch has an event without event time: a dead letter in the checkpoint's side-outputs/
    if through_hadoop:  # as in an hdfs:// or s3a:// checkpoint: written by Spark, pruned through Hadoop, on the local disk
        from sparkstate.runtime.checkpoint.storage import HadoopStorage
        from sparkstate.runtime.io import sinks as spark_sinks

        monkeypatch.setattr(spark_sinks, "is_local", lambda path: False)
        monkeypatch.setattr(spark_sinks, "open_storage", lambda path, s=None: HadoopStorage(str(path), s or spark))
    batches = [[{"ts": 1000 * b, "k": "a", "v": 1.0}, {"ts": None, "k": "a", "v": 2.0}] for b in range(4)]
    wm = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_column("ts")
    job = (
        Job("dead").source(ListSource(batches, "ts bigint, k string, v double"), watermark=wm).key_by("k")
        .process(Total(), output_schema="k string, v double").sink(MemorySink())
        .with_settings(state_backend="hashmap", **FAST).with_checkpointing(retained=2)
    )
    result = job.run(checkpoint_dir=checkpoint, spark=spark)
    assert result.side_outputs == {"dead_letters": 4}
    kept = sorted(p.name for p in (checkpoint / "side-outputs" / "dead_letters").iterdir())
    last = max(p["batchId"] for p in result.progress)
    with_rows = [p["batchId"] for p in result.progress if p.get("sideOutputs", {}).get("dead_letters")]
    assert len(with_rows) >= 3  # so that some fell out of the two retained batches
    # a batch prunes the folders as it runs; the run may stop at the end of its input after one
    # more batch (no data) ran but before it committed or reported progress: one fewer then
    assert kept in ([f"batch_id={b}" for b in with_rows if b > last - 2], [f"batch_id={b}" for b in with_rows if b > last - 1])
    assert kept
    import pyarrow.parquet as pq

    rows = pq.read_table(checkpoint / "side-outputs" / "dead_letters" / kept[-1]).to_pylist()
    assert rows and all("event time" in r["reason"] for r in rows)  # a micro-batch may take two list batches
    assert (checkpoint / "side-outputs" / "dead_letters" / kept[-1] / "_SUCCESS").exists() == through_hadoop  # Spark wrote it


def test_a_lease_guards_a_checkpoint_reached_through_hadoop(spark, tmp_path):
    from sparkstate.errors import CheckpointInUseError
    from sparkstate.runtime.checkpoint.run_lock import LEASE_FILE, lock_checkpoint
    from sparkstate.runtime.checkpoint.storage import HadoopStorage

    storage = HadoopStorage(str(tmp_path / "ckpt"), spark)  # as for hdfs:// or s3a://, on the local disk
    first = lock_checkpoint(storage, "job-a")
    with pytest.raises(CheckpointInUseError, match="in use by another run \\(job 'job-a', pid"):
        lock_checkpoint(storage, "job-b")
    first.release()
    assert not storage.exists(LEASE_FILE)
    lock_checkpoint(storage, "job-b").release()


def test_metadata_survives_a_hadoop_write_cut_between_delete_and_rename(spark, tmp_path):
    """On HDFS or S3 the new content takes the file's name by delete + rename: a crash between
    the two left no sparkstate.json, and the checkpoint looked like one sparkstate did not write."""
    from sparkstate.runtime.checkpoint.directory import CheckpointDir
    from sparkstate.runtime.checkpoint.storage import HadoopStorage

    storage = HadoopStorage(str(tmp_path / "ckpt"), spark)
    checkpoint = CheckpointDir(storage)
    checkpoint.write_metadata({"job": "j", "v": 1})
    storage._call(("sparkstate.json",), lambda p: storage._fs.rename(p, storage._jpath(".sparkstate.json.tmp")))
    assert checkpoint.has_metadata() and checkpoint.read_metadata() == {"job": "j", "v": 1}
    checkpoint.write_metadata({"job": "j", "v": 2})
    assert checkpoint.read_metadata() == {"job": "j", "v": 2} and not (tmp_path / "ckpt" / ".sparkstate.json.tmp").exists()
    storage.delete("sparkstate.json")
    assert not checkpoint.has_metadata()


def test_a_checkpoint_reached_through_hadoop_refuses_and_clears_as_a_local_one(spark, tmp_path):
    """HDFS or S3 take the same rules as a local directory: a folder of someone's files is no
    checkpoint, and --fresh's clear deletes only the layout's names there."""
    from sparkstate.errors import CheckpointMismatchError
    from sparkstate.runtime.checkpoint.directory import CheckpointDir
    from sparkstate.runtime.checkpoint.storage import HadoopStorage

    root = tmp_path / "ckpt"
    (root / "src").mkdir(parents=True)
    (root / "thesis.tex").write_text("mine")
    checkpoint = CheckpointDir(HadoopStorage(str(root), spark))
    with pytest.raises(CheckpointMismatchError, match="is not empty and not a sparkstate checkpoint .* it holds src, thesis.tex"):
        checkpoint.check_usable()
    checkpoint.write_metadata({"job": "j"})
    checkpoint.storage.write_atomic(b"v1", "commits", "0")
    checkpoint.storage.write_atomic(b"{}", "sparkstate.lease")
    checkpoint.check_usable()  # a checkpoint now
    assert checkpoint.clear() == ["src", "thesis.tex"]
    assert sorted(p.name for p in root.iterdir() if not p.name.endswith(".crc")) == ["sparkstate.lease", "src", "thesis.tex"]
