"""Creating and configuring the SparkSession sparkstate runs on.

Local mode by default (``local[N]``); pass ``master`` (or an existing session) to run on a
cluster. The JVM's own console output (log lines, stage progress bars, and the prints of
Spark's Python planner worker) goes to a log file instead of the terminal, so the CLI's
progress output stays readable.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from sparkstate.runtime.session import class_cache
from sparkstate.runtime.session.driver import ClassicDriver

_ROCKSDB_CLASS = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
_HDFS_CLASS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"

STATE_BACKENDS = {
    # Flink's names for the two backends: RocksDB on local disk, or plain in-memory maps.
    "rocksdb": _ROCKSDB_CLASS,
    "hashmap": _HDFS_CLASS,
}

#: Loggers that are noisy at WARN for sparkstate's normal use of Spark.
_QUIET_LOGGERS = {
    # "Value state ... doesn't contain a value" on every read of a new key group
    "org.apache.spark.sql.execution.python.streaming.TransformWithStateInPySparkStateServer": "ERROR",
    "org.apache.spark.sql.execution.streaming.ResolveWriteToStream": "ERROR",
    "org.apache.spark.sql.execution.streaming.MicroBatchExecution": "ERROR",
    "org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution": "ERROR",
    "org.apache.spark.sql.execution.streaming.runtime.ResolveWriteToStream": "ERROR",
    "org.apache.hadoop.util.NativeCodeLoader": "ERROR",
    "org.apache.spark.util.Utils": "ERROR",
}


#: The JVM talks to its Python workers, and a transformWithState worker to its state server,
#: over Unix domain sockets instead of loopback TCP: each state call is a round trip, and a
#: micro-batch of 100 events took about 90 ms less (docs/design/performance.md, "The floor")
_PYTHON_SOCKETS = {"spark.python.unix.domain.socket.enabled": "true"}


def state_store_class(backend: str) -> str:
    try:
        return STATE_BACKENDS[backend]
    except KeyError:
        from sparkstate.errors import JobDefinitionError

        raise JobDefinitionError(
            f"unknown state backend {backend!r}; choose one of {sorted(STATE_BACKENDS)}"
        ) from None


#: a Spark log larger than this when Spark starts is moved aside (to ``<name>.1``, replacing
#: the one before), so that a job run again and again keeps at most about twice this; a run
#: that goes on for months has it copied aside and emptied as it passes this (:func:`trim_log`)
LOG_ROTATE_BYTES = 16 << 20
#: how often a running JVM's log is checked against :data:`LOG_ROTATE_BYTES`
LOG_CHECK_SECONDS = 60.0


def rotate_log(log_path: Path) -> None:
    """Move ``log_path`` to ``<log_path>.1`` when it holds more than :data:`LOG_ROTATE_BYTES`."""
    try:
        if log_path.stat().st_size > LOG_ROTATE_BYTES:
            os.replace(log_path, log_path.with_name(log_path.name + ".1"))
    except OSError:
        pass  # no log yet, or one we cannot move: appending still works


def trim_log(log_path: Path) -> None:
    """Copy ``log_path`` to ``<log_path>.1`` and empty it when it holds more than
    :data:`LOG_ROTATE_BYTES`, while the JVM keeps writing to it: the JVM holds the file open
    (its stdout and stderr), so it cannot be renamed away, but it was opened for appending,
    so the JVM's next line goes to the start of the emptied file. Lines written between the
    copy and the emptying are lost (a few at most)."""
    try:
        if log_path.stat().st_size <= LOG_ROTATE_BYTES:
            return
        shutil.copyfile(log_path, log_path.with_name(log_path.name + ".1"))
        os.truncate(log_path, 0)
    except OSError:
        pass  # gone, or not ours to change: appending still works


#: the logs a thread of this process keeps bounded: one thread a log, however often a session starts
_watched: set[Path] = set()


def _watch_log(log_path: Path) -> None:
    """Keep the log of this process's JVM bounded for as long as the process lives."""
    log_path = log_path.resolve()
    if log_path in _watched:
        return
    _watched.add(log_path)

    def watch() -> None:
        while True:
            time.sleep(LOG_CHECK_SECONDS)
            trim_log(log_path)

    threading.Thread(target=watch, name=f"sparkstate log trim {log_path.name}", daemon=True).start()


