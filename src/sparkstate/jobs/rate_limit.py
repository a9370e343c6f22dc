"""Trip a rate limit when a merchant takes more than 10 payments in a minute (seed 004's FraudCounter).

The first payment of a window registers an event-time timer one minute later; the timer resets
the count. The eleventh payment inside the window emits one ``rate-limit-trip``.
"""

from __future__ import annotations

from datetime import timedelta

from sparkstate.api.functions import Context, KeyedProcessFunction, OnTimerContext, RuntimeContext
from sparkstate.api.state import ValueState, ValueStateDescriptor
from sparkstate.api.time import WatermarkStrategy
from sparkstate.connectors.generator import UpiPayments
from sparkstate.connectors.sinks import NoopSink
from sparkstate.job import Job
from sparkstate.jobs.registry import SeedJob

OUTPUT = "merchant_id string, window_start timestamp, payments bigint, alert string"
LIMIT = 10
WINDOW_MS = 60_000


class RateLimit(KeyedProcessFunction):
    """Counts payments per key from the first one of a window; more than ``limit`` trips once."""

    def __init__(self, limit: int = LIMIT, window_ms: int = WINDOW_MS) -> None:
        self.limit = limit
        self.window_ms = window_ms

    def open(self, ctx: RuntimeContext) -> None:
        self.count: ValueState[int] = ctx.get_state(ValueStateDescriptor("count", int, default=0))
        self.first_seen: ValueState[int] = ctx.get_state(ValueStateDescriptor("first_seen_ms", int))

    def process_element(self, event: dict, ctx: Context):
        count = self.count.value()
        if count == 0:
            ts = ctx.timestamp()
            assert ts is not None  # the job has event time, so every event has a timestamp
            self.first_seen.update(ts)
            ctx.timer_service().register_event_time_timer(ts + self.window_ms)
        count += 1
        self.count.update(count)
        if count == self.limit + 1:
            yield (ctx.get_current_key(), self.first_seen.value(), count, "rate-limit-trip")

    def on_timer(self, timestamp: int, ctx: OnTimerContext):
        # the window is over: reset the per-merchant counter
        self.count.clear()
        self.first_seen.clear()


def build(source: UpiPayments) -> Job:
    watermark = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(milliseconds=source.max_out_of_orderness_ms))
    return (
        Job("rate-limit").source(source, watermark=watermark).key_by("merchant_id")
        .process(RateLimit(), output_schema=OUTPUT).sink(NoopSink())
    )


SEED_JOB = SeedJob(
    name="rate-limit",
    seed="004",
    description=f"trip when a merchant takes more than {LIMIT} payments in a minute (ValueState + event-time timer)",
    build=build,
    # hot merchants: 1,000 payments per event-time second over 500 skewed merchants
    defaults={"merchants": 500, "merchant_skew": 2.0},
    summary_key="merchant_id",
    summary_order="payments",
)
