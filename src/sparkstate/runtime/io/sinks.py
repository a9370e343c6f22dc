"""Attaching sparkstate's sink specs to a Spark ``DataStreamWriter``.

Each kind of sink spec has one Spark binding here, a :class:`SparkSink` that :func:`spark_sink`
finds by the spec's type: how it attaches to a streaming writer, how it writes one batch
DataFrame and how it writes a batch's side-output rows. A new sink is its spec plus one
binding registered with ``spark_sink``.

A job without side outputs writes straight to its sink (Spark's own file sink for Parquet).
A job with side outputs (late data, dead letters, the function's own tags) writes through
:func:`attach_dispatch`: each micro-batch is computed once, its side rows are split off by
tag and each part goes to its sink. Every part of batch ``n`` is written idempotently (Parquet
into ``batch_id=n`` folders, replaced on replay; a database in one transaction with a marker
that a replay finds), so a replayed batch does not double rows.

Database sinks collect each batch on the driver (``df.toArrow()``) and write it in one
transaction (``sparkstate.connectors.database``); a Kafka main sink is written by the batch's
tasks, a transaction per partition (``sparkstate.connectors.kafka.protocol``), and only the
side rows reach the driver. :func:`open_database_sinks` checks them before the query starts.
"""

from __future__ import annotations

import functools
import os
import pickle
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from sparkstate.api.functions import DEAD_LETTERS
from sparkstate.api.io import SinkSpec
from sparkstate.api.schema import Schema
from sparkstate.connectors import database
from sparkstate.connectors.kafka import protocol as kafka
from sparkstate.connectors.kafka.sink import KafkaSink
from sparkstate.connectors.sinks import ConsoleSink, DatabaseSink, ForeachBatchSink, MemorySink, NoopSink, ParquetSink
from sparkstate.engine.output import python_rows
from sparkstate.errors import JobDefinitionError
from sparkstate.fault_points import OFFSETS_WRITTEN, SINK_COMMITTED, SINK_ROWS_WRITTEN, fault_point
from sparkstate.runtime.checkpoint.directory import CheckpointDir
from sparkstate.runtime.checkpoint.storage import is_local, join, normalize, open_storage
from sparkstate.runtime.io.mailbox import MAIN, Mailbox, target_name


class SparkSink(Protocol):
    """A sink spec bound to Spark: the three ways a job's rows reach it."""

    def attach(self, writer: Any) -> Any:
        """Configure ``writer`` (``df.writeStream``) to write the stream; returns the writer."""
        ...

    def write_batch(self, df: Any, batch_id: int) -> Any:
        """Write one micro-batch's main rows (a batch DataFrame), idempotently; a database
        sink returns its :class:`~sparkstate.connectors.database.BatchOutcome`."""
        ...

    def write_side(self, name: str, rows: list, schema: Any, spark: Any, batch_id: int) -> Any:
        """Write one batch's rows of side output ``name`` (Python rows of ``schema``, a
        :class:`~sparkstate.api.schema.Schema` or None), idempotently (returns as
        ``write_batch``)."""
        ...


@functools.singledispatch
def spark_sink(sink: SinkSpec) -> SparkSink:
    """The Spark binding of a sink spec: each binding below registers the spec type it binds
    (a subclass of a spec, such as PostgresSink, takes its base's)."""
    raise JobDefinitionError(
        f"unsupported sink {sink!r}; use ConsoleSink, ParquetSink, MemorySink, NoopSink, PostgresSink, SqliteSink, "
        "KafkaSink or ForeachBatchSink"
    )


def _side_table(rows: list, schema: Any) -> Any:
    """Side-output rows as an Arrow table (of ``schema`` when it is known)."""
    import pyarrow as pa

    from sparkstate.engine.output import arrow_table

    return arrow_table(rows, schema, schema.arrow) if schema is not None else pa.Table.from_pylist(rows)