@contextlib.contextmanager
def _redirect_fds(log_path: Path) -> Iterator[None]:
    """Point fds 1 and 2 at ``log_path`` while the JVM starts, so it inherits the file (moved
    aside first when it has grown past :data:`LOG_ROTATE_BYTES`)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    rotate_log(log_path)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (fd, *saved):
            os.close(f)


def get_spark(
    *,
    master: str | None = None,
    parallelism: int | None = None,
    driver_memory: str = "4g",
    log_file: str | Path | None = None,
    extra_conf: dict[str, str] | None = None,
    ui: bool = False,
):
    """Return the active SparkSession, or create a local one tuned for sparkstate.

    ``parallelism`` sets both the local cores and the default shuffle partitions; ``ui`` starts
    the Spark UI (on port 4040, or the next free one; ``Job.run`` and the CLI ask for it). Under
    ``spark-submit`` (:func:`submitted`) the session takes the submit's master and settings,
    and sparkstate's own only where the submit sets none.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    active = active_session()
    if active is not None:
        return active
    if submitted():
        return _submitted_session(log_file, extra_conf)
    cores = local_cores(parallelism)
    conf = {
        "spark.master": master or f"local[{cores}]",
        "spark.app.name": "sparkstate",
        "spark.driver.memory": driver_memory,
        "spark.sql.shuffle.partitions": str(cores),
        "spark.ui.enabled": "true" if ui else "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.streaming.stateStore.providerClass": _ROCKSDB_CLASS,
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        # sparkstate packs events into a few large Arrow batches per key group
        "spark.sql.execution.arrow.maxRecordsPerBatch": "100000",
        "spark.sql.streaming.metricsEnabled": "false",
        "spark.python.worker.reuse": "true",
        **_PYTHON_SOCKETS,
        # Spark's Python processes import pyspark from the installed package, not from Spark's
        # zip (see worker_path/sitecustomize.py)
        "spark.executorEnv.PYTHONPATH": _worker_path(),
    }
    if not conf["spark.master"].startswith("local"):
        # a cluster: each executor gets one core and room for a micro-batch's Arrow batches
        # (Spark's default of 1g is tight for a million-event batch); extra_conf sets others
        conf.update({"spark.executor.memory": "2g", "spark.executor.cores": "1"})
    conf.update(extra_conf or {})
    cache = class_cache.plan(conf)
    try:
        spark = _start(class_cache.with_java_options(conf, cache), log_file)
    except Exception:
        if not cache.uses_archive:
            raise
        # a damaged archive stops the JVM before it reports its port: start without it
        class_cache.discard(cache)
        cache = class_cache.Plan()
        spark = _start(conf, log_file)
    class_cache.finish_at_exit(cache)
    quiet_loggers(spark)
    return spark


def submitted() -> bool:
    """Whether this process is a driver ``spark-submit`` started: its JVM runs already, with the
    submit's master and settings (PySpark connects to it through ``PYSPARK_GATEWAY_PORT``)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def _submitted_session(log_file: str | Path | None, extra_conf: dict[str, str] | None):
    """The session of a ``spark-submit`` run: sparkstate's settings where the submit gave none
    (never the master, the driver's memory or the JVM's options: the submit fixed them)."""
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # connect to the submit's JVM: SparkConf() reads it, else nothing
    given = SparkConf()  # the submit's spark.* settings
    ours = {
        "spark.app.name": "sparkstate",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.streaming.stateStore.providerClass": _ROCKSDB_CLASS,
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        "spark.sql.execution.arrow.maxRecordsPerBatch": "100000",
        "spark.python.worker.reuse": "true",
        **_PYTHON_SOCKETS,
        "spark.executorEnv.PYTHONPATH": _worker_path(),
        **(extra_conf or {}),
    }
    spark = _start({k: v for k, v in ours.items() if not given.contains(k)}, log_file)
    if not given.contains("spark.sql.shuffle.partitions"):  # Spark's default, 200, is far too many here
        spark.conf.set("spark.sql.shuffle.partitions", str(ClassicDriver(spark).default_parallelism()))
    quiet_loggers(spark)
    return spark


def _worker_path() -> str:
    folder = str(Path(__file__).with_name("worker_path"))
    inherited = os.environ.get("PYTHONPATH")
    return os.pathsep.join([folder, inherited]) if inherited else folder


def spark_ui_url() -> str | None:
    """The Spark UI's address of this process's SparkContext (from any thread), or None."""
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    return sc.uiWebUrl if sc is not None else None


def active_session():
    """This process's running SparkSession, or None."""
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession()


def local_cores(parallelism: int | None) -> int:
    """The cores (and default shuffle partitions) of a local session ``get_spark`` starts."""
    return parallelism or os.cpu_count() or 2


def _start(conf: dict[str, str], log_file: str | Path | None):
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    for k, v in conf.items():
        builder = builder.config(k, v)
    if log_file is None:
        return builder.getOrCreate()
    with _redirect_fds(Path(log_file)):
        spark = builder.getOrCreate()
    _watch_log(Path(log_file))
    return spark


def quiet_loggers(spark) -> None:
    """Lower the log level of loggers that are noisy for sparkstate's normal operation."""
    ClassicDriver(spark).quiet_loggers(_QUIET_LOGGERS)
