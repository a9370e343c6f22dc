"""Nexmark q8, monitor new users: the people who joined and opened an auction in the same 10 s.

The SQL (``queries/q8.sql``)::

    SELECT P.id, P.name, P.starttime
    FROM (
      SELECT id, name, window_start AS starttime, window_end AS endtime
      FROM TABLE(TUMBLE(TABLE person, DESCRIPTOR(dateTime), INTERVAL '10' SECOND))
      GROUP BY id, name, window_start, window_end
    ) P
    JOIN (
      SELECT seller, window_start AS starttime, window_end AS endtime
      FROM TABLE(TUMBLE(TABLE auction, DESCRIPTOR(dateTime), INTERVAL '10' SECOND))
      GROUP BY seller, window_start, window_end
    ) A
    ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime

Both sides are grouped before the join, so the result is one row per ``(id, name, window)``
whose person id sold at least one auction in that window, however many auctions. The rows
are the result table's columns, ``id, name, stime`` (``stime`` the window's start).

People (the first input, keyed by ``id``) and auctions (the second input, keyed by
``seller``) meet in a :class:`~sparkstate.api.connected.KeyedCoProcessFunction`. The windows
are the SQL's tumbling windows ``[start, start + 10 s)`` aligned to the epoch. Keyed state,
per person id: ``names``, the window starts in which the person joined, with the names it
joined under (one, as person ids are unique), and ``sold``, the window starts in which it
sold. Both are bounded by the windows not yet closed (the watermark delay, 4 s, spans at
most two). Each window a key touches has an event-time timer at its last millisecond,
``start + 10 s - 1``, when Flink's window aggregates emit and the join sees both sides: it
emits the window's rows if both sides have it, then drops the window from both. An element
of a window that has already closed (late) is dropped, as Flink's window aggregate drops it.
"""

from __future__ import annotations

from collections.abc import Iterator

from sparkstate.api.connected import KeyedCoProcessFunction
from sparkstate.api.functions import Context, OnTimerContext, RuntimeContext
from sparkstate.api.state import MapState, MapStateDescriptor
from sparkstate.api.windows import window_start
from sparkstate.connectors.nexmark import NexmarkAuctions, NexmarkPersons, view
from sparkstate.connectors.sinks import NoopSink
from sparkstate.job import Job
from sparkstate.jobs.nexmark.common import WATERMARK, nexmark_seed_job, on

OUTPUT = "id bigint, name string, stime timestamp"
#: the SQL's ``TUMBLE(..., INTERVAL '10' SECOND)``, in ms
WINDOW_MS = 10_000


class NewUsers(KeyedCoProcessFunction):
    """People (input 1) who sold (input 2) in the window they joined in; see the module docs."""

    def open(self, ctx: RuntimeContext) -> None:
        self.names: MapState[int, list] = ctx.get_map_state(MapStateDescriptor("names", int, list))
        self.sold: MapState[int, bool] = ctx.get_map_state(MapStateDescriptor("sold", int, bool))

    def process_element1(self, person: dict, ctx: Context) -> None:
        start = self._window(person["date_time"], ctx)
        if start is None:
            return
        names = self.names.get(start) or []
        if person["name"] not in names:
            self.names.put(start, [*names, person["name"]])

    def process_element2(self, auction: dict, ctx: Context) -> None:
        start = self._window(auction["date_time"], ctx)
        if start is not None and not self.sold.contains(start):
            self.sold.put(start, True)

    def on_timer(self, timestamp: int, ctx: OnTimerContext) -> Iterator[tuple]:
        key = ctx.get_current_key()
        closed = {s for s in (*self.names.keys(), *self.sold.keys()) if s + WINDOW_MS - 1 <= timestamp}
        for start in sorted(closed):
            names = self.names.get(start)
            if names and self.sold.contains(start):
                for name in sorted(names):
                    yield (key, name, start)
            self.names.remove(start)
            self.sold.remove(start)

    @staticmethod
    def _window(ts: int, ctx: Context) -> int | None:
        """The start of ``ts``'s window, its timer registered; None for a window already closed."""
        start = window_start(ts, 0, WINDOW_MS)
        timers = ctx.timer_service()
        if start + WINDOW_MS - 1 <= timers.current_watermark():
            return None
        timers.register_event_time_timer(start + WINDOW_MS - 1)
        return start


def build(source: NexmarkPersons) -> Job:
    return (
        on("nexmark-q8", source).key_by("id")
        .connect(view(source, "auction"), key_by="seller", watermark=WATERMARK)
        .process(NewUsers(), output_schema=OUTPUT)
        .sink(NoopSink())
    )


SEED_JOB = nexmark_seed_job(8, "new users: people who joined and sold in the same 10 s window (keyed co-process)",
                            build, generator=NexmarkPersons, second=NexmarkAuctions)
