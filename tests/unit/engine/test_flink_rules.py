"""Windows and timers at their edges, against the Flink model (``tests/flink_model.py``).

The named tests are the concrete cases of issue 12 (§8); the randomised ones compare the
harness with the model batch by batch, key by key: rows, late data, and no state left after
the end of the input.
"""

from __future__ import annotations

import pytest
from flink_cases import (
    PROGRAMS,
    WindowCase,
    by_key,
    random_timer_batches,
    random_window_case,
    rows,
    timers_expected,
    timers_on_harness,
)
from flink_model import TimerProgram, WindowSpec, batch_watermarks, run_timers


def check_against_model(case: WindowCase) -> None:
    want, want_late, want_left = case.expected()
    got, got_late, got_left = case.on_harness()
    assert by_key(got) == by_key(want)
    assert sorted(got_late) == sorted(want_late)
    assert not want_left, "the model keeps no state after the end"
    assert not got_left, "the harness keeps no state after the end"


# --------------------------------------------------------------------------- the cases


def test_sliding_windows_keep_every_membership_when_slide_lt_size_lt_twice_slide():
    # 45 s is in [30 s, 70 s) alone; 65 s of another key is in it and in [60 s, 100 s)
    case = WindowCase("sliding", WindowSpec("sliding", 40_000, 30_000), [[("a", 45_000, 1.0), ("b", 65_000, 2.0)]])
    got, _, _ = case.on_harness()
    assert sorted(r for batch in got for r in batch) == [
        ("a", 30_000, 70_000, 1, 1.0), ("b", 30_000, 70_000, 1, 2.0), ("b", 60_000, 100_000, 1, 2.0),
    ]
    check_against_model(case)


def test_session_lateness_above_the_gap_keeps_the_timer_another_session_uses():
    # a@0's cleanup time (999 + 10 s) is a@10000's firing time: the merge of a@500 into
    # [0, 1000) must not delete it
    batch = [("a", 0, 1.0), ("a", 10_000, 1.0), ("a", 500, 1.0)]
    case = WindowCase("shared", WindowSpec("session", gap=1000, lateness=10_000), [batch])
    got, _, left = case.on_harness()
    assert sorted(r for batch in got for r in batch) == [("a", 0, 1500, 2, 2.0), ("a", 10_000, 11_000, 1, 1.0)]
    assert not left
    check_against_model(case)


def test_a_cleaned_up_session_does_not_absorb_a_late_event():
    batches = [[("a", 0, 1.0), ("a", 10_000, 1.0), ("a", 10_500, 1.0)], [("a", 11_000, 1.0)], [("a", 1000, 1.0)], []]
    case = WindowCase("cleaned", WindowSpec("session", gap=1000, lateness=10_000), batches)
    got, _, _ = case.on_harness()
    assert got[2] == [("a", 1000, 2000, 1, 1.0)]  # a session of its own, fired at once (late firing)
    assert ("a", 0, 2000, 2, 2.0) not in [r for b in got for r in b]
    check_against_model(case)


def test_elements_between_sliding_windows_with_gaps_are_not_late_data():
    # windows [0, 500), [800, 1300), ...: 600 is in none, and not late: Flink drops it quietly
    case = WindowCase("gaps", WindowSpec("sliding", 500, 800), [[("a", 100, 1.0), ("a", 600, 1.0)], [("a", 2000, 1.0)]])
    got, late, _ = case.on_harness()
    assert late == []
    check_against_model(case)


def test_a_timer_registered_in_on_timer_for_a_due_time_fires_in_timestamp_order():
    # 171 and 201 both due; on_timer(171) registers 172: Flink fires 171, 172, 201
    program = TimerProgram(on_element=(71, 101), delete=(), chain=lambda ts: (1,) if ts == 171 else ())
    batches = [[("a", 100)], [("a", 300)], []]
    got = timers_on_harness(program, batches)
    assert got[2] == [("timer", "a", 171), ("timer", "a", 172), ("timer", "a", 201)]
    assert got == timers_expected(program, batches)


