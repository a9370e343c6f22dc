"""Test fault points: named moments of a micro-batch where the crash tests stop a run to kill it.

Off unless the environment variable ``SPARKSTATE_TEST_FAULT_DIR`` names a directory when
sparkstate is imported (only ``tests/e2e/crash.py`` sets it). Off, :func:`fault_point` returns
at once and does nothing else. On, a test *arms* a point by creating the file
``<dir>/<point>.armed``; the first process that reaches an armed point renames the file to
``<point>.hit`` (a rename: exactly one process takes it) and holds there, so that the test
that waits for the ``.hit`` file kills the run at exactly that moment, or removes the file to
let the run go on. A point nobody arms costs a failed rename. A hold that nobody ends goes
on after ``HOLD_SECONDS``.

The points below come in the order a micro-batch reaches them: Spark writes the batch's
offsets, then runs it (the stateful operator, whose state store commits when its task
ends) into the sink, and writes the batch's commit after the sink returns.
"""

from __future__ import annotations

import os
import time

ENV = "SPARKSTATE_TEST_FAULT_DIR"
HOLD_SECONDS = 120.0

#: Spark has written the batch's offsets; nothing of the batch has run, nothing is committed
OFFSETS_WRITTEN = "spark.offsets-written"
#: a key group's state changes are in its task's state store, which has not committed them
#: (the store writes its files for the batch when the task ends; other tasks' may be written)
STATE_UPDATED = "state.updated"
#: the sink has written the batch's rows but not committed them (a database: the transaction
#: with the rows and the batch's marker is open; Parquet: the batch's files are written)
SINK_ROWS_WRITTEN = "sink.rows-written"
#: the sink has committed the batch; Spark's commit log does not hold it yet
SINK_COMMITTED = "sink.committed"

POINTS = (OFFSETS_WRITTEN, STATE_UPDATED, SINK_ROWS_WRITTEN, SINK_COMMITTED)

_DIR = os.environ.get(ENV) or None


def fault_point(name: str) -> None:
    """Hold here if a crash test armed ``name`` (see the module's docstring); else nothing."""
    if _DIR is None:
        return
    hit = os.path.join(_DIR, f"{name}.hit")
    try:
        os.rename(os.path.join(_DIR, f"{name}.armed"), hit)
    except OSError:  # not armed, or another process took it
        return
    until = time.monotonic() + HOLD_SECONDS
    while os.path.exists(hit) and time.monotonic() < until:
        time.sleep(0.01)
