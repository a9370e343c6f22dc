"""State TTL on Spark: the same rows as the harness, for processing time and event time, across
a restart from the checkpoint in the middle.

Processing time on Spark is the batch's timestamp that Spark records in its offset log (the
function emits ``current_processing_time()`` and the test reads the log), so the harness,
driven with those timestamps, must decide every expiry the same. The broad, randomised checks
of the rule are on the harness (tests/unit/api/test_state_ttl.py).
"""

from __future__ import annotations

import pytest
from spark_helpers import FAST

from sparkstate import (
    Job,
    KeyedProcessFunction,
    ListSource,
    ListStateDescriptor,
    MapStateDescriptor,
    MemorySink,
    StateTtlConfig,
    ValueStateDescriptor,
    WatermarkStrategy,
)
from sparkstate.runtime.checkpoint.directory import CheckpointDir
from sparkstate.runtime.savepoints.take import batch_timestamp

OUTPUT = "k string, v bigint, pt bigint, last bigint, last_et bigint, recent string, seen string"
TTL_MS = 250


class TtlProbe(KeyedProcessFunction):
    """Processing-time TTLs (a ValueState, a MapState refreshed on read) and event-time TTLs
    (a ValueState, a ListState returning expired elements); each event emits what they hold,
    then writes its value to each."""

    def open(self, ctx):
        # no background sweep: it may clean an idle key group in a batch of Spark's own (a
        # no-data batch for a wake-up) that the harness below is not fed; the sweep has its
        # own test (test_ttl_cleanup_spark.py). Write-back cleanup stays, as everywhere.
        def new(ttl):
            return StateTtlConfig.new_builder(ttl).disable_cleanup_in_background()

        self.last = ctx.get_state(ValueStateDescriptor("last", int).enable_time_to_live(new(TTL_MS).build()))
        self.seen = ctx.get_map_state(MapStateDescriptor("seen", int, int).enable_time_to_live(
            new(TTL_MS).update_ttl_on_read_and_write().build()))
        self.last_et = ctx.get_state(ValueStateDescriptor("last_et", int).enable_time_to_live(
            new(60).use_event_time().build()))
        self.recent = ctx.get_list_state(ListStateDescriptor("recent", int).enable_time_to_live(
            new(60).use_event_time().return_expired_if_not_cleaned_up().build()))

    def process_element(self, e, ctx):
        pt = ctx.timer_service().current_processing_time()
        yield (ctx.get_current_key(), e["v"], pt, self.last.value(), self.last_et.value(), repr(self.recent.get()),
               repr(sorted(self.seen.items())))
        for state in (self.last, self.last_et):
            state.update(e["v"])
        self.recent.add(e["v"])
        self.seen.put(e["v"] % 3, e["v"])


def _job(batches, sink, backend="rocksdb"):
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(0).with_timestamp_column("ts")
    source = ListSource(batches, "k string, v bigint, ts bigint", "ts")
    return (Job("ttl").source(source, watermark=strategy).key_by("k")
            .process(TtlProbe(), output_schema=OUTPUT).sink(sink).with_settings(**FAST, state_backend=backend))


def _batches(n, base=1_000_000):
    """Key a in every batch, b in every third: b's entries outlive some gaps and not others."""
    return [[{"k": k, "v": 10 * i + j, "ts": base + 40 * i + j} for j, k in enumerate("ab") if k == "a" or i % 3 == 0]
            for i in range(n)]


@pytest.mark.parametrize("backend", ["rocksdb", "hashmap"])
def test_ttl_on_spark_decides_as_the_harness_across_a_restart(spark, checkpoint, backend):
    """Both backends: the hashmap backend (applyInPandasWithState) takes its processing time from
    Spark's group state, the RocksDB backend (transformWithState) from its timer values."""
    batches = _batches(6)
    sink = MemorySink()
    assert _job(batches[:3], sink, backend).run(checkpoint_dir=checkpoint, spark=spark).completed
    assert _job(batches, sink, backend).run(checkpoint_dir=checkpoint, spark=spark).completed
    cp = CheckpointDir.open(checkpoint)
    recorded = {batch_timestamp(cp, b) for b in cp.committed_batches()}
    # every row saw its batch's recorded timestamp as processing time, one per list batch
    seen = sorted({(r["v"] // 10, r["pt"]) for r in sink.rows()})
    assert [i for i, _ in seen] == list(range(6)) and {t for _, t in seen} <= recorded
    times = [t for _, t in seen]
    # the harness at those processing times (the watermark follows the events, as on Spark)
    h = _job(batches, MemorySink()).harness()
    expected = [row for batch, t in zip(batches, times) for row in h.process_batch(batch, processing_time=t)]
    assert sorted(sink.rows(), key=lambda r: r["v"]) == sorted(expected, key=lambda r: r["v"])
    # processing time: the restart lies beyond the TTL, so the first batch after it finds
    # nothing; event time: a's values (40 ms apart) outlive the 60 ms TTL, b's (120 ms) do not
    assert times[3] - times[2] > TTL_MS
    assert all(r["last"] is None and r["seen"] == "[]" for r in expected if r["v"] // 10 == 3)
    assert all(r["last_et"] is not None for r in expected if r["k"] == "a" and r["v"] >= 10)
    assert all(r["last_et"] is None and r["recent"] != "[]" for r in expected if r["k"] == "b" and r["v"] >= 10)
