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
memory of the measured process with its JVM and Python workers (the broker not counted). The
measured run's CPU seconds are shown apart: the job's (that process, its JVM and Python
workers, from ``/proc``) and the broker's, which shares the machine's cores with the job; so
the sink's own cost shows as the job CPU of ``kafka -> kafka`` over ``kafka -> noop`` (and of
``generator -> kafka`` over ``generator -> noop``). The Kafka source is compared with the JSON
file source of the same run: the same events, read the same way but for where the bytes come
from.
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
    from sparkstate.runtime.session.classic import get_spark

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


def _tree_cpu_seconds(root: int) -> float:
    """CPU seconds of ``root`` and every process below it (the JVM, Python workers), with the
    CPU of their children that have ended (``/proc``'s cutime and cstime)."""
    from sparkstate.metrics.memory import _children

    tree, total, stack = _children(), 0.0, [root]
    while stack:
        pid = stack.pop()
        try:
            total += _cpu_seconds(pid, children=True)
        except (OSError, ValueError, IndexError):
            pass
        stack.extend(tree.get(pid, ()))
    return total


def child_throughput(args: argparse.Namespace) -> dict:
    import os

    spark = _session()

    def once(events: int, ckpt: Path) -> dict:
        job = _job(args, events, ckpt)
        if args.engine.startswith("generator"):
            return _figures(job.run(checkpoint_dir=ckpt, spark=spark))
        # files and topics are unbounded sources: run until the events are read
        result = job.run(checkpoint_dir=ckpt, spark=spark, until=lambda r: r.events >= events, timeout=3600)
        return _figures(result)

    cpu: dict[str, float] = {}

    def measured(events: int, ckpt: Path) -> dict:
        # the measured run's CPU (the warm-up's not): the job's processes, and the broker's beside them
        if "warmup" not in ckpt.name:
            cpu["job"], cpu["broker"] = -_tree_cpu_seconds(os.getpid()), -_broker_cpu(args)
        result = once(events, ckpt)
        if "warmup" not in ckpt.name:
            cpu["job"] += _tree_cpu_seconds(os.getpid())
            cpu["broker"] += _broker_cpu(args)
        return result

    result = measure(measured, args.events, args.warmup)
    return {**result, "job_cpu": cpu["job"], "broker_cpu": cpu["broker"]}


def _broker_cpu(args: argparse.Namespace) -> float:
    return _cpu_seconds(args.broker_pid) if args.broker_pid else 0.0


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


def _cpu_seconds(pid: int, children: bool = False) -> float:
    """User and system CPU seconds process ``pid`` has used (Linux ``/proc``); with
    ``children``, also those of its children that ended and were waited for."""
    import os

    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    ticks = int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if children else 0)
    return ticks / os.sysconf("SC_CLK_TCK")



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
    parser.add_argument("--broker-pid", type=int, default=0, help=argparse.SUPPRESS)
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
        common += ["--broker-pid", str(broker)]
        for col in ("source -> sink", "events", "batches", "wall s", "events/s", "events/s after 1st batch",
                    "peak memory", "job CPU s", "broker CPU s"):
            table.add_column(col, justify="left" if col == "source -> sink" else "right")
        results = {}
        for name, engine in rows:
            console.print(f"  running {name} ...")
            r = run_child(HERE, [*common, "--engine", engine])
            assert isinstance(r, dict)
            results[engine] = r
            table.add_row(
                name, f"{r['events']:,}", str(r["batches"]), f"{r['seconds']:.1f}", f"{r['events'] / r['seconds']:,.0f}",
                f"{r['steady']:,.0f}" if r.get("steady") else "-", mb(r["peak_bytes"]), f"{r['job_cpu']:.1f}",
                f"{r['broker_cpu']:.1f}",
            )
        console.print(table)
        console.print("job CPU s: the measured run's processes (driver, JVM, Python workers); broker CPU s: the broker's "
                      "during that run. Both share the machine's cores.")
        rates = {e: r["events"] / r["seconds"] for e, r in results.items()}
        if "files" in rates and "kafka" in rates:
            ratio = rates["kafka"] / rates["files"]
            console.print(f"Kafka source / JSON file source throughput: {ratio:.2f} ({ratio - 1:+.0%}); peak memory "
                          f"{mb(results['kafka']['peak_bytes'])} against {mb(results['files']['peak_bytes'])}; job CPU per "
                          f"1,000,000 events {results['kafka']['job_cpu'] / results['kafka']['events'] * 1e6:.1f} s against "
                          f"{results['files']['job_cpu'] / results['files']['events'] * 1e6:.1f} s")
        for sink, source in (("kafka-kafka", "kafka"), ("generator-kafka", "generator")):
            if sink in results and source in results:
                a, b = results[sink], results[source]
                per = 1e6 / a["events"]
                console.print(
                    f"exactly-once sink ({sink} against {source}): job CPU {(a['job_cpu'] - b['job_cpu']) * per:+.1f} s and "
                    f"broker CPU {(a['broker_cpu'] - b['broker_cpu']) * per:+.1f} s per 1,000,000 events")
        base = rates.get("generator")
        if base:
            for engine, what in (("kafka", "Kafka source"), ("kafka-kafka", "Kafka source and sink"),
                                 ("generator-kafka", "Kafka sink"), ("files", "file source")):
                if engine in rates:
                    ratio = rates[engine] / base
                    console.print(f"{what} / generator throughput: {ratio:.2f} (costs {1 - ratio:.0%} of it)")
    finally:
        kafka.remove()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
