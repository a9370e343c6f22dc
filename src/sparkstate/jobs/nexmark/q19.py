"""Nexmark q19, auction top-10 price: each auction's ten highest bids.

The SQL keeps the bids with ``ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC)
<= 10`` and outputs each with its ``rank_number``. As a ranking it is an upsert stream here,
keyed by ``(auction, rank_number)``: when a bid enters the top ten at rank ``r``, the rows of
ranks ``r`` to the last (each moved down one) are emitted again with their new ranks.

Keyed by auction; a ``ValueState`` holds the auction's top ten as a list, highest price
first: ten bids at most, whatever the auction's number of bids. Ties on price keep the order
of arrival, as Flink's rank operator does (``AppendOnlyTopNFunction``: rows with an equal sort
key are kept in arrival order, a new one after the others, and a bid equal to the tenth when
ten are kept does not enter).
"""

from __future__ import annotations

from collections.abc import Iterator

from sparkstate.api.functions import Context, KeyedProcessFunction, RuntimeContext
from sparkstate.api.state import ValueState, ValueStateDescriptor
from sparkstate.connectors.nexmark import NexmarkBids
from sparkstate.connectors.sinks import NoopSink
from sparkstate.job import Job
from sparkstate.jobs.nexmark.common import nexmark_seed_job, on

OUTPUT = ("auction bigint, bidder bigint, price bigint, channel string, url string, date_time timestamp, extra string, "
          "rank_number bigint")
TOP = 10

#: a kept bid: auction, bidder, price (``row[2]``), channel, url, date_time, extra
Row = tuple[int, int, int, str, str, int, str]


class TopPrices(KeyedProcessFunction):
    """Keeps an auction's ten highest bids; emits the ranks a new bid changes."""

    def __init__(self, top: int = TOP) -> None:
        self.top = top

    def open(self, ctx: RuntimeContext) -> None:
        self.kept: ValueState[list[Row]] = ctx.get_state(ValueStateDescriptor("top", list))

    def process_element(self, bid: dict, ctx: Context) -> Iterator[tuple]:
        price: int = bid["price"]
        kept = self.kept.value() or []
        if len(kept) >= self.top and price <= kept[-1][2]:
            return
        at = len(kept)  # after every kept bid with a price at least this one's
        while at > 0 and kept[at - 1][2] < price:
            at -= 1
        row: Row = (bid["auction"], bid["bidder"], price, bid["channel"], bid["url"], bid["date_time"], bid["extra"])
        kept.insert(at, row)
        del kept[self.top:]
        self.kept.update(kept)
        for rank_number in range(at, len(kept)):
            yield (*kept[rank_number], rank_number + 1)


def build(source: NexmarkBids) -> Job:
    return on("nexmark-q19", source).key_by("auction").process(TopPrices(), output_schema=OUTPUT).sink(NoopSink())


SEED_JOB = nexmark_seed_job(19, "each auction's ten highest bids (top-N ranking, bounded ValueState)", build)
