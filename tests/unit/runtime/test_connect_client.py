"""The Spark Connect client's parts that need no server: the session's driver interface, the
address check, the mailbox a server's batch functions post to, Connect's progress reports
evened out, and what is refused or rewritten for a Connect run."""

from __future__ import annotations

import os
from datetime import timedelta
from types import SimpleNamespace

import pyarrow as pa
import pytest

from sparkstate import (
    Job,
    MemorySink,
    ParquetSink,
    SqliteSink,
    TumblingEventTimeWindows,
    UpiPayments,
    WatermarkStrategy,
    agg,
)
from sparkstate.errors import JobDefinitionError
from sparkstate.runtime.io.mailbox import MAIN, Mailbox
from sparkstate.runtime.io.sinks import deliver
from sparkstate.runtime.run.accounting import progress_dicts
from sparkstate.runtime.run.bind import client_paths
from sparkstate.runtime.run.open import connect_blockers
from sparkstate.runtime.session.connect import RemoteSessionError, remote_url
from sparkstate.runtime.session.driver import ClassicDriver, ConnectDriver, driver, is_connect


class _Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)


def _session(**conf: str) -> SimpleNamespace:
    return SimpleNamespace(conf=_Conf({k.replace("_", "."): v for k, v in conf.items()}))


def test_a_connect_session_is_told_by_its_class_and_answers_without_a_jvm():
    Connect = type("SparkSession", (), {"__module__": "pyspark.sql.connect.session"})
    assert is_connect(Connect()) and isinstance(driver(Connect()), ConnectDriver)
    assert not is_connect(SimpleNamespace()) and isinstance(driver(SimpleNamespace()), ClassicDriver)
    # the server's cores: spark.default.parallelism, else its local[N] master, else its shuffle partitions
    assert ConnectDriver(_session(spark_default_parallelism="6", spark_master="local[2]")).default_parallelism() == 6
    assert ConnectDriver(_session(spark_master="local[3]")).default_parallelism() == 3
    assert ConnectDriver(_session(spark_master="local[4,2]")).default_parallelism() == 4
    conf = {"spark.master": "spark://h:7077", "spark.sql.shuffle.partitions": "8"}
    assert ConnectDriver(SimpleNamespace(conf=_Conf(conf))).default_parallelism() == 8
    assert ConnectDriver(_session()).ui_url() is None
    with pytest.raises(JobDefinitionError, match="over Spark Connect.*client.*Hadoop"):
        ConnectDriver(_session()).hadoop_file_system("hdfs://nn:8020/checkpoint")


def test_the_remote_address_comes_from_the_argument_then_spark_remote(monkeypatch):
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    assert remote_url(None) is None
    assert remote_url("sc://127.0.0.1:15002") == "sc://127.0.0.1:15002"
    monkeypatch.setenv("SPARK_REMOTE", "sc://server:15002/;token=x")
    assert remote_url(None) == "sc://server:15002/;token=x"
    assert remote_url("sc://other:1") == "sc://other:1"
    with pytest.raises(RemoteSessionError, match=r"--remote / remote= 'localhost:15002' is not a Spark Connect address"):
        remote_url("localhost:15002")
    monkeypatch.setenv("SPARK_REMOTE", "http://x")
    with pytest.raises(RemoteSessionError, match=r"\$SPARK_REMOTE 'http://x'"):
        remote_url(None)


def test_a_cluster_and_a_connect_server_together_are_refused_before_any_session(monkeypatch):
    from sparkstate.runtime.session import get_spark

    monkeypatch.setattr("sparkstate.runtime.session.classic.active_session", lambda: pytest.fail("no session"))
    with pytest.raises(JobDefinitionError, match="choose one"):
        get_spark(master="spark://h:7077", remote="sc://h:15002")


