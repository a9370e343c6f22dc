"""Helpers for tests that run jobs on Spark."""

from __future__ import annotations

from typing import Any

FAST = {"trigger_interval": "100 milliseconds"}


def harness_like_spark(job: Any, max_batch: int) -> list[dict]:
    """A generator job on the harness in the micro-batches Spark reads (``max_batch`` offsets each)."""
    events = job.source_spec.events_as_dicts()
    h = job.harness()
    out: list[dict] = []
    for i in range(0, len(events), max_batch):
        out += h.process_batch(events[i : i + max_batch])
    out += h.finish()
    return out
