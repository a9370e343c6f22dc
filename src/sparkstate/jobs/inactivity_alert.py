"""Alert when a merchant has had no payment for an hour of event time (ValueState + event-time timer).

Seed 003's UserSessionTracker compares each event with the previous one; with a timer the alert
fires when the hour has passed, even if the merchant never pays again (at the latest when a
bounded input ends and its final watermark fires every timer).
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

OUTPUT = "merchant_id string, last_payment timestamp, inactive_since timestamp, payments bigint"
GAP_MS = 60 * 60 * 1000


class InactivityAlert(KeyedProcessFunction):
    """Keeps the last payment time and a timer one gap later; the timer's firing is the alert."""

    def __init__(self, gap_ms: int = GAP_MS) -> None:
        self.gap_ms = gap_ms

    def open(self, ctx: RuntimeContext) -> None:
        self.last_seen: ValueState[int] = ctx.get_state(ValueStateDescriptor("last_seen", int))
        self.timer: ValueState[int] = ctx.get_state(ValueStateDescriptor("timer", int))
        self.payments: ValueState[int] = ctx.get_state(ValueStateDescriptor("payments", int, default=0))

    def process_element(self, event: dict, ctx: Context):
        ts = ctx.timestamp()
        assert ts is not None  # the job has event time, so every event has a timestamp
        last = self.last_seen.value()
        if last is None or ts > last:
            self.last_seen.update(ts)
            old = self.timer.value()
            if old is not None:
                ctx.timer_service().delete_event_time_timer(old)
            self.timer.update(ts + self.gap_ms)
            ctx.timer_service().register_event_time_timer(ts + self.gap_ms)
        self.payments.update(self.payments.value() + 1)
        return None

    def on_timer(self, timestamp: int, ctx: OnTimerContext):
        yield (ctx.get_current_key(), self.last_seen.value(), timestamp, self.payments.value())
        self.last_seen.clear()
        self.timer.clear()
        self.payments.clear()


def build(source: UpiPayments) -> Job:
    watermark = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(milliseconds=source.max_out_of_orderness_ms))
    return (
        Job("inactivity-alert").source(source, watermark=watermark).key_by("merchant_id")
        .process(InactivityAlert(), output_schema=OUTPUT).sink(NoopSink())
    )


SEED_JOB = SeedJob(
    name="inactivity-alert",
    seed="003",
    description="alert after an hour without payments per merchant (ValueState + event-time timer)",
    build=build,
    # a skewed, slow stream so that quiet merchants exist: 2 payments per event-time second
    defaults={"merchants": 2_000, "events_per_second": 2.0, "merchant_skew": 3.0},
    summary_key="merchant_id",
    summary_order="payments",
)