def _print_batch(sink: ConsoleSink, table: Any, batch_id: int, title: str = "") -> None:
    """Print up to ``sink.rows`` rows of one batch (an Arrow table): data as text, never as
    Rich markup, its control characters escaped (``terminal.py``)."""
    from rich.console import Console
    from rich.table import Table

    from sparkstate.runtime.run.terminal import text

    if table.num_rows == 0:
        return
    shown = table.slice(0, sink.rows).to_pylist()
    more = f" (first {len(shown)})" if table.num_rows > len(shown) else ""
    view = Table(title=text(f"{title}batch {batch_id}: {table.num_rows:,} rows{more}"), title_justify="left")
    for name in table.column_names:
        view.add_column(text(name), overflow="ellipsis" if sink.truncate else "fold", max_width=40 if sink.truncate else None)
    for row in shown:
        view.add_row(*[text(v) for v in row.values()])
    Console(highlight=False).print(view)


def _each_batch(write: Callable[[Any, int], None]) -> Callable[[Any, int], None]:
    """``write`` as Spark's ``foreachBatch`` function, between the test fault points of a
    batch's start (its offsets written) and end (the sink committed, Spark not yet)."""

    def each_batch(df: Any, batch_id: int) -> None:
        fault_point(OFFSETS_WRITTEN)
        write(df, batch_id)
        fault_point(SINK_COMMITTED)

    return each_batch


class _EachBatch:
    """Sinks that take the stream batch by batch, as they take a dispatched batch."""

    def attach(self, writer: Any) -> Any:
        # one action per batch: a second one would run the stateful operator twice
        return writer.foreachBatch(_each_batch(self.write_batch))

    def write_batch(self, df: Any, batch_id: int) -> Any:
        raise NotImplementedError


class _Collects(_EachBatch):
    """Sinks that collect a batch on the driver: they take it as an Arrow table, so a batch
    with side outputs is collected once and split there (:func:`attach_dispatch`)."""

    def write_batch(self, df: Any, batch_id: int) -> Any:
        return self.write_table(df.toArrow(), batch_id)

    def write_table(self, table: Any, batch_id: int) -> Any:
        raise NotImplementedError


@spark_sink.register(MemorySink)
@dataclass(frozen=True)
class _Memory(_Collects):
    sink: MemorySink

    def write_table(self, table: Any, batch_id: int) -> None:
        self.sink.put(batch_id, python_rows(table))

    def write_side(self, name: str, rows: list, schema: Any, spark: Any, batch_id: int) -> None:
        self.sink.put(batch_id, python_rows(_side_table(rows, schema)) if rows else [])


@dataclass(frozen=True)
class _Posted(_Collects):
    """A :class:`MemorySink` or :class:`ConsoleSink` over Spark Connect: the batch function
    runs on the server, so it posts the rows to the run's mailbox (``mailbox.py``), and the
    client's run loop puts them into the sink or prints them (:func:`deliver`)."""

    mailbox: Mailbox
    target: str

    def write_table(self, table: Any, batch_id: int) -> None:
        self.mailbox.post_rows(batch_id, self.target, table)

    def write_side(self, name: str, rows: list, schema: Any, spark: Any, batch_id: int) -> None:
        self.mailbox.post_rows(batch_id, self.target, _side_table(rows, schema))


def _bound(sink: SinkSpec, target: str, mailbox: Mailbox | None) -> SparkSink:
    """The binding of ``sink``, posting to ``mailbox`` where it keeps or prints rows in the
    run's own process and the batches run in another (Spark Connect)."""
    binding = spark_sink(sink)
    if mailbox is not None and isinstance(binding, (_Memory, _Console)):
        return _Posted(mailbox, target)
    return binding


