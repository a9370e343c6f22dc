"""nexmark-q20 (expand bid with auction) against pandas: the inner join of the bids with their
category-10 auction, and state that holds only what can still join."""

from __future__ import annotations

import pandas as pd
from nexmark_reference import frame, job, run

EVENTS = 100_000
COLUMNS = ["auction", "bidder", "price", "channel", "url", "bid_date_time", "bid_extra", "item_name", "description",
           "initial_bid", "reserve", "auction_date_time", "expires", "seller", "category", "auction_extra"]


def expected(bids: pd.DataFrame, auctions: pd.DataFrame) -> list[tuple]:
    """The SQL: ``bid B JOIN auction A ON B.auction = A.id WHERE A.category = 10``, q20.sql's columns."""
    b = bids.rename(columns={"date_time": "bid_date_time", "extra": "bid_extra"})
    a = auctions[auctions["category"] == 10].rename(columns={"date_time": "auction_date_time", "extra": "auction_extra"})
    joined = b.merge(a, left_on="auction", right_on="id", how="inner")
    return sorted(joined[COLUMNS].itertuples(index=False, name=None))


def test_q20_joins_every_bid_with_its_category_10_auction():
    j = job(20, events=EVENTS)
    rows = run(j)
    bids, auctions = frame(j.source_spec, "bid"), frame(j.source_spec, "auction")
    want = expected(bids, auctions)
    assert rows and list(rows[0]) == COLUMNS
    assert sorted(tuple(r.values()) for r in rows) == want
    assert len(want) > 10_000
    # some of those bids arrived before their auction and had to wait
    b = bids.merge(auctions, left_on="auction", right_on="id", suffixes=("", "_a"))
    assert ((b["category"] == 10) & (b["date_time"] < b["date_time_a"])).sum() > 0


def test_q20_state_waits_only_for_auctions_that_have_not_arrived():
    j = job(20, events=EVENTS)
    h = j.harness()
    second = j.connected.source
    for start in range(0, EVENTS, 5_000):
        h.process_batch(j.source_spec.events_as_dicts(start, start + 5_000),
                        second=second.events_as_dicts(start, start + 5_000))
    auctions = frame(j.source_spec, "auction")
    made, tens = set(auctions["id"]), set(auctions[auctions["category"] == 10]["id"])
    for key in h.keys():
        state = h.state(key)
        if key in made:  # nothing waits; a category-10 auction's columns, or () for another category
            assert not state.get("waiting")
            assert bool(state["auction"]) == (key in tens)
        else:  # an auction never made: 1000 (the first 100 auctions' hot auction), or one after the last
            assert "auction" not in state and state["waiting"]


def test_q20_waiting_bids_are_released_or_dropped_by_their_auction():
    h = job(20, events=0).harness()
    bid = {"bidder": 2001, "price": 5, "channel": "Google", "url": "u", "date_time": 1, "extra": "b"}
    auction = {"item_name": "i", "description": "d", "initial_bid": 1, "reserve": 2, "date_time": 2, "expires": 9,
               "seller": 1001, "extra": "a"}
    assert h.process_batch([{**bid, "auction": 7}, {**bid, "auction": 8}]) == []
    assert h.state(7) == {"waiting": [(7, 2001, 5, "Google", "u", 1, "b")]}
    rows = h.process_batch([], second=[{**auction, "id": 7, "category": 10}, {**auction, "id": 8, "category": 12}])
    assert [tuple(r.values()) for r in rows] == [(7, 2001, 5, "Google", "u", 1, "b", "i", "d", 1, 2, 2, 9, 1001, 10, "a")]
    assert h.state(8) == {"auction": ()}  # its waiting bid dropped, its later ones will be
    rows = h.process_batch([{**bid, "auction": 8}, {**bid, "auction": 7, "price": 6}])
    assert [r["price"] for r in rows] == [6]
    assert h.state(8) == {"auction": ()} and h.state(7) == {"auction": ("i", "d", 1, 2, 2, 9, 1001, 10, "a")}
