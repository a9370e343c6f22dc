"""What the Nexmark seed jobs share: the watermark, the job's start on a view, the registry entry."""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from sparkstate.api.time import WatermarkStrategy
from sparkstate.connectors.nexmark import NexmarkBids, NexmarkGenerator
from sparkstate.job import Job
from sparkstate.jobs.registry import SeedJob

#: the reference's DDL: ``WATERMARK FOR dateTime AS dateTime - INTERVAL '4' SECOND``
WATERMARK = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(seconds=4))
DAY_MS = 86_400_000
_EPOCH = dt.date(1970, 1, 1)

#: the reference's ranges of price for its rank1/rank2/rank3 columns (q15-q17)
RANK1_BELOW, RANK3_FROM = 10_000, 1_000_000


def on(name: str, source: NexmarkGenerator) -> Job:
    """Job ``name`` reading ``source`` (a view of the Nexmark stream) with the reference's watermark."""
    return Job(name).source(source, watermark=WATERMARK)


def nexmark_seed_job(query: int, description: str, build: Callable[..., Job], *,
                     generator: type[NexmarkGenerator] = NexmarkBids,
                     second: type[NexmarkGenerator] | None = None, **more: Any) -> SeedJob:
    """The registry entry of ``nexmark-qN``."""
    return SeedJob(name=f"nexmark-q{query}", seed="nexmark", description=f"Nexmark q{query}: {description}",
                   build=build, generator=generator, second=second, **more)


def rank(price: int) -> int:
    """The reference's price rank: 1 below 10,000, 2 below 1,000,000, 3 from there."""
    return 1 if price < RANK1_BELOW else (2 if price < RANK3_FROM else 3)


def one_group(event: dict[str, Any]) -> int:
    """The computed key of a query Flink SQL runs as one group for the whole stream (a window
    aggregate grouped by the window alone, an aggregate of aggregates): 0 for every event, so
    every event meets the others in one keyed function. That key is the hottest there is: it
    runs on one partition."""
    return 0


def day_of(ts: int) -> str:
    """``DATE_FORMAT(dateTime, 'yyyy-MM-dd')`` of epoch milliseconds ``ts`` (UTC)."""
    return day_text(ts // DAY_MS)


@functools.lru_cache(maxsize=4096)
def day_text(day: int) -> str:
    """The ``yyyy-MM-dd`` of the day ``day`` days after 1970-01-01 (UTC)."""
    return (_EPOCH + dt.timedelta(days=day)).isoformat()


def reading_files(job: Job, directory: str, files_per_batch: int = 1) -> Job:
    """Nexmark job ``job`` reading the JSON lines of ``sparkstate nexmark generate`` in
    ``directory`` (:func:`~sparkstate.connectors.nexmark.nexmark_files`) instead of its
    generator views: the events other systems read, parsed by Spark."""
    import dataclasses

    from sparkstate.connectors.nexmark import VIEWS, nexmark_files

    first = job.source_spec
    assert isinstance(first, NexmarkGenerator), f"{job.name} does not read a Nexmark view"
    moved = job.source(nexmark_files(directory, VIEWS[first.kind], files_per_batch), watermark=job.watermark)
    if job.connected is not None:
        second = job.connected.source
        assert isinstance(second, NexmarkGenerator)
        files = nexmark_files(directory, VIEWS[second.kind], files_per_batch)
        moved = dataclasses.replace(moved, connected=dataclasses.replace(job.connected, source=files))
    return moved
