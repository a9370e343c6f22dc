"""The figures of a checkpoint: from Spark's progress report and from the state files (no Spark).

The progress reports in ``data/progress_reports.json`` are real ones, captured from
``running-sum`` (10,000 events per batch, 500 merchants) on each backend.
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

from sparkstate.metrics.progress import checkpoint_summary
from sparkstate.runtime.checkpoint.directory import CheckpointDir
from sparkstate.runtime.checkpoint.stats import (
    CheckpointLog,
    CheckpointRecorder,
    CheckpointStats,
    StateFiles,
    retained_checkpoints,
    timings,
)

REPORTS = json.loads((Path(__file__).parent / "data" / "progress_reports.json").read_text())


# ------------------------------------------------------------------ progress reports


def test_timings_of_a_rocksdb_report():
    t = timings(REPORTS["rocksdb"])
    # commitTimeMs 203 + walCommit 56 + commitOffsets 78; completed = start + triggerExecution (2,381 ms)
    assert t == {
        "batch_id": 1, "time": "2026-11-22T11:59:56.752Z", "duration_ms": 337, "commit_ms": 203, "wal_ms": 56,
        "commit_log_ms": 78, "state_bytes": 18283, "state_rows": 250,
    }


def test_timings_of_a_hashmap_report_use_the_current_version_size():
    t = timings(REPORTS["hashmap"])
    # memoryUsedBytes (96,680) also holds the previous versions Spark caches
    assert t["state_bytes"] == 53144 and t["duration_ms"] == 107 + 80 + 64


def test_an_idle_trigger_is_not_a_checkpoint():
    idle = {**REPORTS["rocksdb"], "durationMs": {"latestOffset": 1, "triggerExecution": 1}, "stateOperators": []}
    assert timings(idle) is None


# ------------------------------------------------------------------ state files


def rocksdb_zip(ssts: dict[str, int], pad: int = 0) -> bytes:
    """A snapshot zip as Spark's RocksDB writes it: a ``metadata`` entry listing the SST files."""
    meta = {"sstFiles": [{"localFileName": n, "dfsSstFileName": n, "sizeBytes": s} for n, s in ssts.items()], "numKeys": 1}
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("metadata", "v1\n" + json.dumps(meta))
        z.writestr("OPTIONS-000007", "x" * pad)
    return buf.getvalue()


def write(path: Path, data: bytes | int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(data) if isinstance(data, int) else data)


def commit(root: Path, *batches: int) -> None:
    for b in batches:
        write(root / "commits" / str(b), b"v1\n{}\n")


def test_incremental_rocksdb_delta_and_full(tmp_path):
    part = tmp_path / "state" / "0" / "0"
    snap1 = rocksdb_zip({"a.sst": 1000})
    write(part / "1.zip", snap1)
    write(part / "SSTs" / "a.sst", 1000)
    for v, size in ((1, 300), (2, 40), (3, 50)):
        write(part / f"{v}.changelog", size)
    sizes = StateFiles(CheckpointDir.open(tmp_path)).measure([1, 2, 3, 4])
    zip1 = len(snap1)
    assert sizes[1] == (300 + zip1 + 1000, zip1 + 1000, "incremental + snapshot")
    assert sizes[2] == (40, zip1 + 1000 + 40, "incremental")  # restore: snapshot 1, then changelog 2
    assert sizes[3] == (50, zip1 + 1000 + 40 + 50, "incremental")
    assert sizes[4] == (0, 0, "-")  # not written


def test_full_rocksdb_snapshots_write_only_new_sst_files(tmp_path):
    part = tmp_path / "state" / "0" / "1"
    z1, z2 = rocksdb_zip({"a.sst": 1000}), rocksdb_zip({"a.sst": 1000, "b.sst": 200})
    write(part / "1.zip", z1)
    write(part / "2.zip", z2)
    sizes = StateFiles(CheckpointDir.open(tmp_path)).measure([1, 2])
    assert sizes[1] == (len(z1) + 1000, len(z1) + 1000, "full")
    assert sizes[2] == (len(z2) + 200, len(z2) + 1200, "full")


def test_hashmap_deltas_and_snapshots_over_partitions(tmp_path):
    for p in ("0", "1"):
        for v in (1, 2, 3):
            write(tmp_path / "state" / "0" / p / f"{v}.delta", 10 * v)
        write(tmp_path / "state" / "0" / p / "2.snapshot", 500)
    write(tmp_path / "state" / "0" / "_metadata" / "metadata", 5)
    sizes = StateFiles(CheckpointDir.open(tmp_path)).measure([1, 3])
    assert sizes[1] == (2 * 10, 2 * 10, "incremental")
    assert sizes[3] == (2 * 30, 2 * (500 + 30), "incremental")


