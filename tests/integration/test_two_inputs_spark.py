"""Two-input jobs on Spark beyond the behaviour suite, in one run to keep the suite short: a
broadcast job restarted mid-stream, then rescaled through a savepoint, gives the output of an
uninterrupted run (the harness's, which the behaviour suite checks against Spark's); its
rejected rule is one dead letter; its broadcast state is stored once for all key groups, in the
checkpoint and in the savepoint."""

from __future__ import annotations

import os

from behaviour_cases import CASES_BY_NAME, canonical, per_key, run_on_harness
from spark_helpers import FAST

from sparkstate import MemorySink


def test_broadcast_job_restarted_then_rescaled_gives_the_uninterrupted_output(spark, tmp_path):
    from sparkstate.runtime.savepoints.take import take_savepoint

    case = CASES_BY_NAME["broadcast-rules"]
    sink, dead = MemorySink(), MemorySink()
    cp2 = tmp_path / "cp2"

    def upto(n, out, parallelism):
        return (case.job(out, batches=case.batches[:n], end_of_input=False)
                .with_settings(parallelism=parallelism, **FAST).dead_letters(dead))

    assert upto(1, sink, 2).run(checkpoint_dir=cp2, spark=spark).completed
    stored = os.listdir(cp2 / "sparkstate" / "broadcast")
    assert len(stored) == 1  # one rule so far: one file, whatever the number of key groups (8)
    # restarted mid-stream from the checkpoint
    assert upto(3, sink, 2).run(checkpoint_dir=cp2, spark=spark).completed
    # one content file per broadcast state the job went through: {big}, {huge}
    assert len(os.listdir(cp2 / "sparkstate" / "broadcast")) == 2
    # the rejected rule: one dead letter (key group 0 alone reports it), with the function's reason
    assert [r["reason"] for r in dead.rows()] == [
        "Rules.process_broadcast_element rejected it: ValueError: rule neg: negative limit"
    ]

    meta = take_savepoint(str(cp2), target=str(tmp_path / "sp"), spark=spark)
    assert meta["broadcast"]["states"] == {"rules": "MapState[str, int]"}  # one file, not one per key group
    assert meta["connected"]["source_offset"]["offset"] == 3
    after = MemorySink()  # a new checkpoint numbers its batches from 0 again
    rescaled = case.job(after).with_settings(parallelism=1, **FAST)
    assert rescaled.run(checkpoint_dir=tmp_path / "cp1", spark=spark, from_savepoint=str(tmp_path / "sp")).completed

    rows = sink.rows() + after.rows()
    expected = run_on_harness(case)
    assert canonical(rows) == canonical(expected)
    assert per_key(rows, case.out_key) == per_key(expected, case.out_key)


def test_broadcast_files_no_retained_checkpoint_refers_to_are_deleted(spark, tmp_path, monkeypatch):
    """A rules update after another over months must not leave a file each: with Spark keeping
    one checkpoint, the job keeps the broadcast state that checkpoint refers to and the savepoint
    taken from it restores that state."""
    from sparkstate import CheckpointConfig
    from sparkstate.runtime.checkpoint import directory as checkpoint_dir
    from sparkstate.runtime.run import loop as run_loop
    from sparkstate.runtime.savepoints.take import take_savepoint

    monkeypatch.setattr(run_loop, "PRUNE_SECONDS", 0.0)  # after every look at the progress
    monkeypatch.setattr(checkpoint_dir, "BROADCAST_CLOCK_MARGIN", 0)
    case = CASES_BY_NAME["broadcast-rules"]
    sink, cp = MemorySink(), tmp_path / "cp"
    job = case.job(sink, end_of_input=False).with_settings(checkpoint=CheckpointConfig(retained=1), **FAST)
    assert job.run(checkpoint_dir=cp, spark=spark).completed
    # one file per broadcast state the job went through, less those no kept checkpoint refers to
    assert len(os.listdir(cp / "sparkstate" / "broadcast")) == 1
    meta = take_savepoint(str(cp), target=str(tmp_path / "sp"), spark=spark)
    assert meta["broadcast"]["states"] == {"rules": "MapState[str, int]"}
    after = MemorySink()
    assert case.job(after).with_settings(**FAST).run(checkpoint_dir=tmp_path / "cp2", spark=spark,
                                                      from_savepoint=str(tmp_path / "sp")).completed
    assert canonical(sink.rows() + after.rows()) == canonical(run_on_harness(case))