def deliver(mailbox: Mailbox, job: Any, side_counts: dict[int, dict[str, int]], refused_counts: dict[int, int],
            warnings: list[str]) -> None:
    """Take the mailbox's letters (:class:`_Posted` rows, :func:`attach_dispatch`'s notes) into
    the client's sinks and the run's figures."""
    targets: dict[str, Any] = {target_name(MAIN): job.sink_spec}
    for name, sink in database.side_sinks(job).items():
        if sink is not None:
            targets[target_name(name)] = sink
    for letter in mailbox.take():
        if letter.kind == "notes":
            notes = letter.payload
            side_counts[letter.batch] = {str(k): int(v) for k, v in (notes.get("side") or {}).items()}
            refused_counts[letter.batch] = int(notes.get("refused") or 0)
            warnings.extend(w for w in notes.get("warnings") or [] if w not in warnings)
            continue
        sink = targets.get(letter.target)
        if isinstance(sink, MemorySink):
            sink.put(letter.batch, python_rows(letter.payload))
        elif isinstance(sink, ConsoleSink):
            title = "" if letter.target == MAIN else f"{letter.target}: "
            _print_batch(sink, letter.payload, letter.batch, title=title)


@spark_sink.register(ParquetSink)
@dataclass(frozen=True)
class _Parquet:
    sink: ParquetSink

    #: ``write_batch`` computes the batch in one Spark action (:func:`attach_dispatch`)
    one_action = True

    def attach(self, writer: Any) -> Any:
        return writer.format("parquet").option("path", self.sink.path)

    def write_batch(self, df: Any, batch_id: int) -> None:
        df.write.mode("overwrite").parquet(os.path.join(self.sink.path, f"batch_id={batch_id}"))
        fault_point(SINK_ROWS_WRITTEN)

    def write_side(self, name: str, rows: list, schema: Any, spark: Any, batch_id: int) -> None:
        import pyarrow.parquet as pq

        table = _side_table(rows, schema)
        if not is_local(self.sink.path):  # hdfs://, s3a://...: through Spark's Hadoop file system
            open_storage(self.sink.path, spark).delete(f"batch_id={batch_id}")  # a replay replaces its first attempt
            if rows:
                spark.createDataFrame(table).coalesce(1).write.parquet(join(self.sink.path, f"batch_id={batch_id}"))
            return
        folder = os.path.join(normalize(self.sink.path), f"batch_id={batch_id}")
        shutil.rmtree(folder, ignore_errors=True)  # a replayed batch replaces its first attempt
        if rows:
            os.makedirs(folder, exist_ok=True)
            pq.write_table(table, os.path.join(folder, "part-00000.parquet"))


@spark_sink.register(ConsoleSink)
@dataclass(frozen=True)
class _Console(_Collects):
    """Prints from Python: Spark's own console sink prints from the JVM, whose output goes to
    the log file."""

    sink: ConsoleSink

    def write_table(self, table: Any, batch_id: int) -> None:
        _print_batch(self.sink, table, batch_id)

    def write_side(self, name: str, rows: list, schema: Any, spark: Any, batch_id: int) -> None:
        _print_batch(self.sink, _side_table(rows, schema), batch_id, title=f"{name}: ")


@spark_sink.register(NoopSink)
@dataclass(frozen=True)
class _Noop:
    sink: NoopSink

    one_action = True

    def attach(self, writer: Any) -> Any:
        return writer.format("noop")

    def write_batch(self, df: Any, batch_id: int) -> None:
        df.write.format("noop").mode("overwrite").save()

    def write_side(self, name: str, rows: list, schema: Any, spark: Any, batch_id: int) -> None:
        pass


@spark_sink.register(ForeachBatchSink)
@dataclass(frozen=True)
class _ForeachBatch:
    sink: ForeachBatchSink

    def attach(self, writer: Any) -> Any:
        return writer.foreachBatch(self.sink.fn)

    def write_batch(self, df: Any, batch_id: int) -> None:
        self.sink.fn(df, batch_id)

    def write_side(self, name: str, rows: list, schema: Any, spark: Any, batch_id: int) -> None:
        if rows:
            self.sink.fn(spark.createDataFrame(_side_table(rows, schema)), batch_id)


