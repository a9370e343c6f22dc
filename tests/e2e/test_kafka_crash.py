"""Exactly-once from Kafka to Kafka under real crashes: a job killed with SIGKILL again and
again, restarted from its checkpoint each time, leaves in its output topic (read with
``read_committed``) the same records as a run that was never killed: no duplicate, no gap.

UPI payments (the payment generator's events) are produced into a topic of 2 partitions,
keyed by merchant; the job (``kafka_crash_job.py``, run as its own process group by
``crash.CrashLoop``) reads them with ``KafkaSource``, keeps each merchant's running count and
total (the seed job running-sum) and writes a record per payment with ``KafkaSink``
exactly-once. The kills land at a random time and held at the sink's and Spark's risky
moments: the Kafka transaction open with the batch's records and marker in it
(``sink.rows-written``), the Kafka transaction committed and Spark's commit log not written
(``sink.committed``: the replay must find the marker and write nothing), and Spark's offsets
written with nothing of the batch run (``spark.offsets-written``).

The uninterrupted run's output is known exactly without running it: each merchant's payments
are in one partition, in the order produced, with event times rising with their offsets, so
its k-th payment gives ``(merchant, k, the sum of its first k amounts)`` however the input is
cut into micro-batches. ``-s`` prints the loop's summary.
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from pathlib import Path

from crash import OFFSETS, RANDOM, SINK_DONE, SINK_TX, CrashLoop
from kafka_crash_job import sink
from test_crash_recovery import compare

from sparkstate.connectors.generator import UpiPayments
from sparkstate.connectors.kafka import protocol
from sparkstate.errors import SinkError

EVENTS = 8_000
MERCHANTS = 60
#: the killed runs read small batches (each killed long before the input ends); the final run reads the rest at once
MAX_BATCH = 300
KILLS = 4
SCRIPT = Path(__file__).with_name("kafka_crash_job.py")


def payments() -> list[dict]:
    """The generator's payments, stamped with current, strictly rising event times (the
    broker keeps records 7 days by their timestamps; no two payments share an instant)."""
    events = UpiPayments(events=EVENTS, merchants=MERCHANTS, seed=11).events_as_dicts()
    start = int(time.time() * 1000) - EVENTS
    return [{**e, "event_time": start + i} for i, e in enumerate(events)]


def expected(events: list[dict]) -> list[tuple[tuple[str, int], tuple[float]]]:
    count: dict[str, int] = defaultdict(int)
    total: dict[str, float] = defaultdict(float)
    out = []
    for e in events:
        m = e["merchant_id"]
        count[m] += 1
        total[m] += e["amount"]
        out.append(((m, count[m]), (total[m],)))
    return out


def last_batch(kafka_sink) -> callable:
    """The last batch the sink's writer committed (-1: none): while a batch's transaction is
    open, the marker topic cannot be read past it, and the last batch read before stands."""
    last = [-1]

    def read() -> int:
        try:
            top = protocol.read_top_marker(kafka_sink, timeout_s=0.5)
            last[0] = -1 if top is None else top
        except SinkError:
            pass
        return last[0]

    return read


def test_kafka_to_kafka_survives_sigkill_at_every_moment(kafka_broker, tmp_path):
    started = time.monotonic()
    source, output = kafka_broker.new_topic("payments", 2), kafka_broker.new_topic("running-sum", 2)
    events = payments()
    kafka_broker.produce(source, events, key=lambda e: e["merchant_id"])
    checkpoint = tmp_path / "checkpoint"
    args = [kafka_broker.servers, source, output, str(checkpoint), str(EVENTS)]
    loop = CrashLoop(
        [*args, str(MAX_BATCH)], checkpoint, tmp_path, last_batch(sink(kafka_broker.servers, output)),
        kills=KILLS, final_args=[*args, str(EVENTS)], moments=(RANDOM, SINK_DONE, OFFSETS, SINK_TX),
        timeout=300.0, command=[sys.executable, str(SCRIPT)],
    )
    done = loop.run()
    assert done.returncode == 0, done.stdout[-3000:]
    records = kafka_broker.read(output, committed=True)
    got = [((r["value"]["merchant_id"], r["value"]["count"]), (r["value"]["total"],)) for r in records]
    assert all(r["key"] == r["value"]["merchant_id"] for r in records)
    figures = compare(got, expected(events))
    print("\n" + loop.summary("Kafka to Kafka (running-sum, KafkaSink exactly-once)", figures))
    print(f"  records in the output topic for read_uncommitted readers: {len(kafka_broker.read(output, committed=False)):,}"
          f"; seconds in all: {time.monotonic() - started:.0f}")
    wrong = {name: figures[name] for name in ("duplicates", "gaps", "extra", "differing") if figures[name]}
    assert not wrong, f"{wrong} of {figures['rows']:,} rows"
    assert figures["rows"] == EVENTS
    assert len(loop.history) == KILLS
    assert loop.replayed, "a kill mid-batch leaves a planned batch for the restart to run again"
    assert any(k.between_sink_and_spark for k in loop.history), [vars(k) for k in loop.history]
    missed = {k.aim for k in loop.history} - {k.aim for k in loop.history if k.on_target}
    assert not missed, f"no kill landed at {sorted(missed)}: {[vars(k) for k in loop.history]}"
