"""Nexmark q7, highest bid: the bids whose price is the highest of a 10-second window.

The SQL (``queries/q7.sql``)::

    SELECT B.auction, B.price, B.bidder, B.dateTime, B.extra
    FROM bid B
    JOIN (SELECT MAX(price) AS maxprice, window_end as dateTime
          FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(dateTime), INTERVAL '10' SECOND))
          GROUP BY window_start, window_end) B1
    ON B.price = B1.maxprice
    WHERE B.dateTime BETWEEN B1.dateTime - INTERVAL '10' SECOND AND B1.dateTime

So for each window ``[start, end)`` with bids, its highest price, and every bid of that price
with ``start <= dateTime <= end``: ``BETWEEN`` is inclusive, so a bid exactly at ``end``, which
belongs to the next window, is also a result of this one when its price ties the maximum.
The rows have the SELECT's columns in its order (the reference's sink table names them
``auction, bidder, price, ...`` and so receives the price as ``bidder``: a slip of the sink's
DDL, not the query's meaning).

The maximum is over every bid of a window, so all bids meet in one group, as in Flink's plan
(a window aggregate grouped by the window alone): one computed key,
:func:`~sparkstate.jobs.nexmark.common.one_group`. ``BETWEEN``'s range ``[start, end]`` is
a sliding event-time window of 10 s + 1 ms every 10 s: each bid is in its own window and, at
a window's first millisecond, in the window before as its *edge*. The aggregate
(:class:`HighestPrice`) keeps per window the highest price of the bids off those
milliseconds and the bids at it, and the bids on a multiple of 10 s apart (each is the
first millisecond of one window and the edge of the other; only the window knows which).
Its ``merge`` keeps the higher price's bids, so the job aggregates in two phases
(``JobSettings.pre_aggregate``): each source partition reduces its batch to those few bids
before the shuffle. When the window fires (the watermark past ``end``),
:class:`AtHighestPrice` takes the window's maximum over ``[start, end)`` and emits the bids of
``[start, end]`` at it. So the state is the open windows' tied best bids and bids on a
window boundary: bounded by the watermark's delay, not by the stream. A bid behind the
watermark of an already fired window is late data, as in Flink's windows.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sparkstate.api.state import AggregateFunction
from sparkstate.api.windows import ProcessWindowFunction, SlidingEventTimeWindows, WindowContext
from sparkstate.connectors.nexmark import NexmarkBids
from sparkstate.connectors.sinks import NoopSink
from sparkstate.job import Job
from sparkstate.jobs.nexmark.common import nexmark_seed_job, on, one_group

OUTPUT = "auction bigint, price bigint, bidder bigint, date_time timestamp, extra string"
WINDOW_MS = 10_000

#: a bid as the aggregate keeps it, in the output's column order
Bid = tuple[int, int, int, int, str]
#: the accumulator: the highest price off window boundaries (None: no such bid yet), the
#: bids at it, and the bids on a boundary
Best = tuple[int | None, list[Bid], list[Bid]]


class HighestPrice(AggregateFunction[dict, Best, Best]):
    """The bids at a window's highest price, and its bids on a window boundary; see the module docs."""

    def create_accumulator(self) -> Best:
        return (None, [], [])

    def add(self, bid: dict[str, Any], acc: Best) -> Best:
        row = (bid["auction"], bid["price"], bid["bidder"], bid["date_time"], bid["extra"])
        top, best, edge = acc
        if row[3] % WINDOW_MS == 0:
            edge.append(row)
        elif top is None or row[1] > top:
            return (row[1], [row], edge)
        elif row[1] == top:
            best.append(row)
        return acc

    def merge(self, a: Best, b: Best) -> Best:
        (ta, best_a, edge_a), (tb, best_b, edge_b) = a, b
        edge = edge_a + edge_b
        if tb is None or (ta is not None and ta > tb):
            return (ta, best_a, edge)
        if ta is None or tb > ta:
            return (tb, best_b, edge)
        return (ta, best_a + best_b, edge)

    def get_result(self, acc: Best) -> Best:
        return acc


class AtHighestPrice(ProcessWindowFunction):
    """The bids of ``[start, end]`` at the highest price of ``[start, end)``."""

    def process(self, key: Any, context: WindowContext, elements: list[Any]) -> list[Bid]:
        ((top, best, edge),) = elements
        start = context.window.start
        first = [b for b in edge if b[3] == start]  # the window's own first millisecond
        prices = [p for p in (top, *(b[1] for b in first)) if p is not None]
        if not prices:
            return []  # only bids at its end: the window [start, end) itself had none
        price = max(prices)
        rows = best if top == price else []
        return rows + [b for b in first if b[1] == price] + [b for b in edge if b[3] != start and b[1] == price]


def build(source: NexmarkBids) -> Job:
    return (
        on("nexmark-q7", source).key_by(group=one_group)
        .window(SlidingEventTimeWindows.of(timedelta(milliseconds=WINDOW_MS + 1), timedelta(milliseconds=WINDOW_MS)))
        .aggregate(HighestPrice(), window_function=AtHighestPrice(), output_schema=OUTPUT)
        .sink(NoopSink())
    )


SEED_JOB = nexmark_seed_job(7, "highest bid: the bids at each 10-second window's highest price", build)
