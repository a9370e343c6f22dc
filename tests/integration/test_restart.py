"""Restarts: from a checkpoint mid-stream, and after a batch that failed."""

from __future__ import annotations

import pytest
from behaviour_cases import CASES_BY_NAME, canonical, per_key, run_on_harness
from spark_helpers import FAST

from sparkstate import (
    Job,
    JobFailedError,
    KeyedProcessFunction,
    ListSource,
    MemorySink,
    ParquetSink,
    ValueStateDescriptor,
)


@pytest.mark.parametrize("name", ["value", "event-timers"])
def test_restart_mid_stream_continues_the_state(name, spark, checkpoint):
    case = CASES_BY_NAME[name]
    sink = MemorySink()
    first = case.job(sink, batches=case.batches[:2], end_of_input=False).with_settings(**FAST)
    r1 = first.run(checkpoint_dir=checkpoint, spark=spark)
    assert r1.completed and r1.events == sum(len(b) for b in case.batches[:2])
    second = case.job(sink).with_settings(**FAST)
    r2 = second.run(checkpoint_dir=checkpoint, spark=spark)
    assert r2.completed and r2.events == sum(len(b) for b in case.batches[2:])
    expected = run_on_harness(case)
    assert canonical(sink.rows()) == canonical(expected)
    assert per_key(sink.rows(), case.out_key) == per_key(expected, case.out_key)
    # a third run of the finished job does nothing
    r3 = second.run(checkpoint_dir=checkpoint, spark=spark)
    assert r3.already_complete and r3.batches == 0


class Poison(KeyedProcessFunction):
    """Running total; raises on v == 13 unless built with allow=True."""

    def __init__(self, allow: bool = False):
        self.allow = allow

    def open(self, ctx):
        self.total = ctx.get_state(ValueStateDescriptor("total", int, default=0))

    def process_element(self, e, ctx):
        if e["v"] == 13 and not self.allow:
            raise ValueError("unlucky number")
        self.total.update(self.total.value() + e["v"])
        yield {"k": ctx.get_current_key(), "total": self.total.value()}


BATCHES = [
    [{"k": "a", "v": 1}, {"k": "b", "v": 2}],
    [{"k": "a", "v": 3}, {"k": "c", "v": 4}],
    [{"k": "b", "v": 13}, {"k": "a", "v": 5}],
    [{"k": "a", "v": 6}, {"k": "b", "v": 7}],
]


def poison_job(sink, allow):
    return (
        Job("poison").source(ListSource(BATCHES, "k string, v bigint")).key_by("k")
        .process(Poison(allow), output_schema="k string, total bigint").sink(sink).with_settings(**FAST)
    )


def expected_rows():
    h = poison_job(MemorySink(), True).harness()
    return [r for b in BATCHES for r in h.process_batch(b)]


def test_failed_batch_commits_nothing_and_restart_resumes(spark, checkpoint):
    sink = MemorySink()
    with pytest.raises(JobFailedError) as failure:
        poison_job(sink, allow=False).run(checkpoint_dir=checkpoint, spark=spark)
    message = str(failure.value)
    assert "Poison.process_element failed for key 'b'" in message and "unlucky number" in message
    assert "batches up to 1 are committed" in message
    assert sorted(sink.batches) == [0, 1]  # the failed batch reached no sink
    poison_job(sink, allow=True).run(checkpoint_dir=checkpoint, spark=spark)
    assert canonical(sink.rows()) == canonical(expected_rows())  # nothing lost, nothing twice


def test_parquet_output_is_exactly_once_across_a_failure(spark, checkpoint, tmp_path):
    out = tmp_path / "out"
    with pytest.raises(JobFailedError):
        poison_job(ParquetSink(str(out)), allow=False).run(checkpoint_dir=checkpoint, spark=spark)
    poison_job(ParquetSink(str(out)), allow=True).run(checkpoint_dir=checkpoint, spark=spark)
    rows = [r.asDict() for r in spark.read.parquet(str(out)).collect()]
    assert canonical(rows) == canonical(expected_rows())


