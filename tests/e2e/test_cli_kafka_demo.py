"""The README's Kafka demo as a user runs it: `sparkstate produce` fills a topic of the test
broker (noida-db, a Kafka-protocol broker), `sparkstate run running-sum` reads it and writes
its output to another topic in Kafka transactions, with SASL credentials in both URLs."""

from __future__ import annotations

import re
import uuid
from collections import Counter

from test_cli_runs import interrupted, sparkstate

from sparkstate.jobs import get_job

EVENTS = 8_000
MERCHANTS = 40
SECRET = "KafkaPw-e2e"


def test_produce_then_run_kafka_to_kafka_equals_the_job_on_the_generator(tmp_path, kafka_broker):
    source, output = f"payments-{uuid.uuid4().hex[:8]}", f"totals-{uuid.uuid4().hex[:8]}"
    # the test broker takes any SASL PLAIN user: the URLs carry a password as a user's would
    base = f"kafka://app:{SECRET}@{kafka_broker.servers}"
    produced = sparkstate(tmp_path, "produce", f"{base}/{source}", "--events", str(EVENTS), "--merchants",
                          str(MERCHANTS), "--partitions", "2", "--create")
    assert produced.returncode == 0, produced.stderr
    assert f"wrote {EVENTS:,} events" in produced.stdout

    def all_read(out: str) -> bool:  # the progress lines' running total of events
        totals = [int(n.replace(",", "")) for n in re.findall(r"ev in [^|]*\| ([\d,]+) \|", out)]
        return bool(totals) and totals[-1] >= EVENTS

    run = interrupted(tmp_path, all_read, "run", "running-sum", "--source", f"{base}/{source}?max_records=5000",
                      "--sink", f"{base}/{output}?key=merchant_id&create=true&partitions=2", timeout=120)
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    out = " ".join(run.stdout.split())
    servers = kafka_broker.servers
    assert (f"source: kafka {servers}/{source} (json values) (exactly-once: replayable (per-partition Kafka offsets "
            "in the checkpoint))") in out
    assert f"sink: kafka {servers}/{output} (json, key merchant_id, exactly-once: transactions, read_committed readers)" \
        in out
    assert f"output: Kafka topic {output}; readers with isolation.level=read_committed see each batch once" in out
    assert (tmp_path / ".sparkstate" / f"running-sum-kafka-{source}" / "checkpoint" / "sparkstate.json").exists()

    # read_committed readers see exactly the rows of the same job on the generator's events
    rows = kafka_broker.read(output, committed=True)
    assert all(r["key"] == r["value"]["merchant_id"] for r in rows)
    job = get_job("running-sum").job(events=EVENTS, merchants=MERCHANTS)
    harness = job.harness()
    expected = [row for event in job.source_spec.events_as_dicts() for row in harness.process_element(event)]
    assert Counter((r["value"]["merchant_id"], r["value"]["count"], r["value"]["total"]) for r in rows) == Counter(
        (r["merchant_id"], r["count"], r["total"]) for r in expected)
    assert len(rows) == EVENTS

    # the password is in no line printed and no file the run left (checkpoint, offsets, Spark's log)
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name == "spark.log" for p in files) and any(p.parent.name == "offsets" for p in files)
    for text in (produced.stdout, produced.stderr, run.stdout, run.stderr):
        assert SECRET not in text
    leaked = [p for p in files if SECRET.encode() in p.read_bytes()]
    assert not leaked, f"the password was written to {leaked}"
