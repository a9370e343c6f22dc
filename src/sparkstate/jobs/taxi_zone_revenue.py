"""Revenue per taxi zone per hour (seed 000): trips and revenue per pickup zone, 1-hour windows.

Seed 000's Flink SQL ``TUMBLE(TABLE rides, DESCRIPTOR(pickup_time), INTERVAL '1' HOUR)`` grouped
by ``PULocationID``, on the taxi ride generator (zones 1-265) with 30 s of out-of-orderness.
Built-in aggregates only, so it can also run natively on Spark SQL (`--window-path native`).
"""

from __future__ import annotations

from datetime import timedelta

from sparkstate.api import agg
from sparkstate.api.time import WatermarkStrategy
from sparkstate.api.windows import TumblingEventTimeWindows
from sparkstate.connectors.generator import TaxiRides
from sparkstate.connectors.sinks import NoopSink
from sparkstate.job import Job
from sparkstate.jobs.registry import SeedJob


def build(source: TaxiRides) -> Job:
    watermark = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(seconds=30))
    return (
        Job("taxi-zone-revenue").source(source, watermark=watermark).key_by("pickup_zone")
        .window(TumblingEventTimeWindows.of(timedelta(hours=1)))
        .aggregate(agg.count("trips"), agg.sum("total_amount", "revenue"), agg.avg("fare", "avg_fare"))
        .sink(NoopSink())
    )


SEED_JOB = SeedJob(
    name="taxi-zone-revenue",
    seed="000",
    description="trips and revenue per pickup zone per 1-hour tumbling window (taxi rides, 30 s out-of-orderness)",
    build=build,
    generator=TaxiRides,
    summary_key="pickup_zone",
    summary_order="revenue",
)
