"""Nexmark q4, average price for a category: the mean winning price of the closed auctions of each category.

The SQL (``queries/q4.sql``)::

    SELECT Q.category, AVG(Q.final)
    FROM (SELECT MAX(B.price) AS final, A.category
          FROM auction A, bid B
          WHERE A.id = B.auction AND B.dateTime BETWEEN A.dateTime AND A.expires
          GROUP BY A.id, A.category) Q
    GROUP BY Q.category

An auction's ``final`` is its highest bid made while it was open (``BETWEEN`` is inclusive);
an auction without such a bid is not in ``Q``. ``AVG`` of a BIGINT is a BIGINT in Flink (the
sum divided by the count, truncated). Both aggregates are unbounded, so the result is an
upsert stream keyed by ``category``; the columns are the reference sink's ``id`` (the
category) and ``final``.

An auction's highest bid is final once the watermark passes its ``expires`` (Nexmark's bids
are in order), so each auction adds its final price to its category once, on an event-time
timer at ``expires``, and the category's new average is emitted then: the last row of each
category is the SQL's result. The average is over auctions of every category, so auctions
and bids meet in one keyed function: one computed key,
:func:`~sparkstate.jobs.nexmark.common.one_group`, on both inputs (bids first, auctions
second). Its state, in MapState:

* ``auctions``: each open auction's category, start, end and highest bid so far;
* ``expiring``: the ids of the auctions that close at each time (the timers' index);
* ``early``: bids of auctions not seen yet (a bid may come first: the generator bids on ids up
  to 10 ahead of the last auction). An auction that comes later starts after the watermark,
  so after every bid the watermark has passed: those are dropped by a timer each second;
* ``categories``: each category's sum and count of final prices (5 categories).

So the state is the open auctions and a few seconds of early bids: bounded, not the stream.
"""

from __future__ import annotations

from collections.abc import Iterator

from sparkstate.api.connected import KeyedCoProcessFunction
from sparkstate.api.functions import Context, OnTimerContext, RuntimeContext
from sparkstate.api.state import MapState, MapStateDescriptor
from sparkstate.connectors.nexmark import NexmarkAuctions, NexmarkBids, view
from sparkstate.connectors.sinks import NoopSink
from sparkstate.job import Job
from sparkstate.jobs.nexmark.common import WATERMARK, nexmark_seed_job, on, one_group

OUTPUT = "id bigint, final bigint"
#: early bids are swept by a timer at the end of each second of event time
SWEEP_MS = 1_000


class AveragePricePerCategory(KeyedCoProcessFunction):
    """Bids (input 1) and auctions (input 2): each category's mean final price; see the module docs."""

    def open(self, ctx: RuntimeContext) -> None:
        self.auctions: MapState[int, list] = ctx.get_map_state(MapStateDescriptor("auctions", int, list))
        self.expiring: MapState[int, list] = ctx.get_map_state(MapStateDescriptor("expiring", int, list))
        self.early: MapState[int, list] = ctx.get_map_state(MapStateDescriptor("early", int, list))
        self.categories: MapState[int, list] = ctx.get_map_state(MapStateDescriptor("categories", int, list))

    def process_element1(self, bid: dict, ctx: Context) -> None:
        auction = self.auctions.get(bid["auction"])
        if auction is not None:
            if _offer(auction, bid["date_time"], bid["price"]):
                self.auctions.put(bid["auction"], auction)
            return
        ts = bid["date_time"]
        if ts <= ctx.timer_service().current_watermark():
            return  # late: an auction it could count for has closed or will start after it
        waiting = self.early.get(bid["auction"]) or []
        waiting.append((ts, bid["price"]))
        self.early.put(bid["auction"], waiting)
        ctx.timer_service().register_event_time_timer(ts - ts % SWEEP_MS + SWEEP_MS - 1)

    def process_element2(self, auction: dict, ctx: Context) -> None:
        held = [auction["category"], auction["date_time"], auction["expires"], None]
        for ts, price in self.early.get(auction["id"]) or []:
            _offer(held, ts, price)
        self.early.remove(auction["id"])
        self.auctions.put(auction["id"], held)
        closing = self.expiring.get(auction["expires"]) or []
        closing.append(auction["id"])
        self.expiring.put(auction["expires"], closing)
        ctx.timer_service().register_event_time_timer(auction["expires"])

    def on_timer(self, timestamp: int, ctx: OnTimerContext) -> Iterator[tuple[int, int]]:
        changed: dict[int, list] = {}
        for auction_id in self.expiring.get(timestamp) or []:
            category, _, _, final = self.auctions.get(auction_id, [None, 0, 0, None])
            self.auctions.remove(auction_id)
            if final is not None:
                figures = changed.get(category) or self.categories.get(category) or [0, 0]
                changed[category] = [figures[0] + final, figures[1] + 1]
        self.expiring.remove(timestamp)
        for category, (total, count) in sorted(changed.items()):
            self.categories.put(category, [total, count])
            yield (category, total // count)  # Flink's AVG(BIGINT): truncated (prices are positive)
        if timestamp % SWEEP_MS == SWEEP_MS - 1:
            for auction_id, waiting in self.early.items():
                keep = [b for b in waiting if b[0] > timestamp]
                if not keep:
                    self.early.remove(auction_id)
                elif len(keep) != len(waiting):
                    self.early.put(auction_id, keep)


def _offer(auction: list, ts: int, price: int) -> bool:
    """Make ``price`` the auction's highest if the bid was made while it was open; whether it did."""
    if auction[1] <= ts <= auction[2] and (auction[3] is None or price > auction[3]):
        auction[3] = price
        return True
    return False


def build(source: NexmarkBids) -> Job:
    return (
        on("nexmark-q4", source).key_by(group=one_group)
        .connect(view(source, "auction"), key_by={"group": one_group}, watermark=WATERMARK)
        .process(AveragePricePerCategory(), output_schema=OUTPUT)
        .sink(NoopSink())
    )


SEED_JOB = nexmark_seed_job(4, "average closing price per category (an aggregate of per-auction maxima)", build,
                            second=NexmarkAuctions)
