"""nexmark-q16 (channel statistics per day) against pandas' GROUP BY channel, day of the bids."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest
from nexmark_reference import frame, job, run_to_watermark

KEY = ["channel", "day"]
DAY_MS = 86_400_000
#: 2025-01-01T23:59:59Z: a fast stream that crosses midnight a second in
BEFORE_MIDNIGHT_MS = 1_735_775_999_000


def reference(bids: pd.DataFrame) -> pd.DataFrame:
    """The SQL of q16 on the bid view: one row per (channel, day)."""
    at = pd.to_datetime(bids["date_time"], unit="ms")
    price = bids["price"]
    b = bids.assign(day=at.dt.strftime("%Y-%m-%d"), minute=at.dt.strftime("%H:%M"))
    ranges = {"total": pd.Series(True, index=bids.index), "rank1": price < 10_000,
              "rank2": (price >= 10_000) & (price < 1_000_000), "rank3": price >= 1_000_000}
    # max(minute): the last of the group's minutes in text order (pandas' max of strings is slow)
    out = pd.DataFrame({"minute": b.sort_values("minute", kind="stable").groupby(KEY)["minute"].last()})
    # count(*) FILTER (WHERE ...) and count(DISTINCT ...) FILTER (WHERE ...): over the rows the filter keeps
    for name, keep in ranges.items():
        kept = b[keep].groupby(KEY)
        out[f"{name}_bids"] = kept.size()
        out[f"{name}_bidders"] = kept["bidder"].nunique()
        out[f"{name}_auctions"] = kept["auction"].nunique()
    counts = [c for c in out.columns if c != "minute"]
    out[counts] = out[counts].fillna(0).astype("int64")
    return out


def run_keeping_state(j: Any, batch: int = 5_000) -> tuple[list[dict], set[int], int]:
    """The job's rows on the harness in micro-batches, and, before the end of input, the days
    whose windows still hold state and the watermark."""
    rows, h = run_to_watermark(j, batch)
    days = {start // DAY_MS for start, _ in h.keys()}  # the state is one record per day's window
    watermark = h.watermark
    return rows + h.finish(), days, watermark


@pytest.mark.parametrize("pre_aggregate", [True, False], ids=["two-phase", "one-phase"])
@pytest.mark.parametrize("settings", [
    {"events": 50_000, "events_per_second": 0.4},  # 2 s 500 ms an event: about 1.4 days
    {"events": 60_000, "start_ms": BEFORE_MIDNIGHT_MS},  # the hot channels across midnight
], ids=["slow-days", "midnight"])
def test_q16_last_row_per_channel_and_day_is_the_group_by(settings, pre_aggregate):
    j = job(16, **settings).with_settings(pre_aggregate=pre_aggregate)
    rows, days_kept, watermark = run_keeping_state(j)
    bids = frame(j.source_spec, "bid")
    want = reference(bids)
    assert want.index.get_level_values("day").nunique() >= 2
    # an upsert per micro-batch and group it changed, and each group's final row
    assert len(want) <= len(rows) < len(bids)
    got = pd.DataFrame(rows).drop_duplicates(KEY, keep="last").set_index(KEY)
    pd.testing.assert_frame_equal(got[want.columns].sort_index(), want.sort_index(), check_dtype=False)
    # a day's state is gone once the watermark has passed the day's end, and only then
    assert days_kept == {watermark // DAY_MS}
