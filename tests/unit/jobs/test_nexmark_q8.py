"""nexmark-q8 (monitor new users) against pandas: people who sold in the 10 s window they joined in."""

from __future__ import annotations

import pandas as pd
import pytest
from nexmark_reference import frame, job, run

WINDOW_MS = 10_000


def new_users(persons: pd.DataFrame, auctions: pd.DataFrame) -> list[tuple]:
    """The SQL: people grouped by (id, name, 10 s tumbling window), auctions by (seller,
    window), joined on id = seller and the same window; the window's start."""
    p = persons.assign(start=persons["date_time"] - persons["date_time"] % WINDOW_MS)
    p = p[["id", "name", "start"]].drop_duplicates()
    a = auctions.assign(start=auctions["date_time"] - auctions["date_time"] % WINDOW_MS)
    a = a[["seller", "start"]].drop_duplicates()
    joined = p.merge(a, left_on=["id", "start"], right_on=["seller", "start"])
    return sorted(joined[["id", "name", "start"]].itertuples(index=False, name=None))


@pytest.mark.parametrize("events_per_second", [1_000, 5_000])
def test_q8_emits_each_new_seller_once_per_window(events_per_second: int):
    j = job(8, events=100_000, events_per_second=events_per_second)
    rows = run(j)
    auctions = frame(j.source_spec, "auction")
    want = new_users(frame(j.source_spec, "person"), auctions)
    assert len(want) > 100
    assert len({start for _, _, start in want}) > 1
    assert len(auctions) > 2 * len(want)  # rows per person and window, not per auction
    got = sorted((r["id"], r["name"], r["stime"]) for r in rows)
    assert got == want


def test_q8_a_seller_who_joins_after_the_auction_in_the_window_counts():
    h = job(8, events=0).harness()
    t = 1_700_000_000_000  # a window start
    person = {"id": 1001, "name": "Kate Smith", "email_address": "e", "credit_card": "c", "city": "Bend",
              "state": "OR", "extra": ""}
    auction = {"id": 1000, "item_name": "i", "description": "d", "initial_bid": 1, "reserve": 2, "expires": t + 5,
               "seller": 1001, "category": 10, "extra": ""}
    rows = h.process_batch([], second=[{**auction, "date_time": t + 1}, {**auction, "id": 1001, "date_time": t + 2}])
    rows += h.process_batch([{**person, "date_time": t + WINDOW_MS - 1}], second=[{**auction, "date_time": t + 3}])
    rows += h.process_batch([{**person, "id": 1002, "date_time": t + WINDOW_MS}],
                            second=[{**auction, "seller": 1002, "date_time": t + WINDOW_MS - 1}])
    rows += h.finish()
    assert [(r["id"], r["name"], r["stime"]) for r in rows] == [(1001, "Kate Smith", t)]
    assert h.keys() == []