def test_timer_behind_the_watermark_waits_for_it_to_advance_and_a_delete_cancels_it():
    # the model: registered behind the watermark in process_element, it fires only when the
    # watermark next advances; deleted before that, never
    keep = TimerProgram(on_element=(-500,), delete=(), chain=lambda ts: ())
    cancel = TimerProgram(on_element=(-500,), delete=(-500,), chain=lambda ts: ())
    batches = [[("a", 1000)], [("a", 1000)], [("a", 900)], [("a", 2000)]]
    for program in (keep, cancel):
        assert timers_on_harness(program, batches) == timers_expected(program, batches)
    got = timers_on_harness(keep, batches)
    assert ("timer", "a", 500) in got[4]  # batch 2 (watermark 999) registers 500; batch 3 leaves it
    assert ("timer", "a", 400) in got[4]  # at 999; batch 4's watermark (1999) is the next advance


def test_the_harness_watermark_starts_at_the_epoch_as_spark_s_does():
    # Spark's watermark cannot go below 0 and reports 0 before the first one: event times at
    # or before the epoch leave the watermark unset on both engines (a documented difference)
    assert batch_watermarks([[-5000], [0], [1], [2]], 0) == [-(2**63)] * 4
    assert batch_watermarks([[-5000], [0], [1], [2]], 0, from_epoch=False) == [-(2**63), -5001, -1, 0]
    batches = [[("a", -1500, 1.0)], [("a", 1, 1.0)], [("a", 2, 1.0)], [("a", 1500, 1.0)]]
    case = WindowCase("epoch", WindowSpec("tumbling", 1000), batches)
    h = case.job().harness()
    assert rows(h.process_batch([{"ts": -1500, "k": "a", "v": 1.0}])) == []
    assert h.watermark == -(2**63)
    h.process_batch([{"ts": 1, "k": "a", "v": 1.0}])
    assert h.watermark == -(2**63)  # 1 - 0 - 1 = 0: Spark reports 0 as "no watermark yet"
    assert rows(h.process_batch([{"ts": 2, "k": "a", "v": 1.0}])) == []
    assert h.watermark == 1
    # watermark 1: [-2000, -1000) and [-1000, 0) fire; the window of 1 and 2 is still open
    assert rows(h.process_batch([{"ts": 1500, "k": "a", "v": 1.0}])) == [("a", -2000, -1000, 1, 1.0)]
    check_against_model(case)


def test_windows_before_the_epoch_keep_off_the_native_path():
    # Spark SQL's window aggregation drops windows that end at or before its watermark, which
    # starts at 0: it lost [-3000, -2000) ... [-1000, 0), which the Python path fires
    from sparkstate.runtime.streaming.planner import native_blockers

    before = WindowCase("before", WindowSpec("tumbling", 1000), [[("a", -2500, 1.0)], [("a", 1500, 1.0)]])
    after = WindowCase("after", WindowSpec("tumbling", 1000), [[("a", 0, 1.0)], [("a", 1500, 1.0)]])
    assert "before the epoch" in " ".join(native_blockers(before.job()))
    assert native_blockers(after.job()) == []


# --------------------------------------------------------------------------- randomised


@pytest.mark.parametrize("seed", range(192))
def test_windows_match_the_flink_model(seed):
    check_against_model(random_window_case(seed))


@pytest.mark.parametrize("seed", range(60))
def test_early_firing_windows_match_the_flink_model(seed):
    # tumbling and sliding shapes (early firing takes no sessions), every lateness, out of order
    case = random_window_case(seed)
    if case.spec.kind == "session":
        case = random_window_case(seed + 9)
    case.early = True
    check_against_model(case)


@pytest.mark.parametrize("seed", range(24))
def test_windows_near_the_epoch_match_the_flink_model(seed):
    check_against_model(random_window_case(1000 + seed, near_epoch=True))


@pytest.mark.parametrize("seed", range(50))
def test_timers_registering_timers_match_the_flink_model(seed):
    program = PROGRAMS[seed % len(PROGRAMS)]
    batches = random_timer_batches(seed)
    ooo = (0, 20, 100)[seed % 3]
    got = timers_on_harness(program, batches, ooo)
    want = run_timers(program, batches, ooo)
    assert [sorted_ties(b) for b in got] == [sorted_ties(b) for b in want]


def sorted_ties(batch: list[tuple]) -> dict:
    """A batch's rows per key, in order (keys fire interleaved by timestamp; within a key the
    order is Flink's)."""
    out: dict = {}
    for r in batch:
        out.setdefault(r[1], []).append(r)
    return out
