"""Nexmark q9, winning bids: each auction with its highest bid made while it was open.

The SQL (``queries/q9.sql``)::

    SELECT id, itemName, description, initialBid, reserve, dateTime, expires, seller, category, extra,
           auction, bidder, price, bid_dateTime, bid_extra
    FROM (
       SELECT A.*, B.auction, B.bidder, B.price, B.dateTime AS bid_dateTime, B.extra AS bid_extra,
         ROW_NUMBER() OVER (PARTITION BY A.id ORDER BY B.price DESC, B.dateTime ASC) AS rownum
       FROM auction A, bid B
       WHERE A.id = B.auction AND B.dateTime BETWEEN A.dateTime AND A.expires
    )
    WHERE rownum <= 1

Bids (the first input, keyed by ``auction``) meet their auction (the second input, keyed by
``id``) in a :class:`~sparkstate.api.connected.KeyedCoProcessFunction`. A bid qualifies when
``auction.date_time <= bid.date_time <= auction.expires`` (``BETWEEN`` is inclusive); the
winner is the qualifying bid with the highest price, then the earliest ``date_time`` (the SQL
leaves a tie on both open: the first to arrive is kept). The column names are the SQL's,
snake_cased (``bid_date_time``, ``bid_extra``).

Keyed state, per auction id:

* ``auction``: the auction, from its arrival until the watermark reaches its ``expires``;
* ``best``: the best qualifying bid so far (one bid, not the auction's bids);
* ``early``: bids that arrived while the key had no auction. A bid may come before its auction
  (the generator bids on ids up to 10 ahead of the last auction), or after it has expired and
  been dropped. Each waits, with an event-time timer at its own ``date_time``, until the
  auction arrives (which takes the qualifying ones) or the watermark reaches that time: an
  auction that arrives later is not late, so its ``date_time`` is above the watermark, hence
  above the bid's, and the bid cannot qualify. ``early`` holds at most the bids of the last
  watermark delay (4 s of event time, plus a micro-batch) of auctions not in state.

So the state is bounded by the open auctions (one auction and one bid each) plus the bids of
the watermark delay. Every bid an auction can win has ``date_time <= expires``, so once the
watermark reaches ``expires`` no bid can change the result (bids are not late, as Nexmark's
are in order): the auction's event-time timer at ``expires`` emits its one final row (the last
value of the changelog Flink SQL emits for the ranking) and drops its state. An auction with
no qualifying bid has no row (an inner join).
"""

from __future__ import annotations

from collections.abc import Iterator

from sparkstate.api.connected import KeyedCoProcessFunction
from sparkstate.api.functions import Context, OnTimerContext, RuntimeContext
from sparkstate.api.state import ListState, ListStateDescriptor, ValueState, ValueStateDescriptor
from sparkstate.connectors.nexmark import NexmarkAuctions, NexmarkBids, view
from sparkstate.connectors.sinks import NoopSink
from sparkstate.job import Job
from sparkstate.jobs.nexmark.common import WATERMARK, nexmark_seed_job, on

OUTPUT = (
    "id bigint, item_name string, description string, initial_bid bigint, reserve bigint, date_time timestamp, "
    "expires timestamp, seller bigint, category bigint, extra string, "
    "auction bigint, bidder bigint, price bigint, bid_date_time timestamp, bid_extra string"
)
AUCTION_COLUMNS = ("id", "item_name", "description", "initial_bid", "reserve", "date_time", "expires", "seller",
                   "category", "extra")


class WinningBids(KeyedCoProcessFunction):
    """Bids (input 1) and their auction (input 2): the auction's best bid at its expiry; see the module docs."""

    def open(self, ctx: RuntimeContext) -> None:
        self.auction: ValueState[dict] = ctx.get_state(ValueStateDescriptor("auction", dict))
        self.best: ValueState[dict] = ctx.get_state(ValueStateDescriptor("best", dict))
        self.early: ListState[dict] = ctx.get_list_state(ListStateDescriptor("early", dict))

    def process_element1(self, bid: dict, ctx: Context) -> None:
        auction = self.auction.value()
        if auction is None:
            self.early.add(bid)
            ctx.timer_service().register_event_time_timer(bid["date_time"])
        else:
            self._offer(auction, bid)

    def process_element2(self, auction: dict, ctx: Context) -> None:
        self.auction.update(auction)
        timers = ctx.timer_service()
        timers.register_event_time_timer(auction["expires"])
        early = self.early.get()
        if early:
            self.early.clear()
            for bid in early:
                self._offer(auction, bid)
                if bid["date_time"] != auction["expires"]:
                    timers.delete_event_time_timer(bid["date_time"])

    def on_timer(self, timestamp: int, ctx: OnTimerContext) -> Iterator[tuple]:
        auction = self.auction.value()
        if auction is not None and timestamp >= auction["expires"]:
            best = self.best.value()
            if best is not None:
                yield (*(auction[c] for c in AUCTION_COLUMNS),
                       best["auction"], best["bidder"], best["price"], best["date_time"], best["extra"])
            self.auction.clear()
            self.best.clear()
        early = self.early.get()
        if early:
            keep = [b for b in early if b["date_time"] > timestamp]
            if len(keep) != len(early):
                self.early.update(keep)

    def _offer(self, auction: dict, bid: dict) -> None:
        """Make ``bid`` the best one if it qualifies for ``auction`` and beats the one held."""
        ts = bid["date_time"]
        if not auction["date_time"] <= ts <= auction["expires"]:
            return
        best = self.best.value()
        if best is None or bid["price"] > best["price"] or (bid["price"] == best["price"] and ts < best["date_time"]):
            self.best.update(bid)


def build(source: NexmarkBids) -> Job:
    return (
        on("nexmark-q9", source).key_by("auction")
        .connect(view(source, "auction"), key_by="id", watermark=WATERMARK)
        .process(WinningBids(), output_schema=OUTPUT)
        .sink(NoopSink())
    )


SEED_JOB = nexmark_seed_job(9, "winning bids: each auction's highest bid while it was open (keyed co-process)",
                            build, second=NexmarkAuctions)
