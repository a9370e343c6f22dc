"""Nexmark q16, channel statistics: per channel and day, how many bids, bidders and auctions
at each price level.

The SQL groups the bids by ``channel, DATE_FORMAT(dateTime, 'yyyy-MM-dd')`` without a window
and computes ``max(DATE_FORMAT(dateTime, 'HH:mm'))`` (the day's latest minute with a bid),
``count(*)``, ``count(distinct bidder)`` and ``count(distinct auction)``, each in total and
filtered to the three price ranges (rank1 ``price < 10000``, rank2 below 1,000,000, rank3
from there). As an unbounded aggregate it is an upsert stream keyed by ``(channel, day)``,
which Flink's mini-batch emits once per batch and group.

Keyed by channel (the four hot channels carry half of the bids: hot keys), with a tumbling
window of one day (UTC) that fires early: each micro-batch emits the new row of every
channel and day it changed (``early_fire``), and the last row of a group is the SQL's. The
aggregate is q15's, :class:`~sparkstate.jobs.nexmark.price_ranges.PriceRangeCounts`, with
the latest bid's time for the latest minute; it merges, so a batch with a hot channel is
aggregated in two phases (each source partition folds its bids per channel and day before
the shuffle).

As in q15, a day's state goes once the watermark has passed the day's end (the stream is in
event-time order, so no bid of that day is still to come; one later than the 4 s the
watermark allows would be late data, where Flink's aggregate, which keeps its state unless
given a TTL, would count it with the others).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sparkstate.api.windows import ProcessWindowFunction, TumblingEventTimeWindows, WindowContext
from sparkstate.connectors.nexmark import NexmarkBids
from sparkstate.connectors.sinks import NoopSink
from sparkstate.job import Job
from sparkstate.jobs.nexmark.common import DAY_MS, day_text, nexmark_seed_job, on
from sparkstate.jobs.nexmark.price_ranges import PriceRangeCounts

OUTPUT = ("channel string, day string, minute string, total_bids bigint, rank1_bids bigint, rank2_bids bigint, "
          "rank3_bids bigint, total_bidders bigint, rank1_bidders bigint, rank2_bidders bigint, rank3_bidders bigint, "
          "total_auctions bigint, rank1_auctions bigint, rank2_auctions bigint, rank3_auctions bigint")
MINUTE_MS = 60_000
#: ``DATE_FORMAT(dateTime, 'HH:mm')`` of each minute of a day
MINUTES = tuple(f"{m // 60:02d}:{m % 60:02d}" for m in range(24 * 60))


class ChannelDayRow(ProcessWindowFunction):
    """The channel's row for the day: the day, its latest minute with a bid and the twelve counts."""

    def process(self, key: Any, context: WindowContext, elements: list[Any]) -> list[tuple]:
        ((counts, _, _, latest),) = elements
        return [(key, day_text(context.window.start // DAY_MS), MINUTES[latest % DAY_MS // MINUTE_MS], *counts)]


def build(source: NexmarkBids) -> Job:
    return (
        on("nexmark-q16", source).key_by("channel")
        .window(TumblingEventTimeWindows.of(timedelta(days=1))).early_fire()
        .aggregate(PriceRangeCounts(), window_function=ChannelDayRow(), output_schema=OUTPUT)
        .sink(NoopSink())
    )


SEED_JOB = nexmark_seed_job(16, "channel statistics per day (distinct counts with filters; a one-day window "
                            "firing every micro-batch, two phases for hot channels)", build)
