"""The largest payment per merchant so far, emitted for every payment (ReducingState)."""

from __future__ import annotations

from sparkstate.api.functions import Context, KeyedProcessFunction, RuntimeContext
from sparkstate.api.state import ReducingState, ReducingStateDescriptor
from sparkstate.connectors.generator import UpiPayments
from sparkstate.connectors.sinks import NoopSink
from sparkstate.job import Job
from sparkstate.jobs.registry import SeedJob

OUTPUT = "merchant_id string, max_amount double"


class RunningMax(KeyedProcessFunction):
    """Running maximum of ``amount`` per key, folded by a ReducingState."""

    def open(self, ctx: RuntimeContext) -> None:
        self.max: ReducingState[float] = ctx.get_reducing_state(ReducingStateDescriptor("max_amount", max, float))

    def process_element(self, event: dict, ctx: Context):
        self.max.add(event["amount"])
        yield (ctx.get_current_key(), self.max.get())


def build(source: UpiPayments) -> Job:
    return Job("running-max").source(source).key_by("merchant_id").process(RunningMax(), output_schema=OUTPUT).sink(NoopSink())


SEED_JOB = SeedJob(
    name="running-max",
    seed="003",
    description="largest payment per merchant so far (ReducingState)",
    build=build,
    summary_key="merchant_id",
    summary_order="max_amount",
)
