"""nexmark-q0 (pass-through) against pandas: every bid, once, unchanged."""

from __future__ import annotations

from nexmark_reference import frame, job, run


def test_q0_passes_every_bid_through_unchanged():
    j = job(0)
    rows = run(j)
    bids = frame(j.source_spec, "bid")
    want = sorted(bids[["auction", "bidder", "price", "date_time", "extra"]].itertuples(index=False, name=None))
    assert sorted(tuple(r.values()) for r in rows) == want
    assert len(rows) == 20_000 * 46 // 50
