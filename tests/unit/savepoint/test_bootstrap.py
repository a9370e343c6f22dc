"""Bootstrapping a savepoint from DataFrames (savepoint/bootstrap.py), without Spark: keys in the
key groups the packer sends their events to, state as the frames say, the savepoint a restore
of the same job accepts. (Restoring one on Spark: tests/integration/test_savepoint_bootstrap_spark.py.)"""

from __future__ import annotations

import datetime as dt
import random
import string

import pandas as pd
import pyarrow as pa
import pytest

from sparkstate import (
    Job,
    KeyedProcessFunction,
    ListSource,
    ListStateDescriptor,
    MapStateDescriptor,
    MemorySink,
    TumblingEventTimeWindows,
    ValueStateDescriptor,
    WatermarkStrategy,
    agg,
)
from sparkstate.api.schema import Schema
from sparkstate.engine.events import Packer
from sparkstate.errors import SavepointError
from sparkstate.savepoint.bootstrap import key_arrow_types, key_groups_of, write_savepoint
from sparkstate.savepoint.compat import check_restore
from sparkstate.savepoint.files import LocalDirectory, open_savepoint
from sparkstate.savepoint.reader import read_savepoint


class Ledger(KeyedProcessFunction):
    def open(self, ctx):
        self.balance = ctx.get_state(ValueStateDescriptor("balance", float, default=0.0))
        self.history = ctx.get_list_state(ListStateDescriptor("history", float))
        self.limits = ctx.get_map_state(MapStateDescriptor("limits", str, int))

    def process_element(self, event, ctx):
        self.balance.update(self.balance.value() + event["amount"])
        yield {"account": ctx.get_current_key(), "balance": self.balance.value()}

    def on_timer(self, timestamp, ctx):
        return []


def ledger_job(name="ledger", key_groups=32):
    return (Job(name)
            .source(ListSource([[{"account": "a", "amount": 1.0}]], schema="account string, amount double"))
            .key_by("account")
            .process(Ledger(), output_schema="account string, balance double")
            .sink(MemorySink())
            .with_settings(key_groups=key_groups))


def test_key_groups_are_the_packers_on_random_keys():
    rng = random.Random(13)
    schema = "name string, n int, big bigint, at timestamp, amount double"
    cases = [("name",), ("n",), ("big",), ("at",), ("name", "n"), ("at", "name", "big")]
    events = [{
        "name": "".join(rng.choice(string.ascii_letters + "éß中 ") for _ in range(rng.randint(0, 12))),
        "n": rng.randint(-2**31, 2**31 - 1),
        "big": rng.randint(-2**63, 2**63 - 1),
        "at": dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=rng.randint(0, 10**10)),
        "amount": rng.random(),
    } for _ in range(500)]
    arrow = Schema.of(schema).arrow
    batch = pa.RecordBatch.from_pylist(events, schema=arrow)
    for columns in cases:
        packed = Packer(columns, 128, None).pack(batch, 0, 0)
        expected = {}  # the key the operator sees -> the group its events were packed into
        for kg, blob in zip(packed.column("kg").to_pylist(), packed.column("blob").to_pylist()):
            for row in pa.ipc.open_stream(blob).read_all().to_pylist():
                key = tuple(row[c] for c in columns)
                expected[key[0] if len(key) == 1 else key] = kg
        job = (Job("k").source(ListSource([], schema=schema)).key_by(*columns)
               .process(Ledger(), output_schema="account string, balance double"))
        frame = pd.DataFrame(events)
        groups, keys = key_groups_of(frame, list(columns), key_arrow_types(job, frame), 128)
        assert dict(zip(keys, groups.tolist())) == expected, columns


def test_bootstrapped_state_reads_back_as_written(tmp_path):
    balances = pd.DataFrame({"account": ["a", "b", "c"], "value": [100, 20.5, None]})
    history = pd.DataFrame({"account": ["a", "a", "a", "b"], "index": [2, 0, 1, 0], "value": [3.0, 1.0, 2.0, 9.0]})
    limits = pd.DataFrame({"account": ["a", "b"], "map_key": ["daily", "daily"], "value": [500, 50]})
    timers = pd.DataFrame({"account": ["b"], "domain": ["event_time"], "timestamp": [1_700_000_000_000]})
    meta = write_savepoint(ledger_job(), {"balance": balances, "history": history, "limits": limits}, tmp_path / "sp",
                           timers=timers)
    assert meta["keys"] == 2  # c's value is null: no state
    reader = read_savepoint(tmp_path / "sp")
    assert reader.key("a").state == {"balance": 100.0, "history": [1.0, 2.0, 3.0], "limits": {"daily": 500}}
    assert type(reader.key("a").state["balance"]) is float  # an int for a float state becomes a float
    assert reader.key("b").state == {"balance": 20.5, "history": [9.0], "limits": {"daily": 50}}
    assert reader.key("b").timers == [("event_time", 1_700_000_000_000)]
    assert reader.key("c") is None
    # the reader's frames are the writer's input layout: they bootstrap the same savepoint again
    again = write_savepoint(ledger_job(), {n: reader.state(n) for n in reader.states}, tmp_path / "sp2",
                            timers=reader.timers())
    assert {kg: f["sha256"] for kg, f in again["files"].items()} == {kg: f["sha256"] for kg, f in meta["files"].items()}


