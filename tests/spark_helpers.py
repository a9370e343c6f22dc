"""Helpers for tests that run jobs on Spark."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

FAST = {"trigger_interval": "100 milliseconds"}

#: the JIT flag of the tests' Spark JVMs: their runs are short, and C2's compiler threads spend
#: more CPU than they save in them. Measured on this machine: a 3-batch `sparkstate run` 23 s
#: of CPU and 14 s of wall time with C2, 14 s and 10 s with C1 only. The session's JVM, and
#: every `sparkstate run` the tests start, get it through SPARK_SUBMIT_OPTS (read by
#: spark-submit, which starts the driver's JVM); the cluster's JVMs through JAVA_TOOL_OPTIONS
#: (tests/e2e/test_cluster.py's cluster). Only the tests: a job runs long, where C2 pays.
TESTS_JIT = "-XX:TieredStopAtLevel=1"


def harness_like_spark(job: Any, max_batch: int) -> list[dict]:
    """A generator job on the harness in the micro-batches Spark reads (``max_batch`` offsets each)."""
    events = job.source_spec.events_as_dicts()
    h = job.harness()
    out: list[dict] = []
    for i in range(0, len(events), max_batch):
        out += h.process_batch(events[i : i + max_batch])
    out += h.finish()
    return out


def write_json_files(folder: Path, files: list[list[dict]]) -> None:
    """One file of JSON lines per list of events, the first the oldest (Spark's file source
    reads the oldest first)."""
    folder.mkdir(exist_ok=True)
    for i, events in enumerate(files):
        path = folder / f"{i}.json"
        path.write_text("\n".join(json.dumps(e) for e in events))
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))


def same_rows(a: list[dict], b: list[dict]) -> None:
    """Row for row in any order; sums of doubles may differ in the last bits (summation order)."""
    def order(row: tuple) -> str:
        return repr([(k, round(v, 6) if isinstance(v, float) else v) for k, v in row])

    ra, rb = (sorted((tuple(sorted(r.items())) for r in rows), key=order) for rows in (a, b))
    assert len(ra) == len(rb)
    for x, y in zip(ra, rb):
        assert len(x) == len(y)
        for (k, u), (k2, v) in zip(x, y):
            assert k == k2 and (u == v or (isinstance(u, float) and math.isclose(u, v, rel_tol=1e-12))), (x, y)


def committed_rows(folder: Path) -> list[dict]:
    """The rows a Parquet sink committed: the files Spark's file sink log lists (a stopped batch
    may leave others), or, where a job's batches are written one folder each (``batch_id=N``,
    replaced whole by a replayed batch: jobs with side outputs), every file of those folders."""
    import pyarrow.parquet as pq

    if (folder / "_spark_metadata").exists():
        paths = {json.loads(line)["path"].removeprefix("file://") for log in (folder / "_spark_metadata").glob("[0-9]*")
                 for line in log.read_text().splitlines()[1:]}
    else:
        paths = {str(f) for f in folder.glob("batch_id=*/*.parquet")}
    return [row for p in sorted(paths) for row in pq.read_table(p).to_pylist()]
