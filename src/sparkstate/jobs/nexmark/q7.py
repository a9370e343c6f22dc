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

The maximum is over every bid of a window, so all bids meet in one keyed function, as in
Flink's plan (a window aggregate grouped by the window alone): one computed key,
:func:`~sparkstate.jobs.nexmark.common.one_group`. Its state, per window end, in MapState:

* ``best``: the bids at the highest price seen so far in the window (ties only);
* ``edge``: bids exactly at the window's end (the next window's first millisecond).

An event-time timer at the window's end fires when the watermark has passed every bid of
``[start, end]`` (Nexmark's bids are in order; a bid behind the watermark of an already
fired window is dropped, as Flink's window drops late data): it emits ``best`` and the
``edge`` bids of that price, and drops both. So the state is the open windows' tied best
bids and edge bids: bounded by the watermark's delay, not by the stream.
"""

from __future__ import annotations

from collections.abc import Iterator

from sparkstate.api.functions import Context, KeyedProcessFunction, OnTimerContext, RuntimeContext
from sparkstate.api.state import MapState, MapStateDescriptor
from sparkstate.connectors.nexmark import NexmarkBids
from sparkstate.connectors.sinks import NoopSink
from sparkstate.job import Job
from sparkstate.jobs.nexmark.common import nexmark_seed_job, on, one_group

OUTPUT = "auction bigint, price bigint, bidder bigint, date_time timestamp, extra string"
WINDOW_MS = 10_000


class HighestBid(KeyedProcessFunction):
    """The bids at each 10-second window's highest price; see the module docs."""

    def open(self, ctx: RuntimeContext) -> None:
        self.best: MapState[int, list] = ctx.get_map_state(MapStateDescriptor("best", int, list))
        self.edge: MapState[int, list] = ctx.get_map_state(MapStateDescriptor("edge", int, list))

    def process_element(self, bid: dict, ctx: Context) -> None:
        timers = ctx.timer_service()
        ts = bid["date_time"]
        end = ts - ts % WINDOW_MS + WINDOW_MS
        if end <= timers.current_watermark():
            return  # late: its window has fired
        held = self.best.get(end)
        if held is None or bid["price"] > held[0]["price"]:
            self.best.put(end, [bid])
            timers.register_event_time_timer(end)
        elif bid["price"] == held[0]["price"]:
            held.append(bid)
            self.best.put(end, held)
        if ts % WINDOW_MS == 0 and ts > timers.current_watermark():
            # also the end of the window before: a result of it if its price ties that maximum
            edge = self.edge.get(ts) or []
            edge.append(bid)
            self.edge.put(ts, edge)
            timers.register_event_time_timer(ts)

    def on_timer(self, timestamp: int, ctx: OnTimerContext) -> Iterator[tuple]:
        best = self.best.get(timestamp)
        edge = self.edge.get(timestamp) or []
        if best is not None:
            price = best[0]["price"]
            for bid in best + [b for b in edge if b["price"] == price]:
                yield (bid["auction"], bid["price"], bid["bidder"], bid["date_time"], bid["extra"])
            self.best.remove(timestamp)
        if edge:
            self.edge.remove(timestamp)


def build(source: NexmarkBids) -> Job:
    return (
        on("nexmark-q7", source).key_by(group=one_group)
        .process(HighestBid(), output_schema=OUTPUT)
        .sink(NoopSink())
    )


SEED_JOB = nexmark_seed_job(7, "highest bid: the bids at each 10-second window's highest price", build)
