"""The UPI payment generator: deterministic, replayable, boundedly out of order."""

from __future__ import annotations

import pytest

from sparkstate import JobDefinitionError, UpiPayments
from sparkstate.connectors.generator import ClickEvents, TaxiRides


def test_any_range_replays_exactly():
    gen = UpiPayments(events=200_000, merchants=1000, seed=3)
    whole = gen.generate(0, 200_000).to_pylist()
    assert gen.generate(65_530, 65_545).to_pylist() == whole[65_530:65_545]
    assert UpiPayments(events=200_000, merchants=1000, seed=4).generate(0, 10).to_pylist() != whole[:10]


def test_values_are_plausible_and_out_of_order_is_bounded():
    gen = UpiPayments(events=50_000, merchants=100, max_out_of_orderness_ms=5000, events_per_second=1000)
    evs = gen.events_as_dicts()
    assert {e["device"] for e in evs} == {"android", "ios", "web"}
    assert len({e["merchant_id"] for e in evs}) == 100
    assert all(1.0 <= e["amount"] <= 200_000 for e in evs)
    top = float("-inf")
    for e in evs:
        assert e["event_time"] > top - 5000 - 1
        top = max(top, e["event_time"])


def test_offsets_and_event_counts():
    gen = UpiPayments(events=10)
    assert gen.end_offset() == 12  # the end-of-input marker and the final empty batch take one offset each
    assert gen.end_offset(marker=False) == 10  # a job without timers needs neither
    assert gen.events_between(8, 11) == 2
    assert gen.ends_in(10, 11) and not gen.ends_in(0, 10)
    assert UpiPayments(events=None).end_offset() is None
    assert gen.generate(10, 11).num_rows == 0


@pytest.mark.parametrize("kwargs", [{"events": -1}, {"merchants": 0}, {"rate": 0}, {"events_per_second": 0}])
def test_bad_settings(kwargs):
    with pytest.raises(JobDefinitionError):
        UpiPayments(**kwargs)


@pytest.mark.parametrize("cls", [TaxiRides, ClickEvents])
def test_other_generators_replay_and_keep_their_disorder_bound(cls):
    gen = cls(events=70_000, seed=5)
    whole = gen.generate(0, 70_000)
    assert whole.schema == cls.arrow_schema
    assert gen.generate(65_530, 65_545).to_pylist() == whole.to_pylist()[65_530:65_545]
    top = float("-inf")
    for e in gen.events_as_dicts():
        t = e[cls.time_column]
        assert t > top - gen.max_out_of_orderness_ms - 1
        top = max(top, t)


def test_taxi_rides_are_plausible():
    rides = TaxiRides(events=20_000).events_as_dicts()
    assert {r["pickup_zone"] for r in rides} <= set(range(1, 266)) and len({r["pickup_zone"] for r in rides}) > 200
    assert all(r["total_amount"] > r["fare"] > 0 and 1 <= r["passengers"] <= 6 for r in rides)


def test_click_events_come_in_sessions_per_user():
    gen = ClickEvents(events=60_000, users=400, active_users=100, shift_minutes=5, events_per_second=5)
    clicks = gen.events_as_dicts()
    assert {c["event_type"] for c in clicks} == {"view", "click", "cart", "purchase"}
    times: dict = {}
    for c in clicks:
        times.setdefault(c["user_id"], []).append(c["event_time"])
    gaps = [b - a for ts in times.values() for a, b in zip(sorted(ts), sorted(ts)[1:])]
    assert max(gaps) > 30 * 60_000 > sorted(gaps)[len(gaps) // 2]  # bursts with long quiet spells


def test_generators_reject_bad_settings():
    with pytest.raises(JobDefinitionError, match="users must be >= 1"):
        ClickEvents(users=0)
    with pytest.raises(JobDefinitionError, match="max_out_of_orderness_ms"):
        TaxiRides(max_out_of_orderness_ms=-1)


def test_ids_are_the_zero_padded_numbers_for_any_number_of_keys():
    import numpy as np
    import pyarrow as pa

    from sparkstate.connectors import generator

    rng = np.random.default_rng(7)
    for n in (1, 10, 999_999, 1_000_000, 1_000_001, 10_000_000, 50_000_000, 3_000_000_000):
        width = max(6, len(str(n - 1)))
        numbers = np.concatenate([[0, n - 1], rng.integers(0, n, 500)])
        ids = generator._ids("m", numbers, n)
        assert isinstance(ids, pa.StringArray) and ids.validate(full=True) is None
        assert ids.to_pylist() == [f"m{i:0{width}d}" for i in numbers.tolist()]
    assert generator._ids("u", np.array([], dtype=np.int64), 5).to_pylist() == []


def test_tens_of_millions_of_merchants_and_payers():
    """No vocabulary of every id is built (past 2.1 million ids pyarrow returned it chunked, and
    it was built again for every batch): a batch costs its events whatever the keys' number."""
    gen = UpiPayments(events=200_000, merchants=50_000_000, payers=50_000_000, seed=3)
    batch = gen.generate(0, 200_000)
    merchants, payers = batch.column(1).to_pylist(), batch.column(2).to_pylist()
    assert all(len(m) == 9 and m[0] == "m" and m[1:].isdigit() for m in merchants)
    assert all(len(p) == 9 and p[0] == "p" for p in payers)
    assert len(set(merchants)) > 199_000  # 200,000 draws from 50 million: nearly all distinct
    assert gen.generate(150_000, 200_000).column(1).to_pylist() == merchants[150_000:]  # any range alike
