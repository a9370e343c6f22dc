"""Nexmark q5, hot items: per sliding window, the auctions with the most bids.

The SQL (``queries/q5.sql``) counts bids per auction in hopping windows of 10 seconds every
2 seconds (``HOP(TABLE bid, DESCRIPTOR(dateTime), INTERVAL '2' SECOND, INTERVAL '10'
SECOND)``), takes each window's highest count, and joins back::

    SELECT AuctionBids.auction, AuctionBids.num
    FROM (... count(*) AS num ... GROUP BY auction, window_start, window_end) AS AuctionBids
    JOIN (... max(CountBids.num) AS maxn ... GROUP BY starttime, endtime) AS MaxBids
    ON AuctionBids.starttime = MaxBids.starttime AND AuctionBids.endtime = MaxBids.endtime
       AND AuctionBids.num >= MaxBids.maxn

So one row ``(auction, num)`` per window and auction whose count is the window's highest (ties
give several). Each bid falls into 5 windows (``[start, start + 10 s)`` for the starts that
are multiples of 2 s within 10 s before it).

The highest count is over every auction of a window, so all bids meet in one keyed function,
as in Flink's plan (the max is grouped by the window alone): one computed key,
:func:`~sparkstate.jobs.nexmark.common.one_group`. Its state: MapState from window end to
that window's counts per auction. An event-time timer at a window's end (Flink's window end
is exclusive: it fires once the watermark has reached ``end - 1``) emits the window's top
auctions and drops its counts, so the state is the open windows' counts (5 windows, plus the
watermark's delay): bounded by the auctions bid on in 14 seconds, not by the stream. A bid
behind the watermark whose windows have fired is dropped (late data, as Flink's windows do).
"""

from __future__ import annotations

from collections.abc import Iterator

from sparkstate.api.functions import Context, KeyedProcessFunction, OnTimerContext, RuntimeContext
from sparkstate.api.state import MapState, MapStateDescriptor
from sparkstate.connectors.nexmark import NexmarkBids
from sparkstate.connectors.sinks import NoopSink
from sparkstate.job import Job
from sparkstate.jobs.nexmark.common import nexmark_seed_job, on, one_group

OUTPUT = "auction bigint, num bigint"
SIZE_MS = 10_000
SLIDE_MS = 2_000


def window_ends(ts: int) -> range:
    """The ends of the hopping windows holding ``ts``: ``start <= ts < start + SIZE`` for each
    start a multiple of ``SLIDE`` (Flink's ``SlidingEventTimeWindows`` assignment)."""
    last_start = ts - ts % SLIDE_MS
    return range(last_start + SIZE_MS, last_start, -SLIDE_MS)


class HotItems(KeyedProcessFunction):
    """Per hopping window, the auctions with the window's highest bid count; see the module docs."""

    def open(self, ctx: RuntimeContext) -> None:
        self.counts: MapState[int, dict] = ctx.get_map_state(MapStateDescriptor("counts", int, dict))

    def process_element(self, bid: dict, ctx: Context) -> None:
        timers = ctx.timer_service()
        watermark = timers.current_watermark()
        auction = bid["auction"]
        for end in window_ends(bid["date_time"]):
            if end - 1 <= watermark:
                continue  # that window has fired: late for it
            counts = self.counts.get(end)
            if counts is None:
                counts = {}
                timers.register_event_time_timer(end - 1)
            counts[auction] = counts.get(auction, 0) + 1
            self.counts.put(end, counts)

    def on_timer(self, timestamp: int, ctx: OnTimerContext) -> Iterator[tuple[int, int]]:
        end = timestamp + 1
        counts = self.counts.get(end)
        if not counts:
            return
        top = max(counts.values())
        for auction, num in counts.items():
            if num >= top:
                yield (auction, num)
        self.counts.remove(end)


def build(source: NexmarkBids) -> Job:
    return (
        on("nexmark-q5", source).key_by(group=one_group)
        .process(HotItems(), output_schema=OUTPUT)
        .sink(NoopSink())
    )


SEED_JOB = nexmark_seed_job(5, "hot items: per 10-second window every 2 seconds, the auctions with the most bids", build)
