"""Reading a FileSource's files in Python (``sparkstate.connectors.files``), against a model of
how Spark's text source splits a file into lines (Hadoop's line reader: a line ends at
``\\n``, ``\\r\\n`` or ``\\r``), on random files cut into blocks of random sizes."""

from __future__ import annotations

import io
import random
import re

import pyarrow as pa
import pytest

from sparkstate.connectors.files import blocks, blocks_of, lines_of, local_path, reads_locally


def hadoop_lines(data: bytes) -> list[str]:
    """The model: Spark's text source's lines of a file (a final line break starts no line)."""
    lines = re.split(rb"\r\n|\r|\n", data)
    if lines and lines[-1] == b"":
        lines.pop()
    return [line.decode("utf-8", "replace") for line in lines]


def random_file(rng: random.Random) -> bytes:
    pieces = []
    for _ in range(rng.randrange(0, 40)):
        text = "".join(rng.choice("ab{}\":,1 é€") for _ in range(rng.randrange(0, 12))).encode()
        if rng.random() < 0.1:
            text += b"\xff\xfe"  # not UTF-8
        pieces.append(text + rng.choice([b"\n", b"\n", b"\r\n", b"\r", b"\n\n"]))
    if pieces and rng.random() < 0.5:
        pieces[-1] = pieces[-1].rstrip(b"\r\n")  # no line break at the end
    return b"".join(pieces)


def test_blocks_cover_the_file_and_end_at_line_breaks():
    for seed in range(300):
        rng = random.Random(seed)
        data = random_file(rng)
        size = rng.choice([1, 2, 5, 16, 1000])
        got = list(blocks(io.BytesIO(data), size))
        assert b"".join(b for _, b in got) == data, seed
        assert [start for start, _ in got] == [sum(len(b) for _, b in got[:i]) for i in range(len(got))]
        for _, block in got[:-1]:
            assert block[-1:] in (b"\n", b"\r"), seed


def test_the_lines_of_a_files_blocks_are_the_text_sources_lines():
    """Blocks change no line; a ``\\r\\n`` cut between two blocks adds a blank line, which is no
    record (the parser skips blank lines), so the non-blank lines are compared."""
    for seed in range(300):
        rng = random.Random(seed)
        data = random_file(rng)
        got = [line for _, block in blocks(io.BytesIO(data), rng.choice([1, 3, 16, 1 << 20]))
               for line in lines_of(block).to_pylist()]
        assert [line for line in got if line] == [line for line in hadoop_lines(data) if line], seed


def test_lines_of_a_block():
    assert lines_of(b"a\nb\r\nc\rd").to_pylist() == ["a", "b", "c", "d"]
    assert lines_of(b"a\n\nb\n").to_pylist() == ["a", "", "b"]
    assert lines_of(b'{"k": "\xff"}\n').to_pylist() == ['{"k": "\ufffd"}']
    assert lines_of(b"").to_pylist() == [""]
    assert lines_of(b"x").type == pa.string()


def test_local_paths_and_other_file_systems():
    assert local_path("file:/tmp/in/a b.json") == "/tmp/in/a b.json"  # as Spark names a local file
    assert local_path("file:///tmp/in/a.json") == "/tmp/in/a.json"
    assert local_path("/tmp/in") == "/tmp/in" and local_path("in/payments") == "in/payments"
    assert local_path("hdfs://nn:8020/in/a.json") is None and local_path("s3a://bucket/in") is None
    assert reads_locally("in") and not reads_locally("s3a://bucket/in")


def test_a_file_is_read_from_its_path_or_from_the_bytes_spark_read(tmp_path):
    path = tmp_path / "a b.json"
    path.write_bytes(b"1\n2\n3")
    assert list(blocks_of(f"file:{path}", block_bytes=2)) == [(0, b"1\n"), (2, b"2\n"), (4, b"3")]
    assert list(blocks_of("hdfs://nn/in/a.json", pa.py_buffer(b"1\n2\n"))) == [(0, b"1\n2\n")]
    with pytest.raises(FileNotFoundError, match="hdfs://nn/in/a.json: not on a file system Python can open"):
        list(blocks_of("hdfs://nn/in/a.json"))


def test_compressed_files_are_read_as_sparks_text_source_reads_them(tmp_path):
    """By the name's ending, as Hadoop's codecs: gzip (several members too), bzip2 and deflate
    (a zlib stream); another codec's ending fails with what to do."""
    import bz2
    import gzip
    import zlib

    data = b"".join(b'{"k": "%d"}\n' % i for i in range(50_000))
    written = {
        "a.json.gz": gzip.compress(data[:1000]) + gzip.compress(data[1000:]),
        "a.json.bz2": bz2.compress(data),
        "a.json.deflate": zlib.compress(data),
        "a.json": data,
    }
    for name, raw in written.items():
        (tmp_path / name).write_bytes(raw)
        got = list(blocks_of(str(tmp_path / name), block_bytes=100_000))
        assert b"".join(b for _, b in got) == data and len(got) > 1, name
        assert b"".join(b for _, b in blocks_of(f"hdfs://nn/{name}", pa.py_buffer(raw))) == data, name
    (tmp_path / "a.json.zst").write_bytes(b"\x28\xb5\x2f\xfd")
    with pytest.raises(ValueError, match=r"a.json.zst: FileSource reads files compressed as .gz, .bz2 or .deflate"):
        list(blocks_of(str(tmp_path / "a.json.zst")))


def test_a_directory_is_listed_by_modification_time_then_path(tmp_path):
    import os

    from sparkstate.connectors.files import BEFORE_ALL, files_between, list_files, spread

    names = ["b.csv", "a.csv", "c.csv", "sub/a.csv", "_SUCCESS", ".a.csv.crc", "d.csv._COPYING_", "_k=1/x.csv"]
    for i, name in enumerate(names):
        path = tmp_path / name
        path.parent.mkdir(exist_ok=True)
        path.write_text("x\n" * (i + 1))
        # a, b and sub/a tie to the millisecond (not to the nanosecond); c is older
        t = 1_700_000_000_000_000_000 + (0 if name != "c.csv" else -10**9) + i
        os.utime(path, ns=(t, t))
    files = list_files(str(tmp_path))
    assert [os.path.relpath(f.path, tmp_path) for f in files] == ["c.csv", "_k=1/x.csv", "a.csv", "b.csv", "sub/a.csv"]
    assert files[0].mtime_ms == 1_700_000_000_000 - 1000 and files[2].mtime_ms == 1_700_000_000_000
    # a batch: the files after one position and up to another, at most a limit of them
    assert files_between(files, BEFORE_ALL, limit=2) == files[:2]
    assert files_between(files, files[1].key) == files[2:]
    assert files_between(files, files[1].key, files[3].key) == files[2:4]
    assert files_between(files, files[-1].key) == []
    # over tasks by size, each task's in order, none empty
    groups = spread(files, 2)
    assert len(groups) == 2 and sorted(f for g in groups for f in g) == files and all(g == sorted(g) for g in groups)
    assert spread(files[:1], 4) == [files[:1]] and spread([], 4) == []
