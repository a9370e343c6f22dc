"""The watermark of a job with two keyed inputs, against an independent model of the rule.

Flink: a two-input operator's watermark is the minimum of its inputs' watermarks. Spark (its
default ``min`` policy over several ``withWatermark``): the same, where an input that has not
seen an event time yet does not count, and the watermark never goes back. Each input's own
watermark is Flink's bounded-out-of-orderness one: ``max(ts) - out_of_orderness - 1``; none
exists before it passes the epoch (Spark's watermark starts at 0).
"""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from sparkstate import Job, ListSource, MemorySink, WatermarkStrategy
from sparkstate.api.connected import KeyedCoProcessFunction

MIN = -(2**63)


class Watermarks(KeyedCoProcessFunction):
    def process_element1(self, e, ctx):
        yield {"side": 1, "wm": ctx.timer_service().current_watermark()}

    def process_element2(self, e, ctx):
        yield {"side": 2, "wm": ctx.timer_service().current_watermark()}


def model(batches: list[tuple[list[int], list[int]]], d1: int, d2: int) -> list[int]:
    """The watermark each batch runs with: the one the batches before it left."""
    out, top1, top2, mark = [], None, None, MIN
    for ts1, ts2 in batches:
        out.append(mark)
        top1 = max([t for t in [top1, *ts1] if t is not None], default=None)
        top2 = max([t for t in [top2, *ts2] if t is not None], default=None)
        marks = [t - d - 1 for t, d in ((top1, d1), (top2, d2)) if t is not None]
        if marks and min(marks) > 0:
            mark = max(mark, min(marks))
    return out


def ws(ms: int) -> WatermarkStrategy:
    return WatermarkStrategy.for_bounded_out_of_orderness(timedelta(milliseconds=ms)).with_timestamp_column("ts")


@pytest.mark.parametrize("seed", range(30))
def test_the_watermark_is_the_smaller_of_the_inputs(seed):
    rnd = random.Random(seed)
    d1, d2 = rnd.choice([0, 5, 50]), rnd.choice([0, 5, 50])
    batches = [
        ([rnd.randrange(0, 2000) for _ in range(rnd.randrange(0, 4))],
         [rnd.randrange(0, 2000) for _ in range(rnd.randrange(0, 4))])
        for _ in range(rnd.randrange(1, 12))
    ]
    job = (
        Job("wm")
        .source(ListSource([[]], "k string, ts bigint", "ts"), watermark=ws(d1))
        .key_by("k")
        .connect(ListSource([[]], "m string, ts bigint", "ts"), key_by="m", watermark=ws(d2))
        .process(Watermarks(), output_schema="side int, wm bigint")
        .sink(MemorySink())
    )
    h = job.harness()
    got = []
    for ts1, ts2 in batches:
        rows = h.process_batch([{"k": "a", "ts": t} for t in ts1], second=[{"m": "a", "ts": t} for t in ts2])
        got.append({r["wm"] for r in rows})
    for seen, expected in zip(got, model(batches, d1, d2)):
        assert seen <= {expected}
