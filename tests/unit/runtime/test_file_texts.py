"""A FileSource's packing step without Spark: the rows Spark's binary-file source lists for a
micro-batch (path, modification time, no content) spread over partitions in any order, each
file read in blocks; every key still gets the batch's lines by modification time, then path,
each file's lines in order (the model), and every non-blank line is counted as a record."""

from __future__ import annotations

import json
import os
import random

import pyarrow as pa

from sparkstate.connectors.text import LineParser
from sparkstate.engine.events import NOW_COLUMN, Packer, unpack_events
from sparkstate.runtime.io.sources import file_texts


def _rows(packed):
    return list(zip(*[packed.column(i).to_pylist() for i in range(packed.num_columns)]))


def _listing(files, with_now=None):
    columns = {
        "path": pa.array([f"file:{path}" for path, _ in files]),
        "modificationTime": pa.array([mtime * 1000 for _, mtime in files], pa.timestamp("us")),
    }
    if with_now is not None:
        columns[NOW_COLUMN] = pa.array([with_now * 1000] * len(files), pa.timestamp("us", tz="UTC"))
    return pa.RecordBatch.from_pydict(columns)


def test_a_batchs_files_reach_each_key_in_the_files_order_whatever_the_partitions_and_blocks(tmp_path):
    for seed in range(20):
        rng = random.Random(seed)
        folder = tmp_path / str(seed)
        folder.mkdir()
        files = []
        for name in rng.sample(["a.json", "b.json", "c.json", "d.json", "b.json.1", "z"], rng.randrange(1, 6)):
            mtime = rng.choice([1_700_000_000_000, 1_700_000_001_000])  # pairs share a time: then the path decides
            n = rng.randrange(0, 60)
            text = "".join(json.dumps({"k": f"k{rng.randrange(4)}", "file": name, "line": i}) + rng.choice(["\n", "\r\n", "\n\n"])
                           for i in range(n))
            (folder / name).write_text(text)
            files.append((str(folder / name), mtime, n))
        parts: list[list] = [[] for _ in range(rng.randrange(1, 4))]
        for f in rng.sample(files, len(files)):  # Spark's partitions: any order
            rng.choice(parts).append(f)
        packer = Packer(["k"], 4, None)
        parser = LineParser("k string, file string, line int", key_columns=["k"])
        packed, records = [], 0
        for p, part in enumerate(parts):
            listing = [_listing([(path, mtime) for path, mtime, _ in part])] if part else []
            for seq, (lines, now, order) in enumerate(file_texts(listing, block_bytes=rng.choice([64, 1000, 1 << 20]))):
                batch, n = packer.pack_text(parser, lines, p, seq, now, order)
                records += n
                packed += _rows(batch) if batch is not None else []
        model = [(os.path.basename(path), i) for path, _, n in sorted(files, key=lambda f: (f[1], f[0])) for i in range(n)]
        got = []
        for kg in sorted({r[0] for r in packed}):
            events = [(e["file"], e["line"]) for e in unpack_events([(p, s, blob) for k, p, s, _, blob in packed if k == kg])]
            assert events == [m for m in model if m in set(events)], seed
            got += events
        assert sorted(got) == sorted(model) and records == len(model), seed


def test_the_batchs_processing_time_and_a_file_spark_read_for_python(tmp_path):
    listing = pa.RecordBatch.from_pydict({
        "path": ["hdfs://nn/in/a.json"], "modificationTime": pa.array([5_000], pa.timestamp("us")),
        "content": pa.array([b'{"k": "a"}\n\n{"k": "b"}\n'], pa.binary()),
        NOW_COLUMN: pa.array([7_000_000], pa.timestamp("us", tz="UTC")),
    })
    [(lines, now, order)] = list(file_texts([listing]))
    assert lines.to_pylist() == ['{"k": "a"}', "", '{"k": "b"}'] and now == 7_000
    assert order.split(b"\x00")[:2] == [b"%020d" % 5, b"hdfs://nn/in/a.json"]
