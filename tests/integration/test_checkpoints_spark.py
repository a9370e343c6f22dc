"""Checkpoints on real Spark: their recorded figures, their configuration, and storage faults.

The fault tests mount a small tmpfs for the checkpoint (they need root, as the test machine
runs them, and are skipped elsewhere): remounting it read-only makes the directory unwritable
even for root, which ``chmod`` does not, and filling it makes its disk full for real.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sparkstate import (
    CheckpointMismatchError,
    CheckpointStorageError,
    Job,
    KeyedProcessFunction,
    ListSource,
    MemorySink,
    ValueStateDescriptor,
)
from sparkstate.runtime.checkpoint.directory import CheckpointDir
from sparkstate.runtime.checkpoint.stats import CheckpointLog, retained_checkpoints
from sparkstate.runtime.checkpoint.storage import HadoopStorage

FAST = "100 milliseconds"


class Total(KeyedProcessFunction):
    def open(self, ctx):
        self.total = ctx.get_state(ValueStateDescriptor("total", int, default=0))

    def process_element(self, e, ctx):
        self.total.update(self.total.value() + e["v"])
        yield {"k": ctx.get_current_key(), "total": self.total.value()}


#: a first batch that creates 3,000 keys, then small batches that touch two of them
BATCHES = [[{"k": f"k{i}", "v": i} for i in range(3000)]] + [[{"k": "k1", "v": b}, {"k": "k2", "v": b}] for b in range(1, 6)]


def total_job(sink, batches=BATCHES, name="total", **checkpointing):
    source = ListSource(batches, "k string, v bigint", end_of_input=len(batches) == len(BATCHES))
    return (
        Job(name).source(source).key_by("k").process(Total(), output_schema="k string, total bigint").sink(sink)
        .with_checkpointing(interval=FAST, **checkpointing)
    )


def expected_rows():
    h = total_job(MemorySink()).harness()
    return sorted((r["k"], r["total"]) for b in BATCHES for r in h.process_batch(b))


def rows(sink):
    return sorted((r["k"], r["total"]) for r in sink.rows())


@pytest.mark.parametrize("backend", ["rocksdb", "hashmap"])
def test_every_batch_records_its_checkpoint(spark, checkpoint, backend):
    # the directory from the configuration, as a file: URI
    job = total_job(MemorySink(), state_backend=backend, directory=f"file://{checkpoint}")
    result = job.run(spark=spark)
    assert result.completed and result.checkpoint_dir == str(checkpoint)
    ids = [c.batch_id for c in result.checkpoints]
    assert ids == list(range(len(BATCHES)))
    for c, p in zip(result.checkpoints, result.progress):
        op = p["stateOperators"][0]
        assert c.duration_ms == op["commitTimeMs"] + p["durationMs"]["walCommit"] + p["durationMs"]["commitOffsets"]
        assert c.state_rows == op["numRowsTotal"] and c.state_bytes and c.state_bytes > 0
        assert c.kind.startswith("incremental") and 0 < c.delta_bytes <= c.full_bytes + c.delta_bytes
    # a batch touching 2 of 3,000 keys writes a small part of what a restore reads
    for c in result.checkpoints[1:]:
        assert c.delta_bytes < c.full_bytes / 5, c
    log = CheckpointLog(CheckpointDir.open(checkpoint)).load()
    assert sorted(log) == ids and log[ids[-1]] == result.checkpoints[-1]
    listed = retained_checkpoints(CheckpointDir.open(checkpoint))
    assert [c.batch_id for c in listed] == ids and listed[-1].duration_ms == result.checkpoints[-1].duration_ms


def test_a_restart_may_switch_incremental_checkpoints_off_and_on(spark, checkpoint):
    sink = MemorySink()
    first = total_job(sink, BATCHES[:2]).run(checkpoint_dir=checkpoint, spark=spark)
    second = total_job(sink, BATCHES[:4], incremental=False).run(checkpoint_dir=checkpoint, spark=spark)
    third = total_job(sink, incremental=True).run(checkpoint_dir=checkpoint, spark=spark)
    assert [c.batch_id for r in (first, second, third) for c in r.checkpoints] == list(range(len(BATCHES)))
    assert {c.kind for c in first.checkpoints} <= {"incremental", "incremental + snapshot"}
    assert {c.kind for c in second.checkpoints} == {"full"}  # RocksDB snapshots, read back from changelogs
    assert third.checkpoints[-1].kind == "incremental"
    assert rows(sink) == expected_rows()


def test_retained_checkpoints_are_the_last_ones(spark, checkpoint):
    result = total_job(MemorySink(), retained=2).run(checkpoint_dir=checkpoint, spark=spark)
    last = len(BATCHES) - 1
    kept = CheckpointDir.open(checkpoint).committed_batches()
    # Spark keeps `retained` batches besides the last (older state files go at its next maintenance)
    assert kept[-1] == last and len(kept) <= 3, kept
    assert [c.batch_id for c in retained_checkpoints(CheckpointDir.open(checkpoint))] == kept
    assert sorted(CheckpointLog(CheckpointDir.open(checkpoint)).load()) == kept
    assert len(result.checkpoints) == len(BATCHES)  # the run itself saw every one


def test_a_checkpoint_of_another_job_is_refused_and_kept(spark, checkpoint):
    sink = MemorySink()
    total_job(sink, BATCHES[:2]).run(checkpoint_dir=checkpoint, spark=spark)
    with pytest.raises(CheckpointMismatchError, match="belongs to job 'total', not 'other'.*--fresh"):
        total_job(MemorySink(), name="other").run(checkpoint_dir=checkpoint, spark=spark)
    total_job(sink).run(checkpoint_dir=checkpoint, spark=spark)
    assert rows(sink) == expected_rows()


def test_hadoop_storage_reads_and_writes_through_the_jvm(spark, tmp_path):
    store = HadoopStorage(f"file://{tmp_path}", spark)
    store.write_atomic(b"line\n", "sparkstate", "checkpoints.jsonl")
    store.write_atomic(b"again\n", "sparkstate", "checkpoints.jsonl")  # replaces
    assert store.read_text("sparkstate", "checkpoints.jsonl") == "again\n"
    assert [(e.name, e.size, e.is_dir) for e in store.list("sparkstate") if not e.name.startswith(".")] == [
        ("checkpoints.jsonl", 6, False)
    ]
    assert store.list("nothing") == [] and not store.exists("nothing") and store.is_dir("sparkstate")
    with pytest.raises(FileNotFoundError):
        store.read_bytes("nothing")
    (tmp_path / "blocker").write_text("x")
    with pytest.raises(OSError):
        store.write_atomic(b"x", "blocker", "inside")
    store.delete("sparkstate")
    assert not (tmp_path / "sparkstate").exists()


# ------------------------------------------------------------------ storage faults


class Disk:
    """A tmpfs of its own, to make read-only or full."""

    def __init__(self, mount: Path) -> None:
        self.mount = mount

    def remount(self, option: str) -> None:
        subprocess.run(["mount", "-o", f"remount,{option}", str(self.mount)], check=True, capture_output=True)

    def fill(self) -> None:
        with open(self.mount / "filler", "wb") as f:
            try:
                while True:
                    f.write(bytes(1 << 16))
                    f.flush()
            except OSError:
                pass

    def free(self) -> None:
        (self.mount / "filler").unlink()


@pytest.fixture
def disk(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    yield Disk(mount)
    subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_a_read_only_checkpoint_stops_the_job_and_loses_nothing(spark, disk):
    sink = MemorySink()
    checkpoint = disk.mount / "ckpt"
    total_job(sink, BATCHES[:3]).run(checkpoint_dir=checkpoint, spark=spark)
    disk.remount("ro")
    with pytest.raises(CheckpointStorageError) as stopped:
        total_job(sink).run(checkpoint_dir=checkpoint, spark=spark)
    message = str(stopped.value)
    assert f"checkpoint directory {checkpoint} is not writable (Read-only file system)" in message
    assert "make it writable" in message and "batches up to 2 are committed there and kept" in message
    with pytest.raises(CheckpointStorageError, match="is not writable .*no batch was committed yet"):
        total_job(MemorySink()).run(checkpoint_dir=disk.mount / "new", spark=spark)
    disk.remount("rw")
    assert CheckpointDir.open(checkpoint).committed_batches()[-1] == 2
    result = total_job(sink).run(checkpoint_dir=checkpoint, spark=spark)
    assert result.completed and [c.batch_id for c in result.checkpoints] == [3, 4, 5]
    assert rows(sink) == expected_rows()


def test_a_full_disk_stops_the_job_and_loses_nothing(spark, disk):
    sink = MemorySink()
    checkpoint = disk.mount / "ckpt"

    def fill_after_batch_1(p):
        if p["batchId"] == 1:
            disk.fill()

    with pytest.raises(CheckpointStorageError) as stopped:
        total_job(sink).run(checkpoint_dir=checkpoint, spark=spark, on_progress=fill_after_batch_1)
    message = str(stopped.value)
    assert f"no space left for checkpoint directory {checkpoint} (No space left on device)" in message
    assert "free space on its disk" in message
    kept = CheckpointDir.open(checkpoint).committed_batches()
    assert kept[-1] >= 1 and f"batches up to {kept[-1]} are committed there and kept" in message
    disk.free()
    result = total_job(sink).run(checkpoint_dir=checkpoint, spark=spark)
    assert result.completed and result.checkpoints[0].batch_id == kept[-1] + 1
    assert rows(sink) == expected_rows()
