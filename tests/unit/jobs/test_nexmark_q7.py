"""nexmark-q7 (highest bid per 10-second window) against pandas' reading of q7.sql."""

from __future__ import annotations

import pandas as pd
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


def test_q7_on_hand_made_bids_with_ties_and_edges():
    from sparkstate.jobs.nexmark.q7 import HighestBid
    from sparkstate.testing.harness import KeyedHarness

    def bid(t, price, auction=1):
        return {"auction": auction, "bidder": 7, "price": price, "date_time": t, "extra": "", "group": 0}

    from sparkstate.jobs.nexmark.common import WATERMARK

    h = KeyedHarness(HighestBid(), "group", watermark_strategy=WATERMARK.with_timestamp_column("date_time"))
    h.process_batch([bid(1_000, 5), bid(2_000, 9, 2), bid(9_999, 9, 3), bid(10_000, 9, 4), bid(10_001, 3)])
    rows = h.process_batch([bid(30_000, 1)]) + h.finish()
    got = sorted((a, p, t) for a, p, _, t, _ in rows)
    # window [0, 10000): max 9 -> bids 2, 3 and the edge bid 4 at 10000; window [10000, 20000): max 9 -> bid 4
    assert got == sorted([(2, 9, 2_000), (3, 9, 9_999), (4, 9, 10_000), (4, 9, 10_000), (1, 1, 30_000)])
