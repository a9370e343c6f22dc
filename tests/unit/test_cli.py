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
    result = CliRunner().invoke(main, ["run", "running-sum", "--sink", "kafka://x"])
    assert result.exit_code == 1 and "unknown sink 'kafka://x'" in result.output


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


def test_source_guarantee_in_explain_and_generator_options_refused_with_another_source():
    result = CliRunner().invoke(main, ["explain", "running-sum", "--source", "socket://localhost:9000"], terminal_width=200)
    assert result.exit_code == 0
    assert "socket localhost:9000 (at-most-once: lines sent while the job is down are lost)" in result.output
    assert "dead_letters -> checkpoint side-outputs/dead_letters" in result.output
    result = CliRunner().invoke(main, ["explain", "running-sum", "--events", "10"], terminal_width=200)
    assert "(exactly-once: replayable)" in result.output
    bad = CliRunner().invoke(main, ["run", "running-sum", "--source", "socket://localhost:9000", "--merchants", "5", "--events", "9"])
    assert bad.exit_code == 1 and "--events, --merchants: generator options do not apply" in " ".join(bad.output.split())
    bad = CliRunner().invoke(main, ["run", "running-sum", "--source", "socket://localhost"])
    assert bad.exit_code == 1 and "expected socket://HOST:PORT" in bad.output
