"""Reading and writing files in a checkpoint directory, wherever it lives.

Spark takes any Hadoop-compatible URI as a checkpoint location: a local path, ``file://``,
``hdfs://``, ``s3a://``... A local directory is read and written with Python's own file
functions, so the command line can inspect a checkpoint without starting Spark; any other URI
goes through Hadoop's ``FileSystem`` in the JVM of a Spark session, as Spark itself does.
This is the file-access layer only: what lies where in a checkpoint directory is
:class:`~sparkstate.runtime.checkpoint.directory.CheckpointDir`'s to know.

Paths are given relative to the checkpoint directory as parts: ``storage.read_text("offsets", "3")``.
Failures are ``OSError`` with the errno of the cause (for Hadoop file systems: inferred from
the Java exception), so callers handle both kinds alike.
"""

from __future__ import annotations

import errno
import os
import shutil
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from sparkstate.api.checkpointing import is_uri


@dataclass(frozen=True)
class Entry:
    """One item of a directory listing."""

    name: str
    size: int
    is_dir: bool
    #: modification time, epoch milliseconds
    mtime_ms: int


def is_local(directory: str | os.PathLike) -> bool:
    """A plain path or a ``file:`` URI (Python's own file functions can read it)."""
    text = os.fspath(directory)
    return not is_uri(text) or urlparse(text).scheme == "file"


def normalize(directory: str | os.PathLike) -> str:
    """The checkpoint directory as it is recorded and shown: an absolute local path, or the URI."""
    text = os.fspath(directory).strip()
    if not is_uri(text):
        return str(Path(text).expanduser().absolute())
    if urlparse(text).scheme == "file":
        return str(Path(urlparse(text).path).absolute())
    return text.rstrip("/")


def join(directory: str, *parts: str) -> str:
    """``directory/part/...`` for a local path or a URI (``pathlib`` would fold ``hdfs://`` to ``hdfs:/``)."""
    return "/".join([directory.rstrip("/"), *parts]) if parts else directory


class Storage(ABC):
    """The files of one checkpoint directory."""

    def __init__(self, root: str) -> None:
        self.root = root

    def path(self, *parts: str) -> str:
        return join(self.root, *parts)

    @abstractmethod
    def list(self, *parts: str) -> list[Entry]:
        """The entries of a directory; empty when it does not exist."""

    @abstractmethod
    def read_bytes(self, *parts: str) -> bytes:
        """A file's bytes (``FileNotFoundError`` when it does not exist)."""

    @abstractmethod
    def write_atomic(self, data: bytes, *parts: str) -> None:
        """Write a file whole: readers see the old content or the new one, never a part, also
        after a crash of the machine (a local file is synced to disk before it replaces the old
        one, and its directory after)."""

    @abstractmethod
    def create_new(self, data: bytes, *parts: str) -> bool:
        """Create a file holding ``data`` unless it exists: whether this call created it."""

    @abstractmethod
    def exists(self, *parts: str) -> bool: ...

    @abstractmethod
    def delete(self, *parts: str) -> None:
        """Delete a file or a directory tree; nothing happens when it does not exist."""

    def read_text(self, *parts: str) -> str:
        return self.read_bytes(*parts).decode("utf-8")

    def is_dir(self, *parts: str) -> bool:
        *parent, name = parts
        return any(e.name == name and e.is_dir for e in self.list(*parent))