def test_restart_between_the_end_marker_and_the_final_batch(spark, checkpoint):
    from sparkstate.runtime.io.sources import source_offset

    case = CASES_BY_NAME["event-timers"]
    sink = MemorySink()
    job = case.job(sink).with_settings(**FAST)
    marker_read = len(case.batches) + 1  # offsets: the data batches, then the marker

    def after_marker(result):
        last = result.progress[-1] if result.progress else None
        return last is not None and source_offset(last["sources"][0]) == marker_read

    # a trigger far longer than the run loop's look at the progress (0.1 s): the loop sees the
    # marker's batch and stops the query before the next trigger runs the final timers' batch
    # (with 100 ms triggers that batch could run and reach the sink before the stop)
    job.with_settings(trigger_interval="2 seconds").run(checkpoint_dir=checkpoint, spark=spark, until=after_marker)
    assert {r["timer"] for r in sink.rows()} == {-5, 1011, 1013, 1015}  # the final timers wait
    result = job.run(checkpoint_dir=checkpoint, spark=spark)
    # the final batch; on a loaded machine the stop can also land before the marker's batch
    # committed, and the restart runs that batch again first (the sink takes it once)
    assert result.completed and result.batches in (1, 2)
    assert canonical(sink.rows()) == canonical(run_on_harness(case))


class Count(KeyedProcessFunction):
    """A running count per key."""

    def open(self, ctx):
        self.n = ctx.get_state(ValueStateDescriptor("n", int, default=0))

    def process_element(self, e, ctx):
        self.n.update(self.n.value() + 1)
        yield {"k": ctx.get_current_key(), "n": self.n.value()}


def test_a_checkpoint_in_the_earlier_state_layout_resumes_and_its_small_groups_go_inline(
        spark, checkpoint, tmp_path, monkeypatch):
    """Checkpoints written before a one-bucket key group kept its bucket in its meta entry
    (``engine/keygroups.py``) hold every bucket as an entry of its own: they resume with the
    same state, a touched one-bucket group moves its bucket inline (and deletes the entry), and
    a savepoint of the mixed layout holds every key once."""
    import dataclasses

    from sparkstate.runtime.run import open as run_open
    from sparkstate.runtime.savepoints.state_reader import group_metas
    from sparkstate.runtime.savepoints.take import take_savepoint
    from sparkstate.savepoint.reader import read_savepoint

    # 16 key groups, buckets of 3 keys: the first batches (12 keys) leave every group one
    # bucket; with all 40 keys, groups hold 1 to 6 keys, so some split and some stay small
    batches = [[{"k": f"k{i}", "v": 1} for i in range(8)], [{"k": f"k{i}", "v": 1} for i in range(4, 12)],
               [{"k": f"k{i}", "v": 1} for i in range(0, 40, 2)], [{"k": f"k{i}", "v": 1} for i in range(40)]]

    def job(upto):
        return (Job("layouts").source(ListSource(batches[:upto], "k string, v bigint", end_of_input=False)).key_by("k")
                .process(Count(), output_schema="k string, n bigint").sink(sink)
                .with_settings(key_groups=16, bucket_size=3, **FAST))

    sink = MemorySink()
    spec = run_open.operator_spec
    monkeypatch.setattr(run_open, "operator_spec",
                        lambda *a, **k: dataclasses.replace(spec(*a, **k), inline_buckets=False))
    assert job(2).run(checkpoint_dir=checkpoint, spark=spark).completed
    before = group_metas(spark, checkpoint, "rocksdb")
    assert before and all(m.inline is None and m.n_keys for m in before.values())  # the earlier layout
    monkeypatch.undo()
    assert job(4).run(checkpoint_dir=checkpoint, spark=spark).completed
    h = job(4).harness()
    assert canonical(sink.rows()) == canonical([r for b in batches for r in h.process_batch(b)])
    after = group_metas(spark, checkpoint, "rocksdb")
    assert any(m.inline is not None for m in after.values()) and any(m.n_buckets > 1 for m in after.values())
    assert all(m.n_buckets == 1 for m in after.values() if m.inline is not None)
    counts: dict[str, int] = {}
    for b in batches:
        for e in b:
            counts[e["k"]] = counts.get(e["k"], 0) + 1
    saved = read_savepoint(take_savepoint(str(checkpoint), target=str(tmp_path / "sp"), spark=spark)["location"])
    held = [(key, rec) for _, key, rec in saved.records()]
    assert len(held) == len(counts) and {k: r["n"] for k, r in held} == counts
