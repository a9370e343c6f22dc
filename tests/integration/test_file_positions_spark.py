"""A FileSource's files across micro-batches, restarts and restores: every file is read once,
in the order (modification time, path), whatever batch a savepoint is taken at (Spark's
file source log is compacted every tenth batch) and however the directory lists files whose
modification times are equal."""

from __future__ import annotations

import os
import random

import pytest
from spark_helpers import FAST

from sparkstate import FileSource, MemorySink
from sparkstate.jobs import get_job
from sparkstate.runtime.savepoints.take import take_savepoint

pytestmark = pytest.mark.spark

SCHEMA = "merchant_id string, amount double"


def running_sum(folder):
    sink = MemorySink()
    source = FileSource(str(folder), SCHEMA, format="csv", max_files_per_trigger=1)
    return get_job("running-sum").on_source(source).sink(sink).with_settings(**FAST), sink


def write_files(folder, names: list[str], mtime_ns) -> dict[str, list[tuple[str, float]]]:
    """One CSV file per name (in that order of creation), two merchants' payments each, every
    amount distinct so that a running total shows the order the files were read in."""
    folder.mkdir()
    events = {}
    for i, name in enumerate(names):
        rows = [("m1", float(100 * i + 1)), ("m2", float(100 * i + 2)), ("m1", float(100 * i + 3))]
        path = folder / name
        path.write_text("".join(f"{m},{a}\n" for m, a in rows))
        t = mtime_ns(i)
        os.utime(path, ns=(t, t))
        events[name] = rows
    return events


def expected(events: dict[str, list[tuple[str, float]]], order: list[str], skip: int = 0) -> dict[str, list[tuple]]:
    """Each merchant's running (count, total) rows for the files read in ``order``, leaving out
    the rows of the first ``skip`` files (a run restored after them emits the rest)."""
    count: dict[str, int] = {}
    total: dict[str, float] = {}
    out: dict[str, list[tuple]] = {}
    for i, name in enumerate(order):
        for m, a in events[name]:
            count[m] = count.get(m, 0) + 1
            total[m] = total.get(m, 0.0) + a
            if i >= skip:
                out.setdefault(m, []).append((count[m], total[m]))
    return out


def per_key(*sinks) -> dict[str, list[tuple]]:
    out: dict[str, list[tuple]] = {}
    for sink in sinks:
        for r in sink.rows():
            out.setdefault(r["merchant_id"], []).append((r["count"], r["total"]))
    return {k: sorted(v) for k, v in sorted(out.items())}


def events_of(events, order, first, last=None) -> int:
    return sum(len(events[n]) for n in order[first:last])


def test_a_savepoint_at_any_batch_restores_every_row_once(spark, tmp_path):
    names = [f"part-{i:02d}.csv" for i in range(22)]
    events = write_files(tmp_path / "in", names, lambda i: (1_700_000_000 + i) * 10**9)
    job, sink = running_sum(tmp_path / "in")
    total = events_of(events, names, 0)
    assert job.run(checkpoint_dir=tmp_path / "a", spark=spark, timeout=300, until=lambda r: r.events >= total).completed
    assert per_key(sink) == expected(events, names)

    # batch 19 is one Spark's file source log compacts (19.compact): the savepoint must still
    # count its file as read; batch 9 likewise
    for batch in (19, 9):
        target = tmp_path / f"sp-{batch}"
        take_savepoint(str(tmp_path / "a"), target=str(target), batch=batch, spark=spark)
        job, restored = running_sum(tmp_path / "in")
        rest = events_of(events, names, batch + 1)
        result = job.run(checkpoint_dir=tmp_path / f"r-{batch}", spark=spark, timeout=300, from_savepoint=str(target),
                         until=lambda r, rest=rest: r.events >= rest)
        assert result.completed
        assert per_key(restored) == expected(events, names, skip=batch + 1), f"restored from batch {batch}"


def test_files_of_equal_modification_times_are_read_by_path_across_batches_restarts_and_restores(spark, tmp_path):
    names = [f"part-{i:02d}.csv" for i in range(12)]
    created = names[:]
    random.Random(7).shuffle(created)
    # every file the same modification time, to the nanosecond (as `split` writes them), created
    # in an order a directory lists them in (ext4 and tmpfs list a small directory by creation)
    events = write_files(tmp_path / "in", created, lambda i: 1_700_000_000 * 10**9)
    order = sorted(names)  # (modification time, path): by path
    assert os.listdir(tmp_path / "in") != order, "the directory should list the files out of path order"

    # a run that stops after five files (one per batch), and one that resumes its checkpoint
    first_files = events_of(events, order, 0, 5)
    job, first = running_sum(tmp_path / "in")
    assert job.run(checkpoint_dir=tmp_path / "a", spark=spark, timeout=300,
                   until=lambda r: r.events >= first_files).completed
    job, second = running_sum(tmp_path / "in")
    total = events_of(events, order, 0)
    assert job.run(checkpoint_dir=tmp_path / "a", spark=spark, timeout=300,
                   until=lambda r: r.events >= total - len(first.rows())).completed
    assert per_key(first, second) == expected(events, order)

    # a savepoint at batch 4 (five files read) restored into a new checkpoint reads the rest in order
    take_savepoint(str(tmp_path / "a"), target=str(tmp_path / "sp"), batch=4, spark=spark)
    job, restored = running_sum(tmp_path / "in")
    rest = events_of(events, order, 5)
    assert job.run(checkpoint_dir=tmp_path / "b", spark=spark, timeout=300, from_savepoint=str(tmp_path / "sp"),
                   until=lambda r: r.events >= rest).completed
    assert per_key(restored) == expected(events, order, skip=5)
