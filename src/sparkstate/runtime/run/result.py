"""What a run did: the record ``Job.run`` returns and the command line summarises.

A run may go on for months (a micro-batch a second is 86,400 a day), so the record keeps
only the last :data:`HISTORY` progress reports and checkpoints, and running totals for
every figure of the whole run (events, batches, rows out, side outputs, throughput after
the first batch, the checkpoints' mean and maximum duration).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, SupportsIndex, TypeVar

from sparkstate.api.job import WindowPath
from sparkstate.runtime.checkpoint.stats import CheckpointStats

#: progress reports and checkpoints a run's result keeps, the last ones: as many as Spark keeps
#: of each (``spark.sql.streaming.numRecentProgressUpdates``, ``minBatchesToRetain``), as Flink's
#: web.checkpoints.history bounds its own. About 12 KB of Python objects a batch (a RocksDB job's
#: report and figures), so some 1.2 MB however long the run; a run of any length still has its
#: totals (``RunResult.events``, ``side_outputs``, ``checkpoint_totals``...)
HISTORY = 100

T = TypeVar("T")


class Recent(list[T]):
    """A list that keeps only its last ``maxlen`` items: appending one more drops the oldest.
    A list still (indexing, slices, ``len``), for the code and tests that read it as one."""

    def __init__(self, maxlen: int, items: Iterable[T] = ()) -> None:
        super().__init__()
        self.maxlen = maxlen
        self.extend(items)

    def append(self, item: T) -> None:
        super().append(item)
        if len(self) > self.maxlen:
            del self[0]  # maxlen pointers moved: nothing beside a micro-batch

    def extend(self, items: Iterable[T]) -> None:
        super().extend(items)
        if len(self) > self.maxlen:
            del self[: len(self) - self.maxlen]

    def __iadd__(self, items: Iterable[T]) -> Recent[T]:  # type: ignore[override, misc]
        self.extend(items)
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        # pickle would add the items before ``maxlen`` is set again
        return Recent, (self.maxlen, list(self))

    def insert(self, index: SupportsIndex, item: T) -> None:
        super().insert(index, item)
        if len(self) > self.maxlen:
            del self[0]


@dataclass
class CheckpointTotals:
    """The figures of every checkpoint of a run, added up as each comes (the run keeps only
    its last :data:`HISTORY` checkpoints themselves)."""

    count: int = 0
    #: checkpoints with a duration, and their durations' sum and maximum
    timed: int = 0
    duration_ms: int = 0
    max_duration_ms: int | None = None
    #: checkpoints with a delta size, and their sizes' sum
    sized: int = 0
    delta_bytes: int = 0
    kinds: set[str] = field(default_factory=set)
    last: CheckpointStats | None = None

    def add(self, stats: CheckpointStats) -> None:
        self.count += 1
        if stats.duration_ms is not None:
            self.timed += 1
            self.duration_ms += stats.duration_ms
            self.max_duration_ms = max(self.max_duration_ms or 0, stats.duration_ms)
        if stats.delta_bytes is not None:
            self.sized += 1
            self.delta_bytes += stats.delta_bytes
        if stats.kind != "-":
            self.kinds.add(stats.kind)
        self.last = stats

    def summary(self) -> dict[str, Any]:
        """Mean and max duration, mean delta, the last full and state sizes, and the kinds."""
        return {
            "checkpoints": self.count,
            "mean_duration_ms": self.duration_ms / self.timed if self.timed else None,
            "max_duration_ms": self.max_duration_ms,
            "mean_delta_bytes": self.delta_bytes / self.sized if self.sized else None,
            "last_full_bytes": self.last.full_bytes if self.last else None,
            "last_state_bytes": self.last.state_bytes if self.last else None,
            "kinds": sorted(self.kinds),
        }


def _recent() -> Recent[Any]:
    return Recent(HISTORY)


@dataclass
class RunResult:
    """What a run did, for the CLI summary and for tests."""

    job: str
    checkpoint_dir: str
    completed: bool = False
    already_complete: bool = False
    batches: int = 0
    #: events read (the end-of-input marker not counted)
    events: int = 0
    #: rows written to the main sink (None: a run whose batches did not count them)
    output_rows: int | None = None
    seconds: float = 0.0
    first_batch_seconds: float = 0.0
    state_rows: int | None = None
    state_bytes: int | None = None
    #: keys holding state (read from the checkpoint; filled in by the CLI)
    state_keys: int | None = None
    #: peak resident memory of this process and its children (filled in by the CLI)
    peak_memory_bytes: int | None = None
    warnings: list[str] = field(default_factory=list)
    #: the progress reports of the last :data:`HISTORY` micro-batches that ran, oldest first
    #: (Spark's, with sparkstate's ``events``, ``sideOutputs``, ``rowsOut`` and ``checkpoint``)
    progress: list[dict] = field(default_factory=_recent)
    #: side-output rows written per batch id and side output (late_data, dead_letters...), of
    #: the batches whose progress has not come yet: a batch's counts join ``side_outputs``'
    #: totals when it does (``add_progress``), so a batch replayed after a failure counts once
    batch_side_outputs: dict[int, dict[str, int]] = field(default_factory=dict)
    #: main rows a database or Kafka sink refused (sent to dead letters instead), per batch id
    #: until the batch's progress takes it (``run_loop._account``): a batch or two at a time
    batch_refused: dict[int, int] = field(default_factory=dict)
    #: "python" or "native" (see ``sparkstate explain``)
    plan: WindowPath = WindowPath.PYTHON
    #: the figures of the last :data:`HISTORY` checkpoints (committed micro-batches) of this
    #: run, in order; ``checkpoint_totals`` has those of all of them
    checkpoints: list[CheckpointStats] = field(default_factory=_recent)
    checkpoint_totals: CheckpointTotals = field(default_factory=CheckpointTotals)
    #: the last savepoint taken during the run on request (``sparkstate savepoint``): its
    #: metadata (``location``, ``batch``, ``keys``, ``bytes``, ``seconds``...) without the file list
    savepoint: dict | None = None
    #: whether the run stopped because a savepoint request said so (``--stop``)
    stopped_with_savepoint: bool = False
    #: side-output rows of the batches whose progress came, by side output
    _side_totals: dict[str, int] = field(default_factory=dict, repr=False)
    #: batches that read events, and the events and ms of those after the first
    _data_batches: int = field(default=0, repr=False)
    _steady_events: int = field(default=0, repr=False)
    _steady_ms: int = field(default=0, repr=False)

    def __post_init__(self) -> None:
        # given as plain lists: bounded all the same
        if not isinstance(self.progress, Recent):
            self.progress = Recent(HISTORY, self.progress)
        if not isinstance(self.checkpoints, Recent):
            self.checkpoints = Recent(HISTORY, self.checkpoints)

    def add_progress(self, p: dict) -> None:
        """Keep the progress report ``p`` of a batch that ran (``p["events"]`` set), add it to the
        run's totals, and put the batch's side-output counts on it (as ``p["sideOutputs"]``)."""
        batch = p.get("batchId", -1)
        side = self.batch_side_outputs.pop(batch, None)
        if side:
            p["sideOutputs"] = side
        # a batch before this one whose progress was missed (Spark keeps the last 100): it committed
        for earlier in [b for b in self.batch_side_outputs if b < batch]:
            self._add_side(self.batch_side_outputs.pop(earlier))
        self._add_side(side or {})
        if p.get("events"):
            self._data_batches += 1
            if self._data_batches > 1:  # the first pays Spark's and Python's start-up
                self._steady_events += p["events"]
                self._steady_ms += (p.get("durationMs") or {}).get("triggerExecution", 0)
        self.progress.append(p)

    def add_checkpoint(self, stats: CheckpointStats) -> None:
        self.checkpoints.append(stats)
        self.checkpoint_totals.add(stats)

    def _add_side(self, counts: dict[str, int]) -> None:
        for name, n in counts.items():
            self._side_totals[name] = self._side_totals.get(name, 0) + n

    @property
    def side_outputs(self) -> dict[str, int]:
        """Side-output rows written in this run, by side output (a batch written whose
        progress never came, as one a failure stopped, included)."""
        totals = dict(self._side_totals)
        for counts in self.batch_side_outputs.values():
            for name, n in counts.items():
                totals[name] = totals.get(name, 0) + n
        return totals

    @property
    def status(self) -> str:
        """How the run ended, in Flink's words: ``FINISHED`` (its input done, ``until`` held,
        or stopped with a savepoint, as Flink's ``stop``) or ``CANCELED`` (stopped before: a
        timeout, Ctrl-C). A run that fails returns no result (it raises): ``FAILED``."""
        return "FINISHED" if self.completed or self.stopped_with_savepoint else "CANCELED"

    @property
    def events_per_second(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0

    @property
    def steady_events_per_second(self) -> float | None:
        """Throughput after the first micro-batch (which pays Spark's and Python's start-up)."""
        if self._data_batches < 2:
            return None
        return self._steady_events * 1000.0 / self._steady_ms if self._steady_ms else None
