"""fraud-detection on Spark with a rules folder: a rule file added while the job runs applies
from the micro-batch that reads it, through a restart from the checkpoint, exactly as on the
harness fed the same micro-batches."""

from __future__ import annotations

import json
import os

from spark_helpers import FAST, same_rows

from sparkstate import MemorySink
from sparkstate.jobs import JOBS
from sparkstate.jobs.fraud_detection import SEED_RULE, rules_source
from sparkstate.runtime.io.sources import source_offset

BIG = {"rule_id": "big", "min_amount": 3000.0, "action": "alert"}


def _write_rule(folder, name, rule):
    staging = folder.parent / f"{name}.tmp"
    staging.write_text(json.dumps(rule) + "\n")
    os.replace(staging, folder / name)  # complete when it appears


def test_rules_folder_rule_added_mid_run_and_restart(spark, checkpoint, tmp_path):
    folder = tmp_path / "rules"
    folder.mkdir()
    _write_rule(folder, "seed.json", SEED_RULE)
    os.utime(folder / "seed.json", (1_700_000_000, 1_700_000_000))
    events, max_batch = 4_000, 1_000
    job = JOBS["fraud-detection"].job(rules=rules_source(str(folder)), events=events, fraud=0.004, seed=5,
                                      max_batch=max_batch)
    sink = MemorySink()
    job = job.sink(sink).with_settings(**FAST)
    # the function has no timers, so the payments end without the end-of-input marker
    end = job.source_spec.end_offset(marker=False)
    progress: list[dict] = []

    def after_batch(p: dict) -> None:
        progress.append(p)
        if p["batchId"] == 0:
            _write_rule(folder, "big.json", BIG)  # read by a later micro-batch of this run

    first = job.run(checkpoint_dir=checkpoint, spark=spark, on_progress=after_batch, timeout=240,
                    until=lambda r: r.batches >= 2)
    assert first.batches >= 2
    # the restart resumes the payments and the broadcast state (the rules are not read again)
    reached = lambda r: bool(r.progress) and (source_offset(r.progress[-1]["sources"][0]) or 0) >= end  # noqa: E731
    second = job.run(checkpoint_dir=checkpoint, spark=spark, on_progress=progress.append, timeout=240, until=reached)
    assert second.batches >= 1

    # the harness, fed the micro-batches Spark ran: the payments of each, and the rules it read
    payments = job.source_spec.events_as_dicts()
    rules_read = {p["batchId"]: p["sources"][-1]["numInputRows"] for p in progress}
    assert sum(rules_read.values()) == 2 and rules_read[0] == 1  # seed.json first, big.json later
    big_batch = next(b for b, n in rules_read.items() if n and b > 0)
    h = job.harness(max_event_time_ahead=None)
    expected, start = [], 0
    for p in sorted(progress, key=lambda p: p["batchId"]):
        stop = min(source_offset(p["sources"][0]) or start, events)
        rules = [SEED_RULE] if p["batchId"] == 0 else [BIG] if p["batchId"] == big_batch else []
        expected += h.process_batch(payments[start:stop], broadcast=rules)
        start = stop
    assert start == events
    got = sink.rows()
    same_rows(got, expected)
    assert {r["rule"] for r in got} >= {"velocity", "amount-spike", SEED_RULE["rule_id"], "big"}
    # the rule applies from its batch on, after the restart too (from the checkpoint's broadcast state)
    assert not any(r["rule"] == "big" for b in range(big_batch) for r in sink.batches.get(b, []))
    after_restart = [p["batchId"] for p in second.progress]
    assert any(r["rule"] == "big" for b in after_restart for r in sink.batches.get(b, []))
    injected = {f.payer_id for f in job.source_spec.injected()}
    assert injected <= {r["payer_id"] for r in got}
