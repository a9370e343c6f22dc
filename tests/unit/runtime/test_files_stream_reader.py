"""sparkstate's file source without Spark: its offsets are positions in the order
(modification time, path), a batch the files between two of them, the same on a replay."""

from __future__ import annotations

import logging
import os
import pickle

import pytest

from sparkstate.errors import SourceError
from sparkstate.runtime.io.sources import FilesPartition, FilesStreamReader, file_cursor


def write(folder, name: str, t_ms: int) -> str:
    path = folder / name
    path.write_text(f"{name}\n")
    os.utime(path, ns=(t_ms * 10**6, t_ms * 10**6))
    return str(path)


def batch_files(reader: FilesStreamReader, start: dict, end: dict) -> list[str]:
    rows = [r for p in reader.partitions(start, end) for b in reader.read(p) for r in b.to_pylist()]
    return sorted(r["path"] for r in rows)


def test_batches_take_the_next_files_in_order_and_a_replay_takes_the_same(tmp_path):
    # listed in any order, equal times by path
    for name, t in (("c", 1000), ("a", 1000), ("b", 1000), ("0-newest", 2000)):
        write(tmp_path, name, t)
    reader = FilesStreamReader(str(tmp_path), 2, 2)
    start = reader.initialOffset()
    end = reader.latestOffset(start, None)
    assert end == {"mtime": 1000, "path": str(tmp_path / "b"), "files": 2, "first": str(tmp_path / "a")}
    assert batch_files(reader, start, end) == [str(tmp_path / "a"), str(tmp_path / "b")]
    reader.commit(end)
    after = reader.latestOffset(end, None)
    assert batch_files(reader, end, after) == [str(tmp_path / "0-newest"), str(tmp_path / "c")]
    assert reader.latestOffset(after, None) == after  # nothing new: the same offset, no batch
    # a replay after a restart (a new reader) lists the same batch again; the rows carry each
    # file's modification time in microseconds
    again = FilesStreamReader(str(tmp_path), 2, 2)
    assert batch_files(again, end, after) == [str(tmp_path / "0-newest"), str(tmp_path / "c")]
    (part,) = again.partitions(start, end)[:1]
    assert next(iter(again.read(part))).to_pylist()[0]["modificationTime"] == 1000 * 1000
    # a restore starts after its savepoint's position
    restored = FilesStreamReader(str(tmp_path), None, 2, file_cursor(end))
    first = restored.initialOffset()
    assert batch_files(restored, first, restored.latestOffset(first, None)) == [str(tmp_path / "0-newest"), str(tmp_path / "c")]


def test_a_file_behind_the_position_is_not_read_and_is_warned_of(tmp_path, caplog):
    write(tmp_path, "b", 2000)
    reader = FilesStreamReader(str(tmp_path), None, 1)
    end = reader.latestOffset(reader.initialOffset(), None)
    write(tmp_path, "a", 1000)  # moved in late, with an older modification time
    with caplog.at_level(logging.WARNING, logger="sparkstate"):
        assert reader.latestOffset(end, None) == end
    assert "a appeared with a modification time at or before" in caplog.text and "touch it" in caplog.text
    os.utime(tmp_path / "a", ns=(3000 * 10**6, 3000 * 10**6))  # touched: read
    assert batch_files(reader, end, reader.latestOffset(end, None)) == [str(tmp_path / "a")]


def test_a_checkpoint_of_sparks_file_source_is_refused_with_the_way_out(tmp_path):
    reader = FilesStreamReader(str(tmp_path), None, 1)
    with pytest.raises(SourceError, match="take a savepoint of it|Take a savepoint of it"):
        reader.latestOffset({"logOffset": 18}, None)


def test_the_reader_travels_to_tasks_without_its_listing(tmp_path):
    write(tmp_path, "a", 1000)
    reader = FilesStreamReader(str(tmp_path), None, 1)
    reader.latestOffset(reader.initialOffset(), None)
    copy = pickle.loads(pickle.dumps(reader))
    assert copy._seen is None and copy._planned == {} and copy.directory == str(tmp_path)
    assert list(copy.read(FilesPartition(()))) == []
