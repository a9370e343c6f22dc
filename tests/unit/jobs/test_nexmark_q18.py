"""nexmark-q18 (each bidder's last bid on each auction) against pandas' ROW_NUMBER() ... = 1."""

from __future__ import annotations

import pandas as pd
from nexmark_reference import frame, job, run

KEY = ["bidder", "auction"]
COLUMNS = ["auction", "bidder", "price", "channel", "url", "date_time", "extra"]


def reference(bids: pd.DataFrame) -> pd.DataFrame:
    """The SQL of q18: per (bidder, auction), the bid with the latest dateTime; of bids with
    the same dateTime the last to arrive (Flink's deduplication keeping the last row)."""
    return bids.sort_values("date_time", kind="stable").groupby(KEY).tail(1)[COLUMNS]


def bid(auction: int, bidder: int, price: int, at: int) -> dict:
    return {"auction": auction, "bidder": bidder, "price": price, "channel": "Google", "url": "u", "date_time": at,
            "extra": ""}


def test_q18_last_row_per_bidder_and_auction_is_the_latest_bid():
    j = job(18, events=100_000)  # 10 events a millisecond: the hot bidder often bids twice on one in the same one
    rows = run(j)
    bids = frame(j.source_spec, "bid")
    want = reference(bids).set_index(KEY).sort_index()
    got = pd.DataFrame(rows).drop_duplicates(KEY, keep="last").set_index(KEY)[want.columns].sort_index()
    pd.testing.assert_frame_equal(got, want, check_dtype=False)
    assert bids.duplicated([*KEY, "date_time"]).sum() > 100  # ties on dateTime happened
    assert len(rows) == len(bids)  # in event-time order, every bid is its pair's latest when it comes


def test_q18_an_equal_time_replaces_the_latest_and_an_earlier_one_does_not():
    h = job(18, events=0).harness()
    first, later, earlier, tie = bid(1, 7, 10, 1_000), bid(1, 7, 20, 3_000), bid(1, 7, 30, 2_000), bid(1, 7, 40, 3_000)
    rows = h.process_batch([first, later]) + h.process_batch([earlier, tie]) + h.finish()
    assert [r["price"] for r in rows] == [10, 20, 40]
