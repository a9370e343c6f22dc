"""nexmark-q1 (currency conversion) against pandas: every bid once, its price times 0.908 exactly."""

from __future__ import annotations

from decimal import Decimal

from nexmark_reference import frame, job, run


def test_q1_converts_every_bid_price_to_euros_exactly():
    j = job(1)
    rows = run(j)
    bids = frame(j.source_spec, "bid")
    # DECIMAL(23, 3): price * 908 thousandths, in integers, then three places
    bids["price"] = [Decimal(int(p) * 908).scaleb(-3) for p in bids["price"]]
    want = sorted(bids[["auction", "bidder", "price", "date_time", "extra"]].itertuples(index=False, name=None))
    got = sorted(tuple(r.values()) for r in rows)
    assert got == want
    assert len(rows) == 20_000 * 46 // 50
    assert all(isinstance(r["price"], Decimal) and r["price"].as_tuple().exponent == -3 for r in rows)


def test_q1_price_is_exact_where_a_float_is_not():
    h = job(1, events=0).harness()
    bid = {"auction": 1000, "bidder": 2000, "price": 15, "channel": "c", "url": "u", "date_time": 1, "extra": ""}
    (row,) = h.process_batch([bid])
    assert row["price"] == Decimal("13.620")
    assert 0.908 * 15 != 13.62  # a float's is 13.620000000000001
