"""What each micro-batch's progress report adds to a run's result: its events, rows out, side
outputs and refused rows, its checkpoint's figures, and the state's size."""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any

from sparkstate.runtime.checkpoint.stats import CheckpointRecorder, rows_out, state_bytes
from sparkstate.runtime.run.result import RunResult


def progress_dicts(query: Any) -> list[dict]:
    """Spark's recent progress reports of ``query``, as plain dicts, the same from a Classic
    and a Connect session."""
    out = []
    for p in query.recentProgress:
        if isinstance(p, dict):
            observed = p.get("observedMetrics")
            if observed:  # pyspark gives each as a Row: plain data, as the rest
                p = {**p, "observedMetrics": {k: _observed_row(v) for k, v in observed.items()}}
            if p.get("numInputRows") is None and p.get("sources") is not None:
                # Spark Connect's report has the sources' counts only (Classic's has their sum too)
                p = {**p, "numInputRows": sum(int(s.get("numInputRows") or 0) for s in p["sources"])}
            out.append(p)
        else:
            out.append(json.loads(p.json))
    return out


def _observed_row(value: Any) -> Any:
    """An observed metric's row as a dict of its fields. Spark Connect gives it as a row of
    ``values`` and ``schema`` (the fields' names are in the schema), Classic as a row of its fields."""
    row = value.asDict() if hasattr(value, "asDict") else value
    if isinstance(row, dict) and set(row) == {"values", "schema"} and isinstance(row["schema"], dict):
        names = [f.get("name") for f in row["schema"].get("fields") or []]
        return dict(zip(names, row["values"] or [], strict=False))
    return row


def ran(progress: dict) -> bool:
    """Whether a progress report is of a micro-batch that ran. A trigger that found no new
    input reports the *next* batch id without running it; counting it would hide the real
    batch of that id (its events and side outputs) when it comes."""
    return "addBatch" in (progress.get("durationMs") or {})


def account(result: RunResult, p: dict, events: int) -> None:
    """Add a batch that ran to ``result``, and complete its progress report ``p`` with
    sparkstate's own figures: ``events`` read, ``sideOutputs`` and ``rowsOut`` written."""
    from sparkstate.runtime.io.sinks import observed_rows_out

    p["events"] = events
    out = observed_rows_out(p)
    # taken, not read: the count is the batch's alone, and a run of months must not keep one per batch
    refused = result.batch_refused.pop(p.get("batchId", -1), 0)
    if out is not None:
        p["rowsOut"] = max(0, out - refused)
    result.add_progress(p)  # its side outputs too: kept for the last batches only, in totals for all
    result.batches += 1
    result.events += events
    if events and result.first_batch_seconds == 0.0:
        result.first_batch_seconds = p.get("durationMs", {}).get("triggerExecution", 0) / 1000.0
    sink_rows = rows_out(p)
    if sink_rows is not None:
        result.output_rows = (result.output_rows or 0) + sink_rows
    ops = p.get("stateOperators") or []
    if ops:
        result.state_rows = ops[0].get("numRowsTotal")
        result.state_bytes = state_bytes(ops[0])


def record_checkpoint(result: RunResult, recorder: CheckpointRecorder, p: dict) -> None:
    """Measure and log the checkpoint of a committed batch; the figures go on the result and,
    as ``p["checkpoint"]``, to the progress line."""
    try:
        stats = recorder.record(p)
    except OSError as exc:
        raise recorder.checkpoint.failed_write(exc) from exc
    if stats is not None:
        result.add_checkpoint(stats)
        # its fields are numbers and text: a shallow copy (``asdict``'s deep one costs more than the rest)
        p["checkpoint"] = {f.name: getattr(stats, f.name) for f in fields(stats)}
