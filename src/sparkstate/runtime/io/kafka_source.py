"""The Kafka source on Spark: a Python streaming data source whose offsets are the topics'
per-partition Kafka offsets (``sparkstate.connectors.kafka.reader`` says how batches start and
end), registered for :class:`~sparkstate.connectors.kafka.KafkaSource` specs.

Spark writes a batch's end offsets to the checkpoint's offset log before running it, and a
restarted query replays a batch that did not commit from the same offsets: the records are
the same, so the batch's effect is the same (exactly-once). Where a *new* checkpoint starts
(``starting="latest"`` or a time) is resolved once: the first batch's end offset carries it
(``initial``), so a first batch replayed after a crash starts where its first attempt started
even when ``initialOffset()`` would now resolve elsewhere; a local checkpoint also keeps it
beside itself (``kafka-start.json``), which ``initialOffset()`` returns again.

The reader parses and packs records in the task that reads them (one Python pass, as the
generator does); unpacked, it gives the events themselves (the columns of the spec's schema).
"""

from __future__ import annotations

import bisect
import itertools
import json
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from sparkstate.api.schema import Schema
from sparkstate.connectors.kafka.reader import CHUNK, OffsetBook, RecordColumns, fetch, ranges, recreated_error
from sparkstate.connectors.kafka.source import DEFAULT_GROUP, KafkaSource, split_columns
from sparkstate.connectors.text import LineParser
from sparkstate.engine.events import PACKED_SCHEMA
from sparkstate.runtime.io.sources import _Binding, _packer, _with_options, pack_options, resumes, spark_source

KAFKA_FORMAT = "sparkstate_kafka"
#: Spark redacts option values whose key matches ``spark.redaction.regex`` ("secret", "password"...)
#: in plans and logs: the client settings, which may hold a SASL password, travel under such a key
SECRET_OPTIONS = "client_secret_options"
START_FILE = "kafka-start.json"
#: a chunk of records some of which are not events is halved down to pieces of this many, and
#: only the pieces holding such records are read record by record
SPLIT_MIN = 2048


@dataclass(frozen=True)
class KafkaRange(InputPartition):
    index: int
    topic: str
    partition: int
    start: int
    end: int
    now: int | None = None


class KafkaDataSource(DataSource):
    """``spark.readStream.format("sparkstate_kafka")``: a :class:`KafkaSource`'s events (or packed rows)."""

    @classmethod
    def name(cls) -> str:
        return KAFKA_FORMAT

    def schema(self) -> str:
        return PACKED_SCHEMA if self.options.get("pack_keys") else self.options["schema"]

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return KafkaStreamReader(dict(self.options))


