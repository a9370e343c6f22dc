"""How two-input jobs map onto Spark: the figures behind docs/design/two-inputs.md.

    python benchmarks/two_inputs.py           # about 5 minutes on 2 quiet cores
    python benchmarks/two_inputs.py --quick   # a smaller smoke run

1. Broadcast state storage (no Spark): the bytes a change of the broadcast state writes when
   every key group keeps its own copy, against one shared content file plus a reference per
   key group (what sparkstate does).
2. Replicating broadcast rows to every key group: ``explode(sequence(0, K-1))`` (a projection,
   what sparkstate does) against a ``crossJoin`` with ``spark.range(K)``; both over the same
   packed rows, counted per key group.
3. The cost of the union and of broadcast rows per micro-batch: the same keyed job over UPI
   payments (key_groups 128) with no second input, with a broadcast input that brings no
   element, and with one rule every micro-batch; median micro-batch time and events/s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))


def storage(rules: int, key_groups: int) -> dict:
    from sparkstate.engine.broadcast import REF_LENGTH
    from sparkstate.engine.keygroups import GroupMeta, dumps_state

    states = {"rules": {f"rule-{i:03d}": {"name": f"rule-{i:03d}", "kind": "amount_over", "limit": 50_000.0 + i,
                                           "new_device_only": i % 2 == 0} for i in range(rules)}}
    content = len(dumps_state(states))
    meta_plain = len(GroupMeta().dumps())
    meta_ref = len(GroupMeta(broadcast="0" * REF_LENGTH).dumps())
    return {
        "rules": rules, "key_groups": key_groups, "content_bytes": content,
        "per_group_copies_bytes": content * key_groups,
        "shared_bytes": content + key_groups * (meta_ref - meta_plain),
        "ref_bytes_per_group": meta_ref - meta_plain,
    }


def replication(spark: object, rows: int, key_groups: int, repeats: int) -> dict:
    from pyspark.sql import functions as F

    from sparkstate.engine.events import EVERY_KEY_GROUP

    base = spark.range(rows).select(  # type: ignore[attr-defined]
        F.lit(EVERY_KEY_GROUP).cast("int").alias("kg"), F.lit(0).alias("part"), F.col("id").cast("int").alias("seq"),
        F.lit(None).cast("timestamp").alias("ts"), F.lit(b"x" * 200).alias("blob"),
    ).cache()
    base.count()
    groups = F.sequence(F.lit(0), F.lit(key_groups - 1))
    explode = base.select(F.explode(groups).alias("kg"), "part", "seq", "ts", "blob")
    cross = base.drop("kg").crossJoin(spark.range(key_groups).select(F.col("id").cast("int").alias("kg")))  # type: ignore[attr-defined]

    def timed(df: object) -> float:
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            df.groupBy("kg").count().collect()  # type: ignore[attr-defined]
            times.append(time.perf_counter() - t)
        return statistics.median(times)

    return {"rows": rows, "key_groups": key_groups, "explode_s": timed(explode), "cross_join_s": timed(cross)}


def job_batches(spark: object, mode: str, events: int, batch: int) -> dict:
    from sparkstate import Job, ListSource, MapStateDescriptor, NoopSink, UpiPayments, ValueStateDescriptor
    from sparkstate.api.connected import KeyedBroadcastProcessFunction
    from sparkstate.api.functions import KeyedProcessFunction

    rules = MapStateDescriptor("rules", str, float)

    class Count(KeyedProcessFunction):
        def open(self, ctx):
            self.n = ctx.get_state(ValueStateDescriptor("n", int, default=0))

        def process_element(self, p, ctx):
            self.n.update(self.n.value() + 1)
            yield {"merchant_id": p["merchant_id"], "n": self.n.value()}

    class CountWithRules(KeyedBroadcastProcessFunction):
        def open(self, ctx):
            self.n = ctx.get_state(ValueStateDescriptor("n", int, default=0))

        def process_broadcast_element(self, r, ctx):
            ctx.get_broadcast_state(rules).put(r["name"], r["limit"])

        def process_element(self, p, ctx):
            self.n.update(self.n.value() + 1)
            yield {"merchant_id": p["merchant_id"], "n": self.n.value()}

    n_batches = events // batch
    source = UpiPayments(events=events, merchants=10_000, max_batch=batch)
    job = Job(f"two-inputs-{mode}").source(source).key_by("merchant_id")
    if mode == "single":
        job = job.process(Count(), output_schema="merchant_id string, n bigint")
    else:
        per_batch = [[{"name": f"r{i % 100}", "limit": float(i)}] if mode == "rule-every-batch" else []
                     for i in range(n_batches)]
        job = (job.connect(ListSource(per_batch, "name string, limit double")).broadcast(rules)
               .process(CountWithRules(), output_schema="merchant_id string, n bigint"))
    job = job.sink(NoopSink()).with_settings(key_groups=128, trigger_interval="0 seconds")
    with tempfile.TemporaryDirectory() as cp:
        started = time.monotonic()
        result = job.run(checkpoint_dir=cp, spark=spark)
        seconds = time.monotonic() - started
    durations = [p["durationMs"]["triggerExecution"] for p in result.progress if p.get("numInputRows")]
    return {"mode": mode, "events": events, "batches": len(durations), "seconds": round(seconds, 1),
            "median_batch_ms": statistics.median(durations) if durations else None,
            "events_per_s": round(events / seconds)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    from sparkstate.runtime.session.classic import get_spark

    out: dict = {"storage": [storage(r, 128) for r in (10, 100, 1000)]}
    spark = get_spark(parallelism=2)
    replication(spark, 100, 128, 1)  # warm-up
    out["replication"] = [replication(spark, n, 128, 3) for n in ((100, 1000) if args.quick else (100, 1000, 10_000))]
    events, batch = (40_000, 10_000) if args.quick else (200_000, 20_000)
    job_batches(spark, "rule-every-batch", batch * 2, batch)  # warm-up (Python workers, class cache)
    # the modes interleaved, twice: a busy machine's noise falls on each alike
    out["batches"] = [job_batches(spark, mode, events, batch)
                      for _ in range(1 if args.quick else 2) for mode in ("single", "no-rules", "rule-every-batch")]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
