"""Nexmark q16, channel statistics: per channel and day, how many bids, bidders and auctions
at each price level.

The SQL groups the bids by ``channel, DATE_FORMAT(dateTime, 'yyyy-MM-dd')`` without a window
and computes ``max(DATE_FORMAT(dateTime, 'HH:mm'))`` (the day's latest minute with a bid),
``count(*)``, ``count(distinct bidder)`` and ``count(distinct auction)``, each in total and
filtered to the three price ranges (rank1 ``price < 10000``, rank2 below 1,000,000, rank3
from there). As an unbounded aggregate it is an upsert stream here, keyed by
``(channel, day)``: every bid changes its group's ``total_bids``, so each bid emits its
group's new row.

Keyed by channel (the four hot channels carry half of the bids: hot keys). State:

* ``days``: day to the day's counters (latest minute, bids, distinct bidders and auctions,
  each in total and per range);
* ``bidders`` and ``auctions``: ``(day, id)`` to the set of price ranges the id has been
  seen in that day (bits 1, 2 and 4): a first sighting counts the id once in total, a new
  bit once in that range.

As in q17, an event-time timer at the day's last millisecond drops the day's entries once
the watermark has passed it (the stream is in event-time order, so no bid of that day is
still to come; one later than the 4 s the watermark allows would start its day afresh, where
Flink's aggregate, which keeps its state unless given a TTL, would count it with the others).
"""

from __future__ import annotations

from collections.abc import Iterator

from sparkstate.api.functions import Context, KeyedProcessFunction, OnTimerContext, RuntimeContext
from sparkstate.api.state import MapState, MapStateDescriptor
from sparkstate.connectors.nexmark import NexmarkBids
from sparkstate.connectors.sinks import NoopSink
from sparkstate.job import Job
from sparkstate.jobs.nexmark.common import DAY_MS, day_text, nexmark_seed_job, on, rank

OUTPUT = ("channel string, day string, minute string, total_bids bigint, rank1_bids bigint, rank2_bids bigint, "
          "rank3_bids bigint, total_bidders bigint, rank1_bidders bigint, rank2_bidders bigint, rank3_bidders bigint, "
          "total_auctions bigint, rank1_auctions bigint, rank2_auctions bigint, rank3_auctions bigint")
MINUTE_MS = 60_000
#: ``DATE_FORMAT(dateTime, 'HH:mm')`` of each minute of a day
MINUTES = tuple(f"{m // 60:02d}:{m % 60:02d}" for m in range(24 * 60))

#: a day's counters: the latest minute, and the counts of bids, bidders and auctions (each
#: total, rank1, rank2, rank3)
Counters = tuple[str, tuple[int, ...]]
_FIRST: Counters = ("", (0,) * 12)
#: where bids, bidders and auctions start in the counts
BIDS, BIDDERS, AUCTIONS = 0, 4, 8


def _distinct(seen: MapState[tuple[int, int], int], day: int, id_: int, r: int) -> tuple[bool, bool]:
    """Note ``id_`` in price range ``r`` on ``day``: (first time that day, first time in that range)."""
    bit = 1 << (r - 1)
    ranges = seen.get((day, id_))
    if ranges is None:
        seen.put((day, id_), bit)
        return True, True
    if ranges & bit:
        return False, False
    seen.put((day, id_), ranges | bit)
    return False, True


class ChannelStatistics(KeyedProcessFunction):
    """Per channel, each day's bids, distinct bidders and distinct auctions by price range; a row per bid."""

    def open(self, ctx: RuntimeContext) -> None:
        self.days: MapState[int, Counters] = ctx.get_map_state(MapStateDescriptor("days", int, tuple))
        self.bidders: MapState[tuple[int, int], int] = ctx.get_map_state(MapStateDescriptor("bidders", tuple, int))
        self.auctions: MapState[tuple[int, int], int] = ctx.get_map_state(MapStateDescriptor("auctions", tuple, int))

    def process_element(self, bid: dict, ctx: Context) -> Iterator[tuple]:
        ts: int = bid["date_time"]
        day = ts // DAY_MS
        old = self.days.get(day)
        if old is None:
            old = _FIRST
            ctx.timer_service().register_event_time_timer((day + 1) * DAY_MS - 1)
        minute, counts = old
        minute = max(minute, MINUTES[ts % DAY_MS // MINUTE_MS])
        n = list(counts)
        r = rank(bid["price"])
        n[BIDS] += 1
        n[BIDS + r] += 1
        for base, seen, id_ in ((BIDDERS, self.bidders, bid["bidder"]), (AUCTIONS, self.auctions, bid["auction"])):
            new_id, new_in_range = _distinct(seen, day, id_, r)
            n[base] += new_id
            n[base + r] += new_in_range
        self.days.put(day, (minute, tuple(n)))
        yield (ctx.get_current_key(), day_text(day), minute, *n)

    def on_timer(self, timestamp: int, ctx: OnTimerContext) -> None:
        day = (timestamp + 1) // DAY_MS - 1
        self.days.remove(day)
        for seen in (self.bidders, self.auctions):
            for key in seen.keys():
                if key[0] == day:
                    seen.remove(key)


def build(source: NexmarkBids) -> Job:
    return (on("nexmark-q16", source).key_by("channel")
            .process(ChannelStatistics(), output_schema=OUTPUT).sink(NoopSink()))


SEED_JOB = nexmark_seed_job(16, "channel statistics per day (distinct counts with filters, MapState by day and id)",
                            build)
