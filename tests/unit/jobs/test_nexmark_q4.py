"""nexmark-q4 (average closing price per category) against pandas' reading of q4.sql."""

from __future__ import annotations

from nexmark_reference import frame, job, run


def test_q4_last_row_per_category_is_the_sqls_average():
    j = job(4, events=100_000)
    rows = run(j, batch=6_000)
    bids, auctions = frame(j.source_spec, "bid"), frame(j.source_spec, "auction")
    joined = bids.merge(auctions, left_on="auction", right_on="id", suffixes=("_bid", ""))
    open_ = joined[(joined.date_time_bid >= joined.date_time) & (joined.date_time_bid <= joined.expires)]
    finals = open_.groupby(["id", "category"]).price.max().reset_index()
    sums = finals.groupby("category").price.agg(["sum", "count"])
    want = {int(c): int(s // n) for c, (s, n) in sums.iterrows()}
    last = {}
    for r in rows:
        last[r["id"]] = r["final"]
    assert len(want) == 5
    assert last == want
    # a row per change: one per auction that closed with a bid (same-time closings share one)
    assert len(finals) >= len(rows) > len(finals) // 2


def test_q4_keeps_no_state_of_closed_auctions_or_stale_early_bids():
    j = job(4, events=50_000)
    h = j.harness()
    g, a = j.source_spec, j.connected.source
    for start in range(0, 50_000, 5_000):
        h.process_batch(g.events_as_dicts(start, start + 5_000), second=a.events_as_dicts(start, start + 5_000))
    h.process_batch([], second=[])  # the timers of the watermark the last batch set
    state = h.state(0)
    # only auctions that close after the watermark, and early bids of the last second before it
    assert state["auctions"] and all(expires > h.watermark for _, _, expires, _ in state["auctions"].values())
    assert all(ts > h.watermark - 1_000 for waiting in state["early"].values() for ts, _ in waiting)
    assert len(state["auctions"]) < 50_000 * 3 // 50
    h.finish()
    assert set(h.state(0)) <= {"categories"}
