"""The interval join (``sparkstate.engine.joins``) against a brute-force model of the join
(``tests/interval_join_model.py``), and its rules one by one: bounds, late elements, the pair's
timestamp, cleanup by the watermark, and bad input."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from interval_join_model import Batch, Element, joined, late, still_needed, watermarks

from sparkstate import Job, ListSource, MemorySink, OutputTag, WatermarkStrategy
from sparkstate.api.connected import ProcessJoinFunction
from sparkstate.engine.joins import LEFT_BUFFER, RIGHT_BUFFER
from sparkstate.errors import JobDefinitionError, ProcessFunctionError

SCHEMA = "id bigint, key string, ts bigint"
OUTPUT = "key string, left_id bigint, right_id bigint, left_ts bigint, right_ts bigint, ts bigint"


class Pairs(ProcessJoinFunction):
    """Emits each pair with the times its context reports."""

    def process_element(self, left, right, ctx):
        yield {
            "key": ctx.get_current_key(), "left_id": left["id"], "right_id": right["id"],
            "left_ts": ctx.left_timestamp(), "right_ts": ctx.right_timestamp(), "ts": ctx.timestamp(),
        }


def join_job(lower: int, upper: int, out_of_orderness: int = 0, exclusive: tuple[bool, bool] = (False, False),
             function: ProcessJoinFunction | None = None) -> Job:
    wm = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(milliseconds=out_of_orderness)).with_timestamp_column("ts")
    job = (
        Job("join").source(ListSource([[]], SCHEMA), watermark=wm).key_by("key")
        .interval_join(ListSource([[]], SCHEMA), key_by="key", watermark=wm)
        .between(timedelta(milliseconds=lower), timedelta(milliseconds=upper))
    )
    if exclusive[0]:
        job = job.lower_bound_exclusive()
    if exclusive[1]:
        job = job.upper_bound_exclusive()
    return job.process(function or Pairs(), output_schema=OUTPUT).sink(MemorySink("join"))


def rows(elements: list[Element]) -> list[dict]:
    return [{"id": e.id, "key": e.key, "ts": e.ts} for e in elements]


def buffered_ids(h) -> tuple[set[int], set[int]]:
    left, right = set(), set()
    for key in h.keys():
        state = h.state(key)
        left |= {e["id"] for bucket in state.get(LEFT_BUFFER, {}).values() for e in bucket}
        right |= {e["id"] for bucket in state.get(RIGHT_BUFFER, {}).values() for e in bucket}
    return left, right


def random_case(rng: random.Random) -> tuple[list[Batch], int, int, int, tuple[bool, bool]]:
    lower = rng.choice([-3000, -1000, -200, 0, 0, 100, 500])
    upper = lower + rng.choice([0, 0, 1, 300, 1000, 4000])
    inclusive = (rng.random() < 0.7, rng.random() < 0.7)
    if lower + (0 if inclusive[0] else 1) > upper - (0 if inclusive[1] else 1):
        inclusive = (True, True)
    delay = rng.choice([0, 200, 1000])
    batches: list[Batch] = []
    ids = iter(range(1, 10**6))
    clock = 1_000_000
    for _ in range(rng.randint(2, 8)):
        clock += rng.randint(0, 2000)
        # out of order, some of it later than the watermark allows; ms collisions on purpose
        side = [[Element(next(ids), rng.choice("abc"), clock - rng.choice([0, 0, 50, 300, 1500, 3000]))
                 for _ in range(rng.randint(0, 6))] for _ in (0, 1)]
        batches.append((side[0], side[1]))
    return batches, delay, lower, upper, inclusive


@pytest.mark.parametrize("seed", range(60))
def test_joins_exactly_the_model_pairs_and_cleans_as_the_watermark_passes(seed):
    batches, delay, lower, upper, inclusive = random_case(random.Random(seed))
    h = join_job(lower, upper, delay, (not inclusive[0], not inclusive[1])).harness()
    want_marks = watermarks(batches, delay)
    got = []
    for i, (ls, rs) in enumerate(batches):
        assert h.watermark == want_marks[i]
        got += h.process_batch(rows(ls), second=rows(rs))
        # what the buffers hold: the elements that may still meet a partner, nothing else
        assert buffered_ids(h) == still_needed(batches[: i + 1], delay, lower, upper, inclusive, want_marks[i])
    pairs = sorted((r["left_id"], r["right_id"]) for r in got)
    assert pairs == joined(batches, delay, lower, upper, inclusive)
    by_id = {e.id: e for ls, rs in batches for e in ls + rs}
    for r in got:
        assert (r["left_ts"], r["right_ts"]) == (by_id[r["left_id"]].ts, by_id[r["right_id"]].ts)
        assert r["ts"] == max(r["left_ts"], r["right_ts"])
    late_l, late_r = late(batches, delay)
    assert sorted(e["id"] for e in h.side_output("left_late_data")) == sorted(late_l)
    assert sorted(e["id"] for e in h.side_output("right_late_data")) == sorted(late_r)
    h.finish()
    assert h.records == {}, "no state once the watermark has passed every cleanup time"


def test_bounds_are_inclusive_by_default_and_exclusive_on_request():
    left = [{"id": 1, "key": "k", "ts": 10_000}]
    right = [{"id": i, "key": "k", "ts": t} for i, t in enumerate([8_999, 9_000, 9_500, 12_000, 12_001], 10)]

    def pairs(exclusive):
        h = join_job(-1000, 2000, exclusive=exclusive).harness()
        return sorted(r["right_id"] for r in h.process_batch(left, second=right))

    assert pairs((False, False)) == [11, 12, 13]
    assert pairs((True, False)) == [12, 13]
    assert pairs((False, True)) == [11, 12]
    assert pairs((True, True)) == [12]


def test_each_pair_once_whichever_side_arrives_first_and_stamped_with_the_later_time():
    h = join_job(0, 5000).harness()
    assert h.process_batch([{"id": 1, "key": "k", "ts": 1_000}]) == []
    out = h.process_batch([], second=[{"id": 2, "key": "k", "ts": 4_000}])
    assert [(r["left_id"], r["right_id"], r["ts"]) for r in out] == [(1, 2, 4_000)]
    # a left element after its partner on the right joins it on arrival
    out = h.process_batch([{"id": 3, "key": "k", "ts": 3_500}])
    assert [(r["left_id"], r["right_id"], r["ts"]) for r in out] == [(3, 2, 4_000)]
    # another key meets nothing
    assert h.process_batch([{"id": 4, "key": "other", "ts": 3_900}]) == []


def test_late_elements_join_nothing_and_go_to_the_side_outputs():
    h = join_job(-10_000, 10_000).harness()
    h.process_batch([{"id": 1, "key": "k", "ts": 20_000}], second=[{"id": 2, "key": "k", "ts": 20_000}])
    assert h.watermark == 19_999
    out = h.process_batch([{"id": 3, "key": "k", "ts": 19_998}], second=[{"id": 4, "key": "k", "ts": 19_999}])
    # 19_998 < W: late; 19_999 == W is not late and joins the left element at 20_000
    assert [(r["left_id"], r["right_id"]) for r in out] == [(1, 4)]
    assert h.side_output("left_late_data") == [{"id": 3, "key": "k", "ts": 19_998}]
    assert h.side_output("right_late_data") == []


def test_an_element_at_the_watermark_still_meets_a_partner_whose_cleanup_time_it_is():
    # left at 1_000 with upper 2_000 may meet right elements up to 3_000 (its cleanup time);
    # when the watermark is exactly 3_000 such an element is not late, so the left element
    # must still be there (Flink's operator has dropped it by then)
    h = join_job(0, 2_000).harness()
    h.process_batch([{"id": 1, "key": "k", "ts": 1_000}])
    h.process_batch([], watermark=3_000)
    assert h.state("k")[LEFT_BUFFER] == {1_000: [{"id": 1, "key": "k", "ts": 1_000}]}
    out = h.process_batch([], second=[{"id": 2, "key": "k", "ts": 3_000}])
    assert [(r["left_id"], r["right_id"]) for r in out] == [(1, 2)]
    h.process_batch([], watermark=3_001)
    assert LEFT_BUFFER not in h.state("k")


@pytest.mark.parametrize(("lower", "upper", "left_cleanup", "right_cleanup"), [
    (-1_000, 2_000, 12_000, 11_000),   # each side until the last time a partner may have
    (500, 2_000, 12_000, 10_000),      # lower > 0: a right element is never kept past its own time
    (-3_000, -1_000, 10_000, 13_000),  # upper < 0: nor a left element
])
def test_each_side_is_kept_until_the_watermark_passes_its_cleanup_time(lower, upper, left_cleanup, right_cleanup):
    h = join_job(lower, upper).harness()
    h.process_batch([{"id": 1, "key": "k", "ts": 10_000}], second=[{"id": 2, "key": "k", "ts": 10_000}])
    for wm in sorted({left_cleanup, right_cleanup}):
        h.process_batch([], watermark=wm)
        state = h.state("k")
        assert (LEFT_BUFFER in state, RIGHT_BUFFER in state) == (left_cleanup >= wm, right_cleanup >= wm)
        h.process_batch([], watermark=wm + 1)
        state = h.state("k")
        assert (LEFT_BUFFER in state, RIGHT_BUFFER in state) == (left_cleanup > wm, right_cleanup > wm)
    assert h.records == {}


def test_side_outputs_of_the_join_function_and_its_open():
    tag = OutputTag("far", "left_id bigint, right_id bigint")

    class Far(ProcessJoinFunction):
        def open(self, ctx):
            self.opened = True

        def process_element(self, left, right, ctx):
            assert self.opened
            if ctx.right_timestamp() - ctx.left_timestamp() > 500:
                ctx.output(tag, {"left_id": left["id"], "right_id": right["id"]})
            else:
                yield {"key": ctx.get_current_key(), "left_id": left["id"], "right_id": right["id"],
                       "left_ts": ctx.left_timestamp(), "right_ts": ctx.right_timestamp(), "ts": ctx.timestamp()}

    h = join_job(0, 1000, function=Far()).harness()
    out = h.process_batch([{"id": 1, "key": "k", "ts": 0}], second=[{"id": 2, "key": "k", "ts": 100},
                                                                    {"id": 3, "key": "k", "ts": 900}])
    assert [r["right_id"] for r in out] == [2]
    assert h.side_output("far") == [{"left_id": 1, "right_id": 3}]


def test_bad_input_names_what_and_the_fix():
    with pytest.raises(JobDefinitionError, match="hold no time"):
        join_job(0, 0, exclusive=(True, False))
    with pytest.raises(JobDefinitionError, match="hold no time"):
        join_job(5, 6, exclusive=(True, True))
    with pytest.raises(JobDefinitionError, match="applies to an interval join"):
        Job("x").source(ListSource([[]], SCHEMA)).lower_bound_exclusive()
    with pytest.raises(JobDefinitionError, match="ProcessJoinFunction"):
        job = join_job(0, 1)
        job.process(object(), output_schema=OUTPUT).validate()

    class OneRow(ProcessJoinFunction):
        def process_element(self, left, right, ctx):
            return {"key": "k"}

    h = join_job(0, 10, function=OneRow()).harness()
    with pytest.raises(ProcessFunctionError, match="single row"):
        h.process_batch([{"id": 1, "key": "k", "ts": 0}], second=[{"id": 2, "key": "k", "ts": 5}])


def test_late_data_side_outputs_are_declared_with_each_input_columns():
    job = join_job(0, 10)
    assert {"left_late_data", "right_late_data"} <= set(job.side_output_names)
    assert job.side_output_schema("right_late_data").ddl == job.side_output_schema("left_late_data").ddl
    routed = job.side_output_left_late_data(MemorySink("l")).side_output_right_late_data(MemorySink("r"))
    assert [n for n, _ in routed.side_sinks] == ["left_late_data", "right_late_data"]


def test_buffers_and_cleanup_timers_go_through_a_savepoint(tmp_path):
    job = join_job(-1000, 2000)
    h = job.harness()
    h.process_batch([{"id": 1, "key": "k", "ts": 10_000}], second=[{"id": 2, "key": "k", "ts": 10_500}])
    h.savepoint(tmp_path / "sp")
    restored = job.harness(from_savepoint=tmp_path / "sp")
    assert restored.records == h.records and restored.watermark == h.watermark
    out = restored.process_batch([], second=[{"id": 3, "key": "k", "ts": 11_000}])
    assert [(r["left_id"], r["right_id"]) for r in out] == [(1, 3)]
    restored.finish()
    assert restored.records == {}
