"""A class-data-sharing archive for the driver JVM, so Spark starts faster.

Starting Spark's JVM loads and verifies some 20,000 classes; on a small machine that is
most of the 10 s a local SparkSession takes to start, and more in the first micro-batch,
which loads the streaming, state-store and Arrow classes. Java 13+ can dump the classes a
JVM loaded into an archive when it exits (``-XX:ArchiveClassesAtExit``) and map that archive
at the next start (``-XX:SharedArchiveFile``). Measured here: a local session starts in 6 s
instead of 11 s, and a small job's first batch is done 8-10 s sooner.

The first JVM sparkstate starts without an archive records one: when its Python process
exits, ``finish`` stops Spark, waits for the JVM to write the archive (about 15 s, once)
and moves it into place, so a half-written archive is never used (the JVM would crash on
it). One process records at a time (a lock file holding its pid); a process killed while
recording leaves a stale lock the next one takes over. The archive is kept per Java,
pyspark version and jar set under ``$SPARKSTATE_CACHE_DIR`` (default
``~/.cache/sparkstate``; the three most recently used are kept);
``SPARKSTATE_CLASS_CACHE=off`` turns it off. A JVM that finds an
archive it cannot use (another Java, other jars) ignores it and starts as usual.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: archives kept in the cache directory, the most recently used
KEEP = 3

#: the JVM reports on the archive in its own log lines; sparkstate's log needs none of them
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def cache_dir() -> Path:
    base = os.environ.get("SPARKSTATE_CACHE_DIR")
    if base:
        return Path(base)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sparkstate"


def enabled() -> bool:
    return os.environ.get("SPARKSTATE_CLASS_CACHE", "on").strip().lower() not in ("0", "off", "false", "no")


def _java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return os.path.realpath(java) if java and os.path.exists(java) else None


def archive_key(conf: dict[str, str]) -> str | None:
    """What the archive depends on: the Java, pyspark's version and the path and names of its
    jars, and extra class paths. None when there is no Java to key it on (Spark would not start either)."""
    java = _java()
    if java is None:
        return None
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    listing = sorted(p.name for p in jars.glob("*.jar")) if jars.is_dir() else []
    st = os.stat(java)
    # the JVM checks the class path the archive was recorded with, paths included: another
    # installation of the same pyspark (another virtualenv) needs an archive of its own
    material = [java, str(st.st_size), str(int(st.st_mtime)), pyspark.__version__, str(jars.resolve()), *listing]
    material += [conf.get(k, "") for k in ("spark.driver.extraClassPath", "spark.jars", "spark.jars.packages")]
    return hashlib.sha256("\0".join(material).encode()).hexdigest()[:16]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _take_lock(lock: Path) -> bool:
    """Create ``lock`` holding this process's pid; a lock whose process is gone is taken over."""
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                holder = int(lock.read_text().strip() or 0)
            except (OSError, ValueError):
                holder = 0
            if holder and _alive(holder):
                return False
            with contextlib.suppress(OSError):
                lock.unlink()
            continue
        except OSError:  # a read-only or missing cache directory: no archive, no harm
            return False
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        return True
    return False


@dataclass
class Plan:
    """The driver JVM's options for the archive, and what to do when the process exits."""

    java_options: str = ""
    #: the archive being recorded (moved to ``archive`` once the JVM has written it)
    recording: Path | None = None
    archive: Path | None = None
    lock: Path | None = None

    @property
    def uses_archive(self) -> bool:
        return bool(self.java_options) and self.recording is None


def plan(conf: dict[str, str]) -> Plan:
    """Use the archive when there is one; otherwise record one, unless another process is."""
    if not enabled():
        return Plan()
    key = archive_key(conf)
    if key is None:
        return Plan()
    folder = cache_dir()
    archive = folder / f"jvm-classes-{key}.jsa"
    if archive.is_file():
        with contextlib.suppress(OSError):
            os.utime(archive)  # last used: pruning keeps the archives in use
        return Plan(f"-XX:SharedArchiveFile={archive} -XX:+VerifySharedSpaces {_QUIET}", archive=archive)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return Plan()
    lock = folder / f"jvm-classes-{key}.lock"
    if not _take_lock(lock):
        return Plan()
    prune(folder, keep=KEEP - 1)  # room for the one about to be recorded
    recording = folder / f"jvm-classes-{key}.{os.getpid()}.recording"
    with contextlib.suppress(OSError):
        recording.unlink()
    return Plan(f"-XX:ArchiveClassesAtExit={recording} {_QUIET}", recording=recording, archive=archive, lock=lock)


def prune(folder: Path, keep: int) -> None:
    """Delete all but the ``keep`` most recently used archives (each installation of pyspark,
    e.g. each virtualenv, has its own, of about 180 MB)."""
    archives = sorted(folder.glob("jvm-classes-*.jsa"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in archives[keep:]:
        with contextlib.suppress(OSError):
            old.unlink()


def with_java_options(conf: dict[str, str], p: Plan) -> dict[str, str]:
    """``conf`` with the plan's options added to the driver's own Java options."""
    if not p.java_options:
        return conf
    key = "spark.driver.extraJavaOptions"
    return {**conf, key: f"{conf[key]} {p.java_options}" if conf.get(key) else p.java_options}


def finish(p: Plan, stop_spark: Callable[[], Any], gateway_proc: Any, timeout: float = 180.0) -> bool:
    """After the last use of Spark: stop it, let the JVM exit and write the archive, and move
    the archive into place. Returns whether an archive was saved."""
    if p.recording is None or p.archive is None:
        return False
    try:
        print("sparkstate: saving the JVM's class cache, once, so that Spark starts faster next time...",
              file=sys.stderr, flush=True)
        with contextlib.suppress(Exception):
            stop_spark()
        if gateway_proc is None:
            return False
        with contextlib.suppress(Exception):
            gateway_proc.stdin.close()  # the JVM exits when its Python driver's pipe closes
        try:
            code = gateway_proc.wait(timeout=timeout)
        except Exception:
            return False
        if code == 0 and p.recording.is_file() and p.recording.stat().st_size > 0:
            os.replace(p.recording, p.archive)  # atomic: a reader sees no archive or a whole one
            return True
        return False
    finally:
        with contextlib.suppress(OSError):
            p.recording.unlink()
        if p.lock is not None:
            with contextlib.suppress(OSError):
                p.lock.unlink()


def finish_at_exit(p: Plan) -> None:
    """Register ``finish`` for this process's exit, for the session started with ``p``."""
    if p.recording is None:
        return

    def _finish() -> None:
        from pyspark import SparkContext
        from pyspark.sql import SparkSession

        def stop() -> None:
            active = SparkSession.getActiveSession()
            if active is not None:
                active.stop()

        finish(p, stop, getattr(SparkContext._gateway, "proc", None))

    atexit.register(_finish)


def discard(p: Plan) -> None:
    """Give up an archive the JVM could not start with (it is damaged): the next start records
    a new one."""
    for path in (p.archive, p.recording, p.lock):
        if path is not None:
            with contextlib.suppress(OSError):
                path.unlink()
