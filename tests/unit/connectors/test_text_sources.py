"""Text sources without Spark: each source's guarantee, source URLs, jobs on text sources,
and the socket reader's offsets across connections."""

from __future__ import annotations

import pickle
import time

import pytest
from line_server import LineServer
from postgres_server import closed_port

from sparkstate import (
    DEAD_LETTERS,
    DataFrameSource,
    FileSource,
    Job,
    JobDefinitionError,
    ListSource,
    MemorySink,
    SocketSource,
    TaxiRides,
    UpiPayments,
)
from sparkstate.connectors.sources import AT_MOST_ONCE, EXACTLY_ONCE, describe_guarantee, parse_source
from sparkstate.errors import SourceError
from sparkstate.jobs import get_job
from sparkstate.jobs.running_sum import RunningSum
from sparkstate.runtime.io.sources import SocketStreamReader


def test_every_source_states_its_guarantee():
    assert UpiPayments.guarantee == TaxiRides.guarantee == ListSource.guarantee == EXACTLY_ONCE
    assert FileSource("in", "k string").guarantee == EXACTLY_ONCE
    assert SocketSource("localhost", 9000, "k string").guarantee == AT_MOST_ONCE
    assert describe_guarantee(UpiPayments()) == "exactly-once: replayable"
    assert describe_guarantee(SocketSource("localhost", 9000, "k string")) == (
        "at-most-once: lines sent while the job is down are lost"
    )
    assert describe_guarantee(DataFrameSource(lambda s: None)).startswith("as its source gives")


def test_source_urls():
    socket = parse_source("socket://localhost:9000", "k string, ts timestamp", "ts")
    assert socket == SocketSource("localhost", 9000, "k string, ts timestamp", time_column="ts")
    assert socket.describe() == "socket localhost:9000"
    assert parse_source("file:in/payments?format=csv", "k string") == FileSource("in/payments", "k string", format="csv")
    for bad, message in [("socket://localhost", "expected socket://HOST:PORT"), ("socket://h:99999", "expected socket://HOST:PORT"),
                         ("socket://h:9000?format=xml", "format must be one of json, csv"),
                         ("socket://h:9000?fmt=csv", "unknown option"), ("mqtt://x", "unknown source 'mqtt://x'")]:
        with pytest.raises(JobDefinitionError, match=message):
            parse_source(bad, "k string")
    with pytest.raises(JobDefinitionError, match="time_column 'ts' is not in the schema"):
        SocketSource("localhost", 9000, "k string", time_column="ts")


def test_a_job_on_a_text_source_has_the_dead_letter_output():
    job = Job("j").source(SocketSource("localhost", 9000, "k string, v double")).key_by("k")
    job = job.process(RunningSum(), output_schema="k string, count bigint, total double").sink(MemorySink())
    job.validate()
    assert DEAD_LETTERS.name in job.side_output_names
    assert DEAD_LETTERS.name not in job.source(ListSource([], "k string, v double")).side_output_names


def test_seed_jobs_run_on_text_sources_with_their_generator_columns_and_watermark():
    seed = get_job("rate-limit")
    job = seed.on_source(seed.text_source("socket://localhost:9000"))
    assert job.source_spec.schema == UpiPayments.schema_ddl and job.source_spec.time_column == "event_time"
    assert job.watermark == seed.job().watermark
    job.validate()


def test_socket_reader_numbers_lines_on_from_the_checkpoint_and_reconnects():
    def latest(reader, start, lines):
        deadline = time.monotonic() + 10
        while (end := reader.latestOffset({"offset": start}, None)["offset"]) < start + lines and time.monotonic() < deadline:
            time.sleep(0.02)
        return end

    def read(reader, s, e):
        return [
            v for p in reader.partitions({"offset": s}, {"offset": e}) for b in reader.read(p) for v in b.column(0).to_pylist()
        ]

    with LineServer() as server:
        reader = SocketStreamReader("127.0.0.1", server.port)
        assert reader.initialOffset() == {"offset": 0}
        server.send("one", "two\r", "caf\u00e9")
        assert latest(reader, 0, 3) == 3
        assert read(reader, 0, 2) == ["one", "two\r"] and read(reader, 0, 3)[2] == "caf\u00e9"
        reader.commit({"offset": 2})
        assert read(reader, 2, 3) == ["caf\u00e9"]
        shipped = pickle.loads(pickle.dumps(reader))  # as Spark ships it to the reading task
        assert (shipped.host, shipped.port, shipped._lines) == ("127.0.0.1", server.port, [])
        reader.stop()
        server.wait_connected(0)

        # a restarted query: the new connection's lines continue the checkpoint's numbering
        again = SocketStreamReader("127.0.0.1", server.port)
        assert read(again, 2, 3) == []  # a replayed batch: its lines went with the old connection
        server.send("four")
        assert latest(again, 3, 1) == 4 and read(again, 3, 4) == ["four"]
        # the server hangs up: the next micro-batch connects again
        server.hang_up.set()
        server.wait_connected(0)
        server.hang_up.clear()
        server.send("five")
        assert latest(again, 4, 1) == 5 and read(again, 4, 5) == ["five"]
        again.stop()
        assert server.connections == 3

    with pytest.raises(SourceError, match=r"cannot connect to socket 127.0.0.1:\d+: .*refused.*nc -lk"):
        SocketStreamReader("127.0.0.1", closed_port()).latestOffset({"offset": 0}, None)


def test_socket_reader_bounds_a_line_and_its_buffer():
    def settle(reader, start):
        """The latest offset once the reader stops taking lines (buffer full or all read)."""
        last, stable = -1, 0
        while stable < 10:
            end = reader.latestOffset({"offset": start}, None)["offset"]
            stable = stable + 1 if end == last else 0
            last = end
            time.sleep(0.05)
        return last

    def read(reader, s, e):
        parts = reader.partitions({"offset": s}, {"offset": e})
        return [v for p in parts for b in reader.read(p) for v in b.column(0).to_pylist()]

    with LineServer() as server:
        reader = SocketStreamReader("127.0.0.1", server.port, max_line=20, max_buffer=100)
        reader.latestOffset({"offset": 0}, None)
        server.send("x" * 50_000, "short")
        server.send(*[f"line {i:04}" for i in range(30)])  # 10 characters each, with the line end
        end = settle(reader, 0)
        lines = read(reader, 0, end)
        assert lines[0] == "x" * 21 and lines[1] == "short"  # the long line: only its start is kept
        assert sum(len(line) + 1 for line in lines) <= 100 and end < 32  # the buffer is full: reading waits
        reader.commit({"offset": end})
        more = settle(reader, end)
        assert read(reader, end, more)[0] == f"line {end - 2:04}"  # nothing lost, in order
        reader.stop()

    parser = SocketSource("localhost", 9000, "k string", max_line_length=20).parser(("k",), None)
    _, dead = parser.parse(["x" * 21])
    assert dead == [{"raw": "x" * 21 + "...", "reason": "line longer than 20 characters (the source's max_line_length)"}]
    with pytest.raises(JobDefinitionError, match="max_buffer must be an int above max_line_length"):
        SocketSource("localhost", 9000, "k string", max_line_length=20, max_buffer=20)
