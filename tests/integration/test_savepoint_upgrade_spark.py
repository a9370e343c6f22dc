"""Restoring a savepoint into an upgraded job on Spark (docs/guides/savepoint-evolution.md): a state
added, an int state become float and a dataclass state gaining a defaulted field, migrated on
the executors; and a refusal that leaves the new checkpoint without anything written."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from spark_helpers import FAST

from sparkstate import Job, KeyedProcessFunction, ListSource, MemorySink, ValueStateDescriptor
from sparkstate.errors import StateMigrationError
from sparkstate.runtime.savepoints.take import take_savepoint

BATCHES = [
    [{"k": "a", "v": 1}, {"k": "b", "v": 2}],
    [{"k": "a", "v": 3}, {"k": "c", "v": 4}],
    [{"k": "a", "v": 5}, {"k": "b", "v": 6}, {"k": "d", "v": 7}],
]


def version_1():
    # defined in a function: shipped by value, like a script's classes
    @dataclass
    class Acc:
        total: int
        n: int

    class Counts(KeyedProcessFunction):
        def open(self, ctx):
            self.count = ctx.get_state(ValueStateDescriptor("count", int, default=0))
            self.acc = ctx.get_state(ValueStateDescriptor("acc", Acc))

        def process_element(self, e, ctx):
            self.count.update(self.count.value() + 1)
            acc = self.acc.value() or Acc(0, 0)
            self.acc.update(Acc(acc.total + e["v"], acc.n + 1))
            yield {"k": ctx.get_current_key(), "count": self.count.value()}

    return Counts(), "k string, count bigint"


def version_2():
    @dataclass
    class Acc:
        total: int
        n: int
        label: str = "migrated"

    class Counts(KeyedProcessFunction):
        def open(self, ctx):
            self.count = ctx.get_state(ValueStateDescriptor("count", float, default=0.0))
            self.acc = ctx.get_state(ValueStateDescriptor("acc", Acc))
            self.seen = ctx.get_state(ValueStateDescriptor("seen", int, default=0))  # new: starts empty

        def process_element(self, e, ctx):
            count = self.count.value()
            acc = self.acc.value() or Acc(0, 0, "new")
            self.count.update(count + 0.5)
            self.acc.update(Acc(acc.total + e["v"], acc.n + 1, acc.label))
            self.seen.update(self.seen.value() + 1)
            yield {"k": ctx.get_current_key(), "count": count, "float": type(count).__name__,
                   "total": acc.total + e["v"], "n": acc.n + 1, "label": acc.label, "seen": self.seen.value(),
                   "cls": type(acc).__name__ + ("" if isinstance(acc, Acc) else " (not the job's class)")}

    return Counts(), "k string, count double, float string, total bigint, n bigint, label string, seen bigint, cls string"


def job(version, sink, batches, end_of_input=True):
    fn, schema = version()
    source = ListSource(batches, "k string, v bigint", end_of_input=end_of_input)
    return Job("counts").source(source).key_by("k").process(fn, output_schema=schema).sink(sink).with_settings(**FAST)


def test_an_upgraded_job_restores_a_savepoint_with_migrated_types(spark, tmp_path):
    first = job(version_1, MemorySink(), BATCHES[:2], end_of_input=False)
    r1 = first.run(checkpoint_dir=tmp_path / "ck1", spark=spark)
    assert r1.completed and r1.events == 4
    meta = take_savepoint(str(tmp_path / "ck1"), target=str(tmp_path / "sp"), spark=spark)
    assert meta["keys"] == 3 and meta["state"] == {"acc": "ValueState[Acc]", "count": "ValueState[int]"}

    sink = MemorySink()
    r2 = job(version_2, sink, BATCHES).with_settings(parallelism=1).run(
        checkpoint_dir=tmp_path / "ck2", spark=spark, from_savepoint=str(tmp_path / "sp"))
    assert r2.completed  # (r2.events counts the first batch from offset 0: the runtime's accounting)
    assert "state 'seen' (ValueState[int]) is new: it starts empty" in r2.warnings
    assert "state 'count': values migrate from ValueState[int] to ValueState[float]" in r2.warnings
    rows = sorted(sink.rows(), key=lambda r: r["k"])
    assert rows == [
        {"k": "a", "count": 2.0, "float": "float", "total": 9, "n": 3, "label": "migrated", "seen": 1, "cls": "Acc"},
        {"k": "b", "count": 1.0, "float": "float", "total": 8, "n": 2, "label": "migrated", "seen": 1, "cls": "Acc"},
        {"k": "d", "count": 0.0, "float": "float", "total": 7, "n": 1, "label": "new", "seen": 1, "cls": "Acc"},
    ]


def test_a_refused_restore_writes_nothing_to_the_new_checkpoint(spark, tmp_path):
    job(version_1, MemorySink(), BATCHES[:1], end_of_input=False).run(checkpoint_dir=tmp_path / "ck1", spark=spark)
    take_savepoint(str(tmp_path / "ck1"), target=str(tmp_path / "sp"), spark=spark)

    def dropped():  # version 1 without its "acc" state
        class Counts(KeyedProcessFunction):
            def open(self, ctx):
                self.count = ctx.get_state(ValueStateDescriptor("count", int, default=0))

            def process_element(self, e, ctx):
                yield {"k": ctx.get_current_key(), "count": 0}

        return Counts(), "k string, count bigint"

    new = tmp_path / "ck2"
    with pytest.raises(StateMigrationError) as err:
        job(dropped, MemorySink(), BATCHES).run(checkpoint_dir=new, spark=spark, from_savepoint=str(tmp_path / "sp"))
    assert "'acc' (ValueState[Acc])" in str(err.value) and "--allow-non-restored-state" in str(err.value)
    assert sorted(p.name for p in new.iterdir()) == ["sparkstate.lock"]  # no sparkstate.json, offsets, commits
