"""nexmark-q2 (selection) against pandas: the (auction, price) of every bid of every 123rd auction."""

from __future__ import annotations

from nexmark_reference import frame, job, run

EVENTS = 50_000


def test_q2_selects_the_bids_of_every_123rd_auction():
    j = job(2, events=EVENTS)
    rows = run(j)
    bids = frame(j.source_spec, "bid")
    chosen = bids[bids["auction"] % 123 == 0]
    want = sorted(chosen[["auction", "price"]].itertuples(index=False, name=None))
    assert sorted(tuple(r.values()) for r in rows) == want
    # enough events that several auctions qualify and the comparison checks something
    assert len(rows) > 100
    assert len({r["auction"] for r in rows}) > 5