@spark_sink.register(DatabaseSink)
@dataclass(frozen=True)
class _Database(_Collects):
    """Collects each batch on the driver and writes it in one transaction with its marker."""

    sink: DatabaseSink

    def write_table(self, table: Any, batch_id: int) -> Any:
        return database.commit_batch(self.sink, table, batch_id)

    def write_side(self, name: str, rows: list, schema: Any, spark: Any, batch_id: int) -> Any:
        if name == DEAD_LETTERS.name:
            # a dead letter is kept whatever it holds: text the database refuses (NUL) is stored escaped
            rows = [{k: v.replace("\x00", "\\u0000") if isinstance(v, str) else v for k, v in r.items()} for r in rows]
        return database.commit_batch(self.sink, _side_table(rows, schema), batch_id)


@spark_sink.register(KafkaSink)
@dataclass(frozen=True)
class _Kafka(_Collects):
    """A job's main sink: each partition of a batch written by its task, in a Kafka transaction
    of its own with its marker (:func:`_write_kafka_parts`); a side output: the batch's side
    rows, collected on the driver, in one transaction."""

    sink: KafkaSink

    def write_table(self, table: Any, batch_id: int) -> Any:
        return kafka.commit_batch(self.sink, table, batch_id)

    def write_side(self, name: str, rows: list, schema: Any, spark: Any, batch_id: int) -> Any:
        return kafka.commit_batch(self.sink, _side_table(rows, schema), batch_id)


#: the partition of a side row, while :func:`attach_dispatch` gathers them
_PART = "__sparkstate_part"

#: the tag of a row the Kafka sink refused (a dead letter) among the side rows its tasks return
_REFUSED = "\x00refused"


def _write_kafka_parts(df: Any, sink: KafkaSink, batch_id: int, split: bool) -> Any:
    """Write batch ``batch_id`` of ``df`` to ``sink`` from the tasks that compute it, part ``i``
    by the task of partition ``i`` (no batch collected on the driver, every core writes);
    returns the side rows (``split``: the batch has side-output columns) and the dead letters
    of rows the sink refused (tagged ``_REFUSED``), as an Arrow table."""
    from sparkstate.runtime.streaming.processor import SIDE_COLUMN, SIDE_ROW_COLUMN

    sink = kafka.with_transaction_timeout(sink)  # chosen on the driver: the tasks need not ask the broker

    def write(batches: Any) -> Any:
        import pyarrow as pa
        import pyarrow.compute as pc
        from pyspark import TaskContext

        ctx = TaskContext.get()
        assert ctx is not None
        part = ctx.partitionId()
        sides: list[Any] = []

        def main_rows() -> Any:
            for b in batches:
                if split:
                    is_side = b.column(SIDE_COLUMN).is_valid()
                    if b.column(SIDE_COLUMN).null_count < b.num_rows:
                        sides.append(b.filter(is_side).select([SIDE_COLUMN, SIDE_ROW_COLUMN]))
                        b = b.filter(pc.invert(is_side))
                    b = b.drop_columns([SIDE_COLUMN, SIDE_ROW_COLUMN])
                yield b

        dead = kafka.write_part(sink, part, batch_id, main_rows())
        yield from sides
        if dead:
            yield pa.RecordBatch.from_arrays(
                [pa.array([_REFUSED] * len(dead), pa.string()), pa.array([pickle.dumps(d) for d in dead], pa.binary())],
                names=[SIDE_COLUMN, SIDE_ROW_COLUMN])

    return df.mapInArrow(write, f"{SIDE_COLUMN} string, {SIDE_ROW_COLUMN} binary").toArrow()


def attach(sink: SinkSpec, writer: Any, mailbox: Mailbox | None = None) -> Any:
    """Configure ``writer`` (``df.writeStream``) for ``sink``; returns the writer. ``mailbox``:
    the batches run in another process than the run's (Spark Connect)."""
    return _bound(sink, MAIN, mailbox).attach(writer)


#: the observed metric (``observedMetrics`` in a batch's progress) that counts the rows a batch
#: sends to the main sink: Spark's own ``numOutputRows`` is -1 for every sink but ``noop``
ROWS_OUT_METRIC = "sparkstate_rows_out"
_ROWS = "rows"


