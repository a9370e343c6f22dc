"""Per-key running count and sum, emitted for every event (seed 001's rolling sum; W1).

The workload of the keyed-state benchmark: every payment updates its merchant's count and
total and emits both.
"""

from __future__ import annotations

from sparkstate.api.functions import Context, KeyedProcessFunction, RuntimeContext
from sparkstate.api.state import ValueState, ValueStateDescriptor
from sparkstate.connectors.generator import UpiPayments
from sparkstate.connectors.sinks import NoopSink
from sparkstate.job import Job
from sparkstate.jobs.registry import SeedJob

OUTPUT = "merchant_id string, count bigint, total double"


class RunningSum(KeyedProcessFunction):
    """Running count and total amount per merchant."""

    def open(self, ctx: RuntimeContext) -> None:
        self.count: ValueState[int] = ctx.get_state(ValueStateDescriptor("count", int, default=0))
        self.total: ValueState[float] = ctx.get_state(ValueStateDescriptor("total", float, default=0.0))

    def process_element(self, event: dict, ctx: Context):
        count = self.count.value() + 1
        total = self.total.value() + event["amount"]
        self.count.update(count)
        self.total.update(total)
        yield (ctx.get_current_key(), count, total)


def build(source: UpiPayments) -> Job:
    return Job("running-sum").source(source).key_by("merchant_id").process(RunningSum(), output_schema=OUTPUT).sink(NoopSink())


SEED_JOB = SeedJob(
    name="running-sum",
    seed="001",
    description="running count and total per merchant, emitted for every payment (ValueState)",
    build=build,
    summary_key="merchant_id",
    summary_order="total",
)
