"""Emit each payment transaction once, though the network delivers some twice (seed 003, pattern 3).

Keyed by transaction id, a ``ValueState`` seen-flag with a 24-hour TTL: the first delivery
sets it and is emitted; a repeat finds it set and is dropped. The TTL bounds the state: a
flag nobody has written for 24 hours expires, and incremental cleanup (two more keys checked
per element, as Flink's ``cleanup_incrementally(2, True)`` checks per state access) plus the
background sweep remove it from the stored state, so the state stops growing once the TTL
horizon is reached instead of keeping every transaction ever seen. A repeat arriving more
than the TTL after its original would be emitted again: the TTL must exceed the longest
redelivery delay (here minutes).

The TTL's clock is processing time (Flink's); ``event_time=True`` measures it against the
watermark instead, which makes a run's state figures deterministic (the tests use it).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sparkstate.api.functions import Context, KeyedProcessFunction, RuntimeContext
from sparkstate.api.state import ValueState, ValueStateDescriptor
from sparkstate.api.time import Duration, WatermarkStrategy
from sparkstate.api.ttl import StateTtlConfig
from sparkstate.connectors.generator import UpiTransactions
from sparkstate.connectors.sinks import NoopSink
from sparkstate.job import Job
from sparkstate.jobs.registry import SeedJob

OUTPUT = "txn_id bigint, event_time timestamp, merchant_id string, payer_id string, amount double, device string"
TTL = timedelta(hours=24)
#: keys checked per element beyond the touched ones
CLEANUP_SIZE = 2


def seen_descriptor(
    ttl: Duration = TTL, event_time: bool = False, cleanup_size: int = CLEANUP_SIZE
) -> ValueStateDescriptor[bool]:
    """The seen-flag's descriptor: a TTL, incremental cleanup per element, background sweep (default)."""
    builder = StateTtlConfig.new_builder(ttl).cleanup_incrementally(cleanup_size, run_cleanup_for_every_record=True)
    if event_time:
        builder = builder.use_event_time()
    return ValueStateDescriptor("seen", bool).enable_time_to_live(builder.build())


class Dedup(KeyedProcessFunction):
    """Emits an event the first time its key (the transaction id) is seen within the TTL."""

    def __init__(self, ttl: Duration = TTL, event_time: bool = False, cleanup_size: int = CLEANUP_SIZE) -> None:
        self.ttl = ttl
        self.event_time = event_time
        self.cleanup_size = cleanup_size

    def open(self, ctx: RuntimeContext) -> None:
        self.seen: ValueState[bool] = self.seen_state(ctx, seen_descriptor(self.ttl, self.event_time, self.cleanup_size))

    def seen_state(self, ctx: RuntimeContext, descriptor: ValueStateDescriptor[bool]) -> ValueState[bool]:
        return ctx.get_state(descriptor)

    def process_element(self, event: dict, ctx: Context) -> Any:
        if self.seen.value():
            return
        self.seen.update(True)
        yield (event["txn_id"], event["event_time"], event["merchant_id"], event["payer_id"], event["amount"], event["device"])


def build(source: UpiTransactions, ttl: Duration = TTL, event_time: bool = False, fn: Dedup | None = None) -> Job:
    """The dedup job on ``source``; ``event_time`` measures the TTL against the watermark."""
    fn = fn if fn is not None else Dedup(ttl, event_time)
    watermark = None
    if fn.event_time:
        watermark = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(milliseconds=source.max_out_of_orderness_ms))
    return (
        Job("dedup").source(source, watermark=watermark).key_by("txn_id")
        .process(fn, output_schema=OUTPUT).sink(NoopSink())
    )


SEED_JOB = SeedJob(
    name="dedup",
    seed="003",
    description="emit each transaction once though some arrive twice (ValueState seen-flag, 24-hour TTL, "
    "incremental cleanup)",
    build=build,
    generator=UpiTransactions,
    defaults={"duplicates": 0.05},
    summary_key="txn_id",
    summary_order="event_time",
)
