"""The ``sparkstate`` command: list and run the seed jobs, and run your own.

    sparkstate jobs
    sparkstate run running-sum --events 3000000 --merchants 100000
    sparkstate run path/to/pipeline.py          # the file's Job (or pipeline.py:NAME, package.module:NAME)
    sparkstate run running-sum --source socket://localhost:9000 --sink console
    sparkstate produce kafka://localhost:9092/payments --events 200000 --create
    sparkstate run running-sum --source kafka://localhost:9092/payments --sink kafka://localhost:9092/totals?create=true

A run prints its source's delivery guarantee, a line per micro-batch and a summary at the
end. Its checkpoint, output and Spark log live under ``.sparkstate/JOB/`` (with another
source: ``.sparkstate/JOB-socket/``, ``.sparkstate/JOB-files/``, ``.sparkstate/JOB-kafka-TOPIC/``) unless told otherwise;
running the same command again resumes from the checkpoint. ``sparkstate checkpoints JOB``
lists the checkpoints it retains, with their duration and sizes.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from sparkstate import __version__
from sparkstate.api.checkpointing import DEFAULT_INTERVAL, DEFAULT_RETAINED
from sparkstate.errors import SparkStateError
from sparkstate.runtime.run.terminal import labelled, text

console = Console(highlight=False)
errors = Console(stderr=True, highlight=False)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
# the version from its one place (an editable install's metadata can lag behind it)
@click.version_option(__version__, package_name="sparkstate")
def main() -> None:
    """Flink-style keyed state, timers and checkpoints on PySpark."""


@main.command("jobs")
def list_jobs() -> None:
    """List the seed jobs that `sparkstate run` knows."""
    from sparkstate.jobs import JOBS

    table = Table(title="sparkstate jobs", title_justify="left")
    table.add_column("job", style="bold")
    table.add_column("seed")
    table.add_column("what it does")
    table.add_column("source")
    for job in JOBS.values():
        gen = job.generator
        second = f" + {job.second.__name__}" if job.second is not None else ""
        table.add_row(job.name, job.seed, job.description, f"{gen.__name__}{second} ({gen.guarantee})")
    console.print(table)
    console.print("Any job also reads JSON events from a socket, files or a Kafka topic: `sparkstate run JOB --source "
                  "socket://localhost:9000` (or file:DIRECTORY, kafka://HOST:PORT/TOPIC; `sparkstate produce` fills a topic).")


@main.command("explain")
@click.argument("job_name", metavar="JOB")
@click.option("--events", type=click.IntRange(min=0), default=1_000_000, show_default=True, help="Events to generate.")
@click.option("--source", "source_spec", metavar="URL",
              help="As for `run`: socket://HOST:PORT, file:DIRECTORY or kafka://HOST:PORT/TOPIC.")
@click.option("--sink", "sink_spec", metavar="URL", help="As for `run`, e.g. kafka://HOST:PORT/TOPIC (its guarantee shows).")
def explain_job(job_name: str, events: int, source_spec: str | None, sink_spec: str | None) -> None:
    """Show how a job runs: source and sink (and their guarantees), key, window, output, and the path the planner picks.
    JOB is a seed job or a pipeline file or module (path/to/pipeline.py[:NAME], package.module:NAME)."""
    from sparkstate.connectors.sinks import parse_sink
    from sparkstate.errors import JobDefinitionError
    from sparkstate.jobs import get_job
    from sparkstate.runtime.run.pipeline_file import is_pipeline, load_pipeline
    from sparkstate.runtime.streaming.planner import explain

    try:
        if is_pipeline(job_name):
            if source_spec:
                raise JobDefinitionError(f"--source: a pipeline's job reads its own source ({job_name})")
            job = load_pipeline(job_name)
        else:
            seed_job = get_job(job_name)
            job = seed_job.on_source(seed_job.text_source(source_spec)) if source_spec else seed_job.job(events=events)
        if sink_spec:
            job = job.sink(parse_sink(sink_spec))
        console.print(text(explain(job)), soft_wrap=True)
    except SparkStateError as exc:
        errors.print(labelled("error:", "red", exc), soft_wrap=True)
        sys.exit(1)


@main.command("run")
@click.argument("job_name", metavar="JOB")
@click.option("--events", type=click.IntRange(min=0), default=1_000_000, show_default=True, help="Events to generate.")
@click.option("--rate", type=click.FloatRange(min=0, min_open=True),
              help="Cap on events per second (default: as fast as possible).")
@click.option("--merchants", type=click.IntRange(min=1), help="Distinct merchants (default: the job's).")
@click.option("--payers", type=click.IntRange(min=1), help="Distinct payers (default: the job's).")
@click.option("--seed", type=int, help="Generator seed (the same seed replays the same events).")
@click.option("--duplicates", type=click.FloatRange(0, 0.25), metavar="SHARE",
              help="Share of events delivered again, up to minutes later (jobs on UpiTransactions, e.g. dedup) "
              "[the job's].")
@click.option("--source", "source_spec", metavar="URL",
              help="Read events as JSON lines from socket://HOST:PORT (at-most-once; e.g. `nc -lk 9000`) or from the "
              "files of file:DIRECTORY (exactly-once), with the generator's columns; ?format=csv for CSV lines; or the "
              "records of a Kafka topic, kafka://[USER:PASSWORD@]HOST:PORT/TOPIC[?starting=earliest|latest|TIME"
              "&max_records=N&format=csv] (exactly-once: its offsets are in the checkpoint; `sparkstate produce` "
              "writes payments into a topic) [the job's generator].")
@click.option("--set", "settings", multiple=True, metavar="NAME=VALUE",
              help="Any other generator setting, e.g. --set users=50000 (repeatable; see the job's generator); or a "
              "RocksDB option by Flink's name: state.backend.rocksdb.block.cache-size=64mb, "
              "...writebuffer.size, ...writebuffer.count, ...memory.fixed-per-slot (a bound on RocksDB's memory).")
@click.option("--rules", "rules_spec", metavar="DIR|URL",
              help="Jobs with rules (fraud-detection): a folder of JSON-lines rule files, read as files appear "
              "(exactly-once), or socket://HOST:PORT (at-most-once) [.sparkstate/JOB/rules, started with the job's "
              "default rules].")
@click.option("--max-batch", type=click.IntRange(min=1), default=1_000_000, show_default=True,
              help="Most events per micro-batch.")
@click.option("--checkpoint", "checkpoint_dir", metavar="DIR",
              help="Checkpoint directory: a path or a Hadoop URI (file://, hdfs://, s3a://...) [.sparkstate/JOB/checkpoint].")
@click.option("--sink", "sink_spec",
              help="console, noop, memory, parquet:PATH, postgresql://USER@HOST:PORT/DB?table=T[&mode=upsert&key=COLS], "
              "sqlite:///PATH.db?table=T (default table: the job's name), or "
              "kafka://HOST:PORT/TOPIC[?key=COLS&create=true&partitions=N&guarantee=at-least-once] (exactly-once: "
              "Kafka transactions, for read_committed readers) [parquet:.sparkstate/JOB/output, "
              "or with --checkpoint DIR: parquet:DIR/output].")
@click.option("--state-backend", type=click.Choice(["rocksdb", "hashmap"]), default="rocksdb", show_default=True)
@click.option("--partitions", type=click.IntRange(min=1), help="Spark shuffle partitions [number of cores].")
@click.option("--key-groups", type=click.IntRange(1, 32768), default=128, show_default=True,
              help="Key groups (fixed per checkpoint).")
@click.option("--trigger", default=DEFAULT_INTERVAL, show_default=True,
              help="Checkpoint interval: how often a micro-batch (one checkpoint) starts.")
@click.option("--retained", type=click.IntRange(min=1), default=DEFAULT_RETAINED, show_default=True,
              help="Checkpoints (batches) to keep.")
@click.option("--incremental/--no-incremental", default=True, show_default=True,
              help="Incremental RocksDB checkpoints (changelog checkpointing).")
@click.option("--window-path", type=click.Choice(["auto", "python", "native"]), default="auto", show_default=True,
              help="Window jobs: let the planner choose (see `sparkstate explain`), or force a path.")
@click.option("--max-event-time-ahead", "max_ahead", default="1 hour", show_default=True, metavar="DURATION",
              help="Events further ahead of processing time are dead letters ('none': no bound).")
@click.option("--timeout", type=float, help="Stop after this many seconds (the next run resumes).")
@click.option("--fresh", is_flag=True,
              help="Start over: delete the job's checkpoint and output first (only what sparkstate made for the job).")
@click.option("--quiet", is_flag=True, help="No per-batch progress lines.")
@click.option("--from-savepoint", "from_savepoint", metavar="PATH",
              help="Start a new checkpoint from this savepoint's state, watermark and source position (any "
              "--partitions, either --state-backend); with the default checkpoint holding batches, add --fresh or "
              "give another --checkpoint.")
@click.option("--allow-non-restored-state", is_flag=True,
              help="With --from-savepoint: drop the savepoint's states the job no longer declares instead of refusing.")
@click.option("--trust-savepoint", is_flag=True,
              help="With --from-savepoint: you trust who wrote the savepoint, so its pickled values (state with no "
              "safe encoding, or a savepoint of format 1) may be unpickled, which runs code its writer chose.")
@click.option("--metrics-port", type=click.IntRange(0, 65535), metavar="PORT",
              help="Serve the run's metrics over HTTP on this port (0: any free one): a live dashboard at /, Flink's "
              "/jobs/ID/metrics?get=... and /jobs/ID/checkpoints, and Prometheus's /metrics.")
@click.option("--metrics-host", default="127.0.0.1", show_default=True,
              help="The address the metrics endpoint listens on (0.0.0.0: every interface).")
@click.option("--spark-ui/--no-spark-ui", default=True, show_default=True,
              help="Start the Spark UI (port 4040, or the next free one) and print its address.")
@click.option("--master", metavar="URL",
              help="Run on this Spark cluster (spark://HOST:7077, yarn, k8s://...; scripts/cluster.sh starts one here) "
              "instead of local mode; give a --checkpoint every executor reaches [local mode, one core per partition].")
@click.option("--remote", metavar="sc://HOST:PORT",
              help="Run as a client of this Spark Connect server (scripts/connect.sh starts one here; SPARK_REMOTE does "
              "the same); sparkstate must be installed on the server, and --checkpoint be a path both see.")
@click.pass_context
def run(
    ctx: click.Context,
    job_name: str,
    events: int,
    rate: float | None,
    merchants: int | None,
    payers: int | None,
    seed: int | None,
    duplicates: float | None,
    source_spec: str | None,
    settings: tuple[str, ...],
    rules_spec: str | None,
    max_batch: int,
    checkpoint_dir: str | None,
    sink_spec: str | None,
    state_backend: str,
    partitions: int | None,
    key_groups: int,
    trigger: str,
    retained: int,
    incremental: bool,
    window_path: str,
    max_ahead: str,
    timeout: float | None,
    fresh: bool,
    quiet: bool,
    from_savepoint: str | None,
    allow_non_restored_state: bool,
    trust_savepoint: bool,
    metrics_port: int | None,
    metrics_host: str,
    spark_ui: bool,
    master: str | None,
    remote: str | None,
) -> None:
    """Run a seed job on its generator, or on events from a socket, files or a Kafka topic (see `sparkstate jobs`);
    or your own job: JOB is then a pipeline file or module, path/to/pipeline.py[:NAME] or package.module:NAME."""
    from click.core import ParameterSource

    from sparkstate.connectors.sinks import ConsoleSink, ParquetSink, parse_sink
    from sparkstate.jobs import get_job
    from sparkstate.runtime.run.pipeline_file import is_pipeline

    try:
        settings, rocksdb = _split_settings(settings)
        if trust_savepoint and not from_savepoint:
            from sparkstate.errors import JobDefinitionError

            raise JobDefinitionError("--trust-savepoint applies to a restore: add --from-savepoint PATH")
        run_options = {"metrics_port": metrics_port, "metrics_host": metrics_host, "spark_ui": spark_ui, "master": master,
                       "remote": remote, "trust_savepoint": trust_savepoint}
        if not settings:  # only RocksDB options: not a generator setting
            ctx.set_parameter_source("settings", ParameterSource.DEFAULT)
        if is_pipeline(job_name):
            _run_pipeline(ctx, job_name, rocksdb, checkpoint_dir=checkpoint_dir, sink_spec=sink_spec, timeout=timeout,
                          fresh=fresh, quiet=quiet, from_savepoint=from_savepoint,
                          allow_non_restored_state=allow_non_restored_state, run_options=run_options)
            return
        seed_job = get_job(job_name)
        home = Path(".sparkstate") / job_name
        rules = _rules_source(seed_job, rules_spec, home / "rules")
        # another source, another checkpoint: a checkpoint's offsets belong to its source
        if source_spec:
            _refuse_generator_options(ctx, source_spec)
            text_source = seed_job.text_source(source_spec)
            job = seed_job.on_source(text_source, rules=rules)
            home = Path(".sparkstate") / f"{job_name}-{text_source.name}"
        else:
            job = seed_job.job(
                rules=rules, events=events, rate=rate, merchants=merchants, payers=payers, seed=seed,
                max_batch=max_batch, duplicates=duplicates,
                **_generator_settings(seed_job.generator, settings, seed_job.options),
            )
        ckpt = checkpoint_dir or str(home / "checkpoint")
        # the default output belongs to the checkpoint: another checkpoint's batch ids start at 0
        # again, and Spark's file sink would drop them as written into a folder they share
        default_output = str(home / "output") if checkpoint_dir is None else f"{ckpt.rstrip('/')}/output"
        sink = parse_sink(sink_spec) if sink_spec else ParquetSink(default_output)
        job = (
            job
            .sink(sink)
            .with_settings(parallelism=partitions, key_groups=key_groups, window_path=window_path,
                           max_event_time_ahead=None if max_ahead.strip().lower() == "none" else max_ahead)
            .with_checkpointing(state_backend=state_backend, interval=trigger, retained=retained, incremental=incremental,
                                rocksdb=rocksdb or None)
        )
        if source_spec and isinstance(sink, ConsoleSink):
            job = job.dead_letters(sink)  # a line that is not an event shows beside the rows, with its reason
        source = job.source_spec
        assert source is not None, "a seed job has a source"
        until = None
        if rules is not None and job.connected is not None and not job.connected.source.bounded and source.bounded:
            until = _until_events_read(source)
        _run_and_report(
            job, seed_job.description, ckpt=ckpt, home=home, restore_name=job_name, total_events=None if source_spec else events,
            until=until, timeout=timeout, fresh=fresh, quiet=quiet, from_savepoint=from_savepoint,
            allow_non_restored_state=allow_non_restored_state, run_options=run_options,
            results=(lambda: _print_results(sink.path, seed_job.summary_key, seed_job.summary_order))
            if isinstance(sink, ParquetSink) and seed_job.summary_key else None,
        )
    except SparkStateError as exc:
        errors.print(labelled("error:", "red", exc), soft_wrap=True)
        sys.exit(1)
    except KeyboardInterrupt:  # e.g. while Spark starts (once the query runs, Ctrl-C stops it cleanly)
        errors.print("interrupted: the checkpoint keeps every committed batch, and the next run resumes from it",
                     soft_wrap=True)
        sys.exit(130)


def _run_and_report(
    job: Any, description: str, *, ckpt: str, home: Path, restore_name: str, total_events: int | None, until: Any,
    timeout: float | None, fresh: bool, quiet: bool, from_savepoint: str | None, allow_non_restored_state: bool,
    run_options: dict[str, Any] | None = None, results: Any = None,
) -> None:
    """Run ``job`` as the CLI does: what it reads and writes, a line per micro-batch, the summary,
    and where its output is (``results`` prints a seed job's top rows)."""
    from sparkstate.connectors import database
    from sparkstate.connectors.kafka import KafkaSink
    from sparkstate.connectors.sinks import DatabaseSink
    from sparkstate.connectors.sources import describe_guarantee
    from sparkstate.errors import JobDefinitionError
    from sparkstate.metrics.memory import PeakMemory
    from sparkstate.metrics.progress import ProgressPrinter, print_summary

    sink, source = job.sink_spec, job.source_spec
    if source is None:
        raise JobDefinitionError(f"job {job.name!r} has no source: give it one with .source(...)")
    console.print(text(job.name, "bold") + text(f": {description}" if description else ""))
    console.print(text(f"source: {source.describe()} ({describe_guarantee(source)})"))
    if job.connected is not None:
        second = job.connected.source
        console.print(text(f"connected: {second.describe()} ({describe_guarantee(second)}), {job.connected.describe()}"))
    console.print(text(f"sink: {sink.describe()}; checkpoint: {ckpt}"))
    if from_savepoint:
        console.print(text(f"restoring savepoint {from_savepoint} into a new checkpoint"))
    elif allow_non_restored_state:
        raise JobDefinitionError("--allow-non-restored-state applies to a restore: add --from-savepoint PATH")
    if not source.bounded:
        console.print("the source has no end: Ctrl-C (or --timeout) stops the run, and the next run resumes")
    elif until is not None:
        console.print("the rules have no end: the run stops once every event is read (rules read so far stay in "
                      "the checkpoint, and rules that arrive later are read by the next run)")
    console.print("starting Spark (the first batch includes Spark's start-up)...")
    printer = None if quiet else ProgressPrinter(console, total_events=total_events)
    with PeakMemory() as memory:
        # --fresh deletes only what sparkstate made for the job (its checkpoint, output folder and the
        # tables it created; a database's markers too, as the new checkpoint's batch ids start at 0 again),
        # under the checkpoint's lock, once the job is known to be well formed
        result = job.run(checkpoint_dir=ckpt, on_progress=printer, timeout=timeout, until=until,
                         log_file=home / "spark.log",
                         fresh=fresh, on_notice=_notice, from_savepoint=from_savepoint,
                         allow_non_restored_state=allow_non_restored_state,
                         **(run_options or {}))
    result.peak_memory_bytes = memory.peak_bytes
    from sparkstate.runtime.savepoints.state_reader import state_keys  # Spark has started by now

    result.state_keys = state_keys(ckpt, job.settings.state_backend)
    if result.already_complete:
        console.print(text(f"{job.name} already ran to the end", "green")
                      + text(" with this checkpoint; --fresh starts over."))
    print_summary(result, console)
    if results is not None:
        results()
    if isinstance(sink, KafkaSink):
        console.print(text(f"output: Kafka topic {sink.topic}" + (
            "; readers with isolation.level=read_committed see each batch once" if sink.transactional else "")))
    if isinstance(sink, DatabaseSink):
        bound = database.bind_job_sinks(job).sink_spec
        console.print(text(f"output: {database.count_rows(bound):,} rows in table {bound.table} ({bound.describe()})"))
    if result.stopped_with_savepoint and result.savepoint:
        console.print(text("stopped with savepoint ", "green") + text(str(result.savepoint["location"]), "bold"))
        console.print(text(_restore_hint(restore_name, str(result.savepoint["location"]))), soft_wrap=True)


def _split_settings(pairs: tuple[str, ...]) -> tuple[tuple[str, ...], dict[str, str]]:
    """``--set`` pairs: generator settings, and RocksDB options by Flink's names
    (``state.backend.rocksdb.*``, checked by ``CheckpointConfig``)."""
    rocksdb = {}
    rest = []
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if sep and name.strip().startswith("state.backend.rocksdb."):
            rocksdb[name.strip()] = value.strip()
        else:
            rest.append(pair)
    return tuple(rest), rocksdb


def _run_pipeline(ctx: click.Context, spec: str, rocksdb: dict[str, str], *, checkpoint_dir: str | None, sink_spec: str | None,
                  timeout: float | None, fresh: bool, quiet: bool, from_savepoint: str | None,
                  allow_non_restored_state: bool, run_options: dict[str, Any]) -> None:
    """``sparkstate run PIPELINE``: the user's job with its own source, sink and settings; the
    command line's checkpoint, sink and settings over them, where given."""
    from click.core import ParameterSource

    from sparkstate.connectors.sinks import ParquetSink, parse_sink
    from sparkstate.errors import JobDefinitionError
    from sparkstate.runtime.run.pipeline_file import load_pipeline

    given = {name for name in ctx.params if ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE}
    seed_only = sorted(given & {*_GENERATOR_OPTIONS, "source_spec", "rules_spec"})
    if seed_only:
        names = ", ".join("--" + {"settings": "set", "source_spec": "source", "rules_spec": "rules"}.get(n, n.replace("_", "-"))
                          for n in seed_only)
        raise JobDefinitionError(f"{names}: these shape a seed job's input; a pipeline's job reads its own source "
                                 f"({spec}): change it in the file")
    job = load_pipeline(spec)
    p = ctx.params
    settings = {}
    if "partitions" in given:
        settings["parallelism"] = p["partitions"]
    for name in ("key_groups", "window_path"):
        if name in given:
            settings[name] = p[name]
    if "max_ahead" in given:
        settings["max_event_time_ahead"] = None if p["max_ahead"].strip().lower() == "none" else p["max_ahead"]
    if settings:
        job = job.with_settings(**settings)
    checkpointing = {key: p[name] for name, key in (("state_backend", "state_backend"), ("trigger", "interval"),
                                                    ("retained", "retained"), ("incremental", "incremental"))
                     if name in given}
    if rocksdb:
        checkpointing["rocksdb"] = {**(job.settings.checkpoint.rocksdb or {}), **rocksdb}
    if checkpointing:
        job = job.with_checkpointing(**checkpointing)
    home = Path(".sparkstate") / job.name
    ckpt = checkpoint_dir or _pipeline_checkpoint(job)
    if sink_spec:
        job = job.sink(parse_sink(sink_spec))
    elif job.sink_spec is None:
        job = job.sink(ParquetSink(str(home / "output") if checkpoint_dir is None else f"{ckpt.rstrip('/')}/output"))
    _run_and_report(job, f"from {spec}", ckpt=ckpt, home=home, restore_name=spec, total_events=None, until=None,
                    timeout=timeout, fresh=fresh, quiet=quiet, from_savepoint=from_savepoint,
                    allow_non_restored_state=allow_non_restored_state, run_options=run_options)


def _rules_source(seed_job: Any, spec: str | None, default_dir: Path) -> Any:
    """The rules source of a job with rules: ``--rules``, or the job's default rules folder
    (created with the job's initial rules, one file each, when it does not exist yet)."""
    import json

    from sparkstate.errors import JobDefinitionError
    from sparkstate.jobs.registry import rules_jobs

    if seed_job.rules_source is None:
        if spec is not None:
            raise JobDefinitionError(f"--rules: job {seed_job.name!r} reads no rules; only {', '.join(rules_jobs())} do")
        return None
    if spec is None:
        if not default_dir.exists():
            staging = default_dir.with_name(default_dir.name + ".new")
            staging.mkdir(parents=True, exist_ok=True)
            for rule in seed_job.initial_rules:
                (staging / f"{rule['rule_id']}.json").write_text(json.dumps(rule) + "\n")
            staging.rename(default_dir)
        spec = str(default_dir)
    return seed_job.rules_source(spec)


def _until_events_read(source: Any) -> Any:
    """For a bounded source beside an unbounded one (rules): true once a micro-batch has read
    every event of ``source``, the job's first input."""
    from sparkstate.runtime.io.sources import source_offset

    end = source.end_offset(False)

    def done(result: Any) -> bool:
        sources = result.progress[-1].get("sources") if result.progress else None
        return sources is not None and len(sources) > 0 and (source_offset(sources[0]) or 0) >= end

    return done


def _notice(message: str) -> None:
    """A run's notice before it starts (what --fresh kept): shown at once, and in the summary."""
    console.print(labelled("note:", "yellow", message), soft_wrap=True)


_GENERATOR_OPTIONS = ("events", "rate", "merchants", "payers", "seed", "duplicates", "settings", "max_batch")


def _refuse_generator_options(ctx: click.Context, source_spec: str) -> None:
    """Generator options shape generated events; with --source there are none to shape."""
    from click.core import ParameterSource

    from sparkstate.errors import JobDefinitionError

    given = [
        "--" + ("set" if name == "settings" else name.replace("_", "-")) for name in _GENERATOR_OPTIONS
        if ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE
    ]
    if given:
        from sparkstate.connectors.credentials import mask

        bound = " (a Kafka source's micro-batches: ?max_records=N in its URL)" if "--max-batch" in given else ""
        raise JobDefinitionError(
            f"{', '.join(given)}: generator options do not apply with --source {mask(source_spec)}, "
            f"which reads the events it is sent{bound}"
        )


# --------------------------------------------------------------------------- Kafka input for the demo

#: events the producer generates, encodes and hands to librdkafka at a time (the generator's chunk)
_PRODUCE_BLOCK = 1 << 16
#: the payment generator's events per second of event time when --rate sets none
_PRODUCE_EVENT_RATE = 1000.0


@main.command("produce")
@click.argument("url", metavar="kafka://HOST:PORT/TOPIC")
@click.option("--events", type=click.IntRange(min=1), default=100_000, show_default=True, help="Payments to write.")
@click.option("--rate", type=click.FloatRange(min=0, min_open=True),
              help="Events per second, also their event-time rate (default: as fast as the broker takes them, "
              "event times 1,000/s ending now).")
@click.option("--merchants", type=click.IntRange(min=1), default=10_000, show_default=True, help="Distinct merchants.")
@click.option("--seed", type=int, default=7, show_default=True, help="Generator seed (the same seed gives the same payments).")
@click.option("--partitions", type=click.IntRange(min=1), default=1, show_default=True,
              help="Partitions of the topic --create makes.")
@click.option("--create", is_flag=True, help="Create the topic when it does not exist (else a missing topic is refused).")
@click.option("--quiet", is_flag=True, help="No progress lines.")
def produce(url: str, events: int, rate: float | None, merchants: int, seed: int, partitions: int, create: bool,
            quiet: bool) -> None:
    """Write the UPI payment generator's events into a Kafka topic, as JSON records keyed by merchant_id.

    The events are those of `sparkstate run` (UpiPayments with the same --merchants and --seed)
    with current event times, which also are the records' timestamps: the ones of --rate follow
    the clock; without --rate they run at 1,000 per second and the last one is now. Read them
    with `sparkstate run JOB --source kafka://HOST:PORT/TOPIC`. Settings with a dot in the URL's
    query are librdkafka's (security.protocol, sasl.mechanism...); a user and password in the
    URL are SASL credentials and never printed.
    """
    import datetime as dt

    from sparkstate.connectors.credentials import mask

    try:
        wrote, seconds, first_ms, last_ms, topic_parts = _produce(
            url, events, rate, merchants, seed, partitions, create, None if quiet else _produce_progress())
    except SparkStateError as exc:
        errors.print(labelled("error:", "red", exc), soft_wrap=True)
        sys.exit(1)
    except KeyboardInterrupt:
        errors.print("interrupted: the events handed to the producer before it were sent to the broker", soft_wrap=True)
        sys.exit(130)

    def utc(ms: int) -> str:
        return f"{dt.datetime.fromtimestamp(ms / 1000, dt.UTC):%Y-%m-%d %H:%M:%S} UTC"

    console.print(text(
        f"wrote {wrote:,} events to {mask(url).split('?')[0]} ({topic_parts} partition{'s' if topic_parts != 1 else ''}) "
        f"in {seconds:,.1f} s ({wrote / max(seconds, 1e-9):,.0f} events/s); keyed by merchant_id ({merchants:,} merchants, "
        f"seed {seed}); event times {utc(first_ms)} to {utc(last_ms)}"), soft_wrap=True)


def _produce_progress() -> Any:
    """A progress callback ``(written, total, seconds)`` printing a line a second at most."""
    shown = [0.0]

    def show(written: int, total: int, seconds: float) -> None:
        if seconds - shown[0] >= 1.0:
            shown[0] = seconds
            console.print(f"{written:,} / {total:,} events ({written / max(seconds, 1e-9):,.0f}/s)")

    return show


def _produce(url: str, events: int, rate: float | None, merchants: int, seed: int, partitions: int, create: bool,
             progress: Any) -> tuple[int, float, int, int, int]:
    """Write ``events`` payments to the topic of ``url``; returns (events written, seconds, first
    and last event time in epoch ms, the topic's partitions)."""
    import time

    import pyarrow as pa

    from sparkstate.extras import require

    require("kafka", "sparkstate produce")
    from confluent_kafka import KafkaException, Producer
    from confluent_kafka.admin import AdminClient

    from sparkstate.connectors.credentials import mask
    from sparkstate.connectors.generator import UpiPayments
    from sparkstate.connectors.kafka.client import client_config, reason, topic_partitions
    from sparkstate.connectors.kafka.protocol import ensure_topics
    from sparkstate.connectors.kafka.sink import KafkaSink
    from sparkstate.connectors.kafka.source import parse_kafka_url
    from sparkstate.connectors.sources import refuse_unknown_kafka_options
    from sparkstate.errors import SinkError

    servers, topic, options = parse_kafka_url(url)
    refuse_unknown_kafka_options(url, options, (), "topic to produce to")
    target = KafkaSink(servers, topic, create_topics=create, partitions=partitions, options=options)  # checks the name
    admin = AdminClient(client_config(servers, options, **{"allow.auto.create.topics": False}))  # looking creates none
    found = topic_partitions(admin, topic, servers, f"looking up topic {topic!r}", SinkError)
    if found is None and not create:
        raise SinkError(
            f"topic {topic!r} does not exist on Kafka at {mask(servers)}: add --create (with --partitions N) to create "
            "it, or create it with your Kafka tools"
        )
    if found is None:
        ensure_topics(target, [(topic, partitions, True)])
        found = topic_partitions(admin, topic, servers, f"looking up topic {topic!r}", SinkError) or []
    per_second = rate or _PRODUCE_EVENT_RATE
    now_ms = int(time.time() * 1000)
    # event times follow the clock (--rate) or end now: the broker deletes records 7 days older than their timestamp
    start_ms = now_ms if rate else now_ms - int(events * 1000 / per_second)
    gen = UpiPayments(events=events, merchants=merchants, seed=seed, start_ms=start_ms, events_per_second=per_second)
    failures: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(reason(KafkaException(err)))

    config = client_config(servers, {"linger.ms": 20, "queue.buffering.max.messages": 1_000_000, **options},
                           **{"partitioner": "murmur2_random", "enable.idempotence": True, "on_delivery": delivered})
    try:
        producer = Producer(config)
    except KafkaException as exc:
        raise SinkError(f"cannot configure a Kafka producer for {mask(servers)}: {reason(exc)}") from None
    started = time.monotonic()
    written, first_ms, last_ms = 0, None, start_ms
    try:
        for block in range(0, events, _PRODUCE_BLOCK):
            batch = gen.generate(block, min(block + _PRODUCE_BLOCK, events))
            values = _json_records(batch)
            keys = batch.column(1).to_pylist()
            stamps = batch.column(0).cast(pa.timestamp("ms", tz="UTC")).cast(pa.int64()).to_pylist()
            first_ms = min(stamps) if first_ms is None else min(first_ms, min(stamps))
            last_ms = max(last_ms, max(stamps))
            step = len(values) if rate is None else max(1, min(len(values), int(rate / 50)))
            for lo in range(0, len(values), step):
                for value, key, ms in zip(values[lo:lo + step], keys[lo:lo + step], stamps[lo:lo + step]):
                    while True:
                        try:
                            producer.produce(topic, value, key, timestamp=ms)
                            break
                        except BufferError:
                            producer.poll(0.05)
                written += min(step, len(values) - lo)
                producer.poll(0)
                if failures:
                    break
                if rate is not None:
                    time.sleep(max(0.0, started + written / rate - time.monotonic()))
                if progress is not None:
                    progress(written, events, time.monotonic() - started)
            if failures:
                break
    finally:
        left = producer.flush(60)
    if failures or left:
        why = failures[0] if failures else f"{left:,} records still unsent after 60 s"
        raise SinkError(f"writing to topic {topic!r} on Kafka at {mask(servers)} failed ({len(failures):,} records "
                        f"refused): {why}. Is the broker up, and are the security settings right?")
    return written, time.monotonic() - started, first_ms or start_ms, last_ms, len(found)


def _json_records(batch: Any) -> list[bytes]:
    """A generated batch's rows as JSON objects (timestamps ISO 8601 in UTC, to the
    millisecond), built column-wise by Arrow: the generators' strings (ids, devices) need no
    escaping and their numbers are finite, which is checked, with json.dumps as the fallback."""
    import json

    import pyarrow as pa
    import pyarrow.compute as pc

    parts: list[Any] = []
    for i, field in enumerate(batch.schema):
        col = batch.column(i)
        if pa.types.is_timestamp(field.type):
            value = pc.binary_join_element_wise(
                '"', pc.strftime(col.cast(pa.timestamp("ms", tz="UTC")), format="%Y-%m-%dT%H:%M:%S"), 'Z"', "")
        elif pa.types.is_string(field.type):
            if pc.any(pc.match_substring_regex(col, r'["\\\x00-\x1f]')).as_py():
                return [json.dumps(row, default=str, separators=(",", ":")).encode() for row in batch.to_pylist()]
            value = pc.binary_join_element_wise('"', col, '"', "")
        else:
            if pa.types.is_floating(field.type) and not pc.all(pc.is_finite(col)).as_py():
                return [json.dumps(row, default=str, separators=(",", ":")).encode() for row in batch.to_pylist()]
            value = pc.cast(col, pa.string())
        parts += [("{" if not parts else ",") + json.dumps(field.name) + ":", value]
    joined = pc.binary_join_element_wise(*parts, "}", "")
    return joined.cast(pa.binary()).to_pylist()


@main.group("nexmark")
def nexmark() -> None:
    """The Nexmark benchmark's events: `sparkstate run nexmark-qN` runs a query on its generator."""


@nexmark.command("generate")
@click.option("--events", type=click.IntRange(min=1), required=True, help="Events of the stream to write (all types).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder for the JSON-lines files (made if missing; only a folder of Nexmark files is written over).")
@click.option("--files", type=click.IntRange(min=1), default=2, show_default=True,
              help="Files to split the events into, consecutive ranges each (read them in name order).")
@click.option("--set", "pairs", multiple=True, metavar="NAME=VALUE",
              help="A generator setting: seed, events_per_second, hot_auction_ratio, ... (`sparkstate jobs` lists the jobs).")
@click.option("--quiet", is_flag=True, help="No progress lines.")
def nexmark_generate(events: int, out_dir: Path, files: int, pairs: tuple[str, ...], quiet: bool) -> None:
    """Write the Nexmark stream as JSON lines, in the reference's nested shape (`event_type`, then
    `person`, `auction` or `bid`), for other systems to read exactly the events sparkstate reads.

    The events are those of the `nexmark-qN` jobs with the same settings (each a function of
    its offset and the seed); `_nexmark.json` beside the files records the settings.
    """
    import time

    from sparkstate.connectors.nexmark import NexmarkBids, write_json_lines

    try:
        settings = _generator_settings(NexmarkBids, pairs)
        settings.pop("events", None)
        generator = NexmarkBids(events=events, **settings)
        _refuse_foreign_files(out_dir)
        started = shown = time.monotonic()
        for done in write_json_lines(generator, out_dir, files=files):
            now = time.monotonic()
            if not quiet and now - shown >= 1.0:
                shown = now
                console.print(f"{done:,} / {events:,} events ({done / (now - started):,.0f}/s)")
    except SparkStateError as exc:
        errors.print(labelled("error:", "red", exc), soft_wrap=True)
        sys.exit(1)
    seconds = time.monotonic() - started
    size = sum(p.stat().st_size for p in out_dir.glob("part-*.json"))
    console.print(text(
        f"wrote {events:,} Nexmark events to {out_dir} ({files} file{'s' if files != 1 else ''}, {size / 1e6:,.1f} MB) "
        f"in {seconds:,.1f} s ({events / max(seconds, 1e-9):,.0f} events/s)"), soft_wrap=True)


def _refuse_foreign_files(folder: Path) -> None:
    """Refuse a folder holding anything but an earlier `nexmark generate`'s files, and remove
    those (a smaller run must not leave an old run's last files behind)."""
    import re

    if not folder.exists():
        return
    ours = re.compile(r"part-\d{5}\.json|_nexmark\.json")
    foreign = sorted(p.name for p in folder.iterdir() if not ours.fullmatch(p.name))
    if foreign:
        raise SparkStateError(
            f"{folder} holds files that are not Nexmark events ({', '.join(foreign[:5])}); give --out an empty or new folder"
        )
    if any(folder.iterdir()) and not (folder / "_nexmark.json").exists():
        raise SparkStateError(f"{folder} holds part files without _nexmark.json; give --out an empty or new folder")
    for p in folder.glob("part-*.json"):
        p.unlink()


@main.command("checkpoints")
@click.argument("job_name", metavar="JOB")
@click.option("--checkpoint", "checkpoint_dir", metavar="DIR", help="Checkpoint directory [.sparkstate/JOB/checkpoint].")
def list_checkpoints(job_name: str, checkpoint_dir: str | None) -> None:
    """List the checkpoints a job's checkpoint directory retains: batch, time, duration, sizes.

    A local directory is read without starting Spark.
    """
    from sparkstate.metrics.progress import checkpoints_table
    from sparkstate.runtime.checkpoint.directory import CheckpointDir
    from sparkstate.runtime.checkpoint.metadata import damaged_metadata
    from sparkstate.runtime.checkpoint.stats import retained_checkpoints

    try:
        job_arg, (job_name, default_dir) = job_name, _job_checkpoint(job_name)
        checkpoint = CheckpointDir.open(checkpoint_dir or default_dir)
        notes: list[str] = []
        rows = retained_checkpoints(checkpoint, notes)
        for note in notes:
            errors.print(labelled("warning:", "yellow", note), soft_wrap=True)
        if not rows:
            what = "holds no committed checkpoint" if checkpoint.exists() else "does not exist"
            errors.print(labelled("error:", "red", f"checkpoint directory {checkpoint.root} {what}: run `sparkstate run "
                                  f"{job_arg}` first, or give the job's directory with --checkpoint DIR"), soft_wrap=True)
            sys.exit(1)
        try:
            owner = checkpoint.read_metadata().get("job")
        except FileNotFoundError:
            owner = None
        except (OSError, ValueError) as exc:
            owner = None
            errors.print(labelled("warning:", "yellow", damaged_metadata(checkpoint, exc)), soft_wrap=True)
        if owner not in (None, job_name):
            errors.print(labelled("warning:", "yellow", f"{checkpoint.root} belongs to job {owner!r}, not {job_name!r}"),
                         soft_wrap=True)
        # one line per checkpoint also when the output goes to a file or a pipe (80 columns)
        out = console if console.is_terminal else Console(highlight=False, width=160)
        out.print(checkpoints_table(rows, f"{job_name}: {len(rows):,} retained checkpoints in {checkpoint.root}"))
        out.print(
            "duration: state commit + offset log + commit log. delta: what the checkpoint wrote; "
            "full: what restoring it reads (the last snapshot and the changes since). "
            "state size: Spark's figure (RocksDB's SST files, or the hashmap's current version).",
            soft_wrap=True,
        )
    except SparkStateError as exc:
        errors.print(labelled("error:", "red", exc), soft_wrap=True)
        sys.exit(1)


@main.command("report")
@click.argument("job_name", metavar="JOB")
@click.option("--checkpoint", "checkpoint_dir", metavar="DIR", help="Checkpoint directory [.sparkstate/JOB/checkpoint].")
@click.option("--out", "out_dir", metavar="DIR", type=click.Path(file_okay=False, path_type=Path),
              help="Where to write the report [.sparkstate/JOB/report].")
def report_command(job_name: str, checkpoint_dir: str | None, out_dir: Path | None) -> None:
    """Plot a run from what its checkpoint records: one self-contained HTML page (the dashboard's
    charts) and a PNG of each chart, over the batches the checkpoint retains.

    For a run that had no dashboard open (`run --metrics-port`); a local directory is read
    without starting Spark.
    """
    from sparkstate.metrics.report import write_report
    from sparkstate.runtime.checkpoint.directory import CheckpointDir

    try:
        job_arg, (job_name, default_dir) = job_name, _job_checkpoint(job_name)
        checkpoint = CheckpointDir.open(checkpoint_dir or default_dir)
        if not checkpoint.committed_batches():
            what = "holds no committed checkpoint" if checkpoint.exists() else "does not exist"
            errors.print(labelled("error:", "red", f"checkpoint directory {checkpoint.root} {what}: run `sparkstate run "
                                  f"{job_arg}` first, or give the job's directory with --checkpoint DIR"), soft_wrap=True)
            sys.exit(1)
        out = out_dir or Path(".sparkstate") / job_name / "report"
        report = write_report(checkpoint, out, job_name)
        for note in report.notes:
            errors.print(labelled("warning:", "yellow", note), soft_wrap=True)
        console.print(text(f"{job_name}: {report.batches:,} batches (those the checkpoint retains)"))
        if report.last_run is not None:
            console.print(text(f"last run: {report.last_run.describe()}"))
        console.print(text("report: ", "bold") + text(str(report.html)))
        console.print(text(f"charts: {len(report.pngs)} PNGs in {out} ({', '.join(p.name for p in report.pngs)})"),
                      soft_wrap=True)
    except SparkStateError as exc:
        errors.print(labelled("error:", "red", exc), soft_wrap=True)
        sys.exit(1)
    except OSError as exc:
        errors.print(labelled("error:", "red", f"cannot write the report: {exc}; choose another folder with --out DIR"),
                     soft_wrap=True)
        sys.exit(1)


@main.command("savepoint")
@click.argument("job_name", metavar="JOB")
@click.option("--stop", is_flag=True,
              help="Stop the running job after its next committed batch, with a savepoint of that batch "
              "(Flink's `flink stop`).")
@click.option("--batch", type=click.IntRange(min=0),
              help="The committed batch to save: one the checkpoint retains (`sparkstate checkpoints JOB`) [the last].")
@click.option("--checkpoint", "checkpoint_dir", metavar="DIR", help="Checkpoint directory [.sparkstate/JOB/checkpoint].")
@click.option("--target", metavar="DIR", help="Where to write the savepoint [.sparkstate/savepoints/JOB-bBATCH-TIME].")
@click.option("--timeout", "wait", type=click.FloatRange(min=0, min_open=True), default=600, show_default=True,
              help="Seconds to wait for a running job's answer.")
def savepoint_command(job_name: str, stop: bool, batch: int | None, checkpoint_dir: str | None, target: str | None,
                   wait: float) -> None:
    """Take a savepoint of a job: its state, timers, watermark and source offsets at one committed batch.

    A running job (one that holds the checkpoint) is asked through its checkpoint directory and
    goes on, or with --stop stops after its next committed batch. A stopped job's savepoint is
    taken from its checkpoint, of its last committed batch or of --batch N.
    """
    import time

    from sparkstate.runtime.savepoints.requests import savepoint
    from sparkstate.runtime.savepoints.take import DEFAULT_SAVEPOINT_DIR

    started = time.monotonic()
    try:
        job_arg, (job_name, default_dir) = job_name, _job_checkpoint(job_name)
        home = Path(".sparkstate") / job_name
        meta = savepoint(
            checkpoint_dir or default_dir, stop=stop, batch=batch, target=target,
            savepoint_dir=DEFAULT_SAVEPOINT_DIR, wait=wait, log_file=home / "spark.log", job=job_name,
            on_wait=lambda message: console.print(text(message + "; waiting..."), soft_wrap=True),
        )
    except SparkStateError as exc:
        errors.print(labelled("error:", "red", exc), soft_wrap=True)
        sys.exit(1)
    except KeyboardInterrupt:
        errors.print("interrupted: the request is withdrawn unless the run had taken it (then it still answers it)",
                     soft_wrap=True)
        sys.exit(130)
    console.print(_savepoint_table(meta, time.monotonic() - started))
    restore = job_arg if job_arg != job_name else str(meta.get("job") or job_name)
    console.print(text(_restore_hint(restore, str(meta["location"]))), soft_wrap=True)
    from sparkstate.savepoint.format import column_what

    pickled = [*map(column_what, meta.get("pickled", ())),
               *(["the broadcast state"] if (meta.get("broadcast") or {}).get("encoding") == "pickle"
                                           else [])]
    if pickled:
        errors.print(labelled("note:", "yellow", f"{', '.join(pickled)} hold values with no safe encoding (types other "
                              "than numbers, strings, bytes, dates, dataclasses, named tuples and containers of them), "
                              "so they are pickled: a restore needs --trust-savepoint (docs/guides/savepoints.md)"),
                 soft_wrap=True)


def _job_checkpoint(job_arg: str) -> tuple[str, str]:
    """A JOB argument's job name and its default checkpoint directory: a seed job's
    ``.sparkstate/JOB/checkpoint``; a pipeline's own directory, else ``.sparkstate/NAME/checkpoint``."""
    from sparkstate.runtime.run.pipeline_file import is_pipeline, load_pipeline

    if not is_pipeline(job_arg):
        return job_arg, str(Path(".sparkstate") / job_arg / "checkpoint")
    job = load_pipeline(job_arg)
    return job.name, _pipeline_checkpoint(job)


def _pipeline_checkpoint(job: Any) -> str:
    """A pipeline's job's checkpoint: its own directory, else ``.sparkstate/NAME/checkpoint``."""
    own = job.settings.checkpoint.directory
    return str(own) if own else str(Path(".sparkstate") / job.name / "checkpoint")


def _savepoint_table(meta: dict, waited: float) -> Table:
    """What a user wants of a savepoint just taken: where, which batch, how much, how long."""
    import json

    from sparkstate.metrics.progress import human_bytes

    table = Table(title=text(f"savepoint of {meta.get('job')}"), show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value", overflow="fold")  # a path is copied whole: folded, never cut
    table.add_row("path", text(str(meta["location"])))
    table.add_row("batch", f"{meta.get('batch')} (its state, timers, watermark and source offsets)")
    table.add_row("keys", f"{meta.get('keys', 0):,}")
    table.add_row("size", human_bytes(meta.get("bytes") or 0))
    table.add_row("time", f"{meta.get('seconds', 0.0):,.1f} s to write" + (
        f", {waited:,.1f} s in all (with the stop)" if meta.get("stopped") else f", {waited:,.1f} s in all"))
    if meta.get("source_offset") is not None:
        table.add_row("source offset", text(json.dumps(meta["source_offset"])))
    second = meta.get("connected") or {}
    if second.get("source_offset") is not None:
        table.add_row("second input offset", text(json.dumps(second["source_offset"])))
    if meta.get("broadcast"):
        states = ", ".join(meta["broadcast"].get("states") or {})
        table.add_row("broadcast state", text(f"{states}: {human_bytes(meta['broadcast']['bytes'])}, stored once for "
                                              "all key groups"))
    if meta.get("watermark_ms"):
        import datetime as dt

        wm = dt.datetime.fromtimestamp(meta["watermark_ms"] / 1000, dt.UTC)
        table.add_row("watermark", f"{wm:%Y-%m-%d %H:%M:%S} UTC")
    table.add_row("taken by", text(str(meta.get("taken_by"))))
    table.add_row("the job", "stopped" if meta.get("stopped") else "goes on" if meta.get("running") else "was not running")
    return table


def _restore_hint(job_name: str, location: str) -> str:
    return (f"restore it: sparkstate run {job_name} --from-savepoint {location} --fresh (replaces the job's checkpoint "
            "and output), or with --checkpoint NEW_DIR instead of --fresh (keeps them); add --partitions N or "
            "--state-backend to change either")


def _generator_settings(generator: type, pairs: tuple[str, ...], options: dict | None = None) -> dict:
    """``NAME=VALUE`` pairs as generator settings (or the job's own ``options``), each converted
    to its default's type."""
    import dataclasses

    from sparkstate.errors import JobDefinitionError

    defaults = {f.name: f.default for f in dataclasses.fields(generator)}
    defaults.update(options or {})
    out: dict = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or name not in defaults:
            raise JobDefinitionError(
                f"--set {pair!r}: expected NAME=VALUE with NAME one of {', '.join(defaults)} ({generator.__name__})"
            )
        default = defaults[name]
        try:
            if isinstance(default, bool):
                if text.lower() not in ("true", "false"):
                    raise ValueError(text)
                out[name] = text.lower() == "true"
            elif isinstance(default, int):
                out[name] = int(text)
            elif isinstance(default, float) or default is None:
                out[name] = float(text) if text.lower() != "none" else None
            else:
                out[name] = text
        except ValueError:
            raise JobDefinitionError(f"--set {pair!r}: {text!r} is not a valid {type(default).__name__}") from None
    return out


def _print_results(path: str, key: str, order: str | None) -> None:
    """The output's latest row per key, top 10 by ``order``."""
    from sparkstate.metrics.progress import results_table
    from sparkstate.runtime.savepoints.state_reader import latest_rows

    rows = latest_rows(path, key, order)
    if rows is None:
        return
    if not rows:
        console.print("no output rows yet")
        return
    console.print(results_table(rows, f"top {len(rows)} {key} by {order or key} (output: {path})"))


# --------------------------------------------------------------------------- offline state


@main.command("savepoints")
@click.argument("directory", metavar="[DIR]", required=False)
def list_savepoints(directory: str | None) -> None:
    """List savepoints: job, batch, time, keys, size, source offset, watermark.

    DIR is a folder of savepoints (or one savepoint) [.sparkstate/savepoints and
    .sparkstate/*/savepoints]. Reads local files only; Spark is not started.
    """
    import json

    from sparkstate.metrics.progress import human_bytes
    from sparkstate.savepoint.files import INPROGRESS_SUFFIX, LocalDirectory, open_savepoint
    from sparkstate.savepoint.format import METADATA_FILE
    from sparkstate.savepoint.reader import watermark_text

    if directory is not None and "://" in directory and not directory.startswith("file:"):
        errors.print(labelled("error:", "red", f"{directory}: `sparkstate savepoints` lists local folders only; for a "
                              "Hadoop URI, `sparkstate state URI` describes one savepoint (through Spark)"), soft_wrap=True)
        sys.exit(1)
    folders = [Path(directory.removeprefix("file://"))] if directory else [
        Path(".sparkstate") / "savepoints", *sorted(Path(".sparkstate").glob("*/savepoints"))]
    found: list[Path] = []
    unfinished: list[Path] = []
    for folder in folders:
        if (folder / METADATA_FILE).is_file():
            found.append(folder)
        elif folder.is_dir():
            for entry in sorted(folder.iterdir()):
                if (entry / METADATA_FILE).is_file():
                    found.append(entry)
                elif entry.name.endswith(INPROGRESS_SUFFIX):
                    unfinished.append(entry)
    rows = []
    for path in found:
        try:
            rows.append((path, open_savepoint(LocalDirectory(path)).meta))
        except SparkStateError as exc:
            errors.print(labelled("warning:", "yellow", exc), soft_wrap=True)
    for path in unfinished:
        errors.print(labelled("note:", "yellow", f"{path} is an unfinished savepoint (being written now, or its "
                              "writer stopped); it is never read, and once no writer runs it can be deleted"), soft_wrap=True)
    if not rows:
        where = directory or ".sparkstate/savepoints, .sparkstate/*/savepoints"
        errors.print(labelled("error:", "red", f"no savepoints in {where}: take one with `sparkstate savepoint JOB`, "
                              "or give their folder"), soft_wrap=True)
        sys.exit(1)
    rows.sort(key=lambda r: (str(r[1].get("job")), str(r[1].get("created") or "")))
    table = Table(title=f"{len(rows)} savepoint{'s' if len(rows) != 1 else ''}", title_justify="left")
    for name in ("savepoint", "job", "batch", "time (UTC)", "keys", "size", "source offset", "watermark"):
        table.add_column(name, justify="right" if name in ("batch", "keys", "size") else "left")
    for path, meta in rows:
        batch = meta.get("batch")
        offset = meta.get("source_offset")
        table.add_row(
            text(path), text(meta.get("job")),
            text("bootstrap" if batch is None else batch),
            text(str(meta.get("created") or "?").replace("T", " ").removesuffix("+00:00")),
            text(f"{meta.get('keys', 0):,}"), text(human_bytes(meta.get("bytes"))),
            text("start" if offset is None else json.dumps(offset, separators=(",", ":"))),
            text(watermark_text(meta.get("watermark_ms"))),
        )
    out = console if console.is_terminal else Console(highlight=False, width=200)
    out.print(table)


@main.command("state")
@click.argument("path", metavar="PATH")
@click.option("--key", "key", metavar="K",
              help="One key's state and timers: its JSON text (\"m1\", 42, a multi-column key as [\"a\", 1]) or a plain string.")
@click.option("--state", "state_name", metavar="NAME", help="One state descriptor: its first rows (with --key: that key's).")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True, help="Rows to print with --state.")
@click.option("--timers", is_flag=True, help="The first rows of the timers.")
@click.option("--batch", type=click.IntRange(min=0), help="A checkpoint's committed batch [the last].")
@click.option("--trust-savepoint", "trusted", is_flag=True,
              help="Unpickle the savepoint's pickled values (shown as placeholders otherwise): only for a savepoint you "
              "trust, as unpickling runs code its writer chose.")
def show_state(path: str, key: str | None, state_name: str | None, limit: int, timers: bool, batch: int | None,
               trusted: bool) -> None:
    """Print the state in a savepoint, or in a stopped job's checkpoint (read through Spark).

    Without --key, --state or --timers: what PATH holds (job, states, keys, watermark, source offset).
    Reading a savepoint runs no code from it (see --trust-savepoint).
    """
    from sparkstate.savepoint.format import METADATA_FILE

    try:
        local = Path(path.removeprefix("file://")) if "://" not in path or path.startswith("file://") else None
        if local is not None and (local / METADATA_FILE).is_file() and batch is None:
            from sparkstate.savepoint.reader import read_savepoint

            reader = read_savepoint(local, trusted=trusted)
        elif local is not None and not (local / "sparkstate.json").is_file() and batch is None:
            from sparkstate.savepoint.reader import read_savepoint

            reader = read_savepoint(local, trusted=trusted)  # says what is wrong: missing, unfinished, not a savepoint
        else:
            from sparkstate.runtime.savepoints.state_frames import open_state

            console.print(text(f"reading {path} through Spark's state data source (starting Spark takes a few seconds)..."))
            reader = open_state(path, batch=batch, trusted=trusted)
        if key is not None:
            _print_key(reader, key, state_name)
        elif state_name is not None:
            _print_frame(reader.state(state_name, limit), f"{state_name} ({reader.states[state_name]}): first {limit} rows"
                         f" of {reader.location}", limit)
        elif timers:
            _print_frame(reader.timers(limit), f"timers: first {limit} rows of {reader.location}", limit)
        else:
            table = Table(show_header=False, box=None)
            for name, value in reader.describe():
                table.add_row(text(name, "bold"), text(value))
            console.print(table)
            console.print("--key K shows one key's state and timers; --state NAME the rows of one state; --timers the timers.")
    except SparkStateError as exc:
        errors.print(labelled("error:", "red", exc), soft_wrap=True)
        sys.exit(1)


def _print_key(reader, key: str, state_name: str | None) -> None:  # type: ignore[no-untyped-def]
    """One key's state and timers (``--key``), or says which keys there are."""
    import json

    from sparkstate.errors import SavepointError

    if state_name is not None and state_name not in reader.states:
        reader.state(state_name, 0)  # raises, naming the states there are
    found = reader.find(key)
    if not found:
        sample = reader.state(next(iter(reader.states)), 3) if reader.states else None
        examples = "" if sample is None or not len(sample) else (
            "; keys look like " + ", ".join(json.dumps(list(r) if len(r) > 1 else r[0], default=str)
                                            for r in sample[reader.key_columns].itertuples(index=False, name=None)))
        raise SavepointError(f"{reader.location} holds no state for key {key!r} (key columns {reader.key_columns}){examples}")
    for ks in found:
        if state_name is not None:
            ks.state = {n: v for n, v in ks.state.items() if n == state_name}
            if state_name != "windows":
                ks.windows = []
        console.print(text("\n".join(ks.lines())), soft_wrap=True)


def _print_frame(frame, title: str, limit: int) -> None:  # type: ignore[no-untyped-def]
    table = Table()
    for name in frame.columns:
        table.add_column(text(name))
    for row in frame.head(limit).itertuples(index=False, name=None):
        table.add_row(*(text(v if isinstance(v, str) else repr(v)) for v in row))
    out = console if console.is_terminal else Console(highlight=False, width=200)
    out.print(text(title), soft_wrap=True)
    out.print(table)
    if not len(frame):
        out.print("(no rows)")


if __name__ == "__main__":
    main()
