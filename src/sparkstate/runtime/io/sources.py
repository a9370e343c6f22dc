"""Spark streaming sources for sparkstate's source specs (Python data sources with real offsets).

Spark records each micro-batch's offset range in the checkpoint's offset log before running
it. The generator and list sources produce a range's rows as a pure function of the range, so
a batch replayed after a crash reads exactly the rows it read the first time (exactly-once).
The socket source cannot: it holds the lines it received in memory until their batch is
committed (at-most-once). A local directory's files are listed by sparkstate's file source,
whose offset is a position in the files' order ``(modification time, path)``: a batch is the
files between two positions (exactly-once), which the packing step reads.

Each kind of source spec has one Spark binding here, a :class:`SparkSource` that
:func:`spark_source` finds by the spec's type: its raw events, and the job's input packed. A
new source is its spec plus one binding registered with ``spark_source``.
"""

from __future__ import annotations

import base64
import datetime as dt
import functools
import json
import os
import pickle
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from sparkstate.api.io import SourceSpec, check_source_columns
from sparkstate.api.schema import Schema
from sparkstate.api.time import epoch_micros
from sparkstate.connectors.files import (
    BEFORE_ALL,
    BLOCK_BYTES,
    ListedFile,
    blocks_of,
    files_between,
    lines_of,
    list_files,
    local_path,
    reads_locally,
    spread,
)
from sparkstate.connectors.generator import GENERATORS, Generator
from sparkstate.connectors.sources import (
    DEFAULT_MAX_BUFFER,
    DEFAULT_MAX_LINE_LENGTH,
    DataFrameSource,
    FileSource,
    ListSource,
    SocketSource,
)
from sparkstate.engine.combine import LocalCombiner, combiner_for
from sparkstate.engine.events import (
    END_OF_INPUT_MS,
    FILE_COLUMNS,
    NOW_COLUMN,
    PACKED_SCHEMA,
    Packer,
    end_of_input_row,
    file_order,
    take_now,
)
from sparkstate.errors import JobDefinitionError, SourceError

GENERATOR_FORMAT = "sparkstate_generator"
LIST_FORMAT = "sparkstate_list"
SOCKET_FORMAT = "sparkstate_socket"
FILES_FORMAT = "sparkstate_files"

def arrow_schema(ddl: str) -> pa.Schema:
    """Arrow schema of a ListSource's DDL schema."""
    return Schema.of(ddl).arrow


@dataclass(frozen=True)
class RangePartition(InputPartition):
    start: int
    end: int
    index: int = 0
    #: the batch's processing time (epoch ms) from its end offset, for max_event_time_ahead
    now: int | None = None


def _offset_now(end: Any) -> int | None:
    """The processing time an offset of sparkstate's own sources records (None: an offset of
    an older run, which did not record one)."""
    value = end.get("now") if isinstance(end, dict) else None
    return int(value) if value is not None else None


def _stamped(start: dict | None, top: int) -> dict:
    """The end offset ``top`` for ``latestOffset``, stamped with the wall clock when it holds
    new offsets: Spark logs it before running the batch, so a replayed batch reads the same
    processing time (``max_event_time_ahead`` decides the same). Without new offsets it is
    ``start`` itself: an offset that differs would make Spark run an empty batch."""
    if top == (_offset(start) if start else 0):
        return start if start else {"offset": top}
    return {"offset": top, "now": int(time.time() * 1000)}


def _marker(options: Mapping[str, str]) -> bool:
    """Whether the job wants the end-of-input marker (only functions with timers need it)."""
    return options.get("pack_end_marker") == "true"


def _packer(options: Mapping[str, str]) -> Packer | None:
    """The packer a sparkstate job asked for through the source options, if any."""
    keys = options.get("pack_keys")
    if not keys:
        return None
    assigner = options.get("pack_time_assigner")
    ahead = options.get("pack_max_ahead")
    computed = options.get("pack_computed_keys")
    combiner = options.get("pack_combiner")
    return Packer(
        json.loads(keys), int(options["pack_key_groups"]), options.get("pack_time_column") or None,
        pickle.loads(base64.b64decode(assigner)) if assigner else None, int(ahead) if ahead else None,
        pickle.loads(base64.b64decode(computed)) if computed else (),
        pickle.loads(base64.b64decode(combiner)) if combiner else None,
    )


def pack_options(job: Any, marker: bool) -> dict[str, str]:
    """Source options that make sparkstate's own sources emit packed rows for ``job``."""
    options = {
        "pack_keys": json.dumps(list(job.key_columns)),
        "pack_key_groups": str(job.settings.key_groups),
        "pack_time_column": job.timestamp_column or "",
        "pack_end_marker": "true" if marker else "false",
        "pack_max_ahead": "" if job.settings.max_event_time_ahead is None else str(job.settings.max_event_time_ahead),
    }
    assigner = job.watermark.timestamp_assigner if job.watermark else None
    combiner = combiner_for(job)
    if assigner is not None or job.computed_keys or combiner is not None:
        from pyspark import cloudpickle

        # options are strings: the functions travel pickled (cloudpickle: lambdas and __main__);
        # the job's own, pickled here by the driver, not read from any file
        if assigner is not None:
            options["pack_time_assigner"] = base64.b64encode(cloudpickle.dumps(assigner)).decode("ascii")
        if job.computed_keys:
            options["pack_computed_keys"] = base64.b64encode(cloudpickle.dumps(job.computed_keys)).decode("ascii")
        if combiner is not None:
            options["pack_combiner"] = base64.b64encode(cloudpickle.dumps(combiner)).decode("ascii")
    return options


def raw_marker_options(job: Any) -> dict[str, str]:
    """Source options that end a bounded source of raw (unpacked) rows with the end-of-input
    marker row (the native window path, which reads the events themselves)."""
    return {"raw_end_marker": "true", "marker_time_column": job.timestamp_column or ""}


