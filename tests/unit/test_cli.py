"""The command line without Spark: listing jobs and refusing bad arguments."""

from __future__ import annotations

from click.testing import CliRunner

from sparkstate.cli import main


def test_jobs_lists_every_seed_job():
    result = CliRunner().invoke(main, ["jobs"], terminal_width=200)
    assert result.exit_code == 0
    for name in ("running-sum", "rate-limit", "inactivity-alert", "feature-map"):
        assert name in result.output


def test_unknown_job_is_an_error_naming_the_known_ones():
    result = CliRunner().invoke(main, ["run", "no-such-job"])
    assert result.exit_code == 1
    assert "no job named 'no-such-job'" in result.output and "running-sum" in result.output


def test_bad_sink_is_an_error():
    result = CliRunner().invoke(main, ["run", "running-sum", "--sink", "mqtt://x"])
    assert result.exit_code == 1 and "unknown sink 'mqtt://x'" in result.output


def test_progress_line_shows_dead_letters_and_late_rows_of_the_batch():
    from rich.console import Console

    from sparkstate.metrics.progress import ProgressPrinter

    console = Console(record=True, width=200)
    printer = ProgressPrinter(console, total_events=10)
    printer({"batchId": 3, "events": 10, "durationMs": {"triggerExecution": 500},
             "sideOutputs": {"dead_letters": 2, "late_data": 0}})
    line = console.export_text()
    assert "batch 3" in line and "2 dead letters" in line and "late" not in line


def test_generator_settings_from_the_command_line():
    result = CliRunner().invoke(main, ["explain", "sessions", "--events", "100"])
    assert result.exit_code == 0 and "session windows" in result.output
    bad = CliRunner().invoke(main, ["run", "sessions", "--merchants", "5", "--events", "10"])
    assert bad.exit_code == 1 and "ClickEvents, which has no setting 'merchants'" in bad.output
    bad = CliRunner().invoke(main, ["run", "sessions", "--set", "users=many", "--events", "10"])
    assert bad.exit_code == 1 and "'many' is not a valid int" in bad.output
    bad = CliRunner().invoke(main, ["run", "sessions", "--set", "colour=red"])
    assert bad.exit_code == 1 and "NAME one of" in bad.output


def test_progress_line_shows_the_checkpoint():
    from rich.console import Console

    from sparkstate.metrics.progress import ProgressPrinter

    console = Console(record=True, width=300)
    ProgressPrinter(console)({"batchId": 4, "events": 10, "durationMs": {"triggerExecution": 500},
                              "checkpoint": {"duration_ms": 1234, "delta_bytes": 2048}})
    assert "checkpoint 1,234 ms, 2.0 KB written" in console.export_text()


def test_checkpoints_lists_the_retained_ones_without_spark(tmp_path):
    from sparkstate.runtime.checkpoint.directory import CheckpointDir
    from sparkstate.runtime.checkpoint.stats import CheckpointLog, CheckpointStats

    root = tmp_path / "ckpt"
    for b in (3, 4):
        (root / "commits").mkdir(parents=True, exist_ok=True)
        (root / "commits" / str(b)).write_text("v1\n{}\n")
        (root / "state" / "0" / "0").mkdir(parents=True, exist_ok=True)
        (root / "state" / "0" / "0" / f"{b + 1}.changelog").write_bytes(bytes(100 * b))
    (root / "sparkstate.json").write_text('{"job": "running-sum"}')
    CheckpointLog(CheckpointDir.open(root)).save(
        {4: CheckpointStats(4, "2026-11-22T10:00:01.500Z", duration_ms=321, state_bytes=5 << 20)}
    )
    result = CliRunner().invoke(main, ["checkpoints", "running-sum", "--checkpoint", str(root)], terminal_width=200)
    assert result.exit_code == 0, result.output
    lines = [ln for ln in result.output.splitlines() if "│" in ln]
    assert "2 retained checkpoints" in result.output
    assert any("3" in ln and "300 B" in ln and "incremental" in ln for ln in lines)
    row = next(ln for ln in lines if "321 ms" in ln)
    assert "2026-11-22 10:00:01.500" in row and "5.0 MB" in row and "400 B" in row and "700 B" in row


def test_checkpoints_of_a_missing_directory_is_an_error(tmp_path):
    result = CliRunner().invoke(main, ["checkpoints", "running-sum", "--checkpoint", str(tmp_path / "none")])
    assert result.exit_code == 1 and "does not exist" in result.output and "sparkstate run running-sum" in result.output
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "offsets").mkdir()
    result = CliRunner().invoke(main, ["checkpoints", "running-sum", "--checkpoint", str(tmp_path / "empty")])
    assert result.exit_code == 1 and "holds no committed checkpoint" in result.output


def test_source_guarantee_in_explain_and_generator_options_refused_with_another_source():
    result = CliRunner().invoke(main, ["explain", "running-sum", "--source", "socket://localhost:9000"], terminal_width=200)
    assert result.exit_code == 0
    assert "socket localhost:9000 (at-most-once: lines sent while the job is down are lost)" in result.output
    assert "dead_letters -> checkpoint side-outputs/dead_letters" in result.output
    result = CliRunner().invoke(main, ["explain", "running-sum", "--events", "10"], terminal_width=200)
    assert "(exactly-once: replayable)" in result.output
    bad = CliRunner().invoke(
        main, ["run", "running-sum", "--source", "socket://localhost:9000", "--merchants", "5", "--events", "9"]
    )
    assert bad.exit_code == 1 and "--events, --merchants: generator options do not apply" in " ".join(bad.output.split())
    bad = CliRunner().invoke(main, ["run", "running-sum", "--source", "socket://localhost"])
    assert bad.exit_code == 1 and "expected socket://HOST:PORT" in bad.output


def test_the_default_output_follows_the_checkpoint(tmp_path, monkeypatch):
    """Another checkpoint numbers its batches from 0 again: with the output folder of the
    first, Spark's file sink would drop them as written. The default output lives with the
    checkpoint it was written with."""
    from sparkstate.errors import JobDefinitionError
    from sparkstate.job import Job

    def stop(self, **kwargs):
        raise JobDefinitionError(f"stopped before Spark (output {self.sink_spec.path})")

    monkeypatch.setattr(Job, "run", stop)
    for name in ("a", "b"):
        ckpt = tmp_path / name
        result = CliRunner().invoke(main, ["run", "running-sum", "--checkpoint", str(ckpt)], terminal_width=400)
        assert f"output {ckpt}/output" in " ".join(result.output.split()), result.output


def test_max_event_time_ahead_option_is_checked_before_spark_starts():
    bad = CliRunner().invoke(main, ["run", "running-sum", "--max-event-time-ahead", "soon"])
    assert bad.exit_code == 1 and "max_event_time_ahead must be a duration such as" in bad.output
    assert "--max-event-time-ahead" in CliRunner().invoke(main, ["run", "--help"]).output