class KafkaStreamReader(DataSourceStreamReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = dict(options)
        self.servers = options["servers"]
        self.topics: list[str] = json.loads(options["topics"])
        self.client_options: dict[str, Any] = json.loads(options.get(SECRET_OPTIONS) or "{}")
        self.group = options.get("group") or DEFAULT_GROUP
        self.max_records = int(options["max_records"]) if options.get("max_records") else None
        #: where a topic deleted and created again since the offsets were logged is read from
        #: (empty: such a topic is an error)
        self.if_recreated = options.get("starting_if_recreated") or ""
        self._checked = self._planned = False
        self._book: OffsetBook | None = None

    def __getstate__(self) -> dict:
        # the tasks that read get the options; the driver's metadata consumer stays in the driver
        return {"options": self.options}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["options"])  # type: ignore[misc]

    @property
    def book(self) -> OffsetBook:
        if self._book is None:
            self._book = OffsetBook(self.servers, self.topics, self.client_options, self.group)
        return self._book

    def _where(self, savepoint: bool) -> str:
        """The checkpoint (or savepoint) whose offsets are read on, for messages."""
        if savepoint:
            return "the savepoint this run restores"
        path = self.options.get("start_file")
        return f"the checkpoint {os.path.dirname(os.path.dirname(path))}" if path else "the checkpoint"

    def _recreated(self, offset: dict) -> dict[str, dict[str, int]]:
        """The topics of ``offset`` deleted and created again since it was logged, each with
        where it is now read from (``starting_if_recreated``); an error when that is not set."""
        # topic ids at every batch (one request); first records once a run, where the job resumes
        changed = self.book.recreated(offset, firsts=not self._planned)
        self._planned = True
        if changed and not self.if_recreated:
            topic, why = next(iter(changed.items()))
            raise recreated_error(self.servers, topic, why, self._where(bool(offset.get("savepoint"))),
                                  offset["topics"].get(topic, {}))
        if not changed:
            return {}
        fresh = OffsetBook(self.servers, list(changed), self.client_options, self.group)
        try:
            return fresh.initial(self.if_recreated)
        finally:
            fresh.close()

    def initialOffset(self) -> dict:
        given = self.options.get("start_offsets")
        if given:  # a restored savepoint's position, with its topics' ids (none in older savepoints)
            saved = json.loads(self.options.get("start_fingerprint") or "{}")
            return {"topics": json.loads(given), **saved, "savepoint": True}
        path = self.options.get("start_file")
        if path and os.path.exists(path):
            with open(path) as f:
                return json.load(f)
        start = {"topics": self.book.initial(self.options.get("starting") or "earliest"),
                 **self.book.fingerprint(self.book.all_bounds())}
        if path:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path + ".tmp", "w") as f:
                json.dump(start, f)
            os.replace(path + ".tmp", path)
        return start

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        base = start or self.initialOffset()
        # a topic deleted and created again since ``base`` was logged: an error, or read from
        # where the user asked (that batch's end carries its start, as a first batch's does)
        moved = self._recreated(base)
        begin = {**base["topics"], **moved}
        end = self.book.latest(begin, self.max_records)
        if start is not None and end == start.get("topics") and not moved:
            return start  # an offset that differs would make Spark run an empty batch
        # the wall clock rides with the offsets Spark logs: a replay reads the same processing time;
        # the topics' ids, so that a topic deleted and created again is not read on from them
        offset: dict[str, Any] = {"topics": end, "now": int(time.time() * 1000), "waiting": self.book.waiting,
                                  **self.book.fingerprint(self.book.last_bounds)}
        if start is None or "now" not in start or moved:
            # a checkpoint's first batch starts at initialOffset(), which progress reports do not
            # give: its end carries its start, to count its records
            offset["initial"] = begin
        return offset

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        # a batch logged before a stop and replayed after it: its topics must still be those it planned
        if not self._checked:  # once a run: a replay after a restart (a running job's next offsets were checked)
            self._checked = True
            changed = self.book.recreated(end)
            if changed:
                topic, why = next(iter(changed.items()))
                raise recreated_error(self.servers, topic, why, self._where(False), start.get("topics", {}).get(topic, {}))
        now = end.get("now")
        # a checkpoint's first batch logged where it starts: a replay of it starts there too,
        # whatever initialOffset() says now (``starting="latest"`` or a time, resolved again)
        initial = end.get("initial")
        begin = initial if isinstance(initial, dict) else start["topics"]
        return [
            KafkaRange(i, topic, part, s, e, int(now) if now is not None else None)
            for i, topic, part, s, e in ranges(begin, end["topics"])
        ]

    # Spark passes back what partitions() returned; pyspark types it as the base class
    def read(self, partition: KafkaRange) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        decode = RecordDecoder(self.options)
        packer = _packer(self.options)
        seq = 0
        for msgs in fetch(self.servers, self.client_options, self.group, partition.topic, partition.partition,
                          partition.start, partition.end):
            for at in range(0, len(msgs), CHUNK):
                events, dead, raws = decode(msgs[at : at + CHUNK])
                if packer is None:
                    if events.num_rows:
                        yield events
                    continue
                packed = packer.pack(events, partition.index, seq, partition.now, raws, dead)
                if packed is not None:
                    seq += 1
                    yield packed

    def commit(self, end: dict) -> None:
        pass  # the offsets are Spark's to keep, in the checkpoint; nothing is committed to the broker

    def stop(self) -> None:
        if self._book is not None:
            self._book.close()


def _message_value() -> Any:
    from confluent_kafka import Message

    return Message.value


_VALUE = _message_value()