def count_rows_out(out: Any, split: bool) -> Any:
    """The job's output stream ``out``, counting its main rows (``split``: its side-output
    rows, which go elsewhere, are not counted) into :data:`ROWS_OUT_METRIC`: one count per
    batch for every kind of job and sink, computed on the way, with no second Spark action."""
    from pyspark.sql import functions as F

    from sparkstate.runtime.streaming.processor import SIDE_COLUMN

    row = F.when(F.col(SIDE_COLUMN).isNull(), F.lit(1)) if split else F.lit(1)
    return out.observe(ROWS_OUT_METRIC, F.count(row).alias(_ROWS))


def observed_rows_out(progress: dict) -> int | None:
    """The main rows a batch sent to the sink (:func:`count_rows_out`), or None when its
    progress report does not have them."""
    observed = (progress.get("observedMetrics") or {}).get(ROWS_OUT_METRIC)
    return None if observed is None or observed.get(_ROWS) is None else int(observed[_ROWS])


def open_database_sinks(
    job: Any, checkpoint: CheckpointDir, native: bool, restored_from: str | None = None, partitions: int = 1,
) -> Any:
    """Bind the job's database and Kafka sinks to it and check each one before batch 0
    (reachable, table or topic there, markers agreeing with the checkpoint; Kafka writers'
    zombies fenced); returns the bound job.
    ``restored_from``: the savepoint id the checkpoint was restored from (its writers'
    identities carry it, see :attr:`DatabaseSink.marker`). ``partitions``: the batch's, each
    of which writes its part of a Kafka main sink.

    A job on the native path has no side outputs, so their tables are not created for it.
    """
    job = database.bind_job_sinks(job, restored_from)
    sinks = database.job_database_sinks(job, with_side_outputs=not native)
    if sinks:
        last, _ = checkpoint.last_committed_offset()
        for sink, schema in sinks:
            # schema None: where refused rows go, written only for batches that have some
            database.prepare(sink, schema, last, every_batch=schema is not None, may_be_new=sink is not job.sink_spec)
    writers = database.job_kafka_sinks(job, with_side_outputs=not native)
    if writers:
        main = job.sink_spec
        parts = {main.marker: partitions} if isinstance(main, KafkaSink) and main.transactional else {}
        kafka.prepare(writers, checkpoint.last_committed_offset()[0], parts)
    return job


def prepare_sinks(job: Any, checkpoint: CheckpointDir, native: bool, restored_from: str | None = None,
                  partitions: int = 1, restoring: bool = False) -> Any:
    """Bind the job's sinks and check each before batch 0 (:func:`open_database_sinks`,
    :func:`check_file_sink`); returns the bound job."""
    job = open_database_sinks(job, checkpoint, native=native, restored_from=restored_from, partitions=partitions)
    check_file_sink(job, checkpoint, restoring=restoring)
    return job


def database_writers(job: Any, tops: bool = False) -> list[dict[str, Any]]:
    """The database and Kafka writers of a bound job, as a checkpoint's metadata and a
    savepoint record them: table (or topic), writer identity, database or broker (no password)
    and, with ``tops``, the last batch each wrote (``top_batch``)."""
    out = []
    for sink, _ in database.job_database_sinks(job):
        entry: dict[str, Any] = {"table": sink.table, "writer": sink.marker, "database": sink.describe()}
        if tops:
            entry["top_batch"] = database.top_marker(sink)
        out.append(entry)
    for writer in database.job_kafka_sinks(job):
        if writer.transactional:  # at-least-once writers keep no markers
            entry = {"topic": writer.topic, "writer": writer.marker, "kafka": writer.describe()}
            if tops:
                entry["top_batch"] = kafka.read_top_marker(writer)
            out.append(entry)
    return out


