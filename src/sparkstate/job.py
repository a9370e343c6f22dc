"""``Job``: a job description that can also run, on Spark or in the in-process harness.

It lives above ``api``, ``engine``, ``runtime`` and ``testing`` so that the description
(``sparkstate.api.job``) imports none of them: running a job is the runtime's business and
harnessing it the test harness's; both are imported only when asked for.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkstate.api.io import SourceSpec
from sparkstate.api.job import JobDescription
from sparkstate.api.time import WatermarkStrategy
from sparkstate.errors import JobDefinitionError

if TYPE_CHECKING:
    from sparkstate.runtime.run.result import RunResult
    from sparkstate.testing.harness import KeyedHarness


@dataclass(frozen=True)
class Job(JobDescription):
    """A keyed streaming job: build it (see :class:`~sparkstate.api.job.JobDescription`), then
    ``run()`` it on Spark or test its function with ``harness()``.

    Example::

        job = (
            Job("running-sum")
            .source(UpiPayments(events=100_000))
            .key_by("merchant_id")
            .process(RunningSum(), output_schema="merchant_id string, count bigint, total double")
            .sink(ParquetSink("out/running-sum"))
        )
        result = job.run(checkpoint_dir="checkpoints/running-sum")
    """

    def harness(self, **kwargs: Any) -> KeyedHarness:
        """The job's function in the in-process test harness (same key, watermark, schema,
        key groups); ``from_savepoint=PATH`` starts it from a savepoint, and
        ``harness.savepoint(PATH)`` writes one a Spark run of the job restores."""
        from sparkstate.engine.combine import combiner_for
        from sparkstate.engine.compile import keyed_function
        from sparkstate.testing.harness import KeyedHarness

        if (self.function is None and self.window_kind is None) or not self.key_columns:
            raise JobDefinitionError(f"job {self.name!r} needs .key_by(...) and .process(...) for a harness")
        job = self.with_output_from(None)  # the harness has no Spark to ask for a source's columns
        return KeyedHarness(
            copy.deepcopy(keyed_function(job)),  # the job's own function stays unopened for Spark
            list(job.key_columns),
            watermark_strategy=job.watermark,
            output_schema=job.output,
            **{"max_event_time_ahead": job.settings.max_event_time_ahead, "job_name": job.name,
               "key_groups": job.settings.key_groups, "connected": job.connected, "computed_keys": job.computed_keys,
               "combiner": combiner_for(job),
               "source": job.source_spec.identity() if job.source_spec is not None else None, **kwargs},
        )

    def source(self, source: Any, *, watermark: WatermarkStrategy | None = None) -> Job:
        """Read from ``source`` (a source spec, or a streaming DataFrame, read as
        :class:`~sparkstate.connectors.DataFrameSource`); ``watermark`` assigns event time."""
        if not isinstance(source, SourceSpec) and getattr(source, "isStreaming", False):
            from sparkstate.connectors.sources import DataFrameSource

            source = DataFrameSource(source)
        return super().source(source, watermark=watermark)

    def run(
        self,
        *,
        checkpoint_dir: str | Path | None = None,
        spark: Any = None,
        on_progress: Callable[[dict[str, Any]], None] | None = None,
        timeout: float | None = None,
        log_file: str | Path | None = None,
        until: Callable[[RunResult], bool] | None = None,
        fresh: bool = False,
        on_notice: Callable[[str], None] | None = None,
        from_savepoint: str | Path | None = None,
        allow_non_restored_state: bool = False,
        trust_savepoint: bool = False,
        metrics_port: int | None = None,
        metrics_host: str = "127.0.0.1",
        spark_ui: bool = True,
        master: str | None = None,
        remote: str | None = None,
    ) -> RunResult:
        """Run on Spark until a bounded source is exhausted, ``until(result)`` holds, or
        ``timeout`` seconds pass (an unbounded source needs one of the two).

        ``checkpoint_dir`` (a path or a Hadoop-compatible URI) defaults to the checkpoint
        configuration's ``directory``. Re-running with the same directory resumes where the
        last run committed. One run at a time holds a checkpoint directory: another run on it
        fails at once with :class:`~sparkstate.errors.CheckpointInUseError` naming the first.

        ``fresh`` starts over: it deletes the checkpoint and the job's outputs first, but only
        what sparkstate made for this job (a checkpoint holding its metadata, a Parquet folder
        the job wrote, a table the job created); anything else is kept, and the run says so
        (a kept table: to ``on_notice`` at once, and in ``result.warnings``) or is refused (a
        folder that is not the job's).

        ``from_savepoint`` starts a new checkpoint from a savepoint (``sparkstate savepoint``,
        :meth:`savepoint`): its state, timers, watermark and source
        position, with any partitions and either state backend. A savepoint that does not fit
        the job is refused before anything runs (:class:`~sparkstate.errors.SavepointError`); a
        state the savepoint holds and the job no longer declares is refused unless
        ``allow_non_restored_state`` (then it is dropped). Reading a savepoint runs no code from
        it; one that stores pickled values (state of types with no safe encoding, or written by
        an older version) is refused unless ``trust_savepoint`` says you trust who wrote it.

        ``metrics_port`` serves the run's metrics over HTTP while it runs, on ``metrics_host``
        (127.0.0.1: this machine only): a live dashboard at ``/``, Flink's
        ``/jobs/<id>/metrics?get=...`` and ``/jobs/<id>/checkpoints``, and Prometheus's
        ``/metrics`` (``sparkstate.metrics.endpoint``); 0 takes any free port. Its address goes
        to ``on_notice`` before Spark starts.

        ``spark_ui`` starts the Spark UI with the Spark session the run starts (not with one
        that runs already, as ``spark`` or under ``spark-submit``); its address goes to
        ``on_notice`` once Spark runs.

        ``master`` runs the job on a Spark cluster (``spark://HOST:7077``, ``yarn``, ...) rather
        than in local mode, when the run starts its Spark session; the checkpoint directory must
        then be one every executor reaches (a shared folder, ``hdfs://``, ``s3a://``).

        ``remote`` runs it from this process as a Spark Connect client of the server at
        ``sc://HOST:PORT`` (Spark's ``SPARK_REMOTE`` variable does the same, as does passing a
        Connect session as ``spark``): the server runs the query, and sparkstate must be
        installed in its Python too; the checkpoint must be a path this process and the server
        both see (docs/guides/connect.md).
        """
        if metrics_port is None:
            spark = self._cluster_session(spark, master, remote, spark_ui, log_file)
            return self._run(checkpoint_dir, spark, on_progress, timeout, log_file, until, fresh, on_notice,
                             from_savepoint, allow_non_restored_state, spark_ui, trust_savepoint)
        from sparkstate.metrics.endpoint import JobMetrics, MetricsServer
        from sparkstate.runtime.session.classic import spark_ui_url

        metrics = JobMetrics(self.name, self._shown_settings(), spark_ui=spark_ui_url)
        server = MetricsServer(metrics, metrics_port, metrics_host).start()

        def progress(p: dict[str, Any]) -> None:
            metrics.on_progress(p)
            if on_progress is not None:
                on_progress(p)

        if on_notice is not None:
            on_notice(f"dashboard: {server.url}/ (metrics: {server.url}/jobs/{metrics.id}/metrics?get=numRecordsIn, "
                      f"Prometheus: {server.url}/metrics)")
        # the endpoint ends with the run: the final status is recorded in the checkpoint for
        # `sparkstate report` (runtime/checkpoint/run_record.py); here it is set before the endpoint stops
        try:
            spark = self._cluster_session(spark, master, remote, spark_ui, log_file)  # after the port is known to be free
            result = self._run(checkpoint_dir, spark, progress, timeout, log_file, until, fresh, on_notice,
                               from_savepoint, allow_non_restored_state, spark_ui, trust_savepoint)
            metrics.finish(result.status)
        except KeyboardInterrupt:  # a second Ctrl-C: stopped by the user, as the first
            metrics.finish("CANCELED")
            raise
        except BaseException:
            metrics.finish("FAILED")
            raise
        finally:
            server.stop()
        return result

    def _cluster_session(self, spark: Any, master: str | None, remote: str | None, spark_ui: bool,
                         log_file: Any) -> Any:
        """The session on ``master`` or of the Connect server ``remote`` when one is asked for
        and none is given (else ``spark``)."""
        if (master is None and remote is None) or spark is not None:
            return spark
        from sparkstate.runtime.session import get_spark

        return get_spark(master=master, remote=remote, ui=spark_ui, parallelism=self.settings.parallelism,
                         log_file=log_file)

    def _shown_settings(self) -> dict[str, Any]:
        """The settings the dashboard shows."""
        s = self.settings
        return {"source": self.source_spec.describe() if self.source_spec is not None else None,
                "sink": self.sink_spec.describe() if self.sink_spec is not None else None,
                "parallelism": s.parallelism, "key_groups": s.key_groups, "state_backend": s.state_backend,
                "checkpoint_interval": str(s.checkpoint.interval), "incremental": s.checkpoint.incremental,
                "rocksdb": dict(s.checkpoint.rocksdb or {}) or None}

    def _run(self, checkpoint_dir: Any, spark: Any, on_progress: Any, timeout: Any, log_file: Any, until: Any,
             fresh: bool, on_notice: Any, from_savepoint: Any, allow_non_restored_state: bool,
             spark_ui: bool = True, trust_savepoint: bool = False) -> RunResult:
        from sparkstate.runtime.run.job import run_job

        return run_job(
            self,
            checkpoint_dir=checkpoint_dir if checkpoint_dir is not None else self.settings.checkpoint.directory,
            spark=spark,
            on_progress=on_progress,
            timeout=timeout,
            log_file=log_file,
            until=until,
            fresh=fresh,
            on_notice=on_notice,
            from_savepoint=None if from_savepoint is None else str(from_savepoint),
            allow_non_restored_state=allow_non_restored_state,
            trust_savepoint=trust_savepoint,
            spark_ui=spark_ui,
        )

    def savepoint(
        self,
        *,
        checkpoint_dir: str | Path | None = None,
        stop: bool = False,
        batch: int | None = None,
        target: str | Path | None = None,
        wait: float = 600.0,
        spark: Any = None,
    ) -> dict[str, Any]:
        """Take a savepoint of this job (Flink's ``flink savepoint`` / ``flink stop``): the state,
        timers, watermark and source offsets of one committed batch, for ``run(from_savepoint=...)``.

        When a run holds the checkpoint (``run()`` in another process or thread), it is asked
        and goes on, or with ``stop`` stops after its next committed batch; ``wait`` seconds at
        most. Otherwise the savepoint is taken from the checkpoint of the last committed batch,
        or of ``batch`` (one the checkpoint retains). ``target`` defaults to a new folder in
        ``savepoints/`` beside the checkpoint. Returns the savepoint's metadata: ``location``,
        ``batch``, ``keys``, ``bytes``, ``seconds``...
        """
        from sparkstate.runtime.savepoints.requests import savepoint

        directory = checkpoint_dir if checkpoint_dir is not None else self.settings.checkpoint.directory
        if directory is None:
            raise JobDefinitionError(f"job {self.name!r}: savepoint() needs the checkpoint_dir the job runs with")
        return savepoint(directory, stop=stop, batch=batch, target=None if target is None else str(target),
                         wait=wait, spark=spark, job=self.name)
