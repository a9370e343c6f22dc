"""Nexmark q20, expand bid with auction: every bid of a category-10 auction, with the auction's
columns.

The SQL (``queries/q20.sql``)::

    SELECT auction, bidder, price, channel, url, B.dateTime, B.extra,
           itemName, description, initialBid, reserve, A.dateTime, expires, seller, category, A.extra
    FROM bid AS B INNER JOIN auction AS A ON B.auction = A.id
    WHERE A.category = 10

A regular (unbounded) inner join, as a ``KeyedCoProcessFunction``: the bids (input 1, keyed
by ``auction``) meet the auctions (input 2, keyed by ``id``) in one key space, an auction's
id. Output columns in the SQL's order, snake_case (``bid_date_time``, ``bid_extra``, ...,
``auction_date_time``, ``auction_extra``). Per key (an auction's id):

* ``auction``: the auction's nine output columns once it arrived with category 10, or ``()``
  once it arrived with another category. Every later bid on it is emitted at once with
  those columns, or dropped (``()``): it can never join.
* ``waiting``: the bids that arrived before their auction (a bid is drawn for one of up to
  10 auctions ahead of the last one made). The auction's arrival emits them (category 10) or
  drops them (another category).

An auction's id is unique in the stream (ids count the auctions), so it arrives once per key
and a bid, once joined, has nothing left to meet: bids are never stored after they are
emitted, and waiting ones wait only until their auction arrives, a few auctions later, so
``waiting`` stays small. What grows is one entry per auction: a category-10 auction's
columns, which the SQL needs for as long as bids may come (it has no time bound: ``expires``
is not in the join condition, so a bid after it still joins), and the ``()`` of every other
auction, which lets its bids be dropped instead of waiting for ever. Unbounded, as the SQL's
join state is (Flink keeps both filtered sides for ever), but by the number of auctions,
not of bids. One exception waits for ever: auction 1000 is never made (the first event is id
2, an auction: 1001), yet is the hot auction of the first 100 auctions, so their bids
on it wait under key 1000 (some 800 bids, made in the first 1,700 events only).

Order inside a micro-batch: a key's auctions before its bids (``sparkstate.api.connected``),
so a bid whose auction arrives in the same batch does not wait.
"""

from __future__ import annotations

from collections.abc import Iterator

from sparkstate.api.connected import KeyedCoProcessFunction
from sparkstate.api.functions import Context, RuntimeContext
from sparkstate.api.state import ListState, ListStateDescriptor, ValueState, ValueStateDescriptor
from sparkstate.connectors.nexmark import NexmarkAuctions, NexmarkBids, view
from sparkstate.connectors.sinks import NoopSink
from sparkstate.job import Job
from sparkstate.jobs.nexmark.common import WATERMARK, nexmark_seed_job, on

OUTPUT = (
    "auction bigint, bidder bigint, price bigint, channel string, url string, bid_date_time timestamp, "
    "bid_extra string, item_name string, description string, initial_bid bigint, reserve bigint, "
    "auction_date_time timestamp, expires timestamp, seller bigint, category bigint, auction_extra string"
)
BID_COLUMNS = ("auction", "bidder", "price", "channel", "url", "date_time", "extra")
AUCTION_COLUMNS = (
    "item_name", "description", "initial_bid", "reserve", "date_time", "expires", "seller", "category", "extra"
)
#: the SQL's ``A.category = 10``
CATEGORY = 10
#: ``auction``'s value for an auction of another category: its bids never join
OTHER_CATEGORY: tuple = ()


class ExpandBidWithAuction(KeyedCoProcessFunction):
    """Bids (input 1) joined with their auction (input 2) when it is of category 10."""

    def open(self, ctx: RuntimeContext) -> None:
        self.auction: ValueState[tuple] = ctx.get_state(ValueStateDescriptor("auction", tuple))
        self.waiting: ListState[tuple] = ctx.get_list_state(ListStateDescriptor("waiting", tuple))

    def process_element1(self, bid: dict, ctx: Context) -> Iterator[tuple]:
        auction = self.auction.value()
        if auction is None:
            self.waiting.add(tuple(bid[c] for c in BID_COLUMNS))
        elif auction:  # not OTHER_CATEGORY
            yield tuple(bid[c] for c in BID_COLUMNS) + auction

    def process_element2(self, auction: dict, ctx: Context) -> Iterator[tuple]:
        waiting = self.waiting.get()
        if waiting:
            self.waiting.clear()
        if auction["category"] != CATEGORY:
            self.auction.update(OTHER_CATEGORY)
            return
        columns = tuple(auction[c] for c in AUCTION_COLUMNS)
        self.auction.update(columns)
        for bid in waiting:
            yield bid + columns


def build(source: NexmarkBids) -> Job:
    return (
        on("nexmark-q20", source).key_by("auction")
        .connect(view(source, "auction"), key_by="id", watermark=WATERMARK)
        .process(ExpandBidWithAuction(), output_schema=OUTPUT)
        .sink(NoopSink())
    )


SEED_JOB = nexmark_seed_job(
    20, "expand bid with auction: the bids of category-10 auctions with the auction's columns", build,
    second=NexmarkAuctions,
)
