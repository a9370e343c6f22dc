"""Building a job: source, key, keyed function, sink, and the settings that shape its state.

A ``Job`` is an immutable description; ``run`` hands it to the Spark runtime and
``harness`` to the in-process test harness, so a job's function can be unit-tested exactly
as it will run.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from sparkstate.api.functions import KeyedProcessFunction
from sparkstate.api.schema import Schema
from sparkstate.api.time import WatermarkStrategy
from sparkstate.errors import JobDefinitionError

if TYPE_CHECKING:
    from sparkstate.runtime.spark_job import RunResult
    from sparkstate.testing.harness import KeyedHarness

#: Flink's default maximum parallelism; also what measured best here (docs/design.md).
DEFAULT_KEY_GROUPS = 128
DEFAULT_BUCKET_SIZE = 128


@dataclass(frozen=True)
class JobSettings:
    """How a job's state is laid out and run.

    * ``key_groups`` - keys are hashed into this many groups (Flink's max parallelism). It is
      fixed for the life of a checkpoint; it bounds how far state can later be rescaled.
    * ``parallelism`` - Spark shuffle partitions (default: the machine's cores). Also fixed by
      the first run of a checkpoint (Spark keeps it).
    * ``state_backend`` - ``"rocksdb"`` (default) or ``"hashmap"`` (in-memory).
    * ``bucket_size`` - keys per state-store entry inside a key group.
    * ``trigger_interval`` - how often a micro-batch starts (Flink's checkpoint interval is
      the closest analogue: each micro-batch is a checkpoint).
    """

    key_groups: int = DEFAULT_KEY_GROUPS
    parallelism: int | None = None
    state_backend: str = "rocksdb"
    bucket_size: int = DEFAULT_BUCKET_SIZE
    trigger_interval: str = "500 milliseconds"

    def __post_init__(self) -> None:
        if not isinstance(self.key_groups, int) or not 1 <= self.key_groups <= 32768:
            raise JobDefinitionError(f"key_groups must be an int from 1 to 32768, got {self.key_groups!r}")
        if self.parallelism is not None and (not isinstance(self.parallelism, int) or self.parallelism < 1):
            raise JobDefinitionError(f"parallelism must be a positive int, got {self.parallelism!r}")
        if self.state_backend not in ("rocksdb", "hashmap"):
            raise JobDefinitionError(f"state_backend must be 'rocksdb' or 'hashmap', got {self.state_backend!r}")
        if not isinstance(self.bucket_size, int) or self.bucket_size < 1:
            raise JobDefinitionError(f"bucket_size must be a positive int, got {self.bucket_size!r}")


@dataclass(frozen=True)
class Job:
    """A keyed streaming job.

    Example::

        job = (
            Job("running-sum")
            .source(UpiPayments(events=100_000))
            .key_by("merchant_id")
            .process(RunningSum(), output_schema="merchant_id string, total double")
            .sink(ParquetSink("out/running-sum"))
        )
        result = job.run(checkpoint_dir="checkpoints/running-sum")
    """

    name: str
    source_spec: Any = None
    watermark: WatermarkStrategy | None = None
    key_columns: tuple[str, ...] = ()
    function: KeyedProcessFunction | None = None
    output: Schema | None = None
    sink_spec: Any = None
    settings: JobSettings = field(default_factory=JobSettings)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise JobDefinitionError(f"a job needs a name, got {self.name!r}")

    def source(self, source: Any, *, watermark: WatermarkStrategy | None = None) -> "Job":
        """Read from ``source``; ``watermark`` assigns event time and watermarks."""
        if watermark is not None and not isinstance(watermark, WatermarkStrategy):
            raise JobDefinitionError(f"watermark must be a WatermarkStrategy, got {watermark!r}")
        if watermark is not None and not watermark.timestamp_column:
            column = getattr(source, "time_column", None)
            if not column:
                raise JobDefinitionError(
                    "the watermark strategy needs a timestamp column: "
                    "WatermarkStrategy.for_bounded_out_of_orderness(...).with_timestamp_column('ts')"
                )
            watermark = watermark.with_timestamp_column(column)
        return replace(self, source_spec=source, watermark=watermark)

    def key_by(self, *columns: str) -> "Job":
        """Partition the stream by these columns; each key gets its own state and timers."""
        if not columns or not all(isinstance(c, str) and c for c in columns):
            raise JobDefinitionError(f"key_by needs one or more column names, got {columns!r}")
        if len(set(columns)) != len(columns):
            raise JobDefinitionError(f"key_by repeats a column: {columns!r}")
        return replace(self, key_columns=tuple(columns))

    def process(self, function: KeyedProcessFunction, *, output_schema: Any) -> "Job":
        """Run ``function`` on the keyed stream; it emits rows of ``output_schema``."""
        if not isinstance(function, KeyedProcessFunction):
            raise JobDefinitionError(
                f"process needs a KeyedProcessFunction instance, got {function!r}"
                + (" (a class: add ())" if isinstance(function, type) else "")
            )
        return replace(self, function=function, output=Schema.of(output_schema))

    def sink(self, sink: Any) -> "Job":
        """Write the function's output to ``sink``."""
        return replace(self, sink_spec=sink)

    def with_settings(self, **changes: Any) -> "Job":
        """Change :class:`JobSettings` fields, e.g. ``job.with_settings(key_groups=256)``."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(JobSettings)}
        if unknown:
            raise JobDefinitionError(f"unknown job settings {sorted(unknown)}")
        return replace(self, settings=replace(self.settings, **changes))

    # ------------------------------------------------------------------ checks

    def validate(self) -> None:
        """Raise a :class:`JobDefinitionError` naming the first missing piece."""
        missing = [
            what
            for what, ok in (
                ("a source (.source(...))", self.source_spec is not None),
                ("a key (.key_by(...))", bool(self.key_columns)),
                ("a function (.process(...))", self.function is not None),
                ("a sink (.sink(...))", self.sink_spec is not None),
            )
            if not ok
        ]
        if missing:
            raise JobDefinitionError(f"job {self.name!r} is missing " + ", ".join(missing))
        schema_ddl = getattr(self.source_spec, "schema_ddl", None)
        if schema_ddl:
            from sparkstate.errors import KeyColumnError

            schema = Schema.of(schema_ddl)
            for col in self.key_columns:
                if col not in schema.names:
                    raise KeyColumnError(
                        f"job {self.name!r}: key column {col!r} is not in the source's columns {list(schema.names)}"
                    )
            ts = self.timestamp_column
            if ts is not None:
                if ts not in schema.names:
                    raise KeyColumnError(
                        f"job {self.name!r}: timestamp column {ts!r} is not in the source's columns {list(schema.names)}"
                    )
                kind = schema.types[schema.names.index(ts)].lower()
                if not (kind.startswith("timestamp") or kind in ("bigint", "long", "int")):
                    raise JobDefinitionError(
                        f"job {self.name!r}: timestamp column {ts!r} has type {kind}; use a timestamp or epoch-ms bigint"
                    )

    @property
    def timestamp_column(self) -> str | None:
        return self.watermark.timestamp_column if self.watermark else None

    # ------------------------------------------------------------------ running

    def harness(self, **kwargs: Any) -> "KeyedHarness":
        """The job's function in the in-process test harness (same key, watermark, schema)."""
        from sparkstate.testing.harness import KeyedHarness

        if self.function is None or not self.key_columns:
            raise JobDefinitionError(f"job {self.name!r} needs .key_by(...) and .process(...) for a harness")
        return KeyedHarness(
            copy.deepcopy(self.function),  # the job's own function stays unopened for Spark
            list(self.key_columns),
            watermark_strategy=self.watermark,
            output_schema=self.output,
            **kwargs,
        )

    def run(
        self,
        *,
        checkpoint_dir: str | Path,
        spark: Any = None,
        on_progress: Callable[[dict], None] | None = None,
        timeout: float | None = None,
        log_file: str | Path | None = None,
        until: Callable[["RunResult"], bool] | None = None,
    ) -> "RunResult":
        """Run on Spark until a bounded source is exhausted, ``until(result)`` holds, or
        ``timeout`` seconds pass (an unbounded source needs one of the two).

        Re-running with the same ``checkpoint_dir`` resumes where the last run committed.
        """
        from sparkstate.runtime.spark_job import run_job

        return run_job(
            self,
            checkpoint_dir=checkpoint_dir,
            spark=spark,
            on_progress=on_progress,
            timeout=timeout,
            log_file=log_file,
            until=until,
        )
