"""nexmark-q3 (local item suggestion) against pandas: the inner join of category-10 auctions with
their seller from OR, ID or CA, and state that holds only what can still join."""

from __future__ import annotations

import pandas as pd
from nexmark_reference import frame, job, run

EVENTS = 100_000
STATES = ["OR", "ID", "CA"]


def expected(auctions: pd.DataFrame, persons: pd.DataFrame) -> list[tuple]:
    """The SQL: ``auction A JOIN person P ON A.seller = P.id WHERE A.category = 10 AND P.state IN (...)``."""
    a = auctions[auctions["category"] == 10][["id", "seller"]].rename(columns={"id": "auction_id"})
    p = persons[persons["state"].isin(STATES)][["id", "name", "city", "state"]]
    joined = a.merge(p, left_on="seller", right_on="id", how="inner")
    return sorted(joined[["name", "city", "state", "auction_id"]].itertuples(index=False, name=None))


def test_q3_joins_category_10_auctions_with_their_local_seller():
    j = job(3, events=EVENTS)
    rows = run(j)
    auctions, persons = frame(j.source_spec, "auction"), frame(j.source_spec, "person")
    want = expected(auctions, persons)
    assert sorted(tuple(r.values()) for r in rows) == want
    assert len(want) > 300
    # some of those auctions arrived before their seller and had to wait
    a = auctions.merge(persons, left_on="seller", right_on="id", suffixes=("", "_p"))
    early = a[(a["category"] == 10) & a["state"].isin(STATES) & (a["date_time"] < a["date_time_p"])]
    assert len(early) > 0


def test_q3_state_waits_only_for_sellers_that_have_not_arrived():
    j = job(3, events=EVENTS)
    h = j.harness()
    second = j.connected.source
    for start in range(0, EVENTS, 5_000):
        h.process_batch(j.source_spec.events_as_dicts(start, start + 5_000),
                        second=second.events_as_dicts(start, start + 5_000))
    persons = frame(j.source_spec, "person")
    made, local = set(persons["id"]), set(persons[persons["state"].isin(STATES)]["id"])
    for key in h.keys():
        state = h.state(key)
        if key in made:  # nothing waits; a local seller's columns, or () for one elsewhere
            assert not state.get("waiting")
            assert bool(state["seller"]) == (key in local)
        else:  # a seller never made: 1000 (the first 100 people's hot seller), or one after the last person
            assert "seller" not in state and state["waiting"]


def test_q3_waiting_auctions_are_released_or_dropped_by_their_seller():
    h = job(3, events=0).harness()
    auction = {"item_name": "i", "description": "d", "initial_bid": 1, "reserve": 2, "date_time": 1, "expires": 2,
               "extra": ""}
    person = {"name": "Kate Smith", "email_address": "e", "credit_card": "c", "city": "Boise", "date_time": 1,
              "extra": ""}
    assert h.process_batch([{**auction, "id": 1, "seller": 7, "category": 10},
                            {**auction, "id": 2, "seller": 7, "category": 11},
                            {**auction, "id": 3, "seller": 8, "category": 10}]) == []
    assert h.state(7) == {"waiting": [1]}
    rows = h.process_batch([], second=[{**person, "id": 7, "state": "ID"}, {**person, "id": 8, "state": "WA"}])
    assert [tuple(r.values()) for r in rows] == [("Kate Smith", "Boise", "ID", 1)]
    assert h.state(8) == {"seller": ()}  # its waiting auction dropped, its later ones will be
    rows = h.process_batch([{**auction, "id": 4, "seller": 7, "category": 10},
                            {**auction, "id": 5, "seller": 8, "category": 10}])
    assert [tuple(r.values()) for r in rows] == [("Kate Smith", "Boise", "ID", 4)]
    assert h.state(7) == {"seller": ("Kate Smith", "Boise", "ID")} and h.state(8) == {"seller": ()}
