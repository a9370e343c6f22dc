"""Nexmark q11, user sessions: how many bids each bidder made in each of their sessions.

The SQL (``queries/q11.sql``)::

    SELECT B.bidder, count(*) AS bid_count,
           SESSION_START(B.dateTime, INTERVAL '10' SECOND) AS starttime,
           SESSION_END(B.dateTime, INTERVAL '10' SECOND) AS endtime
    FROM bid B
    GROUP BY B.bidder, SESSION(B.dateTime, INTERVAL '10' SECOND)

An event-time session window per bidder (keyed by ``bidder``): each bid opens the window
``[date_time, date_time + 10 s)``, and a bidder's windows that overlap or touch merge, with
their counts (Flink's ``TimeWindow.intersects``: ``start <= other.end and end >= other.start``,
so two bids exactly 10 s apart are in one session). A session is therefore
``[first bid, last bid + 10 s)``: ``starttime`` is its first bid's time and ``endtime`` its
last bid's time plus the gap, as Flink's ``SESSION_START`` / ``SESSION_END``. The keyed state
is one count per open session of each bidder, with an event-time timer at ``endtime - 1``;
the session is emitted (one row) and its state dropped when the watermark reaches it.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from sparkstate.api import agg
from sparkstate.api.windows import EventTimeSessionWindows, ProcessWindowFunction, WindowContext
from sparkstate.connectors.nexmark import NexmarkBids
from sparkstate.connectors.sinks import NoopSink
from sparkstate.job import Job
from sparkstate.jobs.nexmark.common import nexmark_seed_job, on

OUTPUT = "bidder bigint, bid_count bigint, starttime timestamp, endtime timestamp"
#: the SQL's ``SESSION(B.dateTime, INTERVAL '10' SECOND)``
GAP = timedelta(seconds=10)


class SessionRow(ProcessWindowFunction):
    """A session's row: the bidder, its count, the session's start and end."""

    def process(self, key: Any, context: WindowContext, elements: list[dict]) -> Iterator[tuple]:
        (result,) = elements
        yield (key, result["bid_count"], context.window.start, context.window.end)


def build(source: NexmarkBids) -> Job:
    return (
        on("nexmark-q11", source).key_by("bidder")
        .window(EventTimeSessionWindows.with_gap(GAP))
        .aggregate(agg.count("bid_count"), window_function=SessionRow(), output_schema=OUTPUT)
        .sink(NoopSink())
    )


SEED_JOB = nexmark_seed_job(11, "user sessions: bids per bidder per session (10 s gap; session windows)", build)
