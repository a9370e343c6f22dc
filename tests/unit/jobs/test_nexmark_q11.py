"""nexmark-q11 (user sessions) against pandas: bids per bidder per 10 s session."""

from __future__ import annotations

import pandas as pd
import pytest
from nexmark_reference import frame, job, run

GAP_MS = 10_000


def sessions(bids: pd.DataFrame) -> list[tuple]:
    """The SQL's ``GROUP BY bidder, SESSION(dateTime, INTERVAL '10' SECOND)``: a bidder's bids
    are one session while each follows the one before by at most the gap (Flink merges
    session windows that touch); a session ends its last bid + the gap."""
    b = bids.sort_values(["bidder", "date_time"], kind="stable")
    new = (b["bidder"] != b["bidder"].shift()) | (b["date_time"] - b["date_time"].shift() > GAP_MS)
    g = b.assign(session=new.cumsum()).groupby("session")
    out = pd.DataFrame({
        "bidder": g["bidder"].first(), "bid_count": g.size(),
        "starttime": g["date_time"].min(), "endtime": g["date_time"].max() + GAP_MS,
    })
    return sorted(out.itertuples(index=False, name=None))


@pytest.mark.parametrize("events_per_second", [10_000, 500])
def test_q11_counts_the_bids_of_each_session(events_per_second: int):
    j = job(11, events=40_000, events_per_second=events_per_second)
    rows = run(j)
    bids = frame(j.source_spec, "bid")
    want = sessions(bids)
    got = sorted((r["bidder"], r["bid_count"], r["starttime"], r["endtime"]) for r in rows)
    assert got == want
    assert sum(r[1] for r in want) == len(bids)
    if events_per_second == 500:  # 80 s of event time: bidders come back after a gap
        assert len(want) > len({r[0] for r in want})


def test_q11_bids_exactly_a_gap_apart_share_a_session():
    h = job(11, events=0).harness()
    t = 1_700_000_000_000
    bid = {"auction": 1000, "price": 1, "channel": "c", "url": "u", "extra": ""}
    rows = h.process_batch([{**bid, "bidder": 2000, "date_time": t}, {**bid, "bidder": 2000, "date_time": t + GAP_MS}])
    rows += h.process_batch([{**bid, "bidder": 2000, "date_time": t + 2 * GAP_MS + 1}])
    rows += h.finish()
    assert sorted((r["bid_count"], r["starttime"], r["endtime"]) for r in rows) == [
        (1, t + 2 * GAP_MS + 1, t + 3 * GAP_MS + 1), (2, t, t + 2 * GAP_MS),
    ]