def restore_warnings(job: Any, savepoint_meta: dict[str, Any]) -> list[str]:
    """For a bound job restored from a savepoint: the tables (and Kafka topics) that hold
    batches the savepoint's writer wrote after the savepoint's batch. The restored run writes their effect again (it
    starts from the savepoint's state and source offsets): appended rows twice, upserted keys
    rewritten."""
    batch = savepoint_meta.get("batch")
    if not isinstance(batch, int):
        return []
    recorded = savepoint_meta.get("sinks")
    notes = []
    for sink, _ in database.job_database_sinks(job):
        if isinstance(recorded, list):
            writers = [str(e.get("writer")) for e in recorded if isinstance(e, dict) and e.get("table") == sink.table]
        else:  # a savepoint that does not record its writers: the job's own, not restored
            writers = [replace(sink, restored_from=None).marker]
        for writer in writers:
            top = database.top_marker(sink, writer)
            if top is not None and top > batch:
                notes.append(
                    f"table {sink.table} ({sink.describe()}) holds batches {batch + 1} to {top} of writer {writer!r}, "
                    f"written after the savepoint (batch {batch}): this restored run writes their effect again "
                    "(appended rows twice; upserted keys are rewritten with the same values). Delete those rows "
                    "first if they must not count twice, or restore a later savepoint"
                )
    for sink in database.job_kafka_sinks(job):
        if not sink.transactional:
            continue
        if isinstance(recorded, list):
            writers = [str(e.get("writer")) for e in recorded if isinstance(e, dict) and e.get("topic") == sink.topic]
        else:
            writers = [replace(sink, restored_from=None).marker]
        for writer in writers:
            top = kafka.read_top_marker(sink, writer=writer)
            if top is not None and top > batch:
                notes.append(
                    f"topic {sink.topic!r} ({sink.describe()}) holds batches {batch + 1} to {top} of writer {writer!r}, "
                    f"written after the savepoint (batch {batch}): this restored run writes their records again, and "
                    "a topic's records cannot be deleted, so its readers see them twice. Restore a later savepoint, "
                    "or write the restored run to another topic if they must not"
                )
    return notes


def _written_batches(path: str) -> int | None:
    """The last batch id a Parquet output folder holds: in Spark's file-sink log
    (``_spark_metadata/N``, ``N.compact``) or as a ``batch_id=N`` folder (a job with side
    outputs); None when it holds none (or is not a local folder)."""
    import re

    from sparkstate.runtime.checkpoint.storage import is_local, normalize

    root = normalize(path)
    if not is_local(root) or not os.path.isdir(root):
        return None
    ids = [int(m.group(1)) for n in os.listdir(root) if (m := re.fullmatch(r"batch_id=(\d+)", n))]
    log = os.path.join(root, "_spark_metadata")
    if os.path.isdir(log):
        ids += [int(m.group(1)) for n in os.listdir(log) if (m := re.fullmatch(r"(\d+)(?:\.compact)?", n))]
    return max(ids, default=None)


def check_file_sink(job: Any, checkpoint: CheckpointDir, restoring: bool = False) -> None:
    """Refuse a Parquet output folder that holds batches this checkpoint has not run: they
    came from another checkpoint, and Spark's file sink would drop this run's batches of the
    same ids as already written (a job with side outputs would overwrite them)."""
    from sparkstate.errors import SinkError

    sink = job.sink_spec
    if not isinstance(sink, ParquetSink):
        return
    top = _written_batches(sink.path)
    if top is None:
        return
    last, _ = checkpoint.last_committed_offset()
    if last is None or top > last + 1:
        have = "has committed no batch" if last is None else f"has committed batches up to {last}"
        restored = (" A run restored from a savepoint starts a new checkpoint, whose batch ids start at 0 again: give "
                    "it an output folder of its own." if restoring else "")
        raise SinkError(
            f"output folder {sink.path} already holds batches up to {top}, but the checkpoint {checkpoint.root} {have}: "
            "they were written with another checkpoint, and this run's batches with the same ids would be dropped as "
            f"already written.{restored} Write to another folder (--sink parquet:DIR), use the checkpoint that wrote "
            "them, or remove the folder (`sparkstate run --fresh` removes the job's own output with its checkpoint)"
        )


# --------------------------------------------------------------------------- side outputs


