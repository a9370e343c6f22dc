"""A savepoint directory on a Hadoop file system (HDFS, S3, GCS...), through Spark's JVM:
the :class:`~sparkstate.savepoint.files.Directory` operations on
:class:`~sparkstate.runtime.checkpoint.storage.HadoopStorage`."""

from __future__ import annotations

from typing import Any

from sparkstate.runtime.checkpoint.storage import HadoopStorage


class HadoopDirectory:
    def __init__(self, location: str, spark: Any = None) -> None:
        if spark is None:
            from sparkstate.runtime.session import get_spark

            spark = get_spark()
        self._spark = spark
        self.storage = HadoopStorage(location.rstrip("/"), spark)

    @property
    def location(self) -> str:
        return self.storage.root

    def read(self, relative: str) -> bytes:
        return self.storage.read_bytes(*relative.split("/"))

    def write(self, relative: str, data: bytes) -> None:
        self.storage.write_atomic(data, *relative.split("/"))

    def exists(self, relative: str = "") -> bool:
        return self.storage.exists(*relative.split("/")) if relative else self.storage.exists()

    def publish(self, final: Any) -> None:
        # a directory rename (HDFS: atomic; an object store copies, so a reader may see it late).
        # Hadoop moves a directory renamed onto an existing one into it: a writer that lost the
        # race finds its directory inside the other's savepoint, takes it out and is refused
        if final.exists():
            raise FileExistsError(final.location)
        storage = self.storage
        if not storage._call((), lambda p: storage._fs.rename(p, final.storage._jpath())):
            raise OSError(f"cannot rename {self.location} to {final.location}")
        name = self.location.rsplit("/", 1)[-1]
        if final.exists(name):
            HadoopDirectory(f"{final.location}/{name}", self._spark).remove()
            raise FileExistsError(final.location)

    def remove(self) -> None:
        self.storage.delete()

    def sibling(self, name: str) -> HadoopDirectory:
        return HadoopDirectory(f"{self.location.rsplit('/', 1)[0]}/{name}", self._spark)

    def names(self) -> list[str]:
        return sorted(e.name for e in self.storage.list())
