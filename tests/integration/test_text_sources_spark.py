"""Text sources on Spark: a seed job reading JSON lines from a socket and from files, the
lines that are not events in its dead-letter output (line and reason, counted per batch),
and a second run resuming from the first one's checkpoint."""

from __future__ import annotations

import gzip
import json
import os
import time

import pytest
from line_server import LineServer
from postgres_server import closed_port
from spark_helpers import FAST

from sparkstate import FileSource, JobDefinitionError, JobFailedError, MemorySink, SocketSource, UpiPayments
from sparkstate.jobs import get_job

GOOD = [
    {"event_time": "2025-01-01T00:00:01Z", "merchant_id": "m1", "payer_id": "p1", "amount": 5, "device": "ios"},
    {"event_time": 1735689602000, "merchant_id": "m2", "amount": 1.5},
    {"merchant_id": "m1", "amount": 2.5},
]
BAD = [
    ('{"merchant_id": "m1", "amount": 3', "not valid JSON: Expecting ',' delimiter at the end of the line"),
    ('{"merchant_id": "m2", "amount": "ten"}', "column 'amount' (double): expected a number, got string \"ten\""),
    ('{"amount": 4.0}', "key column 'merchant_id' is missing"),
]
LINES = [json.dumps(GOOD[0]), BAD[0][0], json.dumps(GOOD[1]), BAD[1][0], "", BAD[2][0], json.dumps(GOOD[2])]


def running_sum(source, backend="rocksdb"):
    sink, dead = MemorySink(), MemorySink()
    job = get_job("running-sum").on_source(source).sink(sink).dead_letters(dead).with_settings(state_backend=backend, **FAST)
    return job, sink, dead


def totals(sink):
    return [(r["merchant_id"], r["count"], r["total"]) for r in sink.rows()]


def per_key(rows):
    return {k: [r for r in rows if r[0] == k] for k in sorted({r[0] for r in rows})}


def test_socket_lines_run_a_seed_job_bad_lines_are_dead_letters_and_a_restart_resumes(spark, checkpoint):
    with LineServer() as server:
        source = SocketSource("127.0.0.1", server.port, UpiPayments.schema_ddl, time_column="event_time")
        job, sink, dead = running_sum(source)
        server.send(*LINES)
        # every line is counted as read (the blank one too); a socket never ends: stop at 7
        result = job.run(checkpoint_dir=checkpoint, spark=spark, timeout=180, until=lambda r: r.events >= 7)
        assert per_key(totals(sink)) == {"m1": [("m1", 1, 5.0), ("m1", 2, 7.5)], "m2": [("m2", 1, 1.5)]}
        assert dead.rows() == [{"raw": raw, "reason": reason} for raw, reason in BAD]
        assert result.side_outputs == {"dead_letters": 3}
        batches = [p for p in result.progress if p.get("sideOutputs", {}).get("dead_letters")]
        assert batches and sum(p["sideOutputs"]["dead_letters"] for p in batches) == 3  # the progress line's figure

        # the next run resumes from the checkpoint: the state carries on over a new connection
        server.wait_connected(0)
        job, sink, dead = running_sum(source)

        sent = []

        def send_once_connected(r):
            # lines that arrive after the first trigger found none: Spark reports that idle
            # trigger under the id of the batch that then reads them, which must still count
            if not sent and server.connected == 1:
                time.sleep(1)
                server.send(json.dumps({"merchant_id": "m1", "amount": 1.0}), "not json")
                sent.append(True)
            return r.events >= 2

        result = job.run(checkpoint_dir=checkpoint, spark=spark, timeout=180, until=send_once_connected)
        assert totals(sink) == [("m1", 3, 8.5)] and result.events == 2
        assert [d["raw"] for d in dead.rows()] == ["not json"] and result.side_outputs == {"dead_letters": 1}
        assert server.connections == 2


def test_socket_without_a_server_fails_with_the_address(spark, checkpoint):
    port = closed_port()
    job, _, _ = running_sum(SocketSource("127.0.0.1", port, UpiPayments.schema_ddl))
    with pytest.raises(JobFailedError, match=f"cannot connect to socket 127.0.0.1:{port}: .*nc -lk {port}"):
        job.run(checkpoint_dir=checkpoint, spark=spark, timeout=120)


def test_files_of_json_lines_run_exactly_once_across_runs(spark, checkpoint, tmp_path):
    """On the hashmap backend (the socket test runs on RocksDB): dead letters take the same route."""
    folder = tmp_path / "in"
    folder.mkdir()

    def drop(name, lines, when):
        path = tmp_path / name
        path.write_text("\n".join(lines) + "\n")
        os.utime(path, (when, when))
        path.rename(folder / name)  # a file appears complete

    drop("a.json", LINES[:4], 1_700_000_000)
    drop("b.json", LINES[4:], 1_700_000_001)
    missing, _, _ = running_sum(FileSource(str(tmp_path / "nowhere"), UpiPayments.schema_ddl))
    with pytest.raises(JobDefinitionError, match="directory '.*nowhere' does not exist; create it"):
        missing.run(checkpoint_dir=checkpoint, spark=spark)
    # one file per micro-batch, oldest first: a batch's files may be read in any order
    source = FileSource(str(folder), UpiPayments.schema_ddl, time_column="event_time", max_files_per_trigger=1)
    job, sink, dead = running_sum(source, "hashmap")
    # a file's records: its lines but the blank one
    result = job.run(checkpoint_dir=checkpoint, spark=spark, timeout=180, until=lambda r: r.events >= 6)
    assert result.events == 6
    assert per_key(totals(sink)) == {"m1": [("m1", 1, 5.0), ("m1", 2, 7.5)], "m2": [("m2", 1, 1.5)]}
    assert dead.rows() == [{"raw": raw, "reason": reason} for raw, reason in BAD]
    assert result.side_outputs == {"dead_letters": 3}

    drop("c.json", [json.dumps({"merchant_id": "m2", "amount": 2.0})], 1_700_000_002)
    job, sink, dead = running_sum(source, "hashmap")
    result = job.run(checkpoint_dir=checkpoint, spark=spark, timeout=180, until=lambda r: r.events >= 1)
    assert totals(sink) == [("m2", 2, 3.5)] and dead.rows() == []  # the old files are not read again


