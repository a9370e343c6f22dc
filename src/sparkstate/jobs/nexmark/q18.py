"""Nexmark q18, find last bid: each bidder's latest bid on each auction.

The SQL keeps the bids with ``ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY
dateTime DESC) = 1``, which Flink plans as a deduplication keeping the last row on event
time. As a ranking it is an upsert stream here, keyed by ``(bidder, auction)``: a bid is
emitted when it becomes its pair's latest.

Keyed by ``(bidder, auction)``; a ``ValueState`` holds the time of the pair's latest bid.
Flink keeps a later-arriving bid with the same ``dateTime`` as the latest one in its place,
so a bid replaces the latest when its time is not earlier. In event-time order every bid
does; a bid arriving behind a later one of its pair is dropped. The state grows with the
pairs, as Flink's does without a state TTL.
"""

from __future__ import annotations

from collections.abc import Iterator

from sparkstate.api.functions import Context, KeyedProcessFunction, RuntimeContext
from sparkstate.api.state import ValueState, ValueStateDescriptor
from sparkstate.connectors.nexmark import NexmarkBids
from sparkstate.connectors.sinks import NoopSink
from sparkstate.job import Job
from sparkstate.jobs.nexmark.common import nexmark_seed_job, on

OUTPUT = "auction bigint, bidder bigint, price bigint, channel string, url string, date_time timestamp, extra string"


class LastBid(KeyedProcessFunction):
    """Emits a bid when it is its (bidder, auction) pair's latest so far."""

    def open(self, ctx: RuntimeContext) -> None:
        self.latest: ValueState[int] = ctx.get_state(ValueStateDescriptor("latest", int))

    def process_element(self, bid: dict, ctx: Context) -> Iterator[tuple]:
        ts: int = bid["date_time"]
        latest = self.latest.value()
        # Flink's event-time deduplication keeping the last row takes a row whose time is at
        # least the kept one's (DeduplicateFunctionHelper.isDuplicate: preRow <= currentRow)
        if latest is None or latest <= ts:
            self.latest.update(ts)
            yield (bid["auction"], bid["bidder"], bid["price"], bid["channel"], bid["url"], ts, bid["extra"])


def build(source: NexmarkBids) -> Job:
    return on("nexmark-q18", source).key_by("bidder", "auction").process(LastBid(), output_schema=OUTPUT).sink(NoopSink())


SEED_JOB = nexmark_seed_job(18, "each bidder's last bid on each auction (deduplication, keep last row)", build)
