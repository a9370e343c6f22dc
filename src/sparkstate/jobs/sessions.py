"""User sessions (seed 003): one summary per session, closed after 30 minutes of inactivity.

Seed 003's ``SessionAggregator`` keeps one open session per user and moves a timer on every
event; with events out of order (within the watermark) that splits or mislabels sessions. The
same summary as an event-time session window is exact: each event starts a 30-minute session
window, overlapping ones merge (with their accumulators), and a session is emitted once the
watermark passes 30 minutes after its last event.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sparkstate.api.state import AggregateFunction
from sparkstate.api.time import WatermarkStrategy
from sparkstate.api.windows import EventTimeSessionWindows
from sparkstate.connectors.generator import ClickEvents
from sparkstate.connectors.sinks import NoopSink
from sparkstate.job import Job
from sparkstate.jobs.registry import SeedJob

GAP = timedelta(minutes=30)
OUTPUT = (
    "user_id string, window_start timestamp, window_end timestamp, last_event timestamp, "
    "events bigint, event_counts map<string, bigint>"
)


class SessionAggregator(AggregateFunction):
    """A session's last event time, event count and counts per event type.

    The accumulator is ``[last event time, events, {event type: count}]``; ``merge`` combines
    two sessions that a late event has joined.
    """

    def create_accumulator(self) -> list:
        return [None, 0, {}]

    def add(self, value: dict, acc: list) -> list:
        ts = value["event_time"]
        if acc[0] is None or ts > acc[0]:
            acc[0] = ts
        acc[1] += 1
        counts = acc[2]
        kind = value["event_type"]
        counts[kind] = counts.get(kind, 0) + 1
        return acc

    def merge(self, a: list, b: list) -> list:
        counts = dict(a[2])
        for kind, n in b[2].items():
            counts[kind] = counts.get(kind, 0) + n
        last = b[0] if a[0] is None or (b[0] is not None and b[0] > a[0]) else a[0]
        return [last, a[1] + b[1], counts]

    def get_result(self, acc: list) -> dict[str, Any]:
        return {"last_event": acc[0], "events": acc[1], "event_counts": dict(acc[2])}


def build(source: ClickEvents) -> Job:
    watermark = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(milliseconds=source.max_out_of_orderness_ms))
    return (
        Job("sessions").source(source, watermark=watermark).key_by("user_id")
        .window(EventTimeSessionWindows.with_gap(GAP))
        .aggregate(SessionAggregator(), output_schema=OUTPUT)
        .sink(NoopSink())
    )


SEED_JOB = SeedJob(
    name="sessions",
    seed="003",
    description="per-user session summaries (events per type) after 30 minutes of inactivity (session windows)",
    build=build,
    generator=ClickEvents,
    summary_key="user_id",
    summary_order="events",
)
