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

The highest count is over every auction of a window, so all bids meet in one group, as in
Flink's plan (the max is grouped by the window alone): one computed key,
:func:`~sparkstate.jobs.nexmark.common.one_group`, and sliding event-time windows whose
aggregate is the window's counts per auction (:class:`AuctionCounts`). Its ``merge`` adds
counts, so the job aggregates in two phases (``JobSettings.pre_aggregate``, Flink's
local/global aggregation): each source partition counts its batch's bids per window before
the shuffle, and the one group merges a few dicts per window instead of taking every bid.
When a window fires (Flink's window end is exclusive: once the watermark has reached
``end - 1``), :class:`HottestAuctions` emits its top auctions, and the window's state goes.
So the state is the open windows' counts (5 windows, plus the watermark's delay): bounded by
the auctions bid on in 14 seconds, not by the stream. A bid behind the watermark whose
windows have fired is late data, as in Flink's windows.
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

OUTPUT = "auction bigint, num bigint"
SIZE_MS = 10_000
SLIDE_MS = 2_000


class AuctionCounts(AggregateFunction[dict, dict, dict]):
    """A window's bids per auction: ``{auction: count}``; ``merge`` adds two windows' counts."""

    def create_accumulator(self) -> dict[int, int]:
        return {}

    def add(self, bid: dict[str, Any], acc: dict[int, int]) -> dict[int, int]:
        auction = bid["auction"]
        acc[auction] = acc.get(auction, 0) + 1
        return acc

    def merge(self, a: dict[int, int], b: dict[int, int]) -> dict[int, int]:
        if len(a) < len(b):
            a, b = b, a
        for auction, n in b.items():
            a[auction] = a.get(auction, 0) + n
        return a

    def get_result(self, acc: dict[int, int]) -> dict[int, int]:
        return acc


class HottestAuctions(ProcessWindowFunction):
    """The auctions whose count is the window's highest (ties give several)."""

    def process(self, key: Any, context: WindowContext, elements: list[Any]) -> list[tuple[int, int]]:
        (counts,) = elements
        if not counts:
            return []
        top = max(counts.values())
        return [(auction, num) for auction, num in counts.items() if num >= top]


def build(source: NexmarkBids) -> Job:
    return (
        on("nexmark-q5", source).key_by(group=one_group)
        .window(SlidingEventTimeWindows.of(timedelta(milliseconds=SIZE_MS), timedelta(milliseconds=SLIDE_MS)))
        .aggregate(AuctionCounts(), window_function=HottestAuctions(), output_schema=OUTPUT)
        .sink(NoopSink())
    )


SEED_JOB = nexmark_seed_job(5, "hot items: per 10-second window every 2 seconds, the auctions with the most bids", build)