def test_the_mailbox_hands_over_each_letter_once_in_batch_order(tmp_path):
    box = Mailbox(str(tmp_path / "mailbox"))
    assert list(box.take()) == []  # no folder yet
    box.post_notes(11, {"side": {"late_data": 2}, "refused": 1, "warnings": ["w"]})
    box.post_rows(2, MAIN, pa.table({"k": ["a", "b"], "n": [1, 2]}))
    box.post_rows(2, "late data/x", pa.table({"k": ["c"]}))
    box.post_rows(2, MAIN, pa.table({"k": ["a"], "n": [9]}))  # a replayed batch replaces its first letter
    (tmp_path / "mailbox" / ".2.rows.main.abc.tmp").write_bytes(b"half")  # a letter being written: not taken
    letters = list(box.take())
    assert [(x.batch, x.kind, x.target) for x in letters] == [(2, "rows", "late_data_x"), (2, "rows", "main"),
                                                               (11, "notes", "run")]
    assert letters[1].payload.to_pylist() == [{"k": "a", "n": 9}]
    assert letters[2].payload == {"side": {"late_data": 2}, "refused": 1, "warnings": ["w"]}
    assert list(box.take()) == []
    assert os.listdir(tmp_path / "mailbox") == [".2.rows.main.abc.tmp"]


def test_letters_fill_the_clients_sinks_and_the_runs_figures(tmp_path):
    main, late = MemorySink(), MemorySink()
    job = _window_job(main, late=late)
    box = Mailbox(str(tmp_path))
    box.post_rows(0, MAIN, pa.table({"k": ["a"], "n": [1]}))
    box.post_rows(0, "late_data", pa.table({"k": ["z"]}))
    box.post_notes(0, {"side": {"late_data": 1}, "refused": 0, "warnings": ["replayed"]})
    side: dict[int, dict[str, int]] = {}
    refused: dict[int, int] = {}
    warnings = ["replayed"]
    deliver(box, job, side, refused, warnings)
    assert main.rows() == [{"k": "a", "n": 1}] and late.rows() == [{"k": "z"}]
    assert side == {0: {"late_data": 1}} and refused == {0: 0} and warnings == ["replayed"]


def test_connects_progress_reports_read_as_classics():
    from pyspark.sql import Row

    schema = {"type": "struct", "fields": [{"name": "rows", "type": "long", "nullable": False, "metadata": {}}]}
    connect = {"batchId": 3, "numInputRows": None, "sources": [{"numInputRows": 40}, {"numInputRows": 2}],
               "observedMetrics": {"sparkstate_rows_out": Row(values=[7], schema=schema)}}
    classic = {"batchId": 4, "numInputRows": 5, "sources": [{"numInputRows": 5}],
               "observedMetrics": {"sparkstate_rows_out": Row(rows=5)}}
    got = progress_dicts(SimpleNamespace(recentProgress=[connect, classic]))
    assert got[0]["numInputRows"] == 42 and got[0]["observedMetrics"] == {"sparkstate_rows_out": {"rows": 7}}
    assert got[1]["numInputRows"] == 5 and got[1]["observedMetrics"] == {"sparkstate_rows_out": {"rows": 5}}


def _window_job(sink, late=None):
    wm = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(seconds=5))
    job = (Job("w").source(UpiPayments(events=10), watermark=wm).key_by("merchant_id")
           .window(TumblingEventTimeWindows.of(60_000)))
    if late is not None:
        job = job.side_output_late_data(late)
    return job.aggregate(agg.count("n")).sink(sink)


def test_a_connect_run_sends_the_server_absolute_paths_and_refuses_what_it_cannot_write(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    job = client_paths(_window_job(ParquetSink("out"), late=SqliteSink("late.db", table="late")))
    assert job.sink_spec.path == str(tmp_path / "out")
    assert dict(job.side_sinks)["late_data"].path == str(tmp_path / "late.db")
    assert client_paths(_window_job(ParquetSink("s3a://b/out"))).sink_spec.path == "s3a://b/out"
    assert connect_blockers(_window_job(MemorySink(), late=ParquetSink("late"))) == []
    (reason,) = connect_blockers(_window_job(MemorySink(), late=ParquetSink("s3a://b/late")))
    assert "'late_data' goes to s3a://b/late" in reason and "Spark Connect" in reason
