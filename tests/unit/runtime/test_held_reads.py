"""A savepoint's read holds the checkpoint's files (``CheckpointDir.pinned``): what Spark deletes
meanwhile stays readable, nothing else is written among Spark's files, and the held files go
with the read (or with the process that read them)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from sparkstate.runtime.checkpoint.directory import CheckpointDir


def write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def test_a_held_read_keeps_the_files_spark_deletes_meanwhile(tmp_path):
    for name, data in {"metadata": b"{}", "offsets/7": b"o7", "commits/7": b"c7", "commits/.7.crc": b"x",
                       "state/0/0/8.changelog": b"s8", "state/0/0/SSTs/a.sst": b"sst", "state/0/_metadata/v2/7": b"m",
                       "sources/0/7": b"f", "sparkstate.json": b"{}", "sparkstate/checkpoints.jsonl": b""}.items():
        write(tmp_path / name, data)
    checkpoint = CheckpointDir.open(tmp_path)
    with checkpoint.pinned() as held:
        assert held.root.startswith(str(tmp_path / "sparkstate" / "reads"))
        for name in ("offsets/7", "commits/7", "state/0/0/8.changelog", "state/0/0/SSTs/a.sst"):
            (tmp_path / name).unlink()  # Spark's cleanup of a batch it no longer retains
        assert held.committed_batches() == [7] and held.read_state("0", "0", "8.changelog") == b"s8"
        assert held.read_state("0", "0", "SSTs", "a.sst") == b"sst" and held.batch_source_offsets(7) == []
        assert (Path(held.root) / "commits" / ".7.crc").exists()
        assert not (Path(held.root) / "sparkstate").exists()  # Spark's files only
    assert list((tmp_path / "sparkstate" / "reads").iterdir()) == []
    assert checkpoint.committed_batches() == []


def test_the_held_files_of_a_process_that_was_killed_go_with_the_next_read(tmp_path):
    reads = tmp_path / "sparkstate" / "reads"
    dead = reads / f"{socket.gethostname()}-999999999-0123abcd"  # no such process
    alive = reads / f"{socket.gethostname()}-{os.getppid()}-0123abcd"
    other_host = reads / "elsewhere-1-0123abcd"
    for folder in (dead, alive, other_host):
        write(folder / "commits" / "1", b"c")
    old = reads / "elsewhere-2-0123abcd"
    write(old / "commits" / "1", b"c")
    os.utime(old, (0, 0))
    write(tmp_path / "commits" / "3", b"c")
    with CheckpointDir.open(tmp_path).pinned() as held:
        assert held.committed_batches() == [3]
    assert sorted(p.name for p in reads.iterdir()) == sorted([alive.name, other_host.name])


def test_a_checkpoint_that_is_not_local_is_read_in_place():
    checkpoint = CheckpointDir.__new__(CheckpointDir)
    checkpoint.storage = type("Remote", (), {"root": "hdfs://nn/ck"})()  # type: ignore[assignment]
    with checkpoint.pinned() as held:
        assert held is checkpoint
