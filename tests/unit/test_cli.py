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
