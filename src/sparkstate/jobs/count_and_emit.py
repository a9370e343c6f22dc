"""Count events per merchant and emit the count every 100 events (seed 003, ValueState)."""

from __future__ import annotations

from sparkstate.api.functions import Context, KeyedProcessFunction, RuntimeContext
from sparkstate.api.state import ValueState, ValueStateDescriptor
from sparkstate.connectors.generator import UpiPayments
from sparkstate.connectors.sinks import NoopSink
from sparkstate.job import Job
from sparkstate.jobs.registry import SeedJob

OUTPUT = "merchant_id string, count bigint"
EVERY = 100


class CountAndEmit(KeyedProcessFunction):
    """Emits ``(key, count)`` whenever a key's count reaches a multiple of ``every``."""

    def __init__(self, every: int = EVERY) -> None:
        self.every = every

    def open(self, ctx: RuntimeContext) -> None:
        self.count: ValueState[int] = ctx.get_state(ValueStateDescriptor("count", int, default=0))

    def process_element(self, event: dict, ctx: Context):
        count = self.count.value() + 1
        self.count.update(count)
        if count % self.every == 0:
            yield (ctx.get_current_key(), count)


def build(source: UpiPayments) -> Job:
    return (
        Job("count-and-emit").source(source).key_by("merchant_id")
        .process(CountAndEmit(), output_schema=OUTPUT).sink(NoopSink())
    )


SEED_JOB = SeedJob(
    name="count-and-emit",
    seed="003",
    description=f"count payments per merchant, emit every {EVERY} (ValueState)",
    build=build,
    defaults={"merchants": 1_000},
    summary_key="merchant_id",
    summary_order="count",
)
