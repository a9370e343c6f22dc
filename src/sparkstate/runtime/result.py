"""What a run did: the record ``Job.run`` returns and the command line summarises."""

from __future__ import annotations

from dataclasses import dataclass, field

from sparkstate.api.job import WindowPath
from sparkstate.runtime.checkpoint_stats import CheckpointStats


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
    progress: list[dict] = field(default_factory=list)
    #: side-output rows written in this run, per batch id and side output (late_data,
    #: dead_letters...); a batch replayed after a failure counts once
    batch_side_outputs: dict[int, dict[str, int]] = field(default_factory=dict)
    #: main rows a database or Kafka sink refused (sent to dead letters instead), per batch id
    #: until the batch's progress takes it (``run_loop._account``): a batch or two at a time
    batch_refused: dict[int, int] = field(default_factory=dict)
    #: "python" or "native" (see ``sparkstate explain``)
    plan: WindowPath = WindowPath.PYTHON
    #: the figures of each checkpoint (committed micro-batch) of this run, in order
    checkpoints: list[CheckpointStats] = field(default_factory=list)
    #: the last savepoint taken during the run on request (``sparkstate savepoint``): its
    #: metadata (``location``, ``batch``, ``keys``, ``bytes``, ``seconds``...) without the file list
    savepoint: dict | None = None
    #: whether the run stopped because a savepoint request said so (``--stop``)
    stopped_with_savepoint: bool = False

    @property
    def side_outputs(self) -> dict[str, int]:
        """Side-output rows written in this run, by side output."""
        totals: dict[str, int] = {}
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
        data = [p for p in self.progress if p.get("events")]
        if len(data) < 2:
            return None
        rows = sum(p["events"] for p in data[1:])
        ms = sum(p["durationMs"].get("triggerExecution", 0) for p in data[1:])
        return rows * 1000.0 / ms if ms else None