def prune_batch_folders(folder: str, keep_after: int, spark: Any = None) -> None:
    """Delete a side-output folder's ``batch_id=n`` folders with ``n <= keep_after`` (local,
    or on a Hadoop file system through ``spark``'s)."""
    storage = open_storage(folder, spark)
    try:
        entries = storage.list()
    except OSError:
        return
    for entry in entries:
        n = entry.name.removeprefix("batch_id=")
        if n != entry.name and n.isdigit() and int(n) <= keep_after:
            try:
                storage.delete(entry.name)
            except OSError:  # deleted meanwhile, or not now: the next batch tries again
                pass


def attach_job(
    job: Any,
    writer: Any,
    default_dir: str,
    side_counts: dict[int, dict[str, int]] | None = None,
    warnings: list[str] | None = None,
    split: bool = False,
    refused_counts: dict[int, int] | None = None,
    mailbox: Mailbox | None = None,
) -> Any:
    """Configure ``writer`` for the job's sinks: through :func:`attach_dispatch` when the
    batch has side outputs (``split``) or the main sink is a database (whose refused rows
    become dead letters), else straight to the main sink. ``mailbox``: the batches run in
    another process than the run's (Spark Connect), and tell it what they did there."""
    if split or isinstance(job.sink_spec, (DatabaseSink, KafkaSink)):
        counts = side_counts if side_counts is not None else {}
        return attach_dispatch(job, writer, default_dir, counts, warnings, split=split, refused_counts=refused_counts,
                               mailbox=mailbox)
    return attach(job.sink_spec, writer, mailbox)


