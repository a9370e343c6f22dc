"""The accumulator of q15 and q16: bids, distinct bidders and distinct auctions, each in total
and per price range, as one mergeable window aggregate.

Both queries compute, per group and day, ``count(*)``, ``count(distinct bidder)`` and
``count(distinct auction)``, each alone and ``FILTER (WHERE ...)`` each of the three price
ranges (:func:`~sparkstate.jobs.nexmark.common.rank`). :class:`PriceRangeCounts` keeps a
*sighting map* per distinct column: each id to the ranges it has been seen in (a bit per
range), so that a bid counts an id in a distinct count the first time only, and the twelve
counts beside them, kept up to date by ``add`` and ``merge`` alike (no recount when a result
is read).

``merge`` unions two sighting maps and counts what is new to the first, so the queries
aggregate in two phases (``JobSettings.pre_aggregate``): each source partition folds its
batch's bids into one accumulator per day before the shuffle, and the day's one group
merges a few maps of the batch's distinct ids instead of taking every bid. That is what
Flink's split-distinct is for (spreading a hot group's distinct counting over the tasks);
here the spreading is done by the packing step, one task per source partition.
"""

from __future__ import annotations

from typing import Any

from sparkstate.api.state import AggregateFunction
from sparkstate.jobs.nexmark.common import rank

#: where bids, bidders and auctions start in the counts (each: total, rank1, rank2, rank3)
BIDS, BIDDERS, AUCTIONS = 0, 4, 8
#: the accumulator: ``[counts, bidders, auctions, latest]``: the 12 counts, the sighting maps
#: (id to a bit per range: 2 for rank1, 4 for rank2, 8 for rank3), the latest bid's time
Accumulator = list
_RANGES = ((1, 2), (2, 4), (3, 8))


def _sight(seen: dict[int, int], id_: int, r: int, counts: list[int], first: int) -> None:
    """Count ``id_`` (in range ``r``) in the distinct counts from ``counts[first]`` the first
    time it is seen, in total and in that range."""
    bit = 1 << r
    old = seen.get(id_, 0)
    if not old & bit:
        seen[id_] = old | bit
        counts[first + r] += 1
        if not old:
            counts[first] += 1


def _union(into: dict[int, int], other: dict[int, int], counts: list[int], first: int) -> None:
    """Add ``other``'s sightings to ``into``, counting in ``counts`` what is new to it."""
    for id_, bits in other.items():
        old = into.get(id_, 0)
        new = bits & ~old
        if new:
            into[id_] = old | new
            if not old:
                counts[first] += 1
            for r, bit in _RANGES:
                if new & bit:
                    counts[first + r] += 1


class PriceRangeCounts(AggregateFunction[dict, list, list]):
    """Bids, distinct bidders and distinct auctions, in total and per price range; mergeable."""

    def create_accumulator(self) -> Accumulator:
        return [[0] * 12, {}, {}, 0]

    def add(self, bid: dict[str, Any], acc: Accumulator) -> Accumulator:
        counts = acc[0]
        r = rank(bid["price"])
        counts[BIDS] += 1
        counts[BIDS + r] += 1
        _sight(acc[1], bid["bidder"], r, counts, BIDDERS)
        _sight(acc[2], bid["auction"], r, counts, AUCTIONS)
        ts = bid["date_time"]
        if ts > acc[3]:
            acc[3] = ts
        return acc

    def merge(self, a: Accumulator, b: Accumulator) -> Accumulator:
        # walk the smaller sighting maps: the state's day merges a batch's few ids
        if len(a[1]) + len(a[2]) < len(b[1]) + len(b[2]):
            a, b = b, a
        counts = a[0]
        for i in range(BIDS, BIDDERS):
            counts[i] += b[0][i]
        _union(a[1], b[1], counts, BIDDERS)
        _union(a[2], b[2], counts, AUCTIONS)
        a[3] = max(a[3], b[3])
        return a

    def get_result(self, acc: Accumulator) -> Accumulator:
        return acc
