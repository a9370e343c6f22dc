"""The time helpers every datetime and duration goes through (``sparkstate.api.time``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from sparkstate.api.checkpointing import interval_millis
from sparkstate.api.time import epoch_micros, epoch_millis, to_millis
from sparkstate.errors import JobDefinitionError

UTC = UTC


@pytest.mark.parametrize(
    "value, ms",
    [
        (datetime(1970, 1, 1, tzinfo=UTC), 0),
        (datetime(1970, 1, 1, 0, 0, 0, 999, tzinfo=UTC), 0),  # a fraction of a ms rounds down
        (datetime(1970, 1, 1, 0, 0, 0, 1999, tzinfo=UTC), 1),
        (datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC), -1),  # down, not toward zero
        (datetime(1969, 12, 31, 23, 59, 59, 999_000, tzinfo=UTC), -1),
        (datetime(1969, 12, 31, 23, 59, 59, 998_999, tzinfo=UTC), -2),
        (datetime(1900, 1, 1, 0, 0, 0, 500, tzinfo=UTC), -2_208_988_800_000),
        (datetime(2024, 5, 17, 12, 30, 15, 123_456, tzinfo=UTC), 1_715_949_015_123),
        # float seconds (timestamp() * 1000) would lose the last microseconds this far out
        (datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC), 253_402_300_799_999),
    ],
)
def test_epoch_millis_rounds_down_exactly(value, ms):
    assert epoch_millis(value) == ms
    assert epoch_micros(value) // 1000 == ms


def test_epoch_micros_is_exact():
    assert epoch_micros(datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)) == -1
    assert epoch_micros(datetime(2024, 5, 17, 12, 30, 15, 123_457, tzinfo=UTC)) == 1_715_949_015_123_457


def test_naive_datetimes_are_utc_and_offsets_count():
    assert epoch_millis(datetime(2024, 1, 1, 0, 0, 0, 1500)) == epoch_millis(datetime(2024, 1, 1, 0, 0, 0, 1500, tzinfo=UTC))
    plus_two = timezone(timedelta(hours=2))
    assert epoch_millis(datetime(1970, 1, 1, 2, 0, 0, 1, tzinfo=plus_two)) == 0
    assert epoch_micros(datetime(1970, 1, 1, 1, 59, 59, 999_999, tzinfo=plus_two)) == -1


@pytest.mark.parametrize(
    "duration, ms",
    [(timedelta(seconds=2), 2000), (timedelta(microseconds=1500), 1), (timedelta(microseconds=-1), -1), (250, 250), (-5, -5)],
)
def test_to_millis_rounds_timedeltas_down(duration, ms):
    assert to_millis(duration) == ms


@pytest.mark.parametrize("bad", ["2 s", 1.5, True, None])
def test_to_millis_takes_timedeltas_and_ints_only(bad):
    with pytest.raises(JobDefinitionError, match=r"^gap must be a datetime.timedelta or int milliseconds, got "):
        to_millis(bad, "gap")


@pytest.mark.parametrize(
    "interval, ms",
    [("1.5 s", 1500), (" 2 Minutes ", 120_000), (timedelta(milliseconds=7), 7), (timedelta(0), 0), (3, 3)],
)
def test_interval_millis_takes_text_too(interval, ms):
    assert interval_millis(interval) == ms


@pytest.mark.parametrize("bad", [timedelta(microseconds=1500), timedelta(milliseconds=-1), -1, "0.5 ms"])
def test_interval_millis_must_be_whole_and_non_negative(bad):
    with pytest.raises(JobDefinitionError, match="trigger must be a whole, non-negative number of milliseconds"):
        interval_millis(bad, "trigger")


@pytest.mark.parametrize("bad", ["soon", "5 fortnights", 1.5, False])
def test_interval_millis_names_the_forms(bad):
    forms = "a duration such as '500 milliseconds', '2 seconds' or '1 minute', a datetime.timedelta or int milliseconds"
    with pytest.raises(JobDefinitionError, match=f"^interval must be {forms}, got "):
        interval_millis(bad)