def attach_dispatch(
    job: Any,
    writer: Any,
    default_dir: str,
    counts: dict[int, dict[str, int]],
    warnings: list[str] | None = None,
    split: bool = True,
    refused_counts: dict[int, int] | None = None,
    mailbox: Mailbox | None = None,
) -> Any:
    """Configure ``writer`` to split each batch into the main sink and the side-output sinks.

    Side outputs without a sink of their own go to a table beside the main one when the main
    sink is a database (``<table>_<name>``), else to Parquet under ``default_dir/<name>`` (in
    the checkpoint directory), where they follow the checkpoint's retention: the folders of
    the last ``retained`` batches are kept, older ones deleted as batches complete.
    ``counts[batch_id]`` gets the number of side rows written per side output. Rows a
    database or Kafka sink refuses join the batch's dead letters (written last), and their
    number goes to ``refused_counts[batch_id]`` (they did not reach the sink); its warnings (a
    replayed batch that differs from its first commit) go to ``warnings``. ``split=False``:
    the batch has no side-output columns (a job without side outputs, or the native path).
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    from sparkstate.runtime.streaming.processor import SIDE_COLUMN, SIDE_ROW_COLUMN

    names = job.side_output_names if split else ()
    dead_name = DEAD_LETTERS.name
    schemas = {n: job.side_output_schema(n) for n in names}
    schemas.setdefault(dead_name, Schema.of(DEAD_LETTERS.schema))
    declared = database.side_sinks(job)
    sinks = {n: s or ParquetSink(os.path.join(default_dir, n)) for n, s in declared.items() if n in names}
    sinks.setdefault(dead_name, database.dead_letter_sink(job) or ParquetSink(os.path.join(default_dir, dead_name)))
    # the default folders, inside the checkpoint: kept as long as the checkpoint keeps its batches
    own = {n for n in sinks if declared.get(n) is None and not (n == dead_name and database.dead_letter_sink(job))}
    defaults = [sinks[n].path for n in own]
    retained = job.settings.checkpoint.retained
    main = _bound(job.sink_spec, MAIN, mailbox)
    bindings = {n: _bound(s, n, mailbox) for n, s in sinks.items()}
    discard = spark_sink(NoopSink())
    notes = warnings if warnings is not None else []

    # a sink that collects the batch on the driver takes it whole, side rows split off in Arrow:
    # one Spark action, nothing cached (a cached batch is written to Spark's block store first)
    collects = isinstance(main, _Collects)
    # a sink that writes a batch in one Spark action takes the main rows while an observed
    # metric gathers the side rows on the way: one action, nothing cached either
    observes = split and getattr(main, "one_action", False)

    def dispatch(df: Any, batch_id: int) -> None:
        # computed once: a second evaluation would run the stateful operator again
        cache = split and not collects and not observes
        if cache:
            df = df.persist()
        noted = len(notes)
        try:
            refused: list[dict] = []

            def took(outcome: Any) -> None:
                if isinstance(outcome, database.BatchOutcome):
                    refused.extend(outcome.refused)
                    if outcome.warning:
                        notes.append(outcome.warning)

            by_name: dict[str, list] = {n: [] for n in names}
            if isinstance(main, _Kafka):  # written by the batch's tasks, which hand back the side rows
                side = _write_kafka_parts(df, main.sink, batch_id, split)
            elif split and collects:
                table = df.toArrow()
                is_side = table.column(SIDE_COLUMN).is_valid()
                side = table.filter(is_side).select([SIDE_COLUMN, SIDE_ROW_COLUMN])
                assert isinstance(main, _Collects)  # for the type checker: ``collects`` said so
                took(main.write_table(table.filter(pc.invert(is_side)).drop_columns([SIDE_COLUMN, SIDE_ROW_COLUMN]), batch_id))
            elif observes:
                side_rows = Observation(f"sparkstate side rows {uuid.uuid4().hex}")  # one per batch: names must differ
                # CollectMetrics stops the filter below from being pushed under it: it sees every row
                # (Spark evaluates no partition id inside an observed aggregate: it is a column first)
                observed = df.withColumn(_PART, F.spark_partition_id()).observe(side_rows, F.collect_list(F.when(
                    F.col(SIDE_COLUMN).isNotNull(), F.struct(_PART, SIDE_COLUMN, SIDE_ROW_COLUMN)
                )).alias("rows"))
                main_rows = observed.where(F.col(SIDE_COLUMN).isNull()).drop(_PART, SIDE_COLUMN, SIDE_ROW_COLUMN)
                took(main.write_batch(main_rows, batch_id))
                # in partition order, each partition's rows in their order, as a collected batch has them
                gathered = sorted(side_rows.get["rows"], key=lambda r: r[0])
                side = pa.table({"name": [r[1] for r in gathered], "row": pa.array([bytes(r[2]) for r in gathered], pa.binary())})
            elif split:
                side = df.where(F.col(SIDE_COLUMN).isNotNull()).select(SIDE_COLUMN, SIDE_ROW_COLUMN).toArrow()
                took(main.write_batch(df.where(F.col(SIDE_COLUMN).isNull()).drop(SIDE_COLUMN, SIDE_ROW_COLUMN), batch_id))
            if split or isinstance(main, _Kafka):
                for name, blob in zip(side.column(0).to_pylist(), side.column(1).to_pylist()):
                    if name == _REFUSED:
                        refused.append(pickle.loads(blob))
                    else:
                        by_name.setdefault(name, []).append(pickle.loads(blob))
            else:
                took(main.write_batch(df, batch_id))
            for name, rows in by_name.items():
                if name != dead_name:
                    took(bindings.get(name, discard).write_side(name, rows, schemas.get(name), df.sparkSession, batch_id))
            if refused or dead_name in by_name:
                dead = by_name.setdefault(dead_name, [])
                dead.extend(refused)
                bindings[dead_name].write_side(dead_name, dead, schemas[dead_name], df.sparkSession, batch_id)
            side_counts = {name: len(rows) for name, rows in by_name.items()}
            if mailbox is not None:
                # the run is in another process: its figures go by post, and nothing stays here
                # (this process's copies of the run's dicts would keep an entry per batch)
                mailbox.post_notes(batch_id, {"side": side_counts, "refused": len(refused), "warnings": notes[noted:]})
                del notes[noted:]
            else:
                counts[batch_id] = side_counts
                if refused_counts is not None:
                    refused_counts[batch_id] = len(refused)
            for folder in defaults:
                prune_batch_folders(folder, batch_id - retained, df.sparkSession)
        finally:
            if cache:
                df.unpersist()

    return writer.foreachBatch(_each_batch(dispatch))
