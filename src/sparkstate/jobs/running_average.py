"""Running average payment per merchant (AggregatingState with an AggregateFunction)."""

from __future__ import annotations

from sparkstate.api.functions import Context, KeyedProcessFunction, RuntimeContext
from sparkstate.api.state import AggregateFunction, AggregatingState, AggregatingStateDescriptor
from sparkstate.connectors.generator import UpiPayments
from sparkstate.connectors.sinks import NoopSink
from sparkstate.job import Job
from sparkstate.jobs.registry import SeedJob

OUTPUT = "merchant_id string, average double, count bigint"


class Average(AggregateFunction[float, tuple[float, int], tuple[float, int]]):
    """Seed 003's AverageAggregateFunction: the accumulator is ``(sum, count)``."""

    def create_accumulator(self) -> tuple[float, int]:
        return (0.0, 0)

    def add(self, value: float, acc: tuple[float, int]) -> tuple[float, int]:
        return (acc[0] + value, acc[1] + 1)

    def get_result(self, acc: tuple[float, int]) -> tuple[float, int]:
        return (acc[0] / acc[1], acc[1])

    def merge(self, a: tuple[float, int], b: tuple[float, int]) -> tuple[float, int]:
        return (a[0] + b[0], a[1] + b[1])


class RunningAverage(KeyedProcessFunction):
    """Emits the running average and count of ``amount`` per key."""

    def open(self, ctx: RuntimeContext) -> None:
        self.avg: AggregatingState[float, tuple[float, int]] = ctx.get_aggregating_state(
            AggregatingStateDescriptor("average", Average(), tuple)
        )

    def process_element(self, event: dict, ctx: Context):
        self.avg.add(event["amount"])
        # get() is None only before the first add
        average, count = self.avg.get()
        yield (ctx.get_current_key(), average, count)


def build(source: UpiPayments) -> Job:
    return (
        Job("running-average").source(source).key_by("merchant_id")
        .process(RunningAverage(), output_schema=OUTPUT).sink(NoopSink())
    )


SEED_JOB = SeedJob(
    name="running-average",
    seed="003",
    description="running average payment per merchant (AggregatingState)",
    build=build,
    summary_key="merchant_id",
    summary_order="count",
)
