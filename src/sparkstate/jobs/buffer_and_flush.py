"""Buffer each merchant's payments and flush a summary every 100 (seed 003's BufferEventsFunction)."""

from __future__ import annotations

from typing import Any

from sparkstate.api.functions import Context, KeyedProcessFunction, RuntimeContext
from sparkstate.api.state import ListState, ListStateDescriptor
from sparkstate.connectors.generator import UpiPayments
from sparkstate.connectors.sinks import NoopSink
from sparkstate.job import Job
from sparkstate.jobs.registry import SeedJob

OUTPUT = "merchant_id string, events bigint, total double, first_time timestamp, last_time timestamp"
SIZE = 100


class BufferAndFlush(KeyedProcessFunction):
    """Keeps ``(time, amount)`` pairs in a ListState; at ``size`` of them emits a summary and clears."""

    def __init__(self, size: int = SIZE) -> None:
        self.size = size

    def open(self, ctx: RuntimeContext) -> None:
        self.buffer: ListState[tuple[Any, float]] = ctx.get_list_state(ListStateDescriptor("buffer", tuple))

    def process_element(self, event: dict, ctx: Context):
        self.buffer.add((event["event_time"], event["amount"]))
        if len(self.buffer) >= self.size:
            items = self.buffer.get()
            self.buffer.clear()
            times = [t for t, _ in items]
            yield (ctx.get_current_key(), len(items), sum(a for _, a in items), min(times), max(times))


def build(source: UpiPayments) -> Job:
    return (
        Job("buffer-and-flush").source(source).key_by("merchant_id")
        .process(BufferAndFlush(), output_schema=OUTPUT).sink(NoopSink())
    )


SEED_JOB = SeedJob(
    name="buffer-and-flush",
    seed="003",
    description=f"buffer payments per merchant, flush a summary every {SIZE} (ListState)",
    build=build,
    defaults={"merchants": 1_000},
    summary_key="merchant_id",
    summary_order="total",
)
