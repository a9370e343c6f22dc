"""The Kafka sink's start-up read of its batch markers: how long ``read_part_tops`` (what the
driver runs before batch 0) takes over a marker topic of ``--markers`` records.

    python benchmarks/kafka_markers.py                     # 1,000,000 markers
    python benchmarks/kafka_markers.py --markers 100000    # a smaller smoke run

The broker is a local noida-db (``scripts/kafka.sh``, started in a temporary folder and removed
at the end). The markers are those of 8 parts of two writers, in turn, as a compacted marker
topic holds them before its cleaning; the read is timed twice (wall and CPU seconds of this
process, the client's own work; the broker shares the machine's cores).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markers", type=int, default=1_000_000)
    args = parser.parse_args()

    from confluent_kafka import Producer
    from kafka_server import LocalKafka

    from sparkstate.connectors.kafka import protocol
    from sparkstate.connectors.kafka.sink import KafkaSink

    broker = LocalKafka()
    try:
        broker.start()
        sink = KafkaSink(broker.servers, "out", marker_topic=broker.new_topic("markers")).for_job("job")
        p = Producer({"bootstrap.servers": broker.servers, "linger.ms": 20, "queue.buffering.max.messages": 1_000_000})
        for i in range(args.markers):
            part = i % 8
            writer = sink.writer(part) if i % 2 == 0 else f"other@out/p{part}"
            value = json.dumps({"writer": writer, "batch": i // 8, "rows": 100, "topic": "out"}).encode()
            while True:
                try:
                    p.produce(sink.marker_topic, value, writer.encode())
                    break
                except BufferError:
                    p.poll(0.05)
        assert p.flush(300) == 0
        for _ in range(2):
            before, start = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
            tops = protocol.read_part_tops(sink)
            after = resource.getrusage(resource.RUSAGE_SELF)
            cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
            print(f"{args.markers:,} markers: read_part_tops {time.monotonic() - start:.2f} s, {cpu:.2f} s of CPU; "
                  f"tops {tops}")
    finally:
        broker.remove()


if __name__ == "__main__":
    main()
