"""The dedup seed job on Spark (RocksDB, a real checkpoint, a restart in the middle): its
output equals the generator's unique transactions, and its state stays near what the TTL
keeps alive instead of holding every transaction seen."""

from __future__ import annotations

from datetime import timedelta

import ttl_stub
from pyspark import cloudpickle
from spark_helpers import FAST
from ttl_stub import has_ttl_handles, stub_for

from sparkstate import MemorySink
from sparkstate.connectors.generator import UpiTransactions
from sparkstate.jobs.dedup import Dedup, build
from sparkstate.runtime.savepoints.state_reader import group_metas

cloudpickle.register_pickle_by_value(ttl_stub)


class StubbedDedup(Dedup):
    """The job's function; its seen-flag in the stored TTL representation even before
    sparkstate's TTL handles exist (with them, the job's own handle)."""

    def seen_state(self, ctx, descriptor):
        return super().seen_state(ctx, descriptor) if has_ttl_handles() else stub_for(ctx, descriptor)


def test_dedup_on_spark_emits_unique_transactions_and_its_state_stops_growing(spark, checkpoint):
    # 12 s of event time (1,000 payments a second, 1 s out of order), repeats up to 1 s later,
    # an event-time TTL of 2 s (a repeat always finds its original's flag: TTL >= the delay)
    source = UpiTransactions(events=12_000, duplicates=0.05, duplicate_delay_ms=1_000, max_out_of_orderness_ms=1_000,
                             max_batch=2_000)
    sink = MemorySink()
    job = build(source, fn=StubbedDedup(timedelta(seconds=2), event_time=True)).sink(sink).with_settings(
        key_groups=8, **FAST)
    first = job.run(checkpoint_dir=checkpoint, spark=spark, until=lambda r: r.events >= 6_000)
    assert 6_000 <= first.events < 12_000
    second = job.run(checkpoint_dir=checkpoint, spark=spark)  # repeats of transactions seen before the restart
    assert second.completed and first.events + second.events == 12_000

    events = source.events_as_dicts()
    unique: dict[int, dict] = {}
    for e in events:
        unique.setdefault(e["txn_id"], e)
    rows = sink.rows()
    assert len(rows) == len(unique) < len(events)
    assert {r["txn_id"]: (r["event_time"], r["payer_id"], r["amount"]) for r in rows} == {
        t: (e["event_time"], e["payer_id"], e["amount"]) for t, e in unique.items()}

    entries = sum(m.n_keys for m in group_metas(spark, checkpoint, "rocksdb").values())
    # alive at the end, at most: first seen less than the TTL before the last batch's watermark,
    # which is at least the batch before's latest event time (2 s of events earlier) - 1 s - 1 ms
    last = max(e["event_time"] for e in events)
    alive = sum(1 for e in unique.values() if e["event_time"] + 2_000 > last - 2_000 - 1_001)
    print(f"dedup on Spark: {len(events):,} payments, {len(unique):,} unique, {entries:,} state entries at the end "
          f"(at most {alive:,} alive)")
    assert entries <= 2 * alive and entries < len(unique) / 2
