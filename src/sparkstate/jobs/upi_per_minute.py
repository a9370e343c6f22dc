"""UPI payments per merchant per minute (seed 004): count and sum in 1-minute tumbling windows.

Event time comes from ``event_time`` with 5 seconds of out-of-orderness. Built-in aggregates
only, so it can also run natively on Spark SQL with `--window-path native` (`sparkstate explain upi-per-minute`).
"""

from __future__ import annotations

from datetime import timedelta

from sparkstate.api import agg
from sparkstate.api.time import WatermarkStrategy
from sparkstate.api.windows import TumblingEventTimeWindows
from sparkstate.connectors.generator import UpiPayments
from sparkstate.connectors.sinks import NoopSink
from sparkstate.job import Job
from sparkstate.jobs.registry import SeedJob


def build(source: UpiPayments) -> Job:
    watermark = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(seconds=5))
    return (
        Job("upi-per-minute").source(source, watermark=watermark).key_by("merchant_id")
        .window(TumblingEventTimeWindows.of(timedelta(minutes=1)))
        .aggregate(agg.count("payments"), agg.sum("amount", "total"))
        .sink(NoopSink())
    )


SEED_JOB = SeedJob(
    name="upi-per-minute",
    seed="004",
    description="payments and amount per merchant per 1-minute tumbling window (5 s out-of-orderness)",
    build=build,
    defaults={"merchants": 1_000},
    summary_key="merchant_id",
    summary_order="payments",
)
