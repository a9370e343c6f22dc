"""Nexmark q15, bidding statistics report: per day, bids, bidders and auctions by price range.

The SQL (``queries/q15.sql``) groups the bids by ``DATE_FORMAT(dateTime, 'yyyy-MM-dd')``
without a window and computes ``count(*)``, ``count(distinct bidder)`` and ``count(distinct
auction)``, each in total and for each price range (rank1 ``price < 10000``, rank2 below
1,000,000, rank3 from there; ``FILTER (WHERE ...)``). As an unbounded aggregate it is an
upsert stream here, keyed by ``day``: each bid emits its day's new row.

The group key is the day alone, so every bid of a day meets in one keyed function: a
computed key, ``key_by(day=...)`` (the day's text, UTC). It is the hot key the reference's
``table.optimizer.distinct-agg.split.enabled`` addresses in Flink. Keyed state, per day:

* ``counts``: the 12 figures of the row;
* ``bidders`` and ``auctions``: MapState from each distinct bidder (auction) to the price
  ranges it has had bids in (a bit per range), so that a bid counts a bidder in a range's
  distinct count the first time only.

A day's state is dropped by an event-time timer at the day's last millisecond, once the
watermark has passed it (Nexmark's bids are in order; a later bid would start its day
afresh, where Flink would keep the day's state for ever without a state TTL). So the state
is the distinct bidders and auctions of the current day (and of the day before for the
watermark's 4 s).
"""

from __future__ import annotations

from collections.abc import Iterator

from sparkstate.api.functions import Context, KeyedProcessFunction, OnTimerContext, RuntimeContext
from sparkstate.api.state import MapState, MapStateDescriptor, ValueState, ValueStateDescriptor
from sparkstate.connectors.nexmark import NexmarkBids
from sparkstate.connectors.sinks import NoopSink
from sparkstate.job import Job
from sparkstate.jobs.nexmark.common import DAY_MS, day_of, nexmark_seed_job, on, rank

OUTPUT = (
    "day string, total_bids bigint, rank1_bids bigint, rank2_bids bigint, rank3_bids bigint, "
    "total_bidders bigint, rank1_bidders bigint, rank2_bidders bigint, rank3_bidders bigint, "
    "total_auctions bigint, rank1_auctions bigint, rank2_auctions bigint, rank3_auctions bigint"
)


def _count_distinct(seen: MapState[int, int], value: int, r: int, figures: list[int], first: int) -> None:
    """Count ``value`` in the distinct total (``figures[first]``) and in range ``r``'s
    (``figures[first + r]``) the first time it is seen there."""
    ranges = seen.get(value)
    bit = 1 << r
    if ranges is None:
        figures[first] += 1
        ranges = 0
    if not ranges & bit:
        figures[first + r] += 1
        seen.put(value, ranges | bit)


class BiddingStatistics(KeyedProcessFunction):
    """Per day, bid counts and distinct bidders and auctions by price range; a row per bid."""

    def open(self, ctx: RuntimeContext) -> None:
        self.counts: ValueState[list] = ctx.get_state(ValueStateDescriptor("counts", list))
        self.bidders: MapState[int, int] = ctx.get_map_state(MapStateDescriptor("bidders", int, int))
        self.auctions: MapState[int, int] = ctx.get_map_state(MapStateDescriptor("auctions", int, int))

    def process_element(self, bid: dict, ctx: Context) -> Iterator[tuple]:
        figures = self.counts.value()
        if figures is None:
            figures = [0] * 12
            day = bid["date_time"] // DAY_MS
            ctx.timer_service().register_event_time_timer((day + 1) * DAY_MS - 1)
        r = rank(bid["price"])
        figures[0] += 1
        figures[r] += 1
        _count_distinct(self.bidders, bid["bidder"], r, figures, 4)
        _count_distinct(self.auctions, bid["auction"], r, figures, 8)
        self.counts.update(figures)
        yield (ctx.get_current_key(), *figures)

    def on_timer(self, timestamp: int, ctx: OnTimerContext) -> None:
        self.counts.clear()
        self.bidders.clear()
        self.auctions.clear()


def build(source: NexmarkBids) -> Job:
    return (
        on("nexmark-q15", source).key_by(day=(lambda bid: day_of(bid["date_time"]), "string"))
        .process(BiddingStatistics(), output_schema=OUTPUT)
        .sink(NoopSink())
    )


SEED_JOB = nexmark_seed_job(15, "bidding statistics per day: bids, distinct bidders and auctions by price range "
                            "(a computed key: the day)", build)
