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
it). One process records an archive at a time: it holds an ``flock`` on the archive's lock
file, which the kernel releases however the process ends, so a killed recorder leaves no
lock behind, and its half-written ``.recording`` file is deleted by the next process that
takes the lock. The archive is kept per Java, pyspark version and jar set (so per
virtualenv) under ``$SPARKSTATE_CACHE_DIR`` (default ``~/.cache/sparkstate``): up to
:data:`MAX_ARCHIVES` of about 180 MB each; an archive unused for :data:`IDLE_DAYS` days is
deleted, and when that many are all in use a new installation runs without one rather
than evicting another's (which would then record again at its next start, and so on in
turn); ``SPARKSTATE_CLASS_CACHE=off`` turns it off. A JVM that finds an
archive it cannot use (another Java, other jars) ignores it and starts as usual.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: archives kept in the cache directory at most (about 180 MB each)
MAX_ARCHIVES = 6
#: an archive not used for this many days is deleted to make room
IDLE_DAYS = 30

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


def _take_lock(lock: Path) -> int | None:
    """An ``flock`` on ``lock`` (its file descriptor), or None when another process holds it
    or the cache directory cannot be written (no archive, no harm)."""
    from sparkstate.runtime.checkpoint.file_lock import try_flock

    try:
        return try_flock(lock, str(os.getpid()).encode())
    except OSError:
        return None


def _release(fd: int | None) -> None:
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)  # the file stays: deleting a lock file lets a third process lock a new one


def sweep_recordings(folder: Path) -> None:
    """Delete the ``.recording`` files that no process is writing: those of a key whose lock
    nobody holds (a recorder killed before it finished)."""
    keys = {p.name.split(".")[0].removeprefix("jvm-classes-") for p in folder.glob("jvm-classes-*.recording")}
    for key in keys:
        fd = _take_lock(folder / f"jvm-classes-{key}.lock")
        if fd is None:
            continue  # being recorded now
        try:
            for stale in folder.glob(f"jvm-classes-{key}.*.recording"):
                with contextlib.suppress(OSError):
                    stale.unlink()
        finally:
            _release(fd)


@dataclass
class Plan:
    """The driver JVM's options for the archive, and what to do when the process exits."""

    java_options: str = ""
    #: the archive being recorded (moved to ``archive`` once the JVM has written it)
    recording: Path | None = None
    archive: Path | None = None
    lock: Path | None = None
    #: the held ``flock`` on ``lock`` while recording
    lock_fd: int | None = None

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
    sweep_recordings(folder)
    if not prune(folder):
        return Plan()  # every slot holds an archive in use: no room without evicting one
    lock = folder / f"jvm-classes-{key}.lock"
    fd = _take_lock(lock)
    if fd is None:
        return Plan()
    recording = folder / f"jvm-classes-{key}.{os.getpid()}.recording"
    return Plan(f"-XX:ArchiveClassesAtExit={recording} {_QUIET}", recording=recording, archive=archive, lock=lock,
                lock_fd=fd)


def prune(folder: Path, now: float | None = None) -> bool:
    """Delete the archives not used for :data:`IDLE_DAYS` days; whether there is room for
    another (fewer than :data:`MAX_ARCHIVES` remain). Archives in use are never evicted:
    each installation of pyspark (each virtualenv) has its own of about 180 MB, and evicting
    one used lately would have it recorded again at its next start, evicting another."""
    now = time.time() if now is None else now
    kept = 0
    for archive in folder.glob("jvm-classes-*.jsa"):
        try:
            idle = now - archive.stat().st_mtime > IDLE_DAYS * 86400
            if idle:
                archive.unlink()
            else:
                kept += 1
        except OSError:
            continue
    return kept < MAX_ARCHIVES


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
        _release(p.lock_fd)


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
    for path in (p.archive, p.recording):
        if path is not None:
            with contextlib.suppress(OSError):
                path.unlink()
    _release(p.lock_fd)
