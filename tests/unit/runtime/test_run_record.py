"""How a run ended, kept in its checkpoint for `sparkstate report` (no Spark): the metrics
endpoint ends with the run, so its final status is read there."""

from __future__ import annotations

import json
import re

import pytest

from sparkstate.metrics.report import write_report
from sparkstate.runtime.checkpoint.directory import CheckpointDir
from sparkstate.runtime.checkpoint.run_record import last_run, recorded_run
from sparkstate.runtime.run.result import RunResult


def _report_config(checkpoint: CheckpointDir, out) -> dict:
    page = write_report(checkpoint, out, "w1").html.read_text()
    return json.loads(re.search(r"window\.SPARKSTATE = (.*?);</script>", page).group(1))


def test_the_report_shows_how_each_run_ended_and_the_failed_checkpoints(tmp_path) -> None:
    checkpoint = CheckpointDir.open(tmp_path / "ckpt")
    assert last_run(checkpoint) is None and _report_config(checkpoint, tmp_path / "r0")["job"]["state"] == "REPORT"

    for _ in range(2):
        with pytest.raises(ValueError), recorded_run(checkpoint, RunResult("w1", checkpoint.root)):
            raise ValueError("batch 3 failed")
    run = last_run(checkpoint)
    assert run is not None and run.status == "FAILED" and run.error == "ValueError" and run.failed_checkpoints == 2
    assert "batch 3" not in checkpoint.read_run_record()  # the type only: a message may quote any data
    config = _report_config(checkpoint, tmp_path / "r1")
    assert config["job"]["state"] == "FAILED" and config["values"]["numberOfFailedCheckpoints"] == 2
    assert config["job"]["settings"]["last run"].startswith("FAILED (ValueError), ended ")

    result = RunResult("w1", checkpoint.root, completed=True)
    with recorded_run(checkpoint, result):
        pass
    assert last_run(checkpoint).status == "FINISHED" and last_run(checkpoint).failed_checkpoints == 2  # kept
    assert _report_config(checkpoint, tmp_path / "r2")["job"]["state"] == "FINISHED"
    with recorded_run(checkpoint, RunResult("w1", checkpoint.root)):  # stopped before its end: a timeout
        pass
    assert last_run(checkpoint).status == "CANCELED"
    with recorded_run(checkpoint, RunResult("w1", checkpoint.root, stopped_with_savepoint=True)):  # Flink's stop
        pass
    assert last_run(checkpoint).status == "FINISHED"
    with pytest.raises(KeyboardInterrupt), recorded_run(checkpoint, result):  # a second Ctrl-C
        raise KeyboardInterrupt
    assert last_run(checkpoint).status == "CANCELED" and last_run(checkpoint).failed_checkpoints == 2


def test_a_damaged_record_is_no_record(tmp_path) -> None:
    checkpoint = CheckpointDir.open(tmp_path / "ckpt")
    checkpoint.write_run_record("{not json")
    assert last_run(checkpoint) is None
    checkpoint.write_run_record('{"status": "FINISHED"}')  # fields missing
    assert last_run(checkpoint) is None
    result = RunResult("w1", checkpoint.root, completed=True)
    with recorded_run(checkpoint, result):
        pass
    assert last_run(checkpoint).status == "FINISHED" and result.warnings == []


def test_a_record_that_cannot_be_written_hides_no_error(tmp_path) -> None:
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "sparkstate").write_text("a file where the folder goes")
    checkpoint = CheckpointDir.open(tmp_path / "ckpt")
    with pytest.raises(ValueError, match="the run's own"), recorded_run(checkpoint, RunResult("w1", checkpoint.root)):
        raise ValueError("the run's own")
    result = RunResult("w1", checkpoint.root, completed=True)
    with recorded_run(checkpoint, result):
        pass
    assert len(result.warnings) == 1 and "final status could not be recorded" in result.warnings[0]
