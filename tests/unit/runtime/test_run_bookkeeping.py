"""The run loop's record of a run that goes on for months: bounded, with exact totals (no Spark).

A run of one micro-batch a second has 86,400 a day; the loop's record of each (its progress
report, its checkpoint's figures, its side-output counts) must not stay in the driver for
the whole run, while the run's totals still count every batch.
"""

from __future__ import annotations

import io
import json
import pickle
from pathlib import Path

from rich.console import Console

from sparkstate.metrics.progress import checkpoint_summary, summary_table
from sparkstate.runtime.checkpoint.stats import CheckpointStats, batch_figures, timings
from sparkstate.runtime.run import accounting
from sparkstate.runtime.run.result import HISTORY, RunResult

REPORTS = json.loads((Path(__file__).parent / "data" / "progress_reports.json").read_text())
BATCHES = 100_000


class FakeRecorder:
    """``CheckpointRecorder`` without the state files: the figures of the report, fixed sizes."""

    def record(self, p: dict) -> CheckpointStats | None:
        base = timings(p)
        if base is None:
            return None
        kind = "incremental + snapshot" if base["batch_id"] % 10 == 9 else "incremental"
        return CheckpointStats(**base, **batch_figures(p), delta_bytes=100 + base["batch_id"] % 7,
                               full_bytes=5000, kind=kind)


def report(template: dict, batch: int) -> dict:
    """Spark's progress report of micro-batch ``batch``: a real one, its figures varied (its
    sources and state operators shared with the template's: the run loop reads them only)."""
    durations = {**template["durationMs"], "triggerExecution": 1000 + batch % 500, "commitOffsets": 10 + batch % 20}
    return {**template, "batchId": batch, "durationMs": durations, "sink": {**template["sink"], "numOutputRows": batch % 11}}


def test_a_run_of_100000_batches_keeps_the_last_ones_and_counts_them_all():
    result = RunResult(job="running-sum", checkpoint_dir="/ck")
    recorder = FakeRecorder()
    template = REPORTS["rocksdb"]
    events = output = steady_events = steady_ms = 0
    side = {"dead_letters": 0, "late_data": 0}
    durations: list[int] = []
    for b in range(BATCHES):
        counts = {"dead_letters": b % 3, "late_data": 1}
        # the sink writes the batch's counts while it runs; every 1,000th batch is interrupted
        # before its commit and run again (a stop, trigger once): written twice, counted once
        if b % 1000 == 0:
            result.batch_side_outputs[b] = dict(counts)
        result.batch_side_outputs[b] = counts
        p = report(template, b)
        n = 0 if b % 4 == 3 else 200 + b % 13  # some batches read nothing (the watermark moved)
        accounting.account(result, p, n)
        accounting.record_checkpoint(result, recorder, p)
        events += n
        output += b % 11
        side["dead_letters"] += b % 3
        side["late_data"] += 1
        if n and b > 0:  # batch 0 is the first with events
            steady_events += n
            steady_ms += 1000 + b % 500
        durations.append(p["checkpoint"]["duration_ms"])
        assert p["sideOutputs"] == counts  # the progress line and the dashboard see the batch's own

    assert len(result.progress) == len(result.checkpoints) == HISTORY
    assert [p["batchId"] for p in result.progress] == list(range(BATCHES - HISTORY, BATCHES))
    assert result.checkpoints[-1].batch_id == BATCHES - 1 and result.checkpoints[1:][0].batch_id == BATCHES - HISTORY + 1
    assert result.batch_side_outputs == {}  # each batch's counts folded into the totals when its progress came
    assert result.batches == BATCHES and result.events == events and result.output_rows == output
    assert result.side_outputs == side
    assert result.steady_events_per_second == steady_events * 1000.0 / steady_ms
    figures = result.checkpoint_totals.summary()
    assert figures["checkpoints"] == BATCHES
    assert figures["mean_duration_ms"] == sum(durations) / BATCHES and figures["max_duration_ms"] == max(durations)
    assert figures["kinds"] == ["incremental", "incremental + snapshot"]
    assert figures["last_full_bytes"] == 5000
    console = Console(file=io.StringIO(), width=200)
    console.print(summary_table(result))
    assert f"({BATCHES:,} checkpoints)" in console.file.getvalue()  # type: ignore[attr-defined]


def test_side_outputs_count_a_batch_once_whether_or_not_its_progress_came():
    result = RunResult(job="j", checkpoint_dir="/ck")
    template = REPORTS["hashmap"]
    result.batch_side_outputs[0] = {"late_data": 2}
    accounting.account(result, report(template, 0), 1)
    result.batch_side_outputs[1] = {"late_data": 3}  # its progress never seen (Spark keeps the last 100)
    result.batch_side_outputs[2] = {"late_data": 5}
    accounting.account(result, report(template, 2), 1)
    assert result.batch_side_outputs == {} and result.side_outputs == {"late_data": 10}
    result.batch_side_outputs[3] = {"late_data": 7, "dead_letters": 1}  # written, then the query failed
    assert result.side_outputs == {"late_data": 17, "dead_letters": 1}


def test_a_result_given_lists_keeps_them_bounded_and_summarises_them_as_before():
    stats = [CheckpointStats(batch_id=b, time="2026-11-22T12:00:00.000Z", duration_ms=b, delta_bytes=2 * b)
             for b in range(HISTORY + 5)]
    result = RunResult(job="j", checkpoint_dir="/ck", progress=[{"batchId": b} for b in range(HISTORY + 5)],
                       checkpoints=list(stats))
    assert len(result.progress) == len(result.checkpoints) == HISTORY and result.progress[0] == {"batchId": 5}
    result.progress += [{"batchId": -1}]
    assert len(result.progress) == HISTORY and result.progress[-1] == {"batchId": -1}
    copied = pickle.loads(pickle.dumps(result))  # as a result sent from another process
    copied.progress.append({"batchId": -2})
    assert copied.progress[-2:] == [{"batchId": -1}, {"batchId": -2}] and len(copied.progress) == HISTORY
    assert checkpoint_summary(stats[:3]) == {
        "checkpoints": 3, "mean_duration_ms": 1.0, "max_duration_ms": 2, "mean_delta_bytes": 2.0,
        "last_full_bytes": None, "last_state_bytes": None, "kinds": [],
    }
