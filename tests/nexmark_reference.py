"""Helpers for the Nexmark query tests: a seed job run on the harness in micro-batches, and
the views of the same events as pandas frames for the reference computation of the SQL."""

from __future__ import annotations

from typing import Any

import pandas as pd

from sparkstate.connectors.nexmark import NexmarkGenerator, view
from sparkstate.jobs import JOBS


def job(query: int, events: int = 20_000, **settings: Any):
    """Seed job ``nexmark-q<query>`` on ``events`` events of the stream."""
    return JOBS[f"nexmark-q{query}"].job(events=events, **settings)


def run(job: Any, batch: int = 5_000) -> list[Any]:
    """The job's rows on the harness: its view(s) read in step, ``batch`` offsets a micro-batch,
    then the end of input (every event-time timer fires)."""
    h = job.harness()
    first = job.source_spec
    second = job.connected.source if job.connected is not None else None
    rows: list[Any] = []
    for start in range(0, first.events, batch):
        end = min(start + batch, first.events)
        events = first.events_as_dicts(start, end)
        if second is None:
            rows += h.process_batch(events)
        else:
            rows += h.process_batch(events, second=second.events_as_dicts(start, end))
    rows += h.finish()
    return rows


def run_to_watermark(job: Any, batch: int = 5_000) -> tuple[list[Any], Any]:
    """A single-input job's rows on the harness in micro-batches, then one empty batch (the
    timers the last batch's watermark made due), and the harness, not finished: its state
    is what the job keeps before the end of input."""
    h = job.harness()
    spec = job.source_spec
    rows: list[Any] = []
    for start in range(0, spec.events, batch):
        rows += h.process_batch(spec.events_as_dicts(start, min(start + batch, spec.events)))
    rows += h.process_batch([])
    return rows, h


def frame(generator: NexmarkGenerator, name: str) -> pd.DataFrame:
    """View ``name`` of ``generator``'s stream as a frame, timestamps as epoch milliseconds
    (as the harness gives them to a function)."""
    return pd.DataFrame(view(generator, name).events_as_dicts(0, generator.events))
