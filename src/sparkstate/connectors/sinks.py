"""Sink specs: where a job's output goes. The Spark binding is ``sparkstate.runtime.spark_sinks``.

Exactly-once holds for ``ParquetSink`` (Spark's file sink commits each batch in its
``_spark_metadata`` log) and ``MemorySink`` (a replayed batch replaces its earlier copy).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass
class ConsoleSink:
    """Print up to ``rows`` rows of every micro-batch (Spark's console sink)."""

    rows: int = 20
    truncate: bool = True

    def describe(self) -> str:
        return "console"


@dataclass
class ParquetSink:
    """Append every micro-batch to Parquet files under ``path`` (exactly once)."""

    path: str

    def describe(self) -> str:
        return f"parquet:{self.path}"


@dataclass
class NoopSink:
    """Discard the output (benchmarks)."""

    def describe(self) -> str:
        return "noop"


@dataclass
class MemorySink:
    """Collect the output in this process, batch by batch; for tests and small jobs.

    A batch replayed after a failure replaces the first attempt, so ``rows()`` holds every
    output row exactly once. Timestamps are returned as epoch milliseconds.
    """

    batches: dict[int, list[dict]] = field(default_factory=dict)
    _lock: Any = field(default_factory=threading.Lock, repr=False)

    def describe(self) -> str:
        return "memory"

    def put(self, batch_id: int, rows: list[dict]) -> None:
        with self._lock:
            self.batches[batch_id] = rows

    def rows(self) -> list[dict]:
        with self._lock:
            return [r for b in sorted(self.batches) for r in self.batches[b]]

    def clear(self) -> None:
        with self._lock:
            self.batches.clear()


@dataclass
class ForeachBatchSink:
    """Call ``fn(dataframe, batch_id)`` for every micro-batch (Spark's ``foreachBatch``)."""

    fn: Callable[[Any, int], None]

    def describe(self) -> str:
        return f"foreach_batch:{getattr(self.fn, '__name__', 'fn')}"


def parse_sink(spec: str) -> Any:
    """A sink from a CLI string: ``console``, ``noop``, ``memory`` or ``parquet:PATH``."""
    from sparkstate.errors import JobDefinitionError

    if spec == "console":
        return ConsoleSink()
    if spec == "noop":
        return NoopSink()
    if spec == "memory":
        return MemorySink()
    for prefix in ("parquet://", "parquet:"):
        if spec.startswith(prefix) and len(spec) > len(prefix):
            return ParquetSink(spec[len(prefix):])
    raise JobDefinitionError(f"unknown sink {spec!r}; use console, noop, memory or parquet:PATH")