class RecordDecoder:
    """Messages into events of the source's schema, with dead letters for those that are not."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.schema = Schema.of(options["schema"]).arrow
        self.format = options.get("format") or "json"
        value, meta = split_columns(options["schema"])
        self.meta = RecordColumns(meta)
        self.value_names = [n for n, _ in value]
        keys = [k for k in json.loads(options.get("pack_keys") or "[]") if k in self.value_names]
        time_column = options.get("pack_time_column") or None
        self.parser = None
        if self.format != "raw":
            self.parser = LineParser(
                ", ".join(f"{n} {t}" for n, t in value), self.format, keys,
                time_column if time_column in self.value_names else None,
            )
        self.binary_value = self.format == "raw" and pa.types.is_binary(self.schema.field("value").type)

    def __call__(self, msgs: list[Any]) -> tuple[pa.RecordBatch, list[dict[str, str]], Sequence[str] | None]:
        values = list(map(_VALUE, msgs))  # in C: a Python step per record costs as much as parsing it
        if self.parser is None:
            if not self.binary_value:
                values = [None if v is None else v.decode("utf-8", errors="replace") for v in values]
            events = pa.RecordBatch.from_arrays([pa.array(values, self.schema.field("value").type)], names=["value"])
            return self.meta.add(events, msgs, self.schema), [], None
        parts = list(self._parts(msgs, values))
        if len(parts) == 1:
            return parts[0]
        raws = _Chain([p[2] for p in parts])
        return pa.concat_batches([p[0] for p in parts]), [d for p in parts for d in p[1]], raws

    def _parts(self, msgs: list[Any], values: list[Any]) -> Iterator[tuple[pa.RecordBatch, list[dict[str, str]], Sequence[str]]]:
        """The records as one block of text (:meth:`LineParser.parse_values`); a block some
        record of which is not an event in halves, down to :data:`SPLIT_MIN` records, which are
        read record by record: a malformed record costs its piece, not its whole chunk."""
        assert self.parser is not None
        events = self.parser.parse_values(values)
        if events is not None:  # every record an event: no string made of each (raws on demand)
            yield self.meta.add(events, msgs, self.schema), [], _Texts(values)
        elif len(values) >= 2 * SPLIT_MIN:
            mid = len(values) // 2
            yield from self._parts(msgs[:mid], values[:mid])
            yield from self._parts(msgs[mid:], values[mid:])
        else:
            yield self.each(msgs, values)

    def each(self, msgs: list[Any], values: list[Any]) -> tuple[pa.RecordBatch, list[dict[str, str]], list[str]]:
        """Record by record (the parser's rules themselves; its block reading where it can)."""
        assert self.parser is not None
        lines: list[str | None] = []
        placed: list[tuple[int, dict[str, str]]] = []  # (index in msgs, dead letter)
        for i, v in enumerate(values):
            text = None if v is None else v.decode("utf-8", errors="replace")
            if text is None or not text.strip():  # the parser would skip a blank value without a word
                placed.append((i, {"raw": text or "", "reason": "no value (a tombstone)" if text is None else "an empty value"}))
            lines.append(text if text and text.strip() else None)
        events, refused, raws, kept = self.parser.parse_indexed(lines)
        if refused:  # every line the parser saw is kept or refused, in order
            taken = set(kept)
            placed += zip([i for i, line in enumerate(lines) if line is not None and i not in taken], refused)
        # each dead letter says which record it is, in the order of the records
        dead = [{"raw": d["raw"], "reason": f"record at offset {msgs[i].offset()} of {msgs[i].topic()!r} partition "
                 f"{msgs[i].partition()}: {d['reason']}"} for i, d in sorted(placed, key=lambda p: p[0])]
        if len(kept) != len(msgs):
            msgs = [msgs[i] for i in kept]
        return self.meta.add(events, msgs, self.schema), dead, raws


class _Chain(Sequence[str]):
    """The raw texts of consecutive pieces' events as one sequence."""

    def __init__(self, parts: list[Sequence[str]]) -> None:
        self._parts = parts
        self._starts = list(itertools.accumulate((len(p) for p in parts), initial=0))

    def __len__(self) -> int:
        return self._starts[-1]

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        at = bisect.bisect_right(self._starts, i) - 1
        return self._parts[at][i - self._starts[at]]


class _Texts(Sequence[str]):
    """Records' values as text, each made when asked for (a dead letter made later, such as
    an event time too far ahead, quotes its record)."""

    def __init__(self, values: list[bytes]) -> None:
        self._values = values

    def __len__(self) -> int:
        return len(self._values)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [v.decode("utf-8", errors="replace") for v in self._values[i]]
        return self._values[i].decode("utf-8", errors="replace")


def register_kafka(spark: Any) -> None:
    spark.dataSource.register(KafkaDataSource)


def kafka_options(spec: KafkaSource) -> dict[str, str]:
    return {
        "servers": spec.bootstrap_servers,
        "topics": json.dumps(list(spec.topic)),
        "schema": spec.schema,
        "format": spec.format,
        "starting": spec.starting,
        "max_records": "" if spec.max_records_per_batch is None else str(spec.max_records_per_batch),
        "starting_if_recreated": spec.starting_if_recreated or "",
        SECRET_OPTIONS: json.dumps(dict(spec.options)),
    }


@spark_source.register(KafkaSource)
@dataclass(frozen=True)
class _Kafka(_Binding):
    """Reads and packs in one pass; a restored run starts at the savepoint's offsets."""

    spec: KafkaSource

    def _read(self, spark: Any, scratch_dir: str | None, options: dict[str, str]) -> Any:
        register_kafka(spark)
        start_file = {"start_file": os.path.join(scratch_dir, START_FILE)} if scratch_dir else {}
        return _with_options(spark.readStream.format(KAFKA_FORMAT), {**kafka_options(self.spec), **start_file, **options}).load()

    def packed(self, spark: Any, job: Any, marker: bool, scratch_dir: str | None, start: dict | None = None) -> Any:
        options = pack_options(job, marker=False)  # unbounded: no end of input
        saved = (resumes(self.spec, start) or {}).get("source_offset")
        if isinstance(saved, dict) and isinstance(saved.get("topics"), dict):
            options["start_offsets"] = json.dumps(saved["topics"])
            options["start_fingerprint"] = json.dumps({k: saved[k] for k in ("ids", "firsts") if k in saved})
        return self.raw(spark, scratch_dir, options)

    def restore_promise(self) -> str:
        return ("resumes at the savepoint's Kafka offsets: exactly the records after them, once (while the broker "
                "still holds them)")

