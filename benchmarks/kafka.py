"""Kafka benchmark: W1 from a Kafka topic into a transactional Kafka sink, beside the same job
from the generator and from files, in one run.

    python benchmarks/kafka.py                    # 2,000,000 events (a few minutes on 2 cores)
    python benchmarks/kafka.py --events 200000    # a smaller smoke run

The broker is a local noida-db (``scripts/kafka.sh``, the broker the tests use: an independent
implementation of the Kafka protocol, not Apache Kafka), started by this script in a temporary
folder and removed at the end. The script writes ``--events`` UPI payments (the generator's,
with current timestamps: the broker keeps records 7 days by their timestamp) as JSON values
keyed by ``merchant_id`` into a topic of 4 partitions, and the same events as JSON lines into
files. Then W1 (per merchant a running count and sum, every event emitted; 100,000 merchants;
RocksDB) runs, each row in its own process after an unmeasured warm-up run:

* ``generator -> noop``: the events generated in the reading task (the other benchmarks' W1);
* ``files -> noop``: the JSON files through ``FileSource``;
* ``kafka -> noop``: the topic through ``KafkaSource`` (the source's cost alone);
* ``kafka -> kafka``: the topic through ``KafkaSource`` into a ``KafkaSink`` exactly-once (each
  micro-batch's records and marker in one Kafka transaction) on a new topic of 4 partitions;
* ``generator -> kafka``: the generator into that sink (the sink's cost alone).

Every row reads about ``--max-batch`` events per micro-batch. Peak memory is the resident
memory of the measured process with its JVM and Python workers (the broker not counted); the
broker's CPU seconds during the row (its warm-up run included) are shown beside it, since the
broker shares the machine's cores with the job.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from bench_common import mb, measure, run_child
from keyed_state import _figures  # what a throughput row shows, as in the keyed-state benchmark

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]
SCHEMA = "event_time timestamp, merchant_id string, payer_id string, amount double, device string"
PARTITIONS = 4
#: events per file of the file rows (the batch size is a whole number of files)
FILE_EVENTS = 100_000


# --------------------------------------------------------------------------- child side


def _session():
    from sparkstate.runtime.spark_session import get_spark

    return get_spark(parallelism=2, log_file=Path(tempfile.gettempdir()) / "sparkstate-bench-spark.log")


def _generator(events: int, keys: int, max_batch: int, start_ms: int):
    from sparkstate import UpiPayments

    return UpiPayments(events=events, merchants=keys, max_batch=max_batch, seed=11, start_ms=start_ms)


def _job(args: argparse.Namespace, events: int, ckpt: Path):
    """W1 from the row's source into the row's sink."""
    from sparkstate import FileSource, Job, KafkaSink, KafkaSource, NoopSink
    from sparkstate.jobs.running_sum import OUTPUT, RunningSum

    per_batch = min(args.max_batch, events)  # a warm-up run reads no more than its events
    if args.engine.startswith("generator"):
        source = _generator(events, args.keys, args.max_batch, args.start_ms)
    elif args.engine == "files":
        source = FileSource(args.files, SCHEMA, time_column="event_time",
                            max_files_per_trigger=max(1, per_batch // FILE_EVENTS))
    else:
        source = KafkaSource(args.servers, args.topic, SCHEMA, time_column="event_time",
                             max_records_per_batch=per_batch)
    if args.engine.endswith("-kafka"):
        out = f"w1-out-{ckpt.parent.name}-{ckpt.name}"
        sink = KafkaSink(args.servers, out, key="merchant_id", create_topics=True, partitions=PARTITIONS)
    else:
        sink = NoopSink()
    return (
        Job(f"w1-{args.engine}").source(source).key_by("merchant_id").process(RunningSum(), output_schema=OUTPUT)
        .sink(sink).with_settings(state_backend="rocksdb", key_groups=args.key_groups, trigger_interval="0 seconds")
    )


def child_throughput(args: argparse.Namespace) -> dict:
    spark = _session()

    def once(events: int, ckpt: Path) -> dict:
        job = _job(args, events, ckpt)
        if args.engine.startswith("generator"):
            return _figures(job.run(checkpoint_dir=ckpt, spark=spark))
        # files and topics are unbounded sources: run until the events are read
        result = job.run(checkpoint_dir=ckpt, spark=spark, until=lambda r: r.events >= events, timeout=3600)
        return _figures(result)

    return measure(once, args.events, args.warmup)


# --------------------------------------------------------------------------- parent side


def _write_input(kafka, args: argparse.Namespace, files: Path) -> tuple[str, int, float]:
    """The events into a new topic (JSON values keyed by merchant) and into JSON files."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from confluent_kafka import Producer

    from sparkstate.connectors.kafka.records import encode

    # current timestamps, ending about now (the broker deletes records older than 7 days)
    start_ms = int(time.time() * 1000) - int(args.events / 1000.0 * 1000) - 60_000
    gen = _generator(args.events, args.keys, args.max_batch, start_ms)
    topic = kafka.new_topic("w1-payments", PARTITIONS)
    producer = Producer({"bootstrap.servers": kafka.servers, "linger.ms": 20, "batch.num.messages": 10_000,
                         "compression.type": "none", "partitioner": "murmur2_random"})
    files.mkdir(parents=True)
    started = time.monotonic()
    for i, at in enumerate(range(0, args.events, FILE_EVENTS)):
        batch = pa.Table.from_batches([gen.generate(at, min(at + FILE_EVENTS, args.events))])
        ms = pc.divide(batch.column("event_time").cast(pa.int64()), 1000)
        batch = batch.set_column(0, "event_time", ms)  # epoch milliseconds, as producers commonly send
        values, _, dead = encode(batch, ())
        assert not dead
        keys = batch.column("merchant_id").to_pylist()
        for v, k in zip(values, keys):
            while True:
                try:
                    producer.produce(topic, v, k.encode())
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.poll(0)
        tmp = files.parent / f".part-{i:05d}.json"
        tmp.write_bytes(b"\n".join(values) + b"\n")
        tmp.rename(files / f"part-{i:05d}.json")  # a file appears complete
    left = producer.flush(300)
    if left:
        raise SystemExit(f"{left} records not delivered to the broker")
    return topic, start_ms, time.monotonic() - started


