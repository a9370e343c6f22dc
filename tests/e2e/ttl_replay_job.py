"""A small job with a processing-time TTL, run as its own process by tests/e2e/test_ttl_replay.py
(which kills it): ``python ttl_replay_job.py OUT CHECKPOINT``.

Its sink (``foreachBatch``) appends every attempt at a batch to ``OUT/attempts.jsonl`` (the
rows, and the wall clock), then passes the test fault point ``sink.rows-written`` (the state
of the batch is committed, the sink's is not), then commits the batch as ``OUT/batch-N.json``.
"""

from __future__ import annotations

import json
import os
import sys
import time

from sparkstate import (
    ForeachBatchSink,
    Job,
    KeyedProcessFunction,
    ListSource,
    StateTtlConfig,
    ValueStateDescriptor,
)
from sparkstate.fault_points import SINK_ROWS_WRITTEN, fault_point

TTL_MS = 20_000
BATCHES = [[{"k": k, "v": 10 * i + j} for j, k in enumerate("abc")] for i in range(4)]
OUTPUT = "k string, v bigint, pt bigint, last bigint"


class LastSeen(KeyedProcessFunction):
    """Emits the key's previous value while it lives (a TTL of 20 s), and the processing time."""

    def open(self, ctx):
        ttl = StateTtlConfig.new_builder(TTL_MS).build()
        self.last = ctx.get_state(ValueStateDescriptor("last", int).enable_time_to_live(ttl))

    def process_element(self, e, ctx):
        yield (ctx.get_current_key(), e["v"], ctx.timer_service().current_processing_time(), self.last.value())
        self.last.update(e["v"])


def job(out: str | None = None) -> Job:
    def write(df, batch_id):
        rows = [r.asDict() for r in df.collect()]
        with open(os.path.join(out, "attempts.jsonl"), "a") as f:
            f.write(json.dumps({"batch": batch_id, "rows": rows, "wall_ms": int(time.time() * 1000)}) + "\n")
        fault_point(SINK_ROWS_WRITTEN)
        tmp = os.path.join(out, f".batch-{batch_id}.tmp")
        with open(tmp, "w") as f:
            json.dump(rows, f)
        os.replace(tmp, os.path.join(out, f"batch-{batch_id}.json"))

    return (Job("ttl-replay").source(ListSource(BATCHES, "k string, v bigint")).key_by("k")
            .process(LastSeen(), output_schema=OUTPUT).sink(ForeachBatchSink(write))
            .with_settings(trigger_interval="1 second", parallelism=2))


if __name__ == "__main__":
    out, checkpoint = sys.argv[1], sys.argv[2]
    result = job(out).run(checkpoint_dir=checkpoint)
    sys.exit(0 if result.completed else 1)
