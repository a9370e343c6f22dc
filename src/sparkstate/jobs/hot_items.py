"""Hot items: the top 3 items by events in each sliding 10-minute window, every minute.

Flink's classic: count per item incrementally in each window (an ``AggregateFunction``), and
when the window fires, a ``ProcessWindowFunction`` ranks the counts (Flink's
``aggregate(AggregateFunction, ProcessWindowFunction)``), so a window keeps one counter per item,
never its elements. Keyed by category; the click generator has one category by default, so
this is the shop-wide top 3 (``--set categories=20`` ranks per category).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from sparkstate.api.state import AggregateFunction
from sparkstate.api.time import WatermarkStrategy
from sparkstate.api.windows import ProcessWindowFunction, SlidingEventTimeWindows, WindowContext
from sparkstate.connectors.generator import ClickEvents
from sparkstate.connectors.sinks import NoopSink
from sparkstate.job import Job
from sparkstate.jobs.registry import SeedJob

TOP_N = 3
OUTPUT = "category string, window_start timestamp, window_end timestamp, rank int, item_id string, events bigint"


class ItemCounts(AggregateFunction):
    """Events per item: ``{item_id: count}``."""

    def create_accumulator(self) -> dict:
        return {}

    def add(self, value: dict, acc: dict) -> dict:
        item = value["item_id"]
        acc[item] = acc.get(item, 0) + 1
        return acc

    def merge(self, a: dict, b: dict) -> dict:
        out = dict(a)
        for item, n in b.items():
            out[item] = out.get(item, 0) + n
        return out

    def get_result(self, acc: dict) -> dict:
        return acc


class TopItems(ProcessWindowFunction):
    """The ``n`` items with the most events in a window (ties: the smaller item id first)."""

    def __init__(self, n: int = TOP_N) -> None:
        self.n = n

    def process(self, key: Any, context: WindowContext, elements: list[dict]) -> Iterator[dict]:
        (counts,) = elements
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[: self.n]
        for rank, (item, n) in enumerate(ranked, 1):
            yield {
                "category": key, "window_start": context.window.start, "window_end": context.window.end,
                "rank": rank, "item_id": item, "events": n,
            }


def build(source: ClickEvents) -> Job:
    watermark = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(milliseconds=source.max_out_of_orderness_ms))
    return (
        Job("hot-items").source(source, watermark=watermark).key_by("category")
        .window(SlidingEventTimeWindows.of(timedelta(minutes=10), timedelta(minutes=1)))
        .aggregate(ItemCounts(), window_function=TopItems(), output_schema=OUTPUT)
        .sink(NoopSink())
    )


SEED_JOB = SeedJob(
    name="hot-items",
    seed="003",
    description="top 3 items by events per sliding 10-minute window, every minute (aggregate + window function)",
    build=build,
    generator=ClickEvents,
    defaults={"categories": 1},
    summary_key="rank",
    summary_order="events",
)
