"""The Kafka-to-Kafka job of tests/e2e/test_crash_recovery.py, run as its own process (which the
test kills): ``python kafka_crash_job.py SERVERS SOURCE_TOPIC OUTPUT_TOPIC CHECKPOINT EVENTS MAX_BATCH``.

UPI payments from ``SOURCE_TOPIC`` (``KafkaSource``, JSON) through the seed job running-sum
(per merchant: running count and total, a row per payment) into ``OUTPUT_TOPIC``
(``KafkaSink`` exactly-once, keyed by merchant). The run ends once a committed batch has read
the source topic's ``EVENTS`` records; a killed run is started again on the same checkpoint.
"""

from __future__ import annotations

import json
import sys
import time
from collections import defaultdict
from collections.abc import Callable

from sparkstate import Job, KafkaSink, KafkaSource
from sparkstate.jobs.running_sum import OUTPUT, RunningSum

JOB = "kafka-crash"
SCHEMA = "event_time timestamp, merchant_id string, payer_id string, amount double, device string"


def sink(servers: str, topic: str) -> KafkaSink:
    return KafkaSink(servers, topic, key="merchant_id").for_job(JOB)


#: the payments the crash test produces into the source topic
KAFKA_EVENTS = 8_000


def kafka_payments() -> list[dict]:
    """The generator's payments for the crash test, stamped with current, strictly rising event
    times (the broker keeps records 7 days by their timestamps; no two payments share an instant)."""
    from sparkstate.connectors.generator import UpiPayments

    events = UpiPayments(events=KAFKA_EVENTS, merchants=60, seed=11).events_as_dicts()
    start = int(time.time() * 1000) - KAFKA_EVENTS
    return [{**e, "event_time": start + i} for i, e in enumerate(events)]


def kafka_expected(events: list[dict]) -> list[tuple[tuple[str, int], tuple[float]]]:
    """The uninterrupted run's rows as ``((merchant, count), (total,))``."""
    count: dict[str, int] = defaultdict(int)
    total: dict[str, float] = defaultdict(float)
    out = []
    for e in events:
        m = e["merchant_id"]
        count[m] += 1
        total[m] += e["amount"]
        out.append(((m, count[m]), (total[m],)))
    return out


def kafka_last_batch(kafka_sink: KafkaSink) -> Callable[[], int]:
    """The last batch the sink's writer committed (-1: none): while a batch's transaction is
    open, the marker topic cannot be read past it, and the last batch read before stands."""
    from sparkstate.connectors.kafka import protocol
    from sparkstate.errors import SinkError

    last = [-1]

    def read_last() -> int:
        try:
            top = protocol.read_top_marker(kafka_sink, timeout_s=0.5)
            last[0] = -1 if top is None else top
        except SinkError:
            pass
        return last[0]

    return read_last


def read(progress: dict) -> int:
    """Records the query has read in all, from a progress report's end offsets."""
    total = 0
    for source in progress.get("sources") or ():
        end = source.get("endOffset")
        end = json.loads(end) if isinstance(end, str) else end
        for partitions in ((end or {}).get("topics") or {}).values():
            total += sum(int(n) for n in partitions.values())
    return total


def main(servers: str, source: str, output: str, checkpoint: str, events: int, max_batch: int) -> int:
    job = (
        Job(JOB)
        .source(KafkaSource(servers, source, SCHEMA, max_records_per_batch=max_batch))
        .key_by("merchant_id")
        .process(RunningSum(), output_schema=OUTPUT)
        .sink(sink(servers, output))
        .with_settings(key_groups=4, parallelism=1, trigger_interval="200 milliseconds")
    )
    started = time.monotonic()
    result = job.run(
        checkpoint_dir=checkpoint, until=lambda r: bool(r.progress) and read(r.progress[-1]) >= events,
        on_progress=lambda p: print(f"{time.monotonic() - started:.1f}s batch {p.get('batchId')}: "
                                    f"{p.get('numInputRows')} rows", flush=True),
    )
    print(f"batches {result.batches}, events {result.events}, warnings {result.warnings}")
    return 0


if __name__ == "__main__":
    servers, source, output, checkpoint, events, max_batch = sys.argv[1:7]
    sys.exit(main(servers, source, output, checkpoint, int(events), int(max_batch)))
