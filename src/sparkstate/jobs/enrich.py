"""Enrich: each payment joined with its merchant's latest profile from a second stream
(a ``KeyedCoProcessFunction``, the seed's "stream joins"; Flink's enrichment pattern).

Both inputs are keyed by ``merchant_id``: the payments (``process_element1``) and the merchant
profiles (``process_element2``, :class:`~sparkstate.connectors.enrichment.MerchantProfiles`).

* A profile goes to ``ValueState`` when it is newer (by event time, then revision) than the one
  held: an update that arrives after a newer one is ignored, so the state is the latest profile.
* A payment of a merchant with a profile is emitted at once with the profile's fields.
* A payment of a merchant whose profile has not arrived yet waits in ``ListState`` (with an
  event-time timer ``max_wait`` after it): the merchant's first profile releases the waiting
  payments, enriched; a payment still waiting when the watermark reaches its time + ``max_wait``
  is emitted without profile (the profile columns null), so none is held for ever and the
  output has every payment exactly once.

Order inside a micro-batch (``sparkstate.api.connected``): due timers, then the batch's
profiles, then its payments. So a payment sees the profiles of its own batch, and a timer
that falls due in a batch fires before that batch's profiles can release its payment.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from sparkstate.api.connected import KeyedCoProcessFunction
from sparkstate.api.functions import Context, OnTimerContext, RuntimeContext
from sparkstate.api.state import ListState, ListStateDescriptor, ValueState, ValueStateDescriptor
from sparkstate.api.time import WatermarkStrategy
from sparkstate.connectors.enrichment import MerchantProfiles, in_step_with
from sparkstate.connectors.generator import UpiPayments
from sparkstate.connectors.sinks import NoopSink
from sparkstate.job import Job
from sparkstate.jobs.registry import SeedJob

OUTPUT = (
    "event_time timestamp, merchant_id string, payer_id string, amount double, device string, "
    "merchant_name string, category string, risk_tier string, daily_limit double, profile_revision bigint"
)
PAYMENT_COLUMNS = ("event_time", "merchant_id", "payer_id", "amount", "device")
PROFILE_COLUMNS = ("merchant_name", "category", "risk_tier", "daily_limit")
#: how long (event time) a payment waits for its merchant's first profile
MAX_WAIT_MS = 5 * 60 * 1000
#: profile updates per merchant over a run, after its first profile
PROFILE_UPDATES = 9


class EnrichPayments(KeyedCoProcessFunction):
    """Payments (input 1) with the latest profile of their merchant (input 2); see the module docs."""

    def __init__(self, max_wait_ms: int = MAX_WAIT_MS) -> None:
        self.max_wait_ms = max_wait_ms

    def open(self, ctx: RuntimeContext) -> None:
        self.profile: ValueState[dict] = ctx.get_state(ValueStateDescriptor("profile", dict))
        self.waiting: ListState[dict] = ctx.get_list_state(ListStateDescriptor("waiting", dict))

    def process_element1(self, payment: dict, ctx: Context) -> Iterator[dict]:
        profile = self.profile.value()
        if profile is not None:
            yield enriched(payment, profile)
            return
        ts = ctx.timestamp()
        assert ts is not None  # the job has event time, so every payment has a timestamp
        self.waiting.add(payment)
        ctx.timer_service().register_event_time_timer(ts + self.max_wait_ms)

    def process_element2(self, profile: dict, ctx: Context) -> Iterator[dict]:
        held = self.profile.value()
        if held is None or (profile["event_time"], profile["revision"]) >= (held["event_time"], held["revision"]):
            self.profile.update(profile)
            held = profile
        waiting = self.waiting.get()
        if waiting:
            self.waiting.clear()
            for payment in waiting:
                yield enriched(payment, held)

    def on_timer(self, timestamp: int, ctx: OnTimerContext) -> Iterator[dict]:
        waiting = self.waiting.get()
        keep = [p for p in waiting if p["event_time"] + self.max_wait_ms > timestamp]
        for payment in waiting:
            if payment["event_time"] + self.max_wait_ms <= timestamp:
                yield enriched(payment, None)
        if len(keep) != len(waiting):
            self.waiting.update(keep)


def enriched(payment: dict, profile: dict | None) -> dict:
    """The output row of a payment with its merchant's profile (None: the profile columns null)."""
    row: dict[str, Any] = {c: payment[c] for c in PAYMENT_COLUMNS}
    for c in PROFILE_COLUMNS:
        row[c] = profile[c] if profile is not None else None
    row["profile_revision"] = profile["revision"] if profile is not None else None
    return row


def profiles_for(payments: UpiPayments, updates: int = PROFILE_UPDATES) -> MerchantProfiles:
    """The profile stream of ``payments``' merchants: every merchant's first profile, then
    ``updates`` per merchant on average, over the same event time as the payments, read in step
    with them (its batch size and rate scaled by its share of the events)."""
    count = payments.merchants * (1 + updates)
    if payments.events is None:  # unbounded: the first profiles, then updates, over each hour
        per_second, events, share = count / 3600.0, None, count / 3600.0 / payments.events_per_second
    else:
        span_s = max(payments.events, 1) / payments.events_per_second
        events = count if payments.events else 0
        per_second, share = count / span_s, count / max(payments.events, 1)
    return MerchantProfiles(
        events=events, merchants=payments.merchants, seed=payments.seed + 1, events_per_second=per_second,
        **in_step_with(payments, share),
    )


def build(source: UpiPayments, profile_updates: int = PROFILE_UPDATES, max_wait_s: float = MAX_WAIT_MS / 1000) -> Job:
    watermark = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(milliseconds=source.max_out_of_orderness_ms))
    return (
        Job("enrich").source(source, watermark=watermark).key_by("merchant_id")
        .connect(profiles_for(source, profile_updates), key_by="merchant_id", watermark=watermark)
        .process(EnrichPayments(round(max_wait_s * 1000)), output_schema=OUTPUT)
        .sink(NoopSink())
    )


SEED_JOB = SeedJob(
    name="enrich",
    seed="003",
    description="payments with their merchant's latest profile from a second stream (KeyedCoProcessFunction; "
    "--set profile_updates=N, --set max_wait_s=S)",
    build=build,
    options={"profile_updates": PROFILE_UPDATES, "max_wait_s": MAX_WAIT_MS / 1000},
    second=MerchantProfiles,
    summary_key="merchant_id",
    summary_order="amount",
)