def raw_end_marker(schema: pa.Schema, time_column: str) -> pa.RecordBatch:
    """The end-of-input marker as a raw row: every column null but the event time."""
    t = schema.field(time_column).type
    value = END_OF_INPUT_MS * 1000 if pa.types.is_timestamp(t) else END_OF_INPUT_MS
    return pa.RecordBatch.from_pylist([{time_column: value}], schema=schema)


def _raw_marker(options: Mapping[str, str]) -> str | None:
    return options.get("marker_time_column") or None if options.get("raw_end_marker") == "true" else None


def _offset(value: Any) -> int:
    return int(value["offset"])


START_OPTION = "start_offset"


def _start_offset(options: Mapping[str, str]) -> int:
    return int(options.get(START_OPTION) or 0)


def start_options(start: dict | None) -> dict[str, str]:
    """Options that make sparkstate's own sources start a new checkpoint at a savepoint's offset."""
    offset = saved_offset(start)
    return {} if offset is None else {START_OPTION: str(offset)}


def saved_offset(start: dict | None) -> int | None:
    """The offset of sparkstate's own sources a savepoint's metadata records (None: none)."""
    offset = (start or {}).get("source_offset")
    return _offset(offset) if isinstance(offset, dict) and "offset" in offset else None


def _saved_type(start: dict | None) -> str | None:
    source = (start or {}).get("source")
    return source.get("type") if isinstance(source, dict) else None


def resumes(source: SourceSpec, start: dict | None) -> dict | None:
    """``start`` (a savepoint's metadata) when its source position applies to ``source``: the
    savepoint was taken of a source of the same type. A source of another type has other
    offsets (a generator's offset says nothing of a directory's files): then None, and the
    restored run reads the new source from its beginning (``restore_notes`` says so)."""
    saved = _saved_type(start)
    return start if saved is not None and saved == source.identity().get("type") else None


