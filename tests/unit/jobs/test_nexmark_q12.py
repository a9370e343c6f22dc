"""nexmark-q12 (processing-time windows) against pandas: every bid counted once, per bidder,
in 10 s windows of the processing time it was read at."""

from __future__ import annotations

import pandas as pd
from nexmark_reference import frame, job

SIZE_MS = 10_000
BATCH = 2_000
#: processing time per micro-batch: windows hold several batches, and no batch boundary is aligned
STEP_MS = 3_000


def test_q12_counts_every_bid_once_in_aligned_processing_time_windows():
    j = job(12, events=60_000)
    spec = j.source_spec
    h = j.harness()
    clock = spec.start_ms + 1_234  # processing time, a little after the events' own time
    rows: list[dict] = []
    read_at: list[int] = []  # the processing time of each bid's batch, in order
    for start in range(0, spec.events, BATCH):
        events = spec.events_as_dicts(start, min(start + BATCH, spec.events))
        batch = h.process_batch(events, processing_time=clock)
        assert all(r["endtime"] - 1 <= clock for r in batch)  # a window is emitted once it has closed
        rows += batch
        read_at += [clock] * len(events)
        clock += STEP_MS
    rows += h.finish()
    assert h.keys() != []  # the last windows are still open: event time does not close them
    rows += h.advance_processing_time(clock + SIZE_MS)
    assert h.keys() == []

    bids = frame(spec, "bid")
    # what holds whatever the clock: every bid once, in windows of 10 s aligned to 10 s
    assert all(r["starttime"] % SIZE_MS == 0 and r["endtime"] == r["starttime"] + SIZE_MS for r in rows)
    got = pd.DataFrame(rows)
    assert not got.duplicated(["bidder", "starttime"]).any()
    per_bidder = got.groupby("bidder")["bid_count"].sum().sort_index()
    assert per_bidder.to_dict() == bids.groupby("bidder").size().sort_index().to_dict()
    assert len(got["starttime"].unique()) > 1

    # and with this clock: the SQL's TUMBLE over p_time, p_time being each bid's batch time
    p_time = pd.Series(read_at)
    b = bids.assign(starttime=p_time - p_time % SIZE_MS)
    want = b.groupby(["bidder", "starttime"]).size().rename("bid_count").reset_index()
    want["endtime"] = want["starttime"] + SIZE_MS
    cols = ["bidder", "bid_count", "starttime", "endtime"]
    assert sorted(got[cols].itertuples(index=False, name=None)) == sorted(want[cols].itertuples(index=False, name=None))