def test_bootstrapped_savepoint_has_no_batch_watermark_or_offset_and_records_types(tmp_path):
    write_savepoint(ledger_job(), {"balance": pd.DataFrame({"account": ["a"], "value": [1.0]})}, tmp_path / "sp")
    meta = open_savepoint(LocalDirectory(tmp_path / "sp")).meta
    assert meta["batch"] is None and meta["watermark_ms"] is None and meta["source_offset"] is None
    assert meta["origin"] == "bootstrap" and meta["job"] == "ledger" and meta["key_groups"] == 32
    assert meta["state"] == {"balance": "ValueState[float]", "history": "ListState[float]", "limits": "MapState[str, int]"}
    assert meta["state_types"]["balance"]["name"] == "float"


def test_restore_checks_accept_it_for_its_job_and_refuse_another(tmp_path):
    from sparkstate.engine.operator import KeyedOperator

    write_savepoint(ledger_job(), {"balance": pd.DataFrame({"account": ["a"], "value": [1.0]})}, tmp_path / "sp")
    meta = open_savepoint(LocalDirectory(tmp_path / "sp")).meta
    descriptors = KeyedOperator(Ledger(), ["account"]).open()
    job_meta = {"job": "ledger", "key_columns": ["account"], "key_groups": 32}
    plan, notes = check_restore(meta, job_meta, descriptors)
    assert set(plan.keep) == {"balance", "history", "limits"} and not notes
    with pytest.raises(SavepointError, match="64 key groups|32 key groups"):
        check_restore(meta, {**job_meta, "key_groups": 64}, descriptors)


def test_every_group_file_restores_to_its_records(tmp_path):
    from sparkstate.engine.events import key_group_of
    from sparkstate.engine.operator import KeyedOperator

    accounts = [f"acct-{i}" for i in range(200)]
    write_savepoint(ledger_job(), {"balance": pd.DataFrame({"account": accounts, "value": [float(i) for i in range(200)]})},
                    tmp_path / "sp")
    sp = open_savepoint(LocalDirectory(tmp_path / "sp"))
    plan, _ = check_restore(sp.meta, {"job": "ledger", "key_columns": ["account"], "key_groups": 32},
                            KeyedOperator(Ledger(), ["account"]).open())
    seen = {}
    for kg in sp.key_groups:
        for key, rec in plan.records(sp.group_bytes(kg)):
            assert key_group_of(key, 32) == kg
            seen[key] = rec["balance"]
    assert seen == {a: float(i) for i, a in enumerate(accounts)}


@pytest.mark.parametrize(("state", "message"), [
    ({"saldo": pd.DataFrame({"account": ["a"], "value": [1.0]})}, r"declares no state 'saldo'; its states: balance"),
    ({"balance": pd.DataFrame({"account": ["a"], "amount": [1.0]})}, r"no column\(s\) \['value'\]"),
    ({"balance": pd.DataFrame({"account": ["a", "a"], "value": [1.0, 2.0]})}, r"key 'a' has two rows"),
    ({"balance": pd.DataFrame({"account": ["a"], "value": ["lots"]})}, r"str 'lots' is not a float"),
    ({"limits": pd.DataFrame({"account": ["a"], "map_key": [1], "value": [5]})}, r"a map key: int 1 is not a str"),
    ({"limits": pd.DataFrame({"account": ["a", "a"], "map_key": ["x", "x"], "value": [1, 2]})}, r"map key 'x' twice"),
    ({"balance": pd.DataFrame({"account": [None], "value": [1.0]})}, r"key column 'account' has nulls"),
    ({"balance": [1, 2]}, r"expected a pandas or Spark DataFrame, got list"),
])
def test_bad_frames_are_refused_naming_the_state_and_the_problem(tmp_path, state, message):
    with pytest.raises(SavepointError, match=message):
        write_savepoint(ledger_job(), state, tmp_path / "sp")
    assert not (tmp_path / "sp").exists()


def test_timers_for_a_function_without_on_timer_are_refused(tmp_path):
    class NoTimers(Ledger):
        on_timer = KeyedProcessFunction.on_timer

    job = ledger_job().process(NoTimers(), output_schema="account string, balance double")
    with pytest.raises(SavepointError, match="has no on_timer"):
        write_savepoint(job, {}, tmp_path / "sp", timers=pd.DataFrame({"account": ["a"], "domain": [0], "timestamp": [1]}))


def test_a_window_job_is_refused(tmp_path):
    job = (Job("w").source(ListSource([], schema="k string, ts timestamp, v double", time_column="ts"),
                           watermark=WatermarkStrategy.for_bounded_out_of_orderness(0))
           .key_by("k").window(TumblingEventTimeWindows.of(60_000)).aggregate(agg.count()))
    with pytest.raises(SavepointError, match="window job"):
        write_savepoint(job, {}, tmp_path / "sp")


def test_an_existing_savepoint_is_never_overwritten(tmp_path):
    state = {"balance": pd.DataFrame({"account": ["a"], "value": [1.0]})}
    write_savepoint(ledger_job(), state, tmp_path / "sp")
    with pytest.raises(SavepointError, match="already exists"):
        write_savepoint(ledger_job(), state, tmp_path / "sp")
