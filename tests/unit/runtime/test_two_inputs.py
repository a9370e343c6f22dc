"""Two-input jobs on the Spark side, without Spark: what the checkpoint records of the second
input, what ``explain`` says, when a bounded run is done, and where broadcast state may live."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from types import SimpleNamespace

import pytest
from behaviour_cases import CASES_BY_NAME

from sparkstate import CheckpointMismatchError, JobDefinitionError, ListSource, MapStateDescriptor, WatermarkStrategy
from sparkstate.runtime.checkpoint import metadata as checkpoint
from sparkstate.runtime.checkpoint.directory import CheckpointDir
from sparkstate.runtime.run.loop import end_reached as _end_reached
from sparkstate.runtime.run.loop import input_ends as _input_ends
from sparkstate.runtime.run.open import broadcast_dir
from sparkstate.runtime.streaming.planner import explain
from sparkstate.runtime.streaming.query import connected_job, end_delay_ms, operator_spec, second_uses_end_marker

BROADCAST = CASES_BY_NAME["broadcast-rules"]
CO = CASES_BY_NAME["co-process-timers"]


def progress(*offsets):
    return [{"sources": [{"endOffset": {"offset": o}} for o in offsets]}]


def test_the_checkpoint_records_the_second_input_and_refuses_another():
    ident = checkpoint.connected_identity(BROADCAST.job())
    assert ident == {"kind": "broadcast", "source": {"type": "ListSource"}, "broadcast": {"rules": "MapState[str, int]"}}
    assert checkpoint.connected_identity(CO.job())["key_columns"] == ["m"]
    assert checkpoint.connected_identity(CASES_BY_NAME["value"].job()) is None


def test_a_restart_with_another_second_input_is_refused(tmp_path):
    def meta(connected):
        return {"format": 1, "job": "j", "function": "F", "source": {"type": "ListSource"}, "key_columns": ["k"],
                "key_groups": 8, "bucket_size": 128, "time_mode": "None", "state_backend": "rocksdb", "state": {},
                "settings": {}, "connected": connected}

    cp = CheckpointDir.open(tmp_path)
    checkpoint.check_or_write(cp, meta(checkpoint.connected_identity(BROADCAST.job())))
    (tmp_path / "commits").mkdir()
    (tmp_path / "commits" / "0").write_text("v1\n{}\n")
    with pytest.raises(CheckpointMismatchError, match=r"the connected \(second\) input changed \(.*kind 'broadcast' -> 'keyed'"):
        checkpoint.check_or_write(cp, meta(checkpoint.connected_identity(CO.job())))
    with pytest.raises(CheckpointMismatchError, match=r"the connected \(second\) input changed"):
        checkpoint.check_or_write(cp, meta(None))


def test_explain_shows_the_second_input_and_the_order_rule():
    text = explain(BROADCAST.job())
    assert "connected:  broadcast rules from ListSource" in text
    assert "then the connected input's elements, then the first input's" in text
    assert "only key group 0 emits" in text
    co = explain(CO.job())
    assert "connected:  connected ListSource by m" in co
    assert "the job's is the smaller of the two inputs'" in co


def test_the_second_input_is_packed_by_its_own_key_and_watermark():
    job = CO.job()
    second = connected_job(job)
    assert second.key_columns == ("m",) and second.watermark is job.connected.watermark
    assert second.source_spec is job.connected.source and second.connected is None
    assert connected_job(BROADCAST.job()).key_columns == ()
    assert connected_job(BROADCAST.job()).watermark is None


def test_end_of_input_waits_for_both_watermarked_inputs():
    job = CO.job()
    spec = operator_spec(job, job.function, None)
    assert second_uses_end_marker(job, job.function)
    assert spec.event_time and spec.end_watermark is not None
    ends = _input_ends(job, spec)
    assert ends == [(0, 5), (-1, 5)]  # 3 batches, then the marker's batch and the final one, each
    assert not _end_reached(progress(5, 4), ends)
    assert _end_reached(progress(5, 5), ends)
    # a broadcast input does not hold the watermark back: no marker
    bjob = BROADCAST.job()
    assert not second_uses_end_marker(bjob, bjob.function)
    assert _input_ends(bjob, operator_spec(bjob, bjob.function, None)) == [(0, 4), (-1, 4)]


def test_the_final_watermark_allows_for_the_larger_delay():
    slow = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(seconds=2)).with_timestamp_column("ts")
    job = CO.job()
    assert end_delay_ms(job) == 1
    assert end_delay_ms(replace(job, connected=replace(job.connected, watermark=slow))) == 2001


def test_broadcast_state_needs_a_file_system_checkpoint(tmp_path):
    local = CheckpointDir.open(tmp_path)
    assert broadcast_dir(local) == str(tmp_path / "sparkstate" / "broadcast")
    remote = SimpleNamespace(broadcast_dir=None, root="s3a://bucket/cp")
    needs = "s3a://bucket/cp: a job with broadcast state needs its checkpoint on a file system path"
    with pytest.raises(JobDefinitionError, match=needs):
        broadcast_dir(remote)


def test_bad_broadcast_declarations_are_refused():
    job = CASES_BY_NAME["value"].job()
    rules = ListSource([[]], "name string, limit bigint")
    with pytest.raises(JobDefinitionError, match="broadcast state must be a MapStateDescriptor"):
        job.connect(rules).broadcast("rules")
    with pytest.raises(JobDefinitionError, match="a broadcast input has no key"):
        job.connect(rules, key_by="name").broadcast(MapStateDescriptor("r", str, int))


def test_a_broadcast_function_without_on_timer_has_no_timers():
    from behaviour_cases import Rules

    from sparkstate.api.connected import KeyedBroadcastProcessFunction

    class WithTimer(KeyedBroadcastProcessFunction):
        def on_timer(self, timestamp, ctx):
            return None

    assert not Rules.defines_on_timer()
    assert WithTimer.defines_on_timer()


def test_the_savepoint_table_shows_the_second_input_and_the_broadcast_state():
    from rich.console import Console

    from sparkstate.cli import _savepoint_table

    meta = {"job": "limits", "location": "/sp", "batch": 3, "keys": 2, "bytes": 100, "seconds": 0.5,
            "source_offset": {"offset": 3}, "connected": {"source_offset": {"offset": 4}},
            "broadcast": {"bytes": 531, "states": {"rules": "MapState[str, int]"}}}
    console = Console(width=200, record=True)
    console.print(_savepoint_table(meta, 1.0))
    out = console.export_text()
    assert 'second input offset │ {"offset": 4}' in out
    assert "broadcast state     │ rules: 531 B, stored once for all key groups" in out


def test_a_watermark_on_the_second_input_only_is_refused():
    from behaviour_cases import Enrich

    from sparkstate import Job, MemorySink

    ws = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(0)).with_timestamp_column("ts")
    job = (Job("j").source(ListSource([[]], "k string, ts timestamp")).key_by("k")
           .connect(ListSource([[]], "m string, ts timestamp", "ts"), key_by="m", watermark=ws)
           .process(Enrich(), output_schema="k string, what string, n bigint").sink(MemorySink()))
    with pytest.raises(JobDefinitionError, match="the connected input has a watermark strategy but the first input has none"):
        job.validate()


def test_a_spark_run_refuses_idleness_on_two_watermarked_inputs_before_spark_starts(tmp_path):
    """Spark's watermark is the smallest of the inputs' and cannot leave an idle one out; the
    harness honours idleness, and with one watermarked input it changes nothing."""
    quiet = CO.job().connected.watermark.with_idleness(timedelta(minutes=1))
    job = CO.job()
    job = replace(job, connected=replace(job.connected, watermark=quiet))
    assert "idle after 60000 ms without events" in explain(job)
    job.harness().process_batch([], second=[])  # the harness takes it
    with pytest.raises(JobDefinitionError, match=r"the second input's watermark strategy has with_idleness\(\.\.\.\), "
                       "which a Spark run cannot honour"):
        job.run(checkpoint_dir=tmp_path / "cp")
    assert not (tmp_path / "cp").exists()
    one = CASES_BY_NAME["event-timers"].job()
    check = replace(one, watermark=one.watermark.with_idleness(1000))
    from sparkstate.runtime.streaming.query import check_idleness

    check_idleness(check)  # one input: accepted (it changes nothing)


def test_explain_lists_the_state_with_its_ttl_and_cleanup_and_the_broadcast_state():
    from sparkstate.jobs import JOBS

    text = explain(JOBS["dedup"].job(events=1000))
    assert ("state:      seen: ValueState[bool]; ttl 1d, processing time, OnCreateAndWrite, NeverReturnExpired; "
            "cleanup on write-back, incrementally 2 keys per run and 2 per element, background sweep every 1d") in text
    fraud = explain(JOBS["fraud-detection"].job(events=1000))
    assert "state:      profile: ValueState[Profile]; ttl 90d" in fraud
    assert "broadcast:  rules: MapState[str, Rule] (one copy in the checkpoint; read-only in process_element)" in fraud