def make_packer(
    key_columns: Sequence[str], key_groups: int, time_column: str | None,
    timestamp_assigner: Callable[[dict], Any] | None = None, max_ahead_ms: int | None = None,
    computed_keys: Sequence[Any] = (), combiner: LocalCombiner | None = None,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function that packs a DataFrame's events. With ``max_ahead_ms``
    its input carries the batch's processing time (:func:`with_now`)."""
    return in_task(Packer(key_columns, key_groups, time_column, timestamp_assigner, max_ahead_ms, computed_keys,
                          combiner).pack_all)


def in_task(
    pack: Callable[[Iterator[pa.RecordBatch], int], Iterator[pa.RecordBatch]],
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """``pack(batches, partition)`` as a function for ``mapInArrow``: the partition id comes
    from Spark's TaskContext."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        yield from pack(batches, ctx.partitionId() if ctx else 0)

    return run


_RECORDS = "records"


def file_records_metric(source: FileSource) -> str:
    """The observed metric (``observedMetrics`` in a batch's progress) that counts the records
    a FileSource's batch read, where Spark's own count is of files (by directory: the two
    inputs of a job may both read files)."""
    return f"sparkstate_records {source.path}"


#: the columns of Spark's binary-file source a FileSource of a directory Python cannot list
#: reads: each file's name, its modification time (the files' order in a batch) and its bytes
FILE_ROWS_SCHEMA = "path string, modificationTime timestamp, length bigint, content binary"


def file_texts(
    batches: Iterable[pa.RecordBatch], block_bytes: int = BLOCK_BYTES,
) -> Iterator[tuple[pa.Array, int | None, bytes | None]]:
    """The lines of the files a FileSource's batch lists (rows of :data:`FILES_SCHEMA`, or of
    :data:`FILE_ROWS_SCHEMA` with ``content``, and :data:`NOW_COLUMN`), read block by block
    (``sparkstate.connectors.files``): ``(lines, now, order)`` pieces for :meth:`Packer.pack_text`,
    each block ordered by its file's modification time, path and offset."""
    for batch in batches:
        batch, now = take_now(batch)
        names = batch.schema.names
        paths = batch.column(names.index("path")).to_pylist()
        mtimes = batch.column(names.index("modificationTime")).cast(pa.int64()).to_pylist()  # epoch us
        contents = batch.column(names.index("content")) if "content" in names else None
        for i, path in enumerate(paths):
            content = contents[i].as_buffer() if contents is not None else None
            for start, block in blocks_of(path, content, block_bytes):
                yield lines_of(block), now, file_order(path, (mtimes[i] or 0) // 1000, start)


def with_now(df: Any, job: Any) -> Any:
    """``df`` with the batch's processing time in :data:`NOW_COLUMN` when the job bounds how
    far event time may run ahead of it. ``current_timestamp()`` in a streaming query is the
    micro-batch's timestamp, which Spark logs with the batch's offsets: a replay sees the same."""
    if job.settings.max_event_time_ahead is None:
        return df
    from pyspark.sql import functions as F

    return df.withColumn(NOW_COLUMN, F.current_timestamp())


# --------------------------------------------------------------------------- generator


class GeneratorDataSource(DataSource):
    """``spark.readStream.format("sparkstate_generator")``: one of sparkstate's generators."""

    @classmethod
    def name(cls) -> str:
        return GENERATOR_FORMAT

    def schema(self) -> str:
        return PACKED_SCHEMA if self.options.get("pack_keys") else generator_from_options(self.options).schema_ddl

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        packer = _packer(self.options)
        raw = _raw_marker(self.options) if packer is None else None
        marker = (packer is not None and _marker(self.options)) or raw is not None
        reader = GeneratorStreamReader(generator_from_options(self.options), packer, marker, raw)
        reader.start = _start_offset(self.options)
        return reader


def generator_options(gen: Generator) -> dict[str, str]:
    return {"generator": type(gen).__name__, "spec": json.dumps(gen.__dict__)}


def generator_from_options(options: Mapping[str, str]) -> Generator:
    return GENERATORS[options["generator"]](**json.loads(options["spec"]))


class GeneratorStreamReader(DataSourceStreamReader):
    def __init__(self, gen: Generator, packer: Packer | None = None, marker: bool = False, raw_marker: str | None = None) -> None:
        self.gen = gen
        self.packer = packer
        self.raw_marker = raw_marker
        self.marker = marker and gen.has_end_marker
        self._t0: float | None = None
        self._base = 0
        #: where a new checkpoint starts reading (a restored savepoint's offset)
        self.start = 0

    def initialOffset(self) -> dict:
        return {"offset": self.start}

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        s = _offset(start) if start else 0
        events = self.gen.events
        end = self.gen.end_offset(self.marker)
        top = s + self.gen.max_batch if end is None else min(end, s + self.gen.max_batch)
        if self.marker and s <= events and top >= events:  # type: ignore[operator]
            # the end-of-input marker rides with the last events: their batch lifts the
            # watermark to the end, and the next (empty) batch fires every remaining timer
            top = events + 1  # type: ignore[operator]
        if self.gen.rate:
            now = time.monotonic()
            if self._t0 is None:
                self._t0, self._base = now, s
            top = min(top, max(s, self._base + int(self.gen.rate * (now - self._t0))))
        return _stamped(start, top)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        s, e = _offset(start), _offset(end)
        n = max(1, min(self.gen.partitions, e - s))
        bounds = [s + (e - s) * i // n for i in range(n + 1)]
        now = _offset_now(end)
        return [RangePartition(a, b, i, now) for i, (a, b) in enumerate(zip(bounds, bounds[1:]))]

    # Spark passes back what partitions() returned; pyspark types it as the base class
    def read(self, partition: RangePartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        step = 100_000
        seq = 0
        for a in range(partition.start, partition.end, step):
            batch = self.gen.generate(a, min(partition.end, a + step))
            if self.packer is None:
                yield batch
                continue
            packed = self.packer.pack(batch, partition.index, seq, partition.now)
            if packed is not None:
                seq += 1
                yield packed
        if self.marker and self.gen.ends_in(partition.start, partition.end):
            if self.raw_marker:
                yield raw_end_marker(self.gen.arrow_schema, self.raw_marker)
            else:
                yield end_of_input_row(partition.index)

    def commit(self, end: dict) -> None:
        pass


# --------------------------------------------------------------------------- list source


class ListDataSource(DataSource):
    """``spark.readStream.format("sparkstate_list")``: fixed micro-batches from a JSON file."""

    @classmethod
    def name(cls) -> str:
        return LIST_FORMAT

    def schema(self) -> str:
        return PACKED_SCHEMA if self.options.get("pack_keys") else self.options["schema"]

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        reader = ListStreamReader(self.options, _packer(self.options))
        reader.start = _start_offset(self.options)
        return reader


def _to_micros(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value) * 1000
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    if isinstance(value, dt.datetime):
        return epoch_micros(value)
    return value


class ListStreamReader(DataSourceStreamReader):
    def __init__(self, options: Mapping[str, str], packer: Packer | None = None) -> None:
        self.packer = packer
        with open(options["path"]) as f:
            self.batches: list[list[dict]] = json.load(f)
        self.ddl = options["schema"]
        self.raw_marker = _raw_marker(options) if packer is None else None
        wants = (packer is not None and _marker(options)) or self.raw_marker is not None
        self.marker = wants and options.get("end_of_input", "true") == "true"
        self.end = len(self.batches) + (2 if self.marker else 0)
        #: where a new checkpoint starts reading (a restored savepoint's offset)
        self.start = 0

    def initialOffset(self) -> dict:
        return {"offset": self.start}

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        s = _offset(start) if start else 0
        return _stamped(start, min(self.end, s + 1))

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return [RangePartition(_offset(start), _offset(end), now=_offset_now(end))]

    # Spark passes back what partitions() returned; pyspark types it as the base class
    def read(self, partition: RangePartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        schema = arrow_schema(self.ddl)
        ts_cols = [f.name for f in schema if pa.types.is_timestamp(f.type)]
        for i in range(partition.start, partition.end):
            if i >= len(self.batches):  # the end-of-input marker, then the final empty batch
                if self.marker and i == len(self.batches):
                    yield raw_end_marker(schema, self.raw_marker) if self.raw_marker else end_of_input_row()
                continue
            rows = [dict(r) for r in self.batches[i]]
            for r in rows:
                for c in ts_cols:
                    r[c] = _to_micros(r.get(c))
            batch = pa.RecordBatch.from_pylist(rows, schema=schema)
            if self.packer is None:
                yield batch
            else:
                packed = self.packer.pack(batch, 0, i, partition.now)
                if packed is not None:
                    yield packed

    def commit(self, end: dict) -> None:
        pass


def _json_default(value: Any) -> Any:
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


# --------------------------------------------------------------------------- socket


class SocketDataSource(DataSource):
    """``spark.readStream.format("sparkstate_socket")``: lines from a TCP server (``value string``)."""

    @classmethod
    def name(cls) -> str:
        return SOCKET_FORMAT

    def schema(self) -> str:
        return "value string"

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return SocketStreamReader(
            self.options["host"], int(self.options["port"]),
            int(self.options.get("max_line_length") or DEFAULT_MAX_LINE_LENGTH),
            int(self.options.get("max_buffer") or DEFAULT_MAX_BUFFER),
        )


@dataclass(frozen=True)
class LinesPartition(InputPartition):
    lines: tuple[str, ...]


class SocketStreamReader(DataSourceStreamReader):
    """Lines from a TCP server, kept in the driver until Spark commits the batch that read them.

    Offsets count lines. A restarted query numbers the lines of its new connection on from
    its checkpoint's offset, so the checkpoint (state, watermark) carries over; what was sent
    while no job was connected, and the lines of a micro-batch that failed, are gone: the
    source is at-most-once. (Spark's own ``socket`` source numbers every connection's lines
    from 0 and fails on a restarted checkpoint, "Offsets committed out of order".) When the
    server closes the connection, the reader connects again at the next micro-batch.

    Memory is bounded: a line longer than ``max_line`` characters is kept only as its first
    ``max_line + 1`` (the parser makes it a dead letter, see ``SocketSource.max_line_length``),
    and while the lines not yet committed hold ``max_buffer`` characters the reader stops
    reading, so the sender waits (TCP flow control) until a micro-batch commits.
    """

    def __init__(
        self, host: str, port: int, max_line: int = DEFAULT_MAX_LINE_LENGTH, max_buffer: int = DEFAULT_MAX_BUFFER
    ) -> None:
        self.host, self.port = host, port
        self.max_line, self.max_buffer = max_line, max_buffer
        self._lock = threading.Lock()
        #: signalled when a commit frees buffer space
        self._space = threading.Condition(self._lock)
        self._lines: list[str] = []
        #: characters ``_lines`` holds (a line counts one more, for its end)
        self._size = 0
        #: the offset of ``_lines[0]`` (None until the first ``latestOffset``)
        self._base: int | None = None
        self._socket: socket.socket | None = None
        self._pump: threading.Thread | None = None

    def __getstate__(self) -> dict:
        # Spark ships the reader to the tasks that call ``read``: the lines travel in the
        # partitions, the connection stays in the driver
        return {"host": self.host, "port": self.port, "max_line": self.max_line, "max_buffer": self.max_buffer}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["host"], state["port"], state["max_line"], state["max_buffer"])  # type: ignore[misc]

    def initialOffset(self) -> dict:
        return {"offset": 0}

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        with self._lock:
            if self._base is None:
                self._base = _offset(start) if start else 0
        if self._pump is None or not self._pump.is_alive():
            self._connect(first=self._pump is None)
        with self._lock:
            return {"offset": self._base + len(self._lines)}

    def _connect(self, first: bool) -> None:
        try:
            sock = socket.create_connection((self.host, self.port), timeout=10)
        except OSError as exc:
            if not first:
                return  # the server went away after delivering lines: try again next batch
            raise SourceError(
                f"cannot connect to socket {self.host}:{self.port}: {exc.strerror or exc}; "
                f"is a server listening there (e.g. `nc -lk {self.port}`)?"
            ) from None
        sock.settimeout(None)
        self._socket = sock
        self._pump = threading.Thread(target=self._read_lines, args=(sock,), daemon=True, name=f"socket {self.host}:{self.port}")
        self._pump.start()

    def _read_lines(self, sock: socket.socket) -> None:
        # bytes that are not UTF-8 become U+FFFD: such a line reaches the parser (a dead letter)
        limit = self.max_line + 1
        with sock.makefile("r", encoding="utf-8", errors="replace", newline="\n") as stream:
            try:
                while line := stream.readline(limit):
                    if len(line) == limit and not line.endswith("\n"):
                        # too long: keep its start (a dead letter once parsed), skip the rest
                        rest = line
                        while rest and not rest.endswith("\n"):
                            rest = stream.readline(limit)
                    line = line.rstrip("\n")
                    with self._space:
                        while self._lines and self._size + len(line) + 1 > self.max_buffer:
                            self._space.wait()  # until a batch commits (stop() closes the socket)
                        self._lines.append(line)
                        self._size += len(line) + 1
            except (OSError, ValueError):
                pass  # closed by stop()

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        # one partition: a key's lines keep their order (it is kept within a partition only)
        s, e = _offset(start), _offset(end)
        with self._lock:
            # a batch replayed after a restart has no lines here any more (base is None or past it)
            base = e if self._base is None else self._base
            lines = tuple(self._lines[max(s - base, 0) : max(e - base, 0)])
        return [LinesPartition(lines)]

    # Spark passes back what partitions() returned; pyspark types it as the base class
    def read(self, partition: LinesPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        if partition.lines:
            yield pa.RecordBatch.from_arrays([pa.array(partition.lines, pa.string())], names=["value"])

    def commit(self, end: dict) -> None:
        e = _offset(end)
        with self._space:
            if self._base is not None and e > self._base:
                done = self._lines[: e - self._base]
                self._size -= sum(len(line) + 1 for line in done)
                del self._lines[: e - self._base]
                self._base = e
                self._space.notify_all()

    def stop(self) -> None:
        if self._socket is not None:
            try:
                self._socket.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._socket.close()


# --------------------------------------------------------------------------- files


#: the rows sparkstate's file source gives the packing step: one per file of the batch, its
#: modification time in epoch microseconds (as ``file_texts`` takes Spark's timestamps)
FILES_SCHEMA = "path string, modificationTime bigint"


def file_cursor(offset: Any) -> tuple[int, str] | None:
    """The position an offset of sparkstate's file source records (None: not one of its offsets)."""
    if isinstance(offset, dict) and "mtime" in offset and "path" in offset:
        return int(offset["mtime"]), str(offset["path"])
    return None


def _cursor_offset(key: tuple[int, str]) -> dict:
    return {"mtime": key[0], "path": key[1]}


class FilesDataSource(DataSource):
    """``spark.readStream.format("sparkstate_files")``: a local directory's files, oldest first."""

    @classmethod
    def name(cls) -> str:
        return FILES_FORMAT

    def schema(self) -> str:
        return FILES_SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        start = self.options.get(START_OPTION)
        limit = self.options.get("max_files_per_trigger")
        return FilesStreamReader(
            self.options["path"], int(limit) if limit else None, int(self.options.get("tasks") or 1),
            file_cursor(json.loads(start)) if start else None,
        )


@dataclass(frozen=True)
class FilesPartition(InputPartition):
    #: ``(path, modification time in ms)`` of each file the task reads
    files: tuple[tuple[str, int], ...]


class FilesStreamReader(DataSourceStreamReader):
    """A directory's files in the order ``(modification time in ms, path)``; each offset is the
    position of the last file a batch takes (``{"mtime": ms, "path": ...}``, with the batch's
    first file and its count of files, which name them in messages), so a batch is
    the files after its start and up to its end, at most ``max_files`` of them: the same files
    when Spark replays it, and a restore resumes after its savepoint's batch's last file.

    A file that appears with a position at or before the offset already reached (an old
    modification time: ``mv`` and ``cp -p`` keep a file's) is not read: the reader logs a
    warning for it once (touching the file gives it a new modification time, and it is read)."""

    def __init__(self, directory: str, max_files: int | None, tasks: int, start: tuple[int, str] | None = None) -> None:
        self.directory, self.max_files, self.tasks = directory, max_files, tasks
        self.start = start or BEFORE_ALL
        #: the files each end offset this reader planned took (partitions() of that batch reads them)
        self._planned: dict[tuple[int, str], list[ListedFile]] = {}
        #: the paths of the last listing (a path new since then, behind the position, is a late
        #: file); the last listing only, so the set is as large as the directory, not its history
        self._seen: set[str] | None = None

    def initialOffset(self) -> dict:
        return _cursor_offset(self.start)

    def _position(self, offset: Any) -> tuple[int, str]:
        key = file_cursor(offset)
        if key is None:
            raise SourceError(
                f"FileSource {self.directory}: the checkpoint's offset {json.dumps(offset)[:200]} is not a "
                "position of sparkstate's file source: the checkpoint was written by an older sparkstate, whose "
                "file source Spark listed. Take a savepoint of it (`sparkstate savepoint JOB --checkpoint DIR`) "
                "and restore that into a new checkpoint (--from-savepoint): the restore skips the files it had read"
            )
        return key

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        after = self._position(start) if start else self.start
        files = list_files(self.directory)
        self._warn_late(files, after)
        taken = files_between(files, after, limit=self.max_files)
        if not taken:
            return start if start else _cursor_offset(after)
        end = taken[-1].key
        self._planned = {end: taken}
        # the batch's first file and count ride along for its failure message (runtime/run/failures.py)
        return {**_cursor_offset(end), "files": len(taken), "first": taken[0].path}

    def _warn_late(self, files: list[ListedFile], after: tuple[int, str]) -> None:
        paths = {f.path for f in files}
        if self._seen is not None:
            late = [f.path for f in files if f.key <= after and f.path not in self._seen]
            if late:
                import logging

                more = f" and {len(late) - 5} more" if len(late) > 5 else ""
                logging.getLogger("sparkstate").warning(
                    "FileSource %s: %s appeared with a modification time at or before the files already read, and "
                    "will not be read (a file is read when its (modification time, path) follows the last read file's; "
                    "touch it to give it a new modification time)", self.directory, ", ".join(late[:5]) + more)
        self._seen = paths

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        after, upto = self._position(start), self._position(end)
        # a batch planned by this reader takes the files it listed; a batch replayed after a
        # restart lists them again (the same files, unless one was removed or came in late)
        files = self._planned.get(upto)
        if files is None:
            files = files_between(list_files(self.directory), after, upto)
        groups = spread(files, self.tasks) or [[]]  # (a replayed batch whose files were removed reads none)
        return [FilesPartition(tuple((f.path, f.mtime_ms) for f in group)) for group in groups]

    # Spark passes back what partitions() returned; pyspark types it as the base class
    def read(self, partition: FilesPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        if partition.files:
            paths, mtimes = zip(*partition.files)
            yield pa.RecordBatch.from_arrays(
                [pa.array(paths, pa.string()), pa.array([m * 1000 for m in mtimes], pa.int64())],
                names=["path", "modificationTime"],
            )

    def __getstate__(self) -> dict:
        # Spark ships the reader to the tasks that call ``read``: the files travel in the
        # partitions, the listing stays in the driver
        return {"directory": self.directory, "max_files": self.max_files, "tasks": self.tasks, "start": self.start}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["directory"], state["max_files"], state["tasks"], state["start"])  # type: ignore[misc]

    def commit(self, end: dict) -> None:
        key = file_cursor(end)
        self._planned = {k: v for k, v in self._planned.items() if key is None or k > key}


def _local_names(name: str) -> set[str]:
    """The local paths a file named as Spark's file source log names it may be (its URI form
    is percent-encoded; a name may hold a literal ``%`` too)."""
    from urllib.parse import unquote

    path = local_path(name) or name
    return {path, unquote(path)}


# --------------------------------------------------------------------------- binding


def register(spark: Any) -> None:
    spark.dataSource.register(GeneratorDataSource)
    spark.dataSource.register(ListDataSource)
    spark.dataSource.register(SocketDataSource)
    spark.dataSource.register(FilesDataSource)


class SparkSource(Protocol):
    """A source spec bound to Spark: its events as a streaming DataFrame, raw or packed."""

    def raw(self, spark: Any, scratch_dir: str | None, options: dict[str, str] | None = None) -> Any:
        """The source's events as they are (sparkstate's own sources take ``options``: the
        raw end-of-input marker of the native path)."""
        ...

    def packed(self, spark: Any, job: Any, marker: bool, scratch_dir: str | None, start: dict | None = None) -> Any:
        """The job's input as packed rows (``PACKED_SCHEMA``); ``marker``: end with the
        end-of-input marker (the job's function has timers); ``start``: a restored
        savepoint's metadata, whose source position the input starts after (where the
        source can: see each binding)."""
        ...

    #: whether a restored run reads the source from the savepoint's position on
    repositions: bool

    def restore_promise(self) -> str:
        """What a run restored from a savepoint reads of this source (for ``explain`` and
        the restored run's notes)."""
        ...


@functools.singledispatch
def spark_source(source: SourceSpec) -> SparkSource:
    """The Spark binding of a source spec: each binding below registers the spec type it
    binds (a subclass of a spec, such as UpiPayments, takes its base's)."""
    raise JobDefinitionError(
        f"unsupported source {source!r}; use a generator (UpiPayments, TaxiRides, ClickEvents), ListSource, "
        "FileSource, SocketSource, DataFrameSource or a streaming DataFrame"
    )


def _with_options(reader: Any, options: dict[str, str]) -> Any:
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader


class _Binding:
    """What the bindings share: ``raw`` registers sparkstate's data sources (its own sources
    read them, and so may a DataFrame a user builds) and reads the spec's events."""

    spec: Any
    repositions = True

    def raw(self, spark: Any, scratch_dir: str | None, options: dict[str, str] | None = None) -> Any:
        register(spark)
        return self._read(spark, scratch_dir, options or {})

    def _read(self, spark: Any, scratch_dir: str | None, options: dict[str, str]) -> Any:
        raise NotImplementedError


class _PacksItself(_Binding):
    """sparkstate's own sources pack while they generate: the job's packing rides in the options."""

    def packed(self, spark: Any, job: Any, marker: bool, scratch_dir: str | None, start: dict | None = None) -> Any:
        # offsets are a pure function of the range: a restore starts at the savepoint's offset
        return self.raw(spark, scratch_dir, {**pack_options(job, marker), **start_options(resumes(self.spec, start))})

    def restore_promise(self) -> str:
        return ("resumes at the savepoint's offset: exactly the events after it, once "
                "(its events are a function of the offset)")


@spark_source.register(Generator)
@dataclass(frozen=True)
class _Generator(_PacksItself):
    spec: Generator

    def _read(self, spark: Any, scratch_dir: str | None, options: dict[str, str]) -> Any:
        return _with_options(spark.readStream.format(GENERATOR_FORMAT), {**generator_options(self.spec), **options}).load()


_TEMP_PREFIX = "sparkstate-list-"


def scratch_temp_dir() -> str:
    """A temporary directory for a list source's events (a checkpoint that is not local has no
    room for them beside it): deleted when this process exits, and, should it be killed, by
    the next process that makes one."""
    import atexit
    import shutil

    from sparkstate.runtime.checkpoint.run_lock import process_alive

    base = tempfile.gettempdir()
    for name in os.listdir(base):
        pid = name.removeprefix(_TEMP_PREFIX).split("-")[0]
        if name.startswith(_TEMP_PREFIX) and pid.isdigit() and int(pid) != os.getpid() and not process_alive(int(pid)):
            shutil.rmtree(os.path.join(base, name), ignore_errors=True)
    directory = tempfile.mkdtemp(prefix=f"{_TEMP_PREFIX}{os.getpid()}-")
    atexit.register(shutil.rmtree, directory, True)
    return directory


@spark_source.register(ListSource)
@dataclass(frozen=True)
class _List(_PacksItself):
    spec: ListSource

    def _read(self, spark: Any, scratch_dir: str | None, options: dict[str, str]) -> Any:
        source = self.spec
        arrow_schema(source.schema)  # fail early on unsupported types
        directory = scratch_dir or scratch_temp_dir()
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, "list-source.json")
        with open(path, "w") as f:
            json.dump([list(b) for b in source.batches], f, default=_json_default)
        reader = (
            spark.readStream.format(LIST_FORMAT)
            .option("path", path)
            .option("schema", source.schema)
            .option("end_of_input", "true" if source.end_of_input else "false")
        )
        return _with_options(reader, options).load()


class _Lines(_Binding):
    """Text sources: lines parsed into events while packing (the job's only read of the
    source: a socket's lines are read once)."""

    def packed(self, spark: Any, job: Any, marker: bool, scratch_dir: str | None, start: dict | None = None) -> Any:
        assigner = job.watermark.timestamp_assigner if job.watermark else None
        rows = with_now(self._lines(self._input(spark, scratch_dir, start)), job)
        # with a timestamp assigner, event time is the function's business, not a column's
        parser = self.spec.parser(job.source_key_columns, None if assigner else job.timestamp_column)
        packer = Packer(job.key_columns, job.settings.key_groups, job.timestamp_column, assigner,
                        job.settings.max_event_time_ahead, job.computed_keys, combiner_for(job))
        return rows.mapInArrow(self._packing(packer, parser), self._OUTPUT)

    #: the packing step's output
    _OUTPUT = PACKED_SCHEMA

    @staticmethod
    def _packing(packer: Packer, parser: Any) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
        """The packing step's function: here its input is a column of lines."""
        return in_task(lambda batches, part: packer.pack_lines(parser, batches, part))

    def _input(self, spark: Any, scratch_dir: str | None, start: dict | None) -> Any:
        """The source's rows for a run that ``start`` (a savepoint's metadata) may restore."""
        return self._skip_read(self.raw(spark, scratch_dir), resumes(self.spec, start))

    def _skip_read(self, df: Any, start: dict | None) -> Any:
        """A socket cannot be read again: a restored run reads what the server sends next."""
        return df

    def _lines(self, df: Any) -> Any:
        """The columns the packing step takes: here the lines."""
        return df.select("value")

    def restore_promise(self) -> str:
        return ("cannot be repositioned: the restored run reads what the server sends from then on "
                "(lines it sent after the savepoint's batch and before the restore are not read)")


@spark_source.register(SocketSource)
@dataclass(frozen=True)
class _Socket(_Lines):
    spec: SocketSource
    repositions = False

    def _read(self, spark: Any, scratch_dir: str | None, options: dict[str, str]) -> Any:
        # sparkstate's reader, not Spark's "socket" source, which cannot resume a checkpoint
        spec = self.spec
        return _with_options(spark.readStream.format(SOCKET_FORMAT), {
            "host": spec.host, "port": str(spec.port),
            "max_line_length": str(spec.max_line_length), "max_buffer": str(spec.max_buffer),
        }).load()


@spark_source.register(FileSource)
@dataclass(frozen=True)
class _Files(_Lines):
    """A local directory's files are listed by sparkstate's file source (``FilesStreamReader``):
    each batch the next files in the order (modification time, path), its offset the last
    one's position; another file system's by Spark's binary-file source, which logs each
    batch's files in the checkpoint. The packing step reads them (``sparkstate.connectors.files``),
    and orders a batch's by modification time, then path, each file's lines in order (see
    ``sparkstate.engine.events``)."""

    spec: FileSource

    def _read(self, spark: Any, scratch_dir: str | None, options: dict[str, str]) -> Any:
        source = self.spec
        local = local_path(source.path)
        if local is None:
            reader = spark.readStream.format("binaryFile").schema(FILE_ROWS_SCHEMA)
            if source.max_files_per_trigger is not None:
                reader = reader.option("maxFilesPerTrigger", source.max_files_per_trigger)
            return reader.load(source.path)
        if not os.path.isdir(local):
            raise JobDefinitionError(
                f"FileSource: directory {source.path!r} does not exist; create it (its files are read as they appear)"
            )
        from sparkstate.runtime.session.driver import driver

        tasks = driver(spark).default_parallelism()
        settings = {"path": os.path.abspath(local), "tasks": str(tasks)}
        if source.max_files_per_trigger is not None:
            settings["max_files_per_trigger"] = str(source.max_files_per_trigger)
        return _with_options(spark.readStream.format(FILES_FORMAT), {**settings, **options}).load()

    def _input(self, spark: Any, scratch_dir: str | None, start: dict | None) -> Any:
        """A restored run starts after the position its savepoint's batch had reached; a
        savepoint of an older sparkstate (or of a directory Spark lists) names the files read
        instead, which are skipped."""
        saved = resumes(self.spec, start)
        cursor = file_cursor((saved or {}).get("source_offset"))
        options = {START_OPTION: json.dumps(_cursor_offset(cursor))} if cursor and reads_locally(self.spec.path) else {}
        return self._skip_read(self.raw(spark, scratch_dir, options), saved)

    def _skip_read(self, df: Any, start: dict | None) -> Any:
        done = (start or {}).get("source_files")
        if not done:
            return df
        from pyspark.sql import functions as F

        if not reads_locally(self.spec.path):
            return df.where(~F.input_file_name().isin(list(done)))
        # the savepoint names files as Spark's log did (``file:///in/a%20b.csv``); the source, by path
        names = sorted({p for f in done for p in _local_names(f)})
        return df.where(~F.col("path").isin(names))

    def _lines(self, df: Any) -> Any:
        # a file Python can open is read by the packing step; another file system's comes with its bytes
        columns = ["path", "modificationTime", *([] if reads_locally(self.spec.path) else ["content"])]
        return df.select(*columns)

    def packed(self, spark: Any, job: Any, marker: bool, scratch_dir: str | None, start: dict | None = None) -> Any:
        # Spark counts the files of a batch: the packing step counts their records (lines but
        # the blank ones), which Spark reports among the batch's observed metrics
        from pyspark.sql import functions as F

        rows = super().packed(spark, job, marker, scratch_dir, start)
        return rows.observe(file_records_metric(self.spec), F.sum(_RECORDS).alias(_RECORDS)).drop(_RECORDS)

    _OUTPUT = f"{PACKED_SCHEMA}, {_RECORDS} bigint"

    @staticmethod
    def _packing(packer: Packer, parser: Any) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
        """The packing step's function: its input is the batch's files, which it reads; each
        packed piece's first row carries the piece's records."""

        def pack(batches: Iterator[pa.RecordBatch], part: int) -> Iterator[pa.RecordBatch]:
            for seq, (lines, now, order) in enumerate(file_texts(batches)):
                packed, records = packer.pack_text(parser, lines, part, seq, now, order)
                if packed is not None:
                    counts = np.zeros(packed.num_rows, dtype=np.int64)
                    counts[0] = records
                    yield packed.append_column(_RECORDS, pa.array(counts))

        return in_task(pack)

    def restore_promise(self) -> str:
        return ("resumes after the last file the savepoint's batch read, in the order (modification time, path): "
                "every later file once, in that order (a file is read whole in one batch; a file changed after it "
                "was read is not read again, nor one that appears with an older position)")


@spark_source.register(DataFrameSource)
@dataclass(frozen=True)
class _DataFrame(_Binding):
    """Any streaming DataFrame: packed by a ``mapInArrow`` step, once its columns are checked."""

    spec: DataFrameSource
    repositions = False

    def _read(self, spark: Any, scratch_dir: str | None, options: dict[str, str]) -> Any:
        return self.spec.build(spark)

    def packed(self, spark: Any, job: Any, marker: bool, scratch_dir: str | None, start: dict | None = None) -> Any:
        # a DataFrame's position is its own (for example Kafka's startingOffsets): not ours to set
        df = self.raw(spark, scratch_dir)
        names, types = zip(*df.dtypes) if df.dtypes else ((), ())
        check_source_columns(job.name, job.source_key_columns, job.timestamp_column, names, types)
        assigner = job.watermark.timestamp_assigner if job.watermark else None
        packer = make_packer(
            job.key_columns, job.settings.key_groups, job.timestamp_column, assigner,
            max_ahead_ms=job.settings.max_event_time_ahead, computed_keys=job.computed_keys, combiner=combiner_for(job),
        )
        return with_now(_with_files_if_any(df), job).mapInArrow(packer, PACKED_SCHEMA)

    def restore_promise(self) -> str:
        return ("keeps the DataFrame's own position, which sparkstate cannot set (a Kafka source: its "
                "startingOffsets); a new checkpoint starts where the DataFrame's options say")


def with_file_columns(df: Any, columns: list[str]) -> Any:
    """``columns`` of ``df`` (read from files: Spark resolves its hidden ``_metadata`` column)
    and each row's file as :data:`FILE_COLUMNS`: the packing step orders a micro-batch's files
    by them, where Spark's partitions do not (it packs the files largest first)."""
    from pyspark.sql import functions as F

    path, mtime, start = FILE_COLUMNS
    return df.select(
        *columns,
        F.col("_metadata.file_path").alias(path),
        F.col("_metadata.file_modification_time").alias(mtime),
        F.col("_metadata.file_block_start").alias(start),
    )


def _with_files_if_any(df: Any) -> Any:
    """A user's DataFrame with its rows' files (:func:`with_file_columns`) when Spark reads it
    from files (it then has a ``_metadata`` column), else as it is."""
    from pyspark.errors import AnalysisException

    if "_metadata" in df.columns:  # a column of the user's own
        return df
    try:
        return with_file_columns(df, df.columns)
    except AnalysisException:  # not read from files
        return df


def source_columns(spark: Any, source: SourceSpec) -> Schema:
    """The columns of a source's events, as Spark reads them."""
    return Schema.of(spark_source(source).raw(spark, None).schema)


def source_offset(progress_source: dict, which: str = "endOffset") -> int | None:
    """An offset a progress report gives for one of sparkstate's own sources."""
    value = progress_source.get(which)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if isinstance(value, dict) and "offset" in value:
        return int(value["offset"])
    return None


def _offset_json(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


def input_waiting(source: Any, progress: dict) -> int | None:
    """Input the source held beyond a micro-batch's end (the metrics' "input rows waiting"):
    the records a Kafka source's partitions held when the batch was planned, or the events a
    bounded source of sparkstate's has left; None where the source cannot tell (files, sockets,
    a DataFrame, an unbounded generator, or one held to a rate, whose events arrive over time)."""
    sources = progress.get("sources") or []
    if not sources:
        return None
    end = _offset_json(sources[0].get("endOffset"))
    if isinstance(end, dict) and isinstance(end.get("topics"), dict):
        return int(end["waiting"]) if isinstance(end.get("waiting"), int) else None
    offset = source_offset(sources[0])
    if offset is None or not getattr(source, "bounded", False) or getattr(source, "rate", None):
        return None
    return source.events_between(offset, sys.maxsize)


def kafka_records(progress_source: dict) -> int | None:
    """Records a micro-batch of a Kafka source read, from its offsets (None: not a Kafka
    source's; a checkpoint's first batch, whose start Spark does not report, carries it in its
    end offset). Offsets that hold no
    record (transaction markers, aborted records) count too: an upper bound on a
    transactional topic."""
    end, start = _offset_json(progress_source.get("endOffset")), _offset_json(progress_source.get("startOffset"))
    if not (isinstance(end, dict) and isinstance(end.get("topics"), dict)):
        return None
    before = start.get("topics") if isinstance(start, dict) else end.get("initial")
    if not isinstance(before, dict):
        return None
    return sum(
        max(0, int(o) - int(before.get(t, {}).get(p, 0))) for t, parts in end["topics"].items() for p, o in parts.items()
    )


def restore_promise(source: SourceSpec) -> str:
    """What a run restored from a savepoint reads of ``source`` (``sparkstate explain``)."""
    return spark_source(source).restore_promise()


def restore_notes(source: SourceSpec, start: dict) -> list[str]:
    """What a run restored from the savepoint ``start`` (its metadata) reads of ``source``."""
    saved = _saved_type(start)
    kind = source.identity().get("type")
    if saved is not None and saved != kind:
        return [f"the savepoint was taken of a {saved} source and the job now reads a {kind} source: the "
                f"savepoint's source position means nothing to it, so the restored run reads the {kind} source "
                "from its beginning (its state is the savepoint's)"]
    binding = spark_source(source)
    if saved is None or binding.repositions:
        return []
    return [f"source: {source.describe()} {binding.restore_promise()}"]


def restored_offset(source: SourceSpec, start: dict | None) -> int:
    """The offset a run restored from ``start`` starts reading sparkstate's own sources at
    (0: a run that is not restored, or whose source cannot be positioned)."""
    return saved_offset(resumes(source, start)) or 0


def batch_events(source: Any, progress: dict, first: int = 0) -> int:
    """Events a micro-batch read (packed sources report packed rows, so count by offsets).

    The job's source is the first of the progress's sources (a restored run's restore rows,
    unioned after it, are the second). ``first`` is where a new checkpoint's first batch
    starts (Spark reports no start offset for it): a restored run's savepoint offset."""
    sources = progress.get("sources") or []
    if isinstance(source, FileSource):
        observed = (progress.get("observedMetrics") or {}).get(file_records_metric(source))
        if observed is not None:
            return int(observed.get(_RECORDS) or 0)
    records = kafka_records(sources[0]) if sources else None
    if records is not None:
        return records
    end = source_offset(sources[0]) if sources else None
    if end is not None:
        start = source_offset(sources[0], "startOffset")
        events = source.events_between(first if start is None else start, end)
        if events is not None:
            return events
    if sources and sources[0].get("numInputRows") is not None:
        return int(sources[0]["numInputRows"])
    return int(progress.get("numInputRows") or 0)