def _cpu_seconds(pid: int) -> float:
    """User and system CPU seconds process ``pid`` has used (Linux ``/proc``)."""
    import os

    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--max-batch", type=int, default=1_000_000, help="events per micro-batch, every row")
    parser.add_argument("--key-groups", type=int, default=128)
    parser.add_argument("--warmup", type=int, default=100_000, help="events of the unmeasured warm-up run")
    parser.add_argument("--only", default="",
                        help="comma-separated rows to run (generator,files,kafka,kafka-kafka,generator-kafka)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--engine", default="generator", help=argparse.SUPPRESS)
    parser.add_argument("--servers", default="", help=argparse.SUPPRESS)
    parser.add_argument("--topic", default="", help=argparse.SUPPRESS)
    parser.add_argument("--files", default="", help=argparse.SUPPRESS)
    parser.add_argument("--start-ms", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        print(json.dumps(child_throughput(args)))
        return

    import shutil

    from rich.console import Console
    from rich.table import Table

    sys.path.insert(0, str(ROOT / "tests"))
    from kafka_server import LocalKafka

    console = Console(highlight=False, width=max(140, Console().width))
    kafka = LocalKafka()
    work = Path(tempfile.mkdtemp(prefix="sparkstate-bench-kafka-"))
    try:
        servers = kafka.start()
        console.print(f"broker: noida-db (a Kafka-protocol broker, not Apache Kafka) at {servers}")
        console.print(f"  writing {args.events:,} UPI payments to a topic of {PARTITIONS} partitions and to JSON files ...")
        topic, start_ms, took = _write_input(kafka, args, work / "files")
        console.print(f"  written in {took:.1f} s ({args.events / took:,.0f} events/s)")
        common = [
            "--keys", str(args.keys), "--max-batch", str(args.max_batch), "--key-groups", str(args.key_groups),
            "--warmup", str(args.warmup), "--events", str(args.events), "--servers", servers, "--topic", topic,
            "--files", str(work / "files"), "--start-ms", str(start_ms),
        ]
        rows = [
            ("generator -> noop", "generator"),
            ("files (JSON) -> noop", "files"),
            ("kafka (JSON) -> noop", "kafka"),
            ("kafka (JSON) -> kafka exactly-once", "kafka-kafka"),
            ("generator -> kafka exactly-once", "generator-kafka"),
        ]
        only = {s.strip() for s in args.only.split(",") if s.strip()}
        rows = [r for r in rows if not only or r[1] in only]
        console.print(f"W1: running count and sum per merchant, {args.keys:,} merchants, every event emitted; RocksDB; "
                      f"about {args.max_batch:,} events per micro-batch; 2 local cores")
        table = Table(title="W1 by source and sink (each row: own process, after an unmeasured warm-up run)",
                      title_justify="left")
        broker = int((Path(kafka.dir) / "broker.pid").read_text())
        for col in ("source -> sink", "events", "batches", "wall s", "events/s", "events/s after 1st batch",
                    "peak memory", "broker CPU s"):
            table.add_column(col, justify="left" if col == "source -> sink" else "right")
        results = {}
        for name, engine in rows:
            console.print(f"  running {name} ...")
            cpu = _cpu_seconds(broker)
            r = run_child(HERE, [*common, "--engine", engine])
            assert isinstance(r, dict)
            cpu = _cpu_seconds(broker) - cpu  # the warm-up run's too
            results[engine] = r
            table.add_row(
                name, f"{r['events']:,}", str(r["batches"]), f"{r['seconds']:.1f}", f"{r['events'] / r['seconds']:,.0f}",
                f"{r['steady']:,.0f}" if r.get("steady") else "-", mb(r["peak_bytes"]), f"{cpu:.1f}",
            )
        console.print(table)
        base = results.get("generator")
        if base:
            rate = base["events"] / base["seconds"]
            for engine, what in (("kafka", "Kafka source"), ("kafka-kafka", "Kafka source and sink"),
                                 ("generator-kafka", "Kafka sink"), ("files", "file source")):
                r = results.get(engine)
                if r:
                    ratio = r["events"] / r["seconds"] / rate
                    console.print(f"{what} / generator throughput: {ratio:.2f} (costs {1 - ratio:.0%} of it)")
    finally:
        kafka.remove()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
