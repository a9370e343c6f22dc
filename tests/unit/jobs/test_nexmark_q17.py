"""nexmark-q17 (auction statistics per day) against pandas' GROUP BY auction, day of the bids."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from nexmark_reference import frame, job, run_to_watermark

KEY = ["auction", "day"]
DAY_MS = 86_400_000
#: 2025-01-01T23:59:59Z: a fast stream that crosses midnight a second in
BEFORE_MIDNIGHT_MS = 1_735_775_999_000


def reference(bids: pd.DataFrame) -> pd.DataFrame:
    """The SQL of q17 on the bid view: one row per (auction, day)."""
    price = bids["price"]
    b = bids.assign(
        day=pd.to_datetime(bids["date_time"], unit="ms").dt.strftime("%Y-%m-%d"),
        r1=price < 10_000, r2=(price >= 10_000) & (price < 1_000_000), r3=price >= 1_000_000,
    )
    out = b.groupby(KEY).agg(
        total_bids=("price", "size"), rank1_bids=("r1", "sum"), rank2_bids=("r2", "sum"), rank3_bids=("r3", "sum"),
        min_price=("price", "min"), max_price=("price", "max"), sum_price=("price", "sum"),
    )
    # AVG(BIGINT) is a BIGINT in Flink: the sum divided by the count, truncated towards zero
    out["avg_price"] = np.sign(out["sum_price"]) * (out["sum_price"].abs() // out["total_bids"])
    return out.astype("int64")


def run_keeping_state(j: Any, batch: int = 5_000) -> tuple[list[dict], set[int], int]:
    """The job's rows on the harness in micro-batches, and, before the end of input, the days
    its state still holds and the watermark."""
    rows, h = run_to_watermark(j, batch)
    days = {day for key in h.keys() for day in h.state(key).get("days", {})}
    watermark = h.watermark
    return rows + h.finish(), days, watermark


@pytest.mark.parametrize("settings", [
    {"events": 50_000, "events_per_second": 0.4},  # 2 s 500 ms an event: about 1.4 days
    {"events": 60_000, "start_ms": BEFORE_MIDNIGHT_MS},  # the hot auctions across midnight
], ids=["slow-days", "midnight"])
def test_q17_last_row_per_auction_and_day_is_the_group_by(settings):
    j = job(17, **settings)
    rows, days_kept, watermark = run_keeping_state(j)
    bids = frame(j.source_spec, "bid")
    want = reference(bids)
    assert want.index.get_level_values("day").nunique() >= 2
    assert len(rows) == len(bids)  # every bid changes its group's total_bids
    got = pd.DataFrame(rows).drop_duplicates(KEY, keep="last").set_index(KEY)
    pd.testing.assert_frame_equal(got[want.columns].sort_index(), want.sort_index(), check_dtype=False)
    # a day's state is gone once the watermark has passed the day's end, and only then
    assert days_kept == {watermark // DAY_MS}