def _sync_dir(folder: Path) -> None:
    """Sync a directory's entries to disk (where the file system allows opening a directory)."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot sync a directory; the rename is still atomic
    finally:
        os.close(fd)


class LocalStorage(Storage):
    """A checkpoint directory on a local (or locally mounted) file system."""

    def _p(self, *parts: str) -> Path:
        return Path(self.root, *parts)

    def list(self, *parts: str) -> list[Entry]:
        out = []
        try:
            with os.scandir(self._p(*parts)) as it:
                for e in it:
                    try:
                        st = e.stat()
                    except FileNotFoundError:  # deleted while listing (Spark's cleanup)
                        continue
                    out.append(Entry(e.name, st.st_size, e.is_dir(), int(st.st_mtime * 1000)))
        except (FileNotFoundError, NotADirectoryError):
            return []
        return out

    def read_bytes(self, *parts: str) -> bytes:
        return self._p(*parts).read_bytes()

    def write_atomic(self, data: bytes, *parts: str) -> None:
        path = self._p(*parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())  # the content is on disk before the name points at it
            os.replace(tmp, path)
        except OSError:
            tmp.unlink(missing_ok=True)
            raise
        _sync_dir(path.parent)  # and the rename itself survives a power cut

    def create_new(self, data: bytes, *parts: str) -> bool:
        path = self._p(*parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        _sync_dir(path.parent)
        return True

    def exists(self, *parts: str) -> bool:
        return self._p(*parts).exists()

    def delete(self, *parts: str) -> None:
        path = self._p(*parts)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


#: Java exception names and message parts, and the errno they mean
_JAVA_ERRNO = (
    ("FileNotFoundException", errno.ENOENT),
    ("No space left on device", errno.ENOSPC),
    ("DiskQuotaExceeded", errno.EDQUOT),
    ("QuotaExceeded", errno.EDQUOT),
    ("Read-only file system", errno.EROFS),
    ("AccessControlException", errno.EACCES),
    ("AccessDenied", errno.EACCES),
    ("Permission denied", errno.EACCES),
    ("Operation not permitted", errno.EPERM),
)


def _os_error(exc: Exception, path: str) -> OSError:
    """The ``OSError`` (its errno subclass: ``FileNotFoundError``, ``PermissionError``...) a
    Java I/O exception stands for."""
    text = str(exc)
    code = next((e for marker, e in _JAVA_ERRNO if marker in text), errno.EIO)
    first = next((ln.strip() for ln in text.splitlines() if "Exception" in ln or "Error" in ln), text[:200])
    return OSError(code, first, path)


def _tmp_of(parts: tuple[str, ...]) -> tuple[str, ...]:
    """Where ``write_atomic`` writes a file's new content before it takes the file's name."""
    *parent, name = parts
    return (*parent, f".{name}.tmp")


class HadoopStorage(Storage):
    """A checkpoint directory on any file system Hadoop reaches (HDFS, S3, GCS, ADLS...),
    through the JVM of a Spark session."""

    def __init__(self, root: str, spark: Any) -> None:
        from sparkstate.runtime.session.driver import driver

        super().__init__(root)
        self._jvm, self._fs = driver(spark).hadoop_file_system(self.path())

    def _jpath(self, *parts: str) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(self.path(*parts))

    def _call(self, parts: tuple[str, ...], fn: Any) -> Any:
        from py4j.protocol import Py4JJavaError

        try:
            return fn(self._jpath(*parts))
        except Py4JJavaError as exc:
            raise _os_error(exc, self.path(*parts)) from None

    def list(self, *parts: str) -> list[Entry]:
        try:
            statuses = self._call(parts, self._fs.listStatus)
        except FileNotFoundError:
            return []
        return [
            Entry(s.getPath().getName(), int(s.getLen()), bool(s.isDirectory()), int(s.getModificationTime()))
            for s in statuses
        ]

    def read_bytes(self, *parts: str) -> bytes:
        def read(p: Any) -> bytes:
            stream = self._fs.open(p)
            try:
                return bytes(self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
            finally:
                stream.close()

        try:
            return self._call(parts, read)  # OSError(ENOENT, ...) is a FileNotFoundError
        except FileNotFoundError:
            # a write_atomic cut short between its delete and its rename: the whole new content
            # is in the temporary file (written and closed before the old file was deleted)
            if not parts or not self._call(_tmp_of(parts), self._fs.exists):
                raise
            return self._call(_tmp_of(parts), read)

    def write_atomic(self, data: bytes, *parts: str) -> None:
        tmp = _tmp_of(parts)

        def write(p: Any) -> None:
            out = self._fs.create(p, True)
            try:
                out.write(bytearray(data))
            finally:
                out.close()

        self._call(tmp, write)
        # an object store's rename is a copy; a reader may still see the file missing briefly
        self._call(parts, lambda p: self._fs.delete(p, False))
        self._call(parts, lambda p: self._fs.rename(self._jpath(*tmp), p))

    def create_new(self, data: bytes, *parts: str) -> bool:
        if self.exists(*parts):
            return False

        def create(p: Any) -> None:
            out = self._fs.create(p, False)  # HDFS refuses an existing file atomically
            try:
                out.write(bytearray(data))
            finally:
                out.close()

        try:
            self._call(parts, create)
        except OSError as exc:
            if "FileAlreadyExists" in str(exc) or self.exists(*parts):
                return False
            raise
        return True

    def exists(self, *parts: str) -> bool:
        if self._call(parts, self._fs.exists):
            return True
        return bool(parts) and bool(self._call(_tmp_of(parts), self._fs.isFile))  # see read_bytes

    def delete(self, *parts: str) -> None:
        self._call(parts, lambda p: self._fs.delete(p, True))
        if parts:
            self._call(_tmp_of(parts), lambda p: self._fs.delete(p, False))  # see read_bytes


def open_storage(directory: str | os.PathLike, spark: Any = None) -> Storage:
    """The storage of a checkpoint directory. A non-local URI needs a Spark session's JVM:
    ``spark``, else the active one, else a new local one."""
    root = normalize(directory)
    if is_local(root):
        return LocalStorage(root)
    if spark is None:
        from sparkstate.runtime.session import get_spark

        spark = get_spark()
    return HadoopStorage(root, spark)
