"""The Nexmark generator against a scalar model of the reference's rules (NexmarkGenerator,
GeneratorConfig and model/*Generator.java, ported line by line here, not from the module)."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from sparkstate.connectors.nexmark import (
    JSON_FIELDS,
    NexmarkAuctions,
    NexmarkBids,
    NexmarkPersons,
    json_lines,
    write_json_lines,
)
from sparkstate.errors import JobDefinitionError

P, A, T = 1, 3, 50  # person, auction proportions; total


# ----------------------------------------------------------------- the reference, scalar


def event_id(offset):  # the table source: firstEventId 1 + nextAdjustedEventNumber (firstEventNumber 1)
    return 1 + (1 + offset)


def last_person(eid):
    epoch, off = divmod(eid, T)
    if off >= P:
        off = P - 1
    return epoch * P + off


def last_auction(eid):
    epoch, off = divmod(eid, T)
    if off < P:
        epoch -= 1
        off = A - 1
    elif off >= P + A:
        off = A - 1
    else:
        off -= P
    return epoch * A + off


def kind(eid):
    rem = eid % T
    return "person" if rem < P else ("auction" if rem < P + A else "bid")


def timestamp(start_ms, rate, number):
    return start_ms + int(number * (1_000_000.0 / rate)) // 1000


# ----------------------------------------------------------------- tests


def views(events=60_000, **settings):
    return [cls(events=events, **settings) for cls in (NexmarkPersons, NexmarkAuctions, NexmarkBids)]


def test_types_ids_and_times_follow_the_reference():
    persons, auctions, bids = views()
    offsets = {name: g.generate_with_offsets(0, 60_000)[0] for name, g in
               (("person", persons), ("auction", auctions), ("bid", bids))}
    for name, at in offsets.items():
        assert all(kind(event_id(int(o))) == name for o in at)
    assert sum(len(v) for v in offsets.values()) == 60_000
    assert [len(v) for v in offsets.values()] == [1_200, 3_600, 55_200]
    p = persons.generate(0, 60_000).to_pydict()
    a = auctions.generate(0, 60_000).to_pydict()
    assert p["id"] == [last_person(event_id(int(o))) + 1000 for o in offsets["person"]]
    assert a["id"] == [last_auction(event_id(int(o))) + 1000 for o in offsets["auction"]]
    assert a["id"] == list(range(1001, 1001 + 3_600))  # every auction once, in order
    ms = [int(t.timestamp() * 1000) for t in a["date_time"]]
    assert ms == [timestamp(auctions.start_ms, 10_000, int(o) + 1) for o in offsets["auction"]]
    for view in (persons, auctions, bids):
        assert view.events_between(0, 60_000) == len(view.generate(0, 60_000))
        assert view.events_between(777, 5_432) == len(view.generate(777, 5_432))


def test_bids_go_to_hot_and_recent_auctions_and_bidders_in_the_reference_ratios():
    bids = NexmarkBids(events=200_000)
    at, batch = bids.generate_with_offsets(0, 200_000)
    b = batch.to_pydict()
    hot_auctions = hot_bidders = 0
    for o, auction, bidder in zip(at, b["auction"], b["bidder"]):
        eid = event_id(int(o))
        last = last_auction(eid)
        hot = (last // 100) * 100 + 1000
        assert hot == auction or max(last - 100, 0) + 1000 <= auction <= last + 10 + 1000
        hot_auctions += auction == hot
        people = last_person(eid) + 1
        hot_bidder = (last_person(eid) // 100) * 100 + 1 + 2000  # FIRST_PERSON_ID added twice
        assert hot_bidder == bidder or people - min(people, 1000) + 2000 <= bidder < people + 10 + 2000
        hot_bidders += bidder == hot_bidder
    n = len(at)
    assert 0.49 < hot_auctions / n < 0.53  # 1 - 1/2, plus the draws that land on it anyway
    assert 0.74 < hot_bidders / n < 0.77  # 1 - 1/4
    channels = Counter(b["channel"])
    assert 0.49 < sum(channels[c] for c in ("Google", "Facebook", "Baidu", "Apple")) / n < 0.51
    prices = np.array(b["price"])
    assert prices.min() >= 100 and prices.max() <= 100_000_000
    assert abs(np.median(np.log10(prices)) - 5.0) < 0.05  # 10 ** uniform(0, 6) * 100
    extra = np.array([len(e) for e in b["extra"]])
    assert extra.min() >= 54 and extra.max() <= 81  # 68 +- 14 bytes: a bid of about 100


def test_auctions_expire_within_twice_the_horizon_and_sellers_are_hot_or_active():
    auctions = NexmarkAuctions(events=100_000)
    a = auctions.generate(0, 100_000).to_pandas()
    length = (a.expires - a.date_time).dt.total_seconds() * 1000
    # the horizon: 100 in-flight auctions ahead = 1,666 events = 166.6 ms at 10,000 events/s
    assert length.min() >= 1 and length.max() <= 2 * 167 + 1
    assert set(a.category) == {10, 11, 12, 13, 14}
    assert (a.reserve > a.initial_bid).all()
    hot = (a.seller - 1000) % 100 == 0
    assert 0.74 < hot.mean() < 0.80


def test_every_field_is_a_function_of_the_offset_and_the_seed():
    bids = NexmarkBids(events=150_000)
    whole = bids.generate(0, 150_000)
    parts = [bids.generate(lo, hi) for lo, hi in ((0, 70_001), (70_001, 70_002), (70_002, 150_000))]
    assert sum(p.num_rows for p in parts) == whole.num_rows
    import pyarrow as pa

    assert pa.Table.from_batches(parts).equals(pa.Table.from_batches([whole]))
    assert NexmarkBids(events=150_000, seed=8).generate(0, 1000) != bids.generate(0, 1000)
    assert NexmarkBids(events=150_000).generate(0, 1000).equals(bids.generate(0, 1000))


def test_json_lines_are_the_reference_shape_and_hold_the_same_events(tmp_path):
    persons, auctions, bids = views(events=5_000)
    lines = [json.loads(x) for x in json_lines(bids, 0, 5_000).to_pylist()]
    assert [ln["event_type"] for ln in lines] == [
        {"person": 0, "auction": 1, "bid": 2}[kind(event_id(o))] for o in range(5_000)]
    got = {name: [ln[name] for ln in lines if ln[name] is not None] for name in ("person", "auction", "bid")}
    for name, view in (("person", persons), ("auction", auctions), ("bid", bids)):
        rows = view.generate(0, 5_000).to_pylist()
        assert len(got[name]) == len(rows)
        for mine, theirs in zip(rows, got[name]):
            for column, field in JSON_FIELDS[name].items():
                value = mine[column]
                if hasattr(value, "strftime"):
                    value = value.strftime("%Y-%m-%d %H:%M:%S.") + f"{value.microsecond // 1000:03d}"
                assert theirs[field] == value
    written = list(write_json_lines(bids, tmp_path, files=3, block=1_000))
    assert written[-1] == 5_000
    files = sorted(tmp_path.glob("part-*.json"))
    assert len(files) == 3
    assert [json.loads(x) for f in files for x in f.read_text().splitlines()] == lines
    assert json.loads((tmp_path / "_nexmark.json").read_text())["events"] == 5_000


def test_nexmark_settings_are_checked():
    with pytest.raises(JobDefinitionError, match="in event-time order"):
        NexmarkBids(max_out_of_orderness_ms=10)
    with pytest.raises(JobDefinitionError, match="hot_auction_ratio must be >= 1"):
        NexmarkBids(hot_auction_ratio=0)
