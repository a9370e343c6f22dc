"""Randomised window and timer cases, run on the harness (and a sample on Spark) and compared
with the Flink model in ``flink_model.py``."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from flink_model import MAX_WATERMARK, TimerProgram, WindowSpec, run_timers, run_windows

from sparkstate import (
    EventTimeSessionWindows,
    Job,
    KeyedProcessFunction,
    ListSource,
    MemorySink,
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
    WatermarkStrategy,
    agg,
)

SCHEMA = "ts bigint, k string, v double"


@dataclass
class WindowCase:
    name: str
    spec: WindowSpec
    batches: list[list[tuple[str, int, float]]]
    out_of_orderness: int = 0
    #: windows fire early, at the end of every batch (tumbling and sliding only)
    early: bool = False

    def job(self, sink: Any = None, late: Any = None) -> Job:
        spec = self.spec
        if spec.kind == "tumbling":
            assigner: Any = TumblingEventTimeWindows.of(spec.size)
        elif spec.kind == "sliding":
            assigner = SlidingEventTimeWindows.of(spec.size, spec.slide)
        else:
            assigner = EventTimeSessionWindows.with_gap(spec.gap)
        events = [[{"ts": ts, "k": k, "v": v} for k, ts, v in b] for b in self.batches]
        wm = WatermarkStrategy.for_bounded_out_of_orderness(self.out_of_orderness).with_timestamp_column("ts")
        job = Job(f"flink-{self.name}").source(ListSource(events, SCHEMA, "ts"), watermark=wm)
        job = job.key_by("k").window(assigner)
        if spec.lateness:
            job = job.allowed_lateness(spec.lateness)
        if late is not None:
            job = job.side_output_late_data(late)
        if self.early:
            job = job.early_fire()
        return job.aggregate(agg.count("n"), agg.sum("v", "total")).sink(sink if sink is not None else MemorySink())

    def expected(self) -> tuple[list[list[tuple]], list[tuple], bool]:
        """Flink's rows per batch (the last: the end of the input), late elements, and
        whether any state is left after the end."""
        per_batch, late, model = run_windows(self.spec, self.batches, self.out_of_orderness, self.early)
        return per_batch, late, model.state_left()

    def on_harness(self) -> tuple[list[list[tuple]], list[tuple], bool]:
        h = self.job().harness()
        per_batch = [rows(h.process_batch([{"ts": ts, "k": k, "v": v} for k, ts, v in b])) for b in self.batches]
        per_batch.append(rows(h.finish()))
        late = [(e["k"], e["ts"], e["v"]) for e in h.side_output("late_data")]
        return per_batch, late, bool(h.records)


def rows(out: list[dict]) -> list[tuple]:
    return [(r["k"], r["window_start"], r["window_end"], r["n"], r["total"]) for r in out]


def by_key(per_batch: list[list[tuple]]) -> dict[Any, list[tuple]]:
    """``(batch, row)`` per key, in emission order: the order that must hold within a key."""
    out: dict[Any, list[tuple]] = {}
    for i, batch in enumerate(per_batch):
        for r in batch:
            out.setdefault(r[0], []).append((i, *r))
    return out


#: (kind, size, slide, gap) shapes, with sliding windows of every relation of size and slide:
#: a multiple, slide < size < 2 x slide, size >= 2 x slide, and size < slide (gaps)
SHAPES = [
    ("tumbling", 1000, 0, 0),
    ("tumbling", 700, 0, 0),
    ("sliding", 1000, 500, 0),
    ("sliding", 4000, 3000, 0),
    ("sliding", 1000, 600, 0),
    ("sliding", 1500, 1000, 0),
    ("sliding", 3000, 1000, 0),
    ("sliding", 2500, 1000, 0),
    ("sliding", 500, 800, 0),
    ("session", 0, 0, 150),
    ("session", 0, 0, 300),
    ("session", 0, 0, 1000),
]
LATENESS = [0, 200, 1000, 2500]


def random_window_case(seed: int, near_epoch: bool = False) -> WindowCase:
    """Out-of-order batches over a few keys, with late events and batches that leave the
    watermark where it was; times around the epoch when ``near_epoch``."""
    rnd = random.Random(seed)
    kind, size, slide, gap = SHAPES[seed % len(SHAPES)]
    lateness = LATENESS[(seed // len(SHAPES)) % len(LATENESS)]
    spec = WindowSpec(kind, size, slide, gap, lateness)
    keys = "abcd"[: rnd.randint(1, 4)]
    base = -3000 if near_epoch else rnd.choice([0, 10_000, 1_000_000])
    now = base
    batches = []
    for _ in range(rnd.randint(2, 9)):
        batch = []
        for _ in range(rnd.randint(0, 12)):
            now += rnd.choice([0, 50, 100, 300, 700, 1500])
            ts = now - rnd.choice([0, 0, 0, 100, 400, 1200, 3000, 6000])  # out of order, some late
            batch.append((rnd.choice(keys), ts, float(rnd.randint(1, 9))))
        batches.append(batch)
    return WindowCase(f"seed{seed}", spec, batches, rnd.choice([0, 0, 200, 1000]))


# --------------------------------------------------------------------------- timers


def chain(ts: int) -> tuple[int, ...]:
    """What on_timer registers: a due time behind it (fires in the same round, in order),
    and a later one; both end, as each changes the residue that asked for it."""
    out = []
    if ts % 5 == 0:
        out.append(-3)  # ts - 3 is not a multiple of 5: no further chain
    if ts % 3 == 0:
        out.append(7)  # ts + 7 is 1 mod 3
    return tuple(out)


PROGRAMS = [
    TimerProgram(on_element=(10,), delete=(), chain=chain),
    TimerProgram(on_element=(-50, 5), delete=(), chain=chain),  # -50: often behind the watermark
    TimerProgram(on_element=(-20, 30), delete=(-20,), chain=chain),  # registered, then deleted
    TimerProgram(on_element=(0, -400, 100), delete=(100,), chain=chain),
    TimerProgram(on_element=(-50, 20), delete=(-60,), chain=chain),  # deletes what an element 10 ms earlier set
]


class FollowProgram(KeyedProcessFunction):
    """A keyed function doing what a :class:`TimerProgram` says."""

    def __init__(self, program: TimerProgram) -> None:
        self.program = program

    def process_element(self, e, ctx):
        ts, t = ctx.timestamp(), ctx.timer_service()
        for d in self.program.on_element:
            t.register_event_time_timer(ts + d)
        for d in self.program.delete:
            t.delete_event_time_timer(ts + d)
        yield ("element", ctx.get_current_key(), ts)

    def on_timer(self, ts, ctx):
        for d in self.program.chain(ts):
            ctx.timer_service().register_event_time_timer(ts + d)
        yield ("timer", ctx.get_current_key(), ts)


def random_timer_batches(seed: int) -> list[list[tuple[str, int]]]:
    rnd = random.Random(seed)
    now = rnd.choice([1000, 50_000])
    batches = []
    for _ in range(rnd.randint(2, 8)):
        batch = []
        for _ in range(rnd.randint(0, 6)):
            now += rnd.choice([0, 1, 10, 40, 200])
            batch.append((rnd.choice("xyz"), now - rnd.choice([0, 0, 30, 300])))
        batches.append(batch)
    return batches


def timers_on_harness(
    program: TimerProgram, batches: list[list[tuple[str, int]]], out_of_orderness: int = 0,
) -> list[list[tuple]]:
    from sparkstate import KeyedHarness

    wm = WatermarkStrategy.for_bounded_out_of_orderness(out_of_orderness).with_timestamp_column("ts")
    h = KeyedHarness(FollowProgram(program), "k", watermark_strategy=wm)
    per_batch = [h.process_batch([{"k": k, "ts": ts} for k, ts in b]) for b in batches]
    per_batch.append(h.advance_watermark(MAX_WATERMARK))
    assert not h.records, "every timer fired by the end"
    return per_batch


def timers_expected(program: TimerProgram, batches: list[list[tuple[str, int]]], out_of_orderness: int = 0) -> list[list[tuple]]:
    return run_timers(program, batches, out_of_orderness)
