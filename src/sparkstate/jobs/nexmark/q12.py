"""Nexmark q12, processing-time windows: how many bids each bidder makes per 10 s of processing time.

The SQL (``queries/q12.sql``)::

    CREATE VIEW B AS SELECT *, PROCTIME() AS p_time FROM bid;

    SELECT bidder, count(*) AS bid_count, window_start AS starttime, window_end AS endtime
    FROM TABLE(TUMBLE(TABLE B, DESCRIPTOR(p_time), INTERVAL '10' SECOND))
    GROUP BY bidder, window_start, window_end

A tumbling processing-time window per bidder (keyed by ``bidder``): a bid counts in the
10 s window (aligned to the epoch) that holds the processing time it is read at - on Spark,
the micro-batch's timestamp - whatever its ``date_time``. The keyed state is one count per
bidder and open window; a window is emitted (one row per bidder with bids in it) and dropped
when processing time reaches its last millisecond, ``endtime - 1``. Which window a bid falls
in depends on when it is read, so the rows are not deterministic; that every bid is counted
once, in a window ``[starttime, starttime + 10 s)`` aligned to 10 s, is.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from sparkstate.api import agg
from sparkstate.api.windows import ProcessWindowFunction, TumblingProcessingTimeWindows, WindowContext
from sparkstate.connectors.nexmark import NexmarkBids
from sparkstate.connectors.sinks import NoopSink
from sparkstate.job import Job
from sparkstate.jobs.nexmark.common import nexmark_seed_job, on

OUTPUT = "bidder bigint, bid_count bigint, starttime timestamp, endtime timestamp"
#: the SQL's ``TUMBLE(..., DESCRIPTOR(p_time), INTERVAL '10' SECOND)``
SIZE = timedelta(seconds=10)


class WindowRow(ProcessWindowFunction):
    """A window's row: the bidder, its count, the window's start and end."""

    def process(self, key: Any, context: WindowContext, elements: list[dict]) -> Iterator[tuple]:
        (result,) = elements
        yield (key, result["bid_count"], context.window.start, context.window.end)


def build(source: NexmarkBids) -> Job:
    return (
        on("nexmark-q12", source).key_by("bidder")
        .window(TumblingProcessingTimeWindows.of(SIZE))
        .aggregate(agg.count("bid_count"), window_function=WindowRow(), output_schema=OUTPUT)
        .sink(NoopSink())
    )


SEED_JOB = nexmark_seed_job(12, "bids per bidder per 10 s of processing time (processing-time windows)", build)
