"""Nexmark q17, auction statistics: per auction and day, the bids' counts and prices.

The SQL groups the bids by ``auction, DATE_FORMAT(dateTime, 'yyyy-MM-dd')`` without a window
and computes ``count(*)``, the counts per price range (rank1 ``price < 10000``, rank2 below
1,000,000, rank3 from there), ``min``, ``max``, ``avg`` and ``sum`` of the price. As an
unbounded aggregate it is an upsert stream here, keyed by ``(auction, day)``: every bid
changes its group's ``total_bids``, so each bid emits its group's new row.

Keyed by auction; a ``MapState`` from day to the day's accumulator (counts, min, max, sum),
so that a bid of the previous day arriving within the watermark's 4 s after a bid of the
next one still finds its day. A day's entry is dropped by an event-time timer at the day's
last millisecond: once the watermark passes it, every bid of that day still to come is late.
The generator's stream is in event-time order, so none is; a bid later than that would start
its day's counts afresh, where Flink's aggregate (which keeps its state forever unless given
a state TTL) would add it to the day's others.
"""

from __future__ import annotations

from collections.abc import Iterator

from sparkstate.api.functions import Context, KeyedProcessFunction, OnTimerContext, RuntimeContext
from sparkstate.api.state import MapState, MapStateDescriptor
from sparkstate.connectors.nexmark import NexmarkBids
from sparkstate.connectors.sinks import NoopSink
from sparkstate.job import Job
from sparkstate.jobs.nexmark.common import DAY_MS, day_text, nexmark_seed_job, on, rank

OUTPUT = ("auction bigint, day string, total_bids bigint, rank1_bids bigint, rank2_bids bigint, rank3_bids bigint, "
          "min_price bigint, max_price bigint, avg_price bigint, sum_price bigint")
#: a day's accumulator: total, rank1, rank2, rank3 bids, min, max and sum of the price
Stats = tuple[int, int, int, int, int, int, int]


class AuctionStatistics(KeyedProcessFunction):
    """Per auction, each day's bid counts and price statistics; a row per bid."""

    def open(self, ctx: RuntimeContext) -> None:
        self.days: MapState[int, Stats] = ctx.get_map_state(MapStateDescriptor("days", int, tuple))

    def process_element(self, bid: dict, ctx: Context) -> Iterator[tuple]:
        ts: int = bid["date_time"]
        price: int = bid["price"]
        day = ts // DAY_MS
        old: Stats | None = self.days.get(day)
        if old is None:
            old = (0, 0, 0, 0, price, price, 0)
            ctx.timer_service().register_event_time_timer((day + 1) * DAY_MS - 1)
        total, r1, r2, r3, low, high, total_price = old
        r = rank(price)
        stats: Stats = (total + 1, r1 + (r == 1), r2 + (r == 2), r3 + (r == 3), min(low, price), max(high, price),
                        total_price + price)
        self.days.put(day, stats)
        # Flink's AVG of a BIGINT is a BIGINT: the sum divided by the count in integer
        # arithmetic (truncated; prices are positive, so floor division is the same)
        yield (ctx.get_current_key(), day_text(day), *stats[:6], stats[6] // stats[0], stats[6])

    def on_timer(self, timestamp: int, ctx: OnTimerContext) -> None:
        self.days.remove((timestamp + 1) // DAY_MS - 1)


def build(source: NexmarkBids) -> Job:
    return (on("nexmark-q17", source).key_by("auction")
            .process(AuctionStatistics(), output_schema=OUTPUT).sink(NoopSink()))


SEED_JOB = nexmark_seed_job(17, "auction statistics per day (unbounded aggregate, MapState by day)", build)
