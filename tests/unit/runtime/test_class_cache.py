"""The driver JVM's class-data-sharing archive: when it is used, recorded, or left alone."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from sparkstate.runtime.session import class_cache


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKSTATE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("SPARKSTATE_CLASS_CACHE", raising=False)
    if class_cache.archive_key({}) is None:
        pytest.skip("no java on this machine")
    return tmp_path


def test_the_first_start_records_an_archive_and_a_second_process_waits_its_turn(cache):
    first = class_cache.plan({})
    assert first.recording is not None and f"-XX:ArchiveClassesAtExit={first.recording}" in first.java_options
    assert first.lock is not None and first.lock.read_text() == str(os.getpid())
    # the lock's holder is alive (this process), so another start records nothing
    assert class_cache.plan({}).java_options == ""


def test_a_lock_left_by_a_killed_process_is_taken_over(cache):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    key = class_cache.archive_key({})
    (cache / f"jvm-classes-{key}.lock").write_text(str(dead.pid))
    assert class_cache.plan({}).recording is not None


def test_an_existing_archive_is_used_and_checked(cache):
    key = class_cache.archive_key({})
    (cache / f"jvm-classes-{key}.jsa").write_bytes(b"archive")
    p = class_cache.plan({})
    assert p.uses_archive and "-XX:SharedArchiveFile=" in p.java_options and "-XX:+VerifySharedSpaces" in p.java_options
    merged = class_cache.with_java_options({"spark.driver.extraJavaOptions": "-Dx=1"}, p)
    assert merged["spark.driver.extraJavaOptions"].startswith("-Dx=1 -XX:SharedArchiveFile=")


def test_another_jar_set_gets_another_archive(cache):
    assert class_cache.archive_key({}) != class_cache.archive_key({"spark.jars": "/opt/extra.jar"})


def test_another_installation_of_pyspark_gets_another_archive(cache, monkeypatch, tmp_path):
    import pyspark

    here = class_cache.archive_key({})
    (tmp_path / "other-venv" / "pyspark" / "jars").mkdir(parents=True)
    monkeypatch.setattr(pyspark, "__file__", str(tmp_path / "other-venv" / "pyspark" / "__init__.py"))
    assert class_cache.archive_key({}) != here


def test_off_turns_it_off(cache, monkeypatch):
    monkeypatch.setenv("SPARKSTATE_CLASS_CACHE", "off")
    assert class_cache.plan({}) == class_cache.Plan()


class _Jvm:
    """What ``finish`` needs of the JVM's process: a pipe to close and an exit to wait for."""

    def __init__(self, writes: bytes | None, code: int, at) -> None:
        self.writes, self.code, self.at = writes, code, at
        self.stdin = open(os.devnull, "w")

    def wait(self, timeout=None) -> int:
        if self.writes is not None:
            self.at.write_bytes(self.writes)
        return self.code


def test_the_archive_is_moved_into_place_only_when_the_jvm_wrote_it_and_exited_cleanly(cache):
    p = class_cache.plan({})
    stopped = []
    assert class_cache.finish(p, lambda: stopped.append(1), _Jvm(b"classes", 0, p.recording))
    assert stopped and p.archive.read_bytes() == b"classes" and not p.recording.exists()
    p.archive.unlink()
    assert class_cache.plan({}).recording is not None  # the lock was released


@pytest.mark.parametrize("writes, code", [(None, 0), (b"", 0), (b"half", 1)])
def test_no_archive_from_a_jvm_that_wrote_none_or_failed(cache, writes, code):
    p = class_cache.plan({})
    assert not class_cache.finish(p, lambda: None, _Jvm(writes, code, p.recording))
    assert not p.archive.exists() and not p.recording.exists()
    assert class_cache.plan({}).recording is not None  # the next start records again


