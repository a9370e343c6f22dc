"""FraudPayments: the injected patterns are what they claim, replayable, and listed for tests."""

from __future__ import annotations

from collections import Counter

import pytest

from sparkstate.connectors.generator import CHUNK, FRAUD_SPAN_MS, FraudPayments, UpiPayments
from sparkstate.errors import JobDefinitionError

N = 70_000  # more than one chunk, so patterns of two chunks are listed


@pytest.fixture(scope="module")
def gen():
    return FraudPayments(events=N, fraud=0.002, seed=3)


@pytest.fixture(scope="module")
def events(gen):
    return gen.events_as_dicts()


def test_every_kind_is_injected_and_listed_in_offset_order(gen):
    found = gen.injected()
    kinds = Counter(f.kind for f in found)
    assert set(kinds) == {"velocity", "amount-spike", "new-device"} and all(n > 20 for n in kinds.values())
    assert [f.offset for f in found] == sorted(f.offset for f in found)
    assert len({f.payer_id for f in found}) == len(found)  # a payer per pattern
    assert max(f.offset for f in found) >= CHUNK
    # a range lists the patterns completed in it
    assert gen.injected(1000, 40_000) == [f for f in found if 1000 <= f.offset < 40_000]


def test_each_pattern_is_the_fraud_it_names(gen, events):
    for f in gen.injected():
        mine = [i for i, e in enumerate(events) if e["payer_id"] == f.payer_id]
        assert tuple(mine) == f.offsets and f.offset == mine[-1]
        pays = [events[i] for i in mine]
        last, before = pays[-1], pays[:-1]
        if f.kind == "velocity":
            times = [p["event_time"] for p in pays]
            assert len(pays) == 5 and max(times) - min(times) < 10 * 60_000
        elif f.kind == "amount-spike":
            average = sum(p["amount"] for p in before) / len(before)
            assert len(before) == 3 and last["amount"] > 10 * average
            assert {p["device"] for p in pays} == {last["device"]}
        else:
            assert last["amount"] > 50_000 and last["device"] not in {p["device"] for p in before}
            assert all(p["amount"] <= 10_000 for p in before)


def test_patterns_span_little_event_time_even_on_a_slow_stream():
    slow = FraudPayments(events=20_000, fraud=0.002, events_per_second=2.0, seed=5)
    events = slow.events_as_dicts()
    for f in slow.injected():
        times = [events[i]["event_time"] for i in f.offsets]
        assert max(times) - min(times) <= FRAUD_SPAN_MS + slow.max_out_of_orderness_ms


def test_replay_gives_the_same_events_and_patterns(gen, events):
    again = FraudPayments(events=N, fraud=0.002, seed=3)
    assert again.events_as_dicts(30_000, 66_000) == events[30_000:66_000]
    assert again.injected() == gen.injected()
    other = FraudPayments(events=N, fraud=0.002, seed=4)
    assert other.injected() != gen.injected()


def test_the_other_payments_are_those_of_upi_payments(gen, events):
    plain = UpiPayments(events=N, seed=3).events_as_dicts()
    injected = {i for f in gen.injected() for i in f.offsets}
    assert all(events[i] == plain[i] for i in range(N) if i not in injected)
    # no patterns: exactly UpiPayments
    assert FraudPayments(events=N, fraud=0.0, seed=3).events_as_dicts() == plain


def test_fraud_rate_is_checked():
    with pytest.raises(JobDefinitionError, match="fraud must be between 0 and 0.02"):
        FraudPayments(fraud=0.5)
    with pytest.raises(JobDefinitionError, match="unbounded"):
        FraudPayments(events=None).injected()
    assert FraudPayments(events=10, fraud=0.001).identity()["fraud"] == 0.001
