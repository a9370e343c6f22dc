"""nexmark-q7 (highest bid per 10-second window) against pandas' reading of q7.sql."""

from __future__ import annotations

import pandas as pd
import pytest
from nexmark_reference import frame, job, run

WINDOW = 10_000


def expected(bids: pd.DataFrame) -> list[tuple]:
    """The SQL: each tumbling window's MAX(price), joined back to the bids of that price with
    window_end - 10 s <= dateTime <= window_end (both ends inclusive)."""
    windows = bids.assign(end=bids.date_time // WINDOW * WINDOW + WINDOW).groupby("end").price.max()
    rows = []
    for end, top in windows.items():
        hit = bids[(bids.price == top) & (bids.date_time >= end - WINDOW) & (bids.date_time <= end)]
        rows += list(hit[["auction", "price", "bidder", "date_time", "extra"]].itertuples(index=False, name=None))
    return sorted(rows)


def test_q7_emits_the_bids_at_each_windows_highest_price():
    # 1,000 events/s of event time: 12 windows (prices rarely tie: the hand-made case has ties)
    j = job(7, events=120_000, events_per_second=1_000)
    rows = run(j, batch=7_000)
    want = expected(frame(j.source_spec, "bid"))
    assert len(want) >= 12
    assert sorted(tuple(r.values()) for r in rows) == want


@pytest.mark.parametrize("pre_aggregate", [True, False])
@pytest.mark.parametrize("batches", [1, 2, 5])
def test_q7_on_hand_made_bids_with_ties_and_edges(pre_aggregate, batches):
    from sparkstate.connectors.nexmark import NexmarkBids
    from sparkstate.jobs.nexmark.q7 import build

    def bid(t, price, auction=1):
        return {"auction": auction, "bidder": 7, "price": price, "date_time": t, "extra": ""}

    h = build(NexmarkBids(events=1)).with_settings(pre_aggregate=pre_aggregate).harness()
    given = [bid(1_000, 5), bid(2_000, 9, 2), bid(9_999, 9, 3), bid(10_000, 9, 4), bid(10_001, 3)]
    for i in range(batches):  # one batch, or several: the windows merge the batches' partials
        h.process_batch(given[i * len(given) // batches:(i + 1) * len(given) // batches])
    rows = h.process_batch([bid(30_000, 1)]) + h.finish()
    got = sorted((a, p, t) for a, p, _, t, _ in (tuple(r.values()) for r in rows))
    # window [0, 10000): max 9 -> bids 2, 3 and the edge bid 4 at 10000; window [10000, 20000): max 9 -> bid 4
    assert got == sorted([(2, 9, 2_000), (3, 9, 9_999), (4, 9, 10_000), (4, 9, 10_000), (1, 1, 30_000)])


def test_q7_a_window_with_only_its_edge_bid_emits_nothing_for_itself():
    from sparkstate.connectors.nexmark import NexmarkBids
    from sparkstate.jobs.nexmark.q7 import build

    h = build(NexmarkBids(events=1)).harness()
    h.process_batch([{"auction": 1, "bidder": 7, "price": 4, "date_time": 20_000, "extra": ""}])
    rows = h.finish()
    # [10000, 20000) has no bid of its own; [20000, 30000) has the bid at its first millisecond
    assert [tuple(r.values())[:2] for r in rows] == [(1, 4)]
