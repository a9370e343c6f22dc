"""nexmark-q15 (bidding statistics per day) against pandas' reading of q15.sql."""

from __future__ import annotations

import pandas as pd
import pytest
from nexmark_reference import frame, job, run

from sparkstate.jobs.nexmark.q15 import OUTPUT

COLUMNS = [c.split()[0] for c in OUTPUT.split(", ")]


def expected(bids: pd.DataFrame) -> dict[str, tuple]:
    """The SQL's final row per day: counts and distinct counts, in total and per price range."""
    bids = bids.assign(day=pd.to_datetime(bids.date_time, unit="ms", utc=True).dt.strftime("%Y-%m-%d"))
    ranges = {1: bids.price < 10_000, 2: (bids.price >= 10_000) & (bids.price < 1_000_000), 3: bids.price >= 1_000_000}
    out = {}
    for day, b in bids.groupby("day"):
        m = {r: ranges[r][b.index] for r in (1, 2, 3)}
        out[day] = (
            day, len(b), *(int(m[r].sum()) for r in (1, 2, 3)),
            b.bidder.nunique(), *(b.bidder[m[r]].nunique() for r in (1, 2, 3)),
            b.auction.nunique(), *(b.auction[m[r]].nunique() for r in (1, 2, 3)),
        )
    return out


@pytest.mark.parametrize("pre_aggregate", [True, False], ids=["two-phase", "one-phase"])
def test_q15_last_row_per_day_is_the_sqls_result(pre_aggregate):
    # 0.4 events/s of event time: 100,000 events span 3 days (a day's window, then the next's)
    j = job(15, events=100_000, events_per_second=0.4).with_settings(pre_aggregate=pre_aggregate)
    rows = run(j, batch=9_000)
    # an upsert per micro-batch and day it changed (12 batches), and the day's final row
    assert 12 <= len(rows) <= 12 * 2 + 3
    last = {}
    for r in rows:
        last[r["day"]] = tuple(r[c] for c in COLUMNS)
    want = expected(frame(j.source_spec, "bid"))
    assert len(want) >= 3
    assert last == want


def test_q15_each_batch_emits_the_day_so_far():
    # early firing: each batch emits the rows of the days it changed, as the SQL's result
    # over the bids read so far
    j = job(15, events=30_000, events_per_second=0.4)
    h = j.harness()
    g = j.source_spec
    start = 0
    for end in (7_000, 19_000, 30_000):
        rows = h.process_batch(g.events_as_dicts(start, end))
        start = end
        want = expected(pd.DataFrame(g.events_as_dicts(0, end)))
        got = {r["day"]: tuple(r[c] for c in COLUMNS) for r in rows}
        assert got and all(want[d] == row for d, row in got.items())


def test_q15_day_state_is_dropped_once_the_day_is_over():
    j = job(15, events=60_000, events_per_second=0.4)
    h = j.harness()
    g = j.source_spec
    h.process_batch(g.events_as_dicts(0, 60_000))
    h.process_batch([])  # the watermark reaches the last bid's time - 4 s
    days = sorted(h.keys())
    assert len(days) == 1  # only the last day still holds state
    h.finish()
    assert h.keys() == []
