"""Click to purchase: each purchase joined with the same user's clicks in the minutes before it
(an interval join, the seed's "stream joins"; Flink's ``intervalJoin``).

Clicks (:class:`~sparkstate.connectors.generator.ClickEvents`) are the left input, purchases
(:class:`~sparkstate.connectors.enrichment.Purchases`) the right, both keyed by ``user_id``;
``between(0, window)``: a purchase at most ``window`` after a click (default 10 minutes). The
join function keeps the pairs whose click was in the purchased item's category: what a shop
would count as the browsing that led to the purchase. Each side's elements stay in state only
until the watermark passes the last time they can still pair (``sparkstate.engine.joins``).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

from sparkstate.api.connected import ProcessJoinFunction
from sparkstate.api.time import WatermarkStrategy
from sparkstate.connectors.enrichment import Purchases, in_step_with
from sparkstate.connectors.generator import ClickEvents
from sparkstate.connectors.sinks import NoopSink
from sparkstate.job import Job
from sparkstate.jobs.registry import SeedJob

OUTPUT = (
    "user_id string, category string, click_time timestamp, purchase_time timestamp, clicked_item string, "
    "purchased_item string, amount double, same_item boolean"
)
WINDOW_MINUTES = 10.0
#: clicks per purchase in the generated shop
CLICKS_PER_PURCHASE = 25


class ClickToPurchase(ProcessJoinFunction):
    """A purchase with a click of its user in the same category before it."""

    def process_element(self, click: dict, purchase: dict, ctx) -> Iterator[dict]:  # type: ignore[no-untyped-def]
        if click["category"] == purchase["category"]:
            yield {
                "user_id": ctx.get_current_key(), "category": purchase["category"],
                "click_time": ctx.left_timestamp(), "purchase_time": ctx.right_timestamp(),
                "clicked_item": click["item_id"], "purchased_item": purchase["item_id"],
                "amount": purchase["amount"], "same_item": click["item_id"] == purchase["item_id"],
            }


def purchases_for(clicks: ClickEvents) -> Purchases:
    """Purchases in the shop of ``clicks`` (same users and items, another seed), one for every
    ``CLICKS_PER_PURCHASE`` clicks over the same event time, read in step with the clicks."""
    share = 1 / CLICKS_PER_PURCHASE
    return Purchases(
        events=None if clicks.events is None else clicks.events // CLICKS_PER_PURCHASE,
        seed=clicks.seed + 1, events_per_second=clicks.events_per_second * share, users=clicks.users,
        active_users=clicks.active_users, shift_minutes=clicks.shift_minutes, items=clicks.items,
        categories=clicks.categories, item_skew=clicks.item_skew, **in_step_with(clicks, share),
    )


def build(source: ClickEvents, window_minutes: float = WINDOW_MINUTES) -> Job:
    watermark = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(milliseconds=source.max_out_of_orderness_ms))
    return (
        Job("click-purchase-join").source(source, watermark=watermark).key_by("user_id")
        .interval_join(purchases_for(source), key_by="user_id", watermark=watermark)
        .between(timedelta(0), timedelta(minutes=window_minutes))
        .process(ClickToPurchase(), output_schema=OUTPUT)
        .sink(NoopSink())
    )


SEED_JOB = SeedJob(
    name="click-purchase-join",
    seed="003",
    description="purchases joined with their user's clicks in the same category up to 10 minutes before "
    "(interval join; --set window_minutes=M)",
    build=build,
    generator=ClickEvents,
    options={"window_minutes": WINDOW_MINUTES},
    second=Purchases,
    summary_key="user_id",
    summary_order="amount",
)
