"""A per-payer feature map updated by every payment (seed 003's FeatureAggregator, MapState)."""

from __future__ import annotations

from sparkstate.api.functions import Context, KeyedProcessFunction, RuntimeContext
from sparkstate.api.state import MapState, MapStateDescriptor
from sparkstate.connectors.generator import UpiPayments
from sparkstate.connectors.sinks import NoopSink
from sparkstate.job import Job
from sparkstate.jobs.registry import SeedJob

OUTPUT = (
    "payer_id string, txn_count double, total_amount double, max_amount double, "
    "distinct_merchants double, features map<string, double>"
)
EMIT_EVERY = 5


class FeatureMap(KeyedProcessFunction):
    """Keeps named features per payer in a MapState and emits the map every few payments."""

    def open(self, ctx: RuntimeContext) -> None:
        self.features: MapState[str, float] = ctx.get_map_state(MapStateDescriptor("features", str, float))
        self.merchants: MapState[str, bool] = ctx.get_map_state(MapStateDescriptor("merchants", str, bool))

    def process_element(self, event: dict, ctx: Context):
        f = self.features
        amount = event["amount"]
        count = f.get("txn_count", 0.0) + 1
        f.put("txn_count", count)
        f.put("total_amount", f.get("total_amount", 0.0) + amount)
        f.put("max_amount", max(f.get("max_amount", 0.0), amount))
        device = f"device:{event['device']}"
        f.put(device, f.get(device, 0.0) + 1)
        if event["merchant_id"] not in self.merchants:
            self.merchants.put(event["merchant_id"], True)
            f.put("distinct_merchants", f.get("distinct_merchants", 0.0) + 1)
        if count % EMIT_EVERY == 0:
            snapshot = dict(f.items())
            yield (
                ctx.get_current_key(),
                snapshot["txn_count"],
                snapshot["total_amount"],
                snapshot["max_amount"],
                snapshot["distinct_merchants"],
                snapshot,
            )


def build(source: UpiPayments) -> Job:
    return Job("feature-map").source(source).key_by("payer_id").process(FeatureMap(), output_schema=OUTPUT).sink(NoopSink())


SEED_JOB = SeedJob(
    name="feature-map",
    seed="003",
    description=f"feature map per payer (count, total, max, devices, merchants), emitted every {EMIT_EVERY} payments (MapState)",
    build=build,
    defaults={"payers": 20_000},
    summary_key="payer_id",
    summary_order="total_amount",
)
