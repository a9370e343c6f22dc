"""What sparkstate's driver code needs of a Spark session beyond the DataFrame API, in one
interface with two implementations.

:class:`ClassicDriver` is a session whose JVM runs in this process's gateway (local mode, a
cluster's driver, ``spark-submit``): it answers through py4j. :class:`ConnectDriver` is a Spark
Connect client: the JVM is the server's, out of reach, so each answer comes from the session's
SQL settings, and what needs the JVM itself (Hadoop file systems, log4j) is refused or left to
the server. Nothing else in sparkstate touches ``sparkContext``, ``_jvm`` or ``_jsc``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sparkstate.errors import JobDefinitionError


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect client session (``pyspark.sql.connect``)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


@dataclass(frozen=True)
class ClassicDriver:
    """A session with its JVM in this process (reached through py4j)."""

    spark: Any
    connect = False

    def default_parallelism(self) -> int:
        """The cores Spark gives a job by default: the number of partitions of a run."""
        return int(self.spark.sparkContext.defaultParallelism)

    def ui_url(self) -> str | None:
        """The Spark UI's address, or None when it is off."""
        return self.spark.sparkContext.uiWebUrl

    def quiet_loggers(self, levels: dict[str, str]) -> None:
        """Set log4j levels of the JVM's loggers (a cluster with another logging backend keeps its own)."""
        jvm = self.spark.sparkContext._jvm
        try:
            configurator = jvm.org.apache.logging.log4j.core.config.Configurator
            level = jvm.org.apache.logging.log4j.Level
            for name, lvl in levels.items():
                configurator.setLevel(name, level.toLevel(lvl))
        except Exception:
            pass

    def hadoop_file_system(self, uri: str) -> tuple[Any, Any]:
        """The JVM and the Hadoop ``FileSystem`` of ``uri`` (``hdfs://``, ``s3a://``...)."""
        jvm = self.spark._jvm
        fs = jvm.org.apache.hadoop.fs.Path(uri).getFileSystem(self.spark._jsc.hadoopConfiguration())
        return jvm, fs


@dataclass(frozen=True)
class ConnectDriver:
    """A Spark Connect client session: the server runs the JVM, the query and the Python
    functions of the batches (``foreachBatch``), and reads and writes the checkpoint."""

    spark: Any
    connect = True

    def default_parallelism(self) -> int:
        """The server's ``spark.default.parallelism``, else the cores of its ``local[N]``
        master, else its shuffle partitions."""
        conf = self.spark.conf
        given = conf.get("spark.default.parallelism", None)
        if given:
            return int(given)
        master = conf.get("spark.master", None) or ""
        cores = re.fullmatch(r"local\[(\d+)(?:,\d+)?\]", master)
        if cores:
            return int(cores.group(1))
        return int(conf.get("spark.sql.shuffle.partitions", "2"))

    def ui_url(self) -> str | None:
        return None  # the server's UI, if any, is the server's to show

    def quiet_loggers(self, levels: dict[str, str]) -> None:
        pass  # the server's logging is configured where it runs

    def hadoop_file_system(self, uri: str) -> tuple[Any, Any]:
        raise JobDefinitionError(
            f"{uri}: over Spark Connect, sparkstate reads and writes its own files of a checkpoint (metadata, lock, "
            "savepoints) from the client, which has no Hadoop file system; only the server does. Give a path the "
            "client and the server both see (the same machine, or a shared file system mounted at the same path), "
            "or run in Classic mode (--master) for an hdfs:// or s3a:// checkpoint"
        )


Driver = ClassicDriver | ConnectDriver


def driver(spark: Any) -> Driver:
    """The driver interface of ``spark``, a Classic or a Connect session."""
    return ConnectDriver(spark) if is_connect(spark) else ClassicDriver(spark)
