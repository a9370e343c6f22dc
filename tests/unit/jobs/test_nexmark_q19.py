"""nexmark-q19 (each auction's ten highest bids) against pandas' ROW_NUMBER() ... <= 10."""

from __future__ import annotations

import pandas as pd
from nexmark_reference import frame, job, run

KEY = ["auction", "rank_number"]
COLUMNS = ["auction", "bidder", "price", "channel", "url", "date_time", "extra"]


def reference(bids: pd.DataFrame) -> pd.DataFrame:
    """The SQL of q19: per auction, the bids by price, highest first, numbered from 1, the first
    ten; bids with the same price in their order of arrival (Flink's rank operator)."""
    ranked = bids.sort_values("price", ascending=False, kind="stable")[COLUMNS]
    ranked["rank_number"] = ranked.groupby("auction").cumcount() + 1
    return ranked[ranked["rank_number"] <= 10]


def bid(auction: int, bidder: int, price: int, at: int) -> dict:
    return {"auction": auction, "bidder": bidder, "price": price, "channel": "Google", "url": "u", "date_time": at,
            "extra": ""}


def last_per_rank(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows).drop_duplicates(KEY, keep="last").set_index(KEY).sort_index()


def test_q19_last_row_per_auction_and_rank_is_the_top_ten():
    j = job(19, events=100_000)
    rows = run(j)
    bids = frame(j.source_spec, "bid")
    want = reference(bids).set_index(KEY).sort_index()
    got = last_per_rank(rows)[want.columns]
    pd.testing.assert_frame_equal(got, want, check_dtype=False)
    assert (bids.groupby("auction").size() > 10).sum() > 10  # many auctions had more bids than the top keeps


def test_q19_ties_on_price_keep_the_order_of_arrival():
    h = job(19, events=0).harness()
    # ten bids at 50 (bidders 100-109); then another 50 (out: the tenth is as high), a 60, a 50
    # (out), a 70: each new high bid moves the ranks below it down one, in the order of arrival
    tens = [bid(1, 100 + i, 50, 1_000 + i) for i in range(10)]
    rows = h.process_batch(tens) + h.process_batch([bid(1, 200, 50, 2_000), bid(1, 201, 60, 2_001)])
    rows += h.process_batch([bid(1, 202, 50, 2_002), bid(1, 203, 70, 2_003)]) + h.finish()
    emitted = [(r["rank_number"], r["bidder"]) for r in rows]
    assert emitted == [
        *((i + 1, 100 + i) for i in range(10)),
        *zip(range(1, 11), [201, *range(100, 109)]),
        *zip(range(1, 11), [203, 201, *range(100, 108)]),
    ]