def test_recorder_keeps_the_retained_batches_and_a_replay_replaces_its_entry(tmp_path):
    checkpoint = CheckpointDir.open(tmp_path)
    write(tmp_path / "state" / "0" / "0" / "2.changelog", 40)
    commit(tmp_path, 0, 1)
    recorder = CheckpointRecorder(checkpoint)
    first = recorder.record(REPORTS["rocksdb"])
    assert first is not None and first.batch_id == 1 and first.delta_bytes == 40 and first.kind == "incremental"
    replay = {**REPORTS["rocksdb"], "durationMs": {**REPORTS["rocksdb"]["durationMs"], "walCommit": 1000}}
    recorder.record(replay)
    assert [s.duration_ms for s in CheckpointLog(checkpoint).load().values()] == [203 + 1000 + 78]
    # Spark dropped batches 0 and 1 from its commit log: their entries go too
    for b in (0, 1):
        (tmp_path / "commits" / str(b)).unlink()
    commit(tmp_path, 2)
    recorder.record({**REPORTS["rocksdb"], "batchId": 2})
    assert list(CheckpointLog(checkpoint).load()) == [2]
    assert recorder.record({**REPORTS["rocksdb"], "durationMs": {"triggerExecution": 3}}) is None


def test_the_log_skips_lines_it_cannot_read(tmp_path):
    checkpoint = CheckpointDir.open(tmp_path)
    write(tmp_path / "sparkstate" / "checkpoints.jsonl", b'{"batch_id": 3, "time": "t"}\nnot json\n{"other": 1}\n')
    assert list(CheckpointLog(checkpoint).load()) == [3]


def test_retained_checkpoints_join_commits_records_and_files(tmp_path):
    checkpoint = CheckpointDir.open(tmp_path)
    commit(tmp_path, 4, 5)
    write(tmp_path / "state" / "0" / "0" / "5.delta", 70)
    write(tmp_path / "state" / "0" / "0" / "6.delta", 80)
    CheckpointLog(checkpoint).save({5: CheckpointStats(5, "2026-01-01T00:00:00.000Z", duration_ms=12, delta_bytes=1)})
    rows = retained_checkpoints(checkpoint)
    assert [r.batch_id for r in rows] == [4, 5]
    assert rows[0].duration_ms is None and rows[0].delta_bytes == 70  # no record: the files still tell the sizes
    assert rows[1].duration_ms == 12 and rows[1].delta_bytes == 80 and rows[1].full_bytes == 150


def test_summary_of_a_run():
    stats = [CheckpointStats(b, "t", duration_ms=d, delta_bytes=x, full_bytes=f, state_bytes=s, kind=k)
             for b, d, x, f, s, k in ((0, 900, 300, 300, 90, "incremental + snapshot"), (1, 100, 100, 400, 95, "incremental"))]
    assert checkpoint_summary(stats) == {
        "checkpoints": 2, "mean_duration_ms": 500, "max_duration_ms": 900, "mean_delta_bytes": 200,
        "last_full_bytes": 400, "last_state_bytes": 95, "kinds": ["incremental", "incremental + snapshot"],
    }
    assert checkpoint_summary([])["mean_duration_ms"] is None


# ------------------------------------------------------------------ bounded over a long run


def test_the_log_stays_bounded_however_many_batches_it_saw(tmp_path):
    from sparkstate.runtime.checkpoint import stats as checkpoint_stats

    checkpoint = CheckpointDir.open(tmp_path)
    log = tmp_path / "sparkstate" / "checkpoints.jsonl"
    # 100,000 batches recorded without a commit log to trim by (a long run that listed none)
    recorded = "\n".join(CheckpointStats(b, "2026-01-01T00:00:00.000Z", duration_ms=1, delta_bytes=10, full_bytes=99,
                                         kind="incremental").to_json() for b in range(100_000))
    write(log, recorded.encode())
    recorder = CheckpointRecorder(checkpoint)
    for b in range(100_000, 100_020):
        recorder.record({**REPORTS["rocksdb"], "batchId": b})
    assert log.stat().st_size < 1 << 20  # MAX_RECORDS records of about 500 bytes at most
    kept = CheckpointLog(checkpoint).load()
    assert len(kept) == len(recorder.entries) == checkpoint_stats.MAX_RECORDS
    assert sorted(kept) == list(range(100_020 - checkpoint_stats.MAX_RECORDS, 100_020))  # the newest
    # what the report reads still has the newest batches' figures
    commit(tmp_path, 100_018, 100_019)
    rows = retained_checkpoints(checkpoint)
    assert [(r.batch_id, r.duration_ms) for r in rows] == [(100_018, 337), (100_019, 337)]


def test_state_files_forget_the_snapshots_spark_deleted(tmp_path):
    part = tmp_path / "state" / "0" / "0"
    files = StateFiles(CheckpointDir.open(tmp_path))
    for v in range(1, 301):
        write(part / f"{v}.zip", rocksdb_zip({f"{v}.sst": 10}))
        (part / f"{v - 2}.zip").unlink(missing_ok=True)  # Spark keeps the last two
        assert files.measure([v])[v][2] == "full"
    assert files.cached_snapshots() <= 2
