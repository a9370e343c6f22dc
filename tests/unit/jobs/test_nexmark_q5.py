"""nexmark-q5 (hot items) against pandas' reading of q5.sql."""

from __future__ import annotations

import pandas as pd
import pytest
from nexmark_reference import frame, job, run

SIZE, SLIDE = 10_000, 2_000


def expected(bids: pd.DataFrame) -> list[tuple]:
    """HOP(2 s slide, 10 s size): each bid in the windows [start, start + 10 s) whose start is a
    multiple of 2 s; count per (window, auction); keep the counts >= the window's maximum."""
    parts = []
    for k in range(SIZE // SLIDE):
        start = bids.date_time // SLIDE * SLIDE - k * SLIDE
        parts.append(pd.DataFrame({"start": start, "auction": bids.auction}))
    assigned = pd.concat(parts)
    counts = assigned.groupby(["start", "auction"]).size().rename("num").reset_index()
    top = counts.groupby("start").num.transform("max")
    hot = counts[counts.num >= top]
    return sorted(zip(hot.auction.tolist(), hot.num.tolist()))


def test_q5_emits_each_windows_most_bid_auctions():
    j = job(5, events=150_000, events_per_second=5_000)  # 30 s: 19 windows
    rows = run(j, batch=6_000)
    want = expected(frame(j.source_spec, "bid"))
    assert len(want) >= 19
    assert sorted((r["auction"], r["num"]) for r in rows) == want


@pytest.mark.parametrize("pre_aggregate", [True, False])
def test_q5_ties_give_every_tied_auction(pre_aggregate):
    from sparkstate.connectors.nexmark import NexmarkBids
    from sparkstate.jobs.nexmark.q5 import build

    def bid(t, auction):
        return {"auction": auction, "bidder": 1, "price": 1, "date_time": t}

    h = build(NexmarkBids(events=1)).with_settings(pre_aggregate=pre_aggregate).harness()
    given = [bid(0, 1), bid(1, 2), bid(9_999, 3), bid(9_999, 3), bid(10_000, 1)]
    rows = h.process_batch(given[:3]) + h.process_batch(given[3:]) + h.finish()
    # auctions 1 and 2 tie at 1 bid in the windows that end before 9999 is in them; auction 3's
    # two bids at 9999 top every window holding them; the bid at 10000 is alone in [10000, 20000)
    got = sorted(tuple(r.values()) for r in rows)
    want = expected(pd.DataFrame(given))
    assert got == want
    assert (1, 1) in got and (2, 1) in got and (3, 2) in got