def test_a_jvm_that_cannot_start_with_the_archive_starts_without_it(cache, monkeypatch):
    # a damaged archive (e.g. cut short) makes the JVM exit before it reports its port
    from sparkstate.runtime.session import classic as spark_session

    key = class_cache.archive_key({})
    archive = cache / f"jvm-classes-{key}.jsa"
    archive.write_bytes(b"cut short")
    starts = []

    def start(conf, log_file):
        starts.append(conf.get("spark.driver.extraJavaOptions", ""))
        if "SharedArchiveFile" in starts[-1]:
            raise RuntimeError("[JAVA_GATEWAY_EXITED] Java gateway process exited before sending its port number.")
        return "session"

    monkeypatch.setattr(spark_session, "_start", start)
    monkeypatch.setattr(spark_session, "active_session", lambda: None)  # the suite's own Spark may run
    monkeypatch.setattr(spark_session, "quiet_loggers", lambda spark: None)
    assert spark_session.get_spark(parallelism=1) == "session"
    assert len(starts) == 2 and starts[1] == "" and not archive.exists()


def _archives(cache, ages_in_days: dict[str, float]) -> None:
    now = time.time()
    for name, days in ages_in_days.items():
        archive = cache / f"jvm-classes-{name}.jsa"
        archive.write_bytes(b"x")
        os.utime(archive, (now - days * 86400, now - days * 86400))


def test_archives_idle_for_a_month_make_room_and_those_in_use_stay(cache):
    _archives(cache, {"a": 0, "b": 1, "c": 2, "d": 3, "old": 40})
    assert class_cache.plan({}).recording is not None
    assert sorted(p.name for p in cache.glob("*.jsa")) == [f"jvm-classes-{n}.jsa" for n in "abcd"]


def test_more_installations_than_room_do_not_evict_each_other(cache):
    """Seven virtualenvs used in turn: before, each start without an archive evicted the least
    recently used one (180 MB recorded again at its next start, evicting another, and so on)."""
    _archives(cache, {n: i * 0.1 for i, n in enumerate("abcdef")})
    p = class_cache.plan({})
    assert p == class_cache.Plan()  # no room: this one runs without an archive and records none
    assert len(list(cache.glob("*.jsa"))) == class_cache.MAX_ARCHIVES


def test_recordings_of_killed_processes_are_deleted(cache):
    key = class_cache.archive_key({})
    left = [cache / f"jvm-classes-{key}.4242.recording", cache / "jvm-classes-other.4343.recording"]
    for f in left:
        f.write_bytes(bytes(1000))
    assert class_cache.plan({}).recording is not None
    assert not any(f.exists() for f in left)


def test_a_recording_in_progress_is_kept(cache):
    other = cache / "jvm-classes-other.lock"
    held = class_cache._take_lock(other)
    recording = cache / "jvm-classes-other.4343.recording"
    recording.write_bytes(b"being written")
    class_cache.sweep_recordings(cache)
    assert recording.exists()
    class_cache._release(held)


_RACER = """
import sys, time
from sparkstate.runtime.session import class_cache
def slow_check(pid):  # widens the window between reading a stale lock and taking it over
    time.sleep(0.3)
    return False
class_cache._alive = slow_check
p = class_cache.plan({})
print("recording" if p.recording is not None else "not", flush=True)
sys.stdin.read()  # hold on to whatever was taken until every racer has answered
"""


def test_only_one_of_many_processes_racing_for_a_stale_lock_records(cache):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    key = class_cache.archive_key({})
    (cache / f"jvm-classes-{key}.lock").write_text(str(dead.pid))  # left by a killed recorder
    racers = [subprocess.Popen([sys.executable, "-c", _RACER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "SPARKSTATE_CACHE_DIR": str(cache)}) for _ in range(6)]
    try:
        answers = [r.stdout.readline().strip() for r in racers]
    finally:
        for r in racers:
            r.communicate("")
    assert sorted(answers) == ["not"] * 5 + ["recording"]
