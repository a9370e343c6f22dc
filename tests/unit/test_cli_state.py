"""`sparkstate savepoints` and `sparkstate state` on savepoints written here: no Spark."""

from __future__ import annotations

import pandas as pd
import pytest
from click.testing import CliRunner

from sparkstate import Job, KeyedProcessFunction, ListSource, ListStateDescriptor, MemorySink, ValueStateDescriptor
from sparkstate.cli import main
from sparkstate.savepoint.bootstrap import write_savepoint


class Ledger(KeyedProcessFunction):
    def open(self, ctx):
        self.balance = ctx.get_state(ValueStateDescriptor("balance", float, default=0.0))
        self.history = ctx.get_list_state(ListStateDescriptor("history", float))

    def process_element(self, event, ctx):
        yield {"account": ctx.get_current_key(), "balance": self.balance.value()}

    def on_timer(self, timestamp, ctx):
        return []


def ledger_job(name="ledger"):
    return (Job(name).source(ListSource([], schema="account string, amount double")).key_by("account")
            .process(Ledger(), output_schema="account string, balance double").sink(MemorySink()))


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), terminal_width=250)


@pytest.fixture
def savepoint(tmp_path):
    path = tmp_path / "savepoints" / "ledger-opening"
    write_savepoint(ledger_job(), {
        "balance": pd.DataFrame({"account": ["alice", "bob", "42"], "value": [100.0, 7.5, 1.0]}),
        "history": pd.DataFrame({"account": ["alice", "alice"], "value": [1.0, 2.0]}),
    }, path, timers=pd.DataFrame({"account": ["bob"], "domain": ["processing_time"], "timestamp": [60_000]}))
    return path


def test_savepoints_lists_a_folder(savepoint):
    (savepoint.parent / "broken.inprogress").mkdir()
    result = invoke("savepoints", str(savepoint.parent))
    assert result.exit_code == 0, result.output
    row = next(line for line in result.output.splitlines() if "ledger-opening" in line)
    for cell in ("ledger", "bootstrap", " 3 ", "KB", "start", "none"):
        assert cell in row, (cell, row)
    assert "broken.inprogress is an unfinished savepoint" in result.output


def test_savepoints_finds_the_default_folders(savepoint, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    home = tmp_path / ".sparkstate"
    (home / "ledger").mkdir(parents=True)
    savepoint.parent.rename(home / "ledger" / "savepoints")
    write_savepoint(ledger_job("other"), {"balance": pd.DataFrame({"account": ["x"], "value": [1.0]})},
                    home / "savepoints" / "other-sp")
    result = invoke("savepoints")
    assert result.exit_code == 0, result.output
    assert "2 savepoints" in result.output and "ledger-opening" in result.output and "other-sp" in result.output


def test_savepoints_says_when_there_are_none(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke("savepoints")
    assert result.exit_code == 1 and "no savepoints in .sparkstate/savepoints" in result.output


def test_state_describes_the_savepoint(savepoint):
    result = invoke("state", str(savepoint))
    assert result.exit_code == 0, result.output
    assert "ledger (Ledger)" in result.output and "bootstrapped" in result.output
    assert "balance ValueState[float]" in result.output and "none: the source starts from its beginning" in result.output


def test_state_of_one_key(savepoint):
    result = invoke("state", str(savepoint), "--key", "alice")
    assert result.exit_code == 0, result.output
    assert 'key "alice"' in result.output and "100.0" in result.output and "[1.0, 2.0]" in result.output
    bob = invoke("state", str(savepoint), "--key", '"bob"', "--state", "balance").output
    assert "7.5" in bob and "history" not in bob and "timer  processing time 1970-01-01T00:01:00.000Z (60000)" in bob
    assert 'key "42"' in invoke("state", str(savepoint), "--key", "42").output  # the string key, given plainly


def test_state_of_an_unknown_key_says_what_keys_look_like(savepoint):
    result = invoke("state", str(savepoint), "--key", "carol")
    assert result.exit_code == 1
    assert "holds no state for key 'carol'" in result.output and "keys look like" in result.output


def test_state_rows_of_one_descriptor_and_the_timers(savepoint):
    result = invoke("state", str(savepoint), "--state", "history", "--limit", "1")
    assert result.exit_code == 0, result.output
    assert "history (ListState[float]): first 1 rows" in result.output
    assert "alice" in result.output and "2.0" not in result.output
    timers = invoke("state", str(savepoint), "--timers").output
    assert "processing_time" in timers and "60000" in timers
    bad = invoke("state", str(savepoint), "--state", "saldo")
    assert bad.exit_code == 1 and "no state 'saldo'" in bad.output


def test_state_of_a_missing_or_foreign_path_is_refused(tmp_path):
    missing = invoke("state", str(tmp_path / "nothing"))
    assert missing.exit_code == 1 and "does not exist" in missing.output
    (tmp_path / "plain").mkdir()
    plain = invoke("state", str(tmp_path / "plain"))
    assert plain.exit_code == 1 and "is not a savepoint" in plain.output


def test_savepoints_shows_a_taken_savepoints_batch_offset_and_watermark(tmp_path, monkeypatch):
    from sparkstate.savepoint.files import LocalDirectory, SavepointWriter

    monkeypatch.chdir(tmp_path)  # a short location: the table's width does not depend on pytest's temporary path

    meta = {"job": "running-sum", "key_columns": ["merchant_id"], "key_groups": 8, "state": {"total": "ValueState[float]"},
            "batch": 4, "watermark_ms": 1_767_225_600_000, "source_offset": {"offset": 120000},
            "created": "2026-01-01T12:00:00+00:00"}
    writer = SavepointWriter(LocalDirectory(tmp_path / "running-sum-b000004-20260101T120000"), meta, ["total"])
    writer.add_group(3, [("m1", {"total": 1.0}), ("m2", {"total": 2.0})])
    writer.publish()
    result = invoke("savepoints", ".")
    assert result.exit_code == 0, result.output
    row = next(line for line in result.output.splitlines() if "running-sum-b000004" in line)
    for cell in ("running-sum", " 4 ", "2026-01-01 12:00:00", " 2 ", '{"offset":120000}', "2026-01-01T00:00:00.000Z"):
        assert cell in row, (cell, row)
