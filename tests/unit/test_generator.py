"""The UPI payment generator: deterministic, replayable, boundedly out of order."""

from __future__ import annotations

import pytest

from sparkstate import JobDefinitionError, UpiPayments


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
