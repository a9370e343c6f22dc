"""Nexmark q15, bidding statistics report: per day, bids, bidders and auctions by price range.

The SQL (``queries/q15.sql``) groups the bids by ``DATE_FORMAT(dateTime, 'yyyy-MM-dd')``
without a window and computes ``count(*)``, ``count(distinct bidder)`` and ``count(distinct
auction)``, each in total and for each price range (rank1 ``price < 10000``, rank2 below
1,000,000, rank3 from there; ``FILTER (WHERE ...)``). As an unbounded aggregate it is an
upsert stream keyed by ``day``, which Flink's mini-batch emits once per batch and day.

Grouping by the day is a tumbling window of one day (UTC, as ``DATE_FORMAT`` of an epoch
time) that fires early: each micro-batch emits the day's row as it then stands
(``early_fire``), and the last row of a day is the SQL's. All bids of a day meet in one
group (:func:`~sparkstate.jobs.nexmark.common.one_group`): the hot key that Flink's
``table.optimizer.distinct-agg.split.enabled`` addresses. The window's aggregate,
:class:`~sparkstate.jobs.nexmark.price_ranges.PriceRangeCounts`, merges, so the job
aggregates in two phases: each source partition folds its batch's bids per day before the
shuffle, and the group merges their distinct ids.

A day's state goes when the watermark passes the day's end (its window's end: Nexmark's bids
are in order, so no bid of that day is still to come; a bid later than the watermark's 4 s
would be late data, where Flink, with no state TTL, would keep the day for ever). So the
state is the distinct bidders and auctions of the current day (and of the day before for the
watermark's 4 s).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sparkstate.api.windows import ProcessWindowFunction, TumblingEventTimeWindows, WindowContext
from sparkstate.connectors.nexmark import NexmarkBids
from sparkstate.connectors.sinks import NoopSink
from sparkstate.job import Job
from sparkstate.jobs.nexmark.common import DAY_MS, day_text, nexmark_seed_job, on, one_group
from sparkstate.jobs.nexmark.price_ranges import PriceRangeCounts

OUTPUT = (
    "day string, total_bids bigint, rank1_bids bigint, rank2_bids bigint, rank3_bids bigint, "
    "total_bidders bigint, rank1_bidders bigint, rank2_bidders bigint, rank3_bidders bigint, "
    "total_auctions bigint, rank1_auctions bigint, rank2_auctions bigint, rank3_auctions bigint"
)


class DayRow(ProcessWindowFunction):
    """The day's row: its date and the twelve counts."""

    def process(self, key: Any, context: WindowContext, elements: list[Any]) -> list[tuple]:
        ((counts, _, _, _),) = elements
        return [(day_text(context.window.start // DAY_MS), *counts)]


def build(source: NexmarkBids) -> Job:
    return (
        on("nexmark-q15", source).key_by(group=one_group)
        .window(TumblingEventTimeWindows.of(timedelta(days=1))).early_fire()
        .aggregate(PriceRangeCounts(), window_function=DayRow(), output_schema=OUTPUT)
        .sink(NoopSink())
    )


SEED_JOB = nexmark_seed_job(15, "bidding statistics per day: bids, distinct bidders and auctions by price range "
                            "(a one-day window firing every micro-batch, aggregated in two phases)", build)
