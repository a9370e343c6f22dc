"""Broadcast-state benchmark: fraud-detection with 100 rules and a rule update every micro-batch.

    python benchmarks/broadcast.py           # 2,000,000 payments
    python benchmarks/broadcast.py --quick   # 200,000 payments

The job: ``sparkstate.jobs.fraud_detection`` keyed by payer over ``FraudPayments`` (1,000,000
payers, 0.001 injected fraud patterns per payment): velocity and amount spike in keyed state
(profile with a 90-day TTL, recent payments 24 hours) and the broadcast rules. The rules input
is a list source replayed by micro-batch: the first micro-batch brings 100 rules, every later
one an update of one of them, so the broadcast state changes in every micro-batch. RocksDB
state store, a real checkpoint directory, noop sink, micro-batches of ``--max-batch`` payments.

Rows, each in its own process (an unmeasured warm-up run, then the measured run with its peak
resident memory: driver, JVM and Python workers):

* ``fraud-detection, 100 rules``: the job as above;
* ``keyed part only (no broadcast input)``: the same payments through ``PayerChecks`` (velocity
  and spike, the same keyed state) in a job with one input: what the broadcast input costs.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from bench_common import measure, run_child

HERE = Path(__file__).resolve()
RULES = 100


def _session():
    from sparkstate.runtime.session.classic import get_spark

    return get_spark(parallelism=2, log_file=Path(tempfile.gettempdir()) / "sparkstate-bench-broadcast.log")


def rule_batches(rules: int, updates: int) -> list[list[dict]]:
    """The rules input: ``rules`` rules, then one update per micro-batch (a new amount for rule
    ``i % rules``). The amounts lie between 10,000 and 200,000, so a few rules fire."""

    def rule(i: int, version: int) -> dict:
        return {"rule_id": f"r{i:03d}", "min_amount": 10_000.0 + (i * 1_900 + version * 37) % 190_000,
                "new_device": i % 2 == 0, "action": "block" if i % 5 == 0 else "alert"}

    return [[rule(i, 0) for i in range(rules)], *([rule(u % rules, u)] for u in range(1, updates + 1))]


def _job(events: int, max_batch: int, engine: str, rules: int):
    from sparkstate import NoopSink
    from sparkstate.connectors.generator import FraudPayments
    from sparkstate.connectors.sources import ListSource
    from sparkstate.job import Job
    from sparkstate.jobs.fraud_detection import OUTPUT, RULE_SCHEMA, PayerChecks, build, payment_watermark

    gen = FraudPayments(events=events, max_batch=max_batch, seed=11)
    if engine == "keyed":
        job = Job("fraud-keyed-only").source(gen, watermark=payment_watermark(gen)).key_by("payer_id").process(
            PayerChecks(), output_schema=OUTPUT)
    else:
        # the rules, then an update with each later micro-batch of payments (a run ends once
        # both inputs have been read: more rule batches would add micro-batches without payments)
        updates = -(-events // max_batch) - 1
        source = ListSource(rule_batches(rules, updates), schema=RULE_SCHEMA, end_of_input=False, name="rules")
        job = build(gen, rules=source)
    return job.sink(NoopSink()).with_settings(trigger_interval="0 seconds")


def _run(spark, events: int, max_batch: int, engine: str, rules: int, ckpt: Path) -> dict:
    result = _job(events, max_batch, engine, rules).run(checkpoint_dir=ckpt, spark=spark)
    return {"events": result.events, "seconds": result.seconds, "batches": result.batches,
            "steady": result.steady_events_per_second}


def child(args: argparse.Namespace) -> dict:
    spark = _session()
    return measure(lambda n, ckpt: _run(spark, n, args.max_batch, args.engine, args.rules, ckpt), args.events, args.warmup)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--max-batch", type=int, default=100_000, help="payments per micro-batch")
    parser.add_argument("--rules", type=int, default=RULES)
    parser.add_argument("--warmup", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true", help="200,000 payments, 20,000 warm-up")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--engine", default="broadcast", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return
    if args.quick:
        args.events, args.warmup, args.max_batch = 200_000, 20_000, 20_000

    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False, width=max(130, Console().width))
    console.print(
        f"fraud-detection: {args.events:,} payments (1,000,000 payers), {args.rules} rules, a rule update every "
        f"micro-batch of {args.max_batch:,} payments; 2 local cores; RocksDB; noop sink"
    )
    common = ["--events", str(args.events), "--max-batch", str(args.max_batch), "--rules", str(args.rules),
              "--warmup", str(args.warmup)]
    table = Table(title="Broadcast state (each row: own process, after an unmeasured warm-up run)", title_justify="left")
    for col in ("job", "events", "batches", "wall s", "events/s", "events/s after 1st batch", "peak memory"):
        table.add_column(col, justify="left" if col == "job" else "right")
    results = {}
    for name, engine in ((f"fraud-detection, {args.rules} rules", "broadcast"),
                         ("keyed part only (no broadcast input)", "keyed")):
        console.print(f"  running {name} ...")
        r = results[engine] = run_child(HERE, [*common, "--engine", engine])
        assert isinstance(r, dict)
        table.add_row(name, f"{r['events']:,}", f"{r['batches']:,}", f"{r['seconds']:.1f}",
                      f"{r['events'] / r['seconds']:,.0f}", f"{r['steady']:,.0f}" if r.get("steady") else "-",
                      f"{r['peak_bytes'] / 2**20:,.1f} MB")
    console.print(table)
    full, keyed = results["broadcast"], results["keyed"]
    console.print(f"the broadcast input and {args.rules} rules cost {(full['seconds'] / keyed['seconds'] - 1) * 100:+.1f}% "
                  "time against the keyed part alone")


if __name__ == "__main__":
    main()
