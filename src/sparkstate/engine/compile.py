"""The keyed function a job runs: the user's own, a window operator compiled from the job's
window settings, or the interval join's operator around its ``ProcessJoinFunction``.

This is the one place a window job becomes executable. The harness calls it, and so does the
Spark runtime once the planner has chosen the Python path (the native path runs Spark SQL and
needs no function); the description itself stays free of engine objects.
"""

from __future__ import annotations

from typing import Any

from sparkstate.api.connected import LEFT_LATE_DATA_NAME, RIGHT_LATE_DATA_NAME
from sparkstate.api.functions import LATE_DATA_NAME, KeyedProcessFunction, OutputTag, TimeDomain
from sparkstate.api.job import JobDescription
from sparkstate.api.windows import WindowKind
from sparkstate.engine.joins import IntervalJoinOperator
from sparkstate.engine.windows import WindowOperator
from sparkstate.errors import JobDefinitionError


def keyed_function(job: JobDescription) -> KeyedProcessFunction:
    """The function that runs ``job``'s keyed stream (a new window operator for a window job)."""
    assigner, kind = job.window_assigner, job.window_kind
    c = job.connected
    if c is not None and c.join_bounds is not None:
        return interval_join(job)
    if assigner is None or kind is None:
        if job.function is None:
            raise JobDefinitionError(
                f"job {job.name!r} has no keyed function: call .process(...) (or .window(...) and a window function)"
            )
        return job.function
    # built-in aggregates emit rows in the output's column order, so it must be known by now
    job = job.with_output_from(None)
    late = None
    if assigner.time == TimeDomain.EVENT_TIME:
        late = OutputTag(LATE_DATA_NAME, job.source_spec.schema_ddl if job.source_spec is not None else None)
    return WindowOperator(
        assigner,
        kind,
        job.window_function,
        job.key_columns,
        job.lateness_ms,
        late,
        job.window_process if kind == WindowKind.AGGREGATE else None,
        job.output.names if job.output is not None else (),
        early=job.early_firing,
    )



def interval_join(job: JobDescription) -> IntervalJoinOperator:
    """The operator of an interval join job (``sparkstate.engine.joins``); its late elements go to
    the side outputs ``left_late_data`` and ``right_late_data``, each with its input's columns."""
    c = job.connected
    assert c is not None and c.join_bounds is not None
    if job.function is None:
        raise JobDefinitionError(
            f"job {job.name!r} has no join function: .process(MyJoin(), output_schema=...) with a ProcessJoinFunction"
        )
    lower, upper = c.join_bounds
    function: Any = job.function  # a ProcessJoinFunction (JobDescription.process keeps it as given)
    left_ddl = job.source_spec.schema_ddl if job.source_spec is not None else None
    return IntervalJoinOperator(
        function, lower, upper, c.join_inclusive,
        OutputTag(LEFT_LATE_DATA_NAME, left_ddl), OutputTag(RIGHT_LATE_DATA_NAME, c.source.schema_ddl),
    )