def test_a_batch_of_several_files_reaches_each_key_in_the_files_order(spark, checkpoint, tmp_path):
    """Spark packs a micro-batch's files into partitions largest first; each key still sees the
    batch's lines by file modification time, then path, each file's lines in order (the model
    below), through FileSource and through a DataFrameSource of Spark's JSON file source."""
    from sparkstate import DataFrameSource

    folder = tmp_path / "in"
    folder.mkdir()
    sizes = [3, 40, 10, 25, 5, 30, 12, 2]  # the largest first would be another order
    files = []
    for i, n in enumerate(sizes):
        name = f"{'ba'[i % 2]}{i}.json"
        when = 1_700_000_000 + i // 2  # pairs share a modification time: then the path decides
        lines = [{"merchant_id": f"m{j % 3}", "amount": float(i * 1000 + j)} for j in range(n)]
        files.append((when, str(folder / name), lines))
        path = tmp_path / name
        path.write_text("\n".join(json.dumps(e) for e in lines) + "\n")
        os.utime(path, (when, when))
        path.rename(folder / name)
    model: dict[str, list[tuple[int, float]]] = {}
    totals_so_far: dict[str, tuple[int, float]] = {}
    for _, _, lines in sorted(files):
        for e in lines:
            count, total = totals_so_far.get(e["merchant_id"], (0, 0.0))
            totals_so_far[e["merchant_id"]] = (count + 1, total + e["amount"])
            model.setdefault(e["merchant_id"], []).append(totals_so_far[e["merchant_id"]])
    schema = "merchant_id string, amount double"
    events = sum(sizes)
    for name, source in (
        ("files", FileSource(str(folder), schema, max_files_per_trigger=4)),
        ("dataframe", DataFrameSource(lambda s: s.readStream.schema(schema).option("maxFilesPerTrigger", 4).json(str(folder)))),
    ):
        job, sink, _ = running_sum(source)
        result = job.run(checkpoint_dir=checkpoint / name, spark=spark, timeout=180, until=lambda r: r.events >= events)
        assert len(result.progress) >= 2, name  # several files in each batch
        got = {k: [(c, t) for _, c, t in rows] for k, rows in per_key(totals(sink)).items()}
        assert got == model, name


def test_files_lines_end_as_sparks_text_source_ends_them_and_bytes_not_utf8_stop_nothing(spark, checkpoint, tmp_path):
    """Line breaks ``\n``, ``\r\n`` and ``\r`` (Spark's text source, Hadoop's line reader),
    a line of bytes that are not UTF-8 (read with U+FFFD in their place), blank lines (no
    record) and no line break at the end; then a file of 100,000 lines and a gzipped one."""
    folder = tmp_path / "in"
    folder.mkdir()
    lines = [json.dumps({"merchant_id": f"m{i % 3}", "amount": 1.0}).encode() for i in range(6)]
    odd = b'{"merchant_id": "m\xff", "amount": 2.0}'
    (tmp_path / "a.json").write_bytes(lines[0] + b"\r\n" + lines[1] + b"\r" + lines[2] + b"\n\n\r\n" + odd + b"\r\n"
                                      + lines[3] + b"\n" + lines[4] + b"\r" + lines[5])
    big = b"".join(json.dumps({"merchant_id": f"b{i % 7}", "amount": 0.5}).encode() + b"\n" for i in range(100_000))
    (tmp_path / "b.json").write_bytes(big)
    (tmp_path / "c.json.gz").write_bytes(gzip.compress(b"\n".join(lines[:3])))
    for i, name in enumerate(["a.json", "b.json", "c.json.gz"]):
        os.utime(tmp_path / name, (1_700_000_000 + i, 1_700_000_000 + i))
        (tmp_path / name).rename(folder / name)
    job, sink, dead = running_sum(FileSource(str(folder), UpiPayments.schema_ddl, max_files_per_trigger=1))
    result = job.run(checkpoint_dir=checkpoint, spark=spark, timeout=180, until=lambda r: r.events >= 100_010)
    assert result.events == 100_010 and dead.rows() == []
    last = {r["merchant_id"]: (r["count"], r["total"]) for r in sink.rows()}
    assert {k: v for k, v in last.items() if not k.startswith("b")} == {
        "m0": (3, 3.0), "m1": (3, 3.0), "m2": (3, 3.0), "m\ufffd": (1, 2.0)  # c.json.gz: m0, m1, m2 again
    }
    assert sum(count for k, (count, _) in last.items() if k.startswith("b")) == 100_000
