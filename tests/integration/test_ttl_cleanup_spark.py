"""TTL cleanup on Spark (RocksDB, a real checkpoint): the incremental cursor survives a restart,
and idle key groups are swept. State is read back through sparkstate's state reader.

Event-time TTL keeps the expiry decisions deterministic here (the watermark follows the
events); the background sweep's wake-ups are Spark processing-time timers."""

from __future__ import annotations

import time
from datetime import timedelta

import ttl_stub
from pyspark import cloudpickle
from spark_helpers import FAST, write_json_files
from ttl_stub import stub_for

from sparkstate import FileSource, Job, KeyedProcessFunction, ListSource, MemorySink, ValueStateDescriptor
from sparkstate.api.time import WatermarkStrategy
from sparkstate.api.ttl import StateTtlConfig
from sparkstate.runtime.savepoints.state_frames import read_checkpoint
from sparkstate.runtime.savepoints.state_reader import group_metas

# Spark's Python workers cannot import modules from tests/: ship the stub by value
cloudpickle.register_pickle_by_value(ttl_stub)

SCHEMA = "k string, op string, ts bigint"


class Seen(KeyedProcessFunction):
    """``op`` w writes a TTL'd value (event-time TTL of 1 s); p only touches the key."""

    def __init__(self, ttl: StateTtlConfig) -> None:
        self.ttl = ttl

    def open(self, ctx):
        self.seen = stub_for(ctx, ValueStateDescriptor("seen", bool).enable_time_to_live(self.ttl))
        self.touches = ctx.get_state(ValueStateDescriptor("touches", int, default=0))

    def process_element(self, ev, ctx):
        if ev["op"] == "w":
            self.seen.update(True)
        else:
            self.touches.update(self.touches.value() + 1)
        return []


def _job(ttl: StateTtlConfig, batches: list[list[dict]], key_groups: int) -> Job:
    watermark = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(0)).with_timestamp_column("ts")
    return (
        Job("ttl-cleanup").source(ListSource(batches, SCHEMA, "ts", end_of_input=False), watermark=watermark)
        .key_by("k").process(Seen(ttl), output_schema="k string").sink(MemorySink())
        .with_settings(key_groups=key_groups, **FAST)
    )


def _keys(spark, checkpoint) -> set:
    return {key for _, key, _ in read_checkpoint(checkpoint, spark=spark).records()}


WRITES = [{"k": f"k{i:02d}", "op": "w", "ts": 1_000} for i in range(30)]


def hot(ts: int) -> list[dict]:
    return [{"k": "hot", "op": "p", "ts": ts}]


def test_the_incremental_cursor_walks_on_after_a_restart(spark, checkpoint):
    ttl = StateTtlConfig.new_builder(timedelta(seconds=1)).use_event_time().cleanup_incrementally(4) \
        .disable_cleanup_in_background().build()
    # one key group; batch 1 checks k00-k03 before they expire (watermark 999); batch 2
    # (watermark 9,999) removes the next four
    first = [WRITES, hot(10_000), hot(10_001)]  # k04-k07 go; the cursor stops at k08
    assert _job(ttl, first, key_groups=1).run(checkpoint_dir=checkpoint, spark=spark).completed
    # the restarted run goes on from the cursor (k08...), not from the group's start (k00)
    second = [*first, hot(10_002)]
    assert _job(ttl, second, key_groups=1).run(checkpoint_dir=checkpoint, spark=spark).completed
    keys = _keys(spark, checkpoint)
    assert len(keys) == 23 and {"k00", "k03", "k12"} <= keys and not {"k04", "k11"} & keys


def test_idle_key_groups_are_swept_in_the_background(spark, checkpoint, tmp_path):
    ttl = StateTtlConfig.new_builder(timedelta(seconds=1)).use_event_time() \
        .cleanup_in_background(timedelta(milliseconds=500)).build()
    # one file, one batch: 30 TTL'd keys over four key groups, and a later event that moves
    # the watermark past their expiry; then no input, only the sweeps' wake-ups
    write_json_files(tmp_path / "in", [[*WRITES, *hot(10_000)]])
    watermark = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(0)).with_timestamp_column("ts")
    job = (
        Job("ttl-sweep").source(FileSource(str(tmp_path / "in"), SCHEMA, time_column="ts"), watermark=watermark)
        .key_by("k").process(Seen(ttl), output_schema="k string").sink(MemorySink())
        .with_settings(key_groups=4, **FAST)
    )
    mark: dict[str, float] = {}

    def swept(result) -> bool:
        """Two batches have committed since every sweep was due (0.5 s after the input's
        batch; 1 s here), so the second of them started after it: each group has been woken."""
        if result.events < len(WRITES) + 1:
            return False
        now = time.monotonic()
        if now - mark.setdefault("input", now) < 1.0:
            return False
        return len(result.progress) > mark.setdefault("batches", len(result.progress)) + 1

    job.run(checkpoint_dir=checkpoint, spark=spark, until=swept, timeout=120)
    metas = group_metas(spark, checkpoint, "rocksdb")
    # every idle key group lost its expired keys: only "hot" (no TTL'd state) is left
    assert len(metas) == 4 and sum(m.n_keys for m in metas.values()) == 1
    assert all(m.sweep_at is None for m in metas.values())  # nothing TTL'd left: no more wake-ups
