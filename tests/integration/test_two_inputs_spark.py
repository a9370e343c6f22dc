"""Two-input jobs on Spark beyond the behaviour suite: a broadcast job restarted mid-stream,
its dead letters, and its broadcast state stored once for all key groups."""

from __future__ import annotations

import os

from behaviour_cases import CASES_BY_NAME, canonical, per_key, run_on_harness
from spark_helpers import FAST

from sparkstate import MemorySink


def test_broadcast_job_restarted_mid_stream_gives_the_uninterrupted_output(spark, checkpoint):
    case = CASES_BY_NAME["broadcast-rules"]
    sink, dead = MemorySink(), MemorySink()
    first = case.job(sink, batches=case.batches[:2], end_of_input=False).with_settings(**FAST).dead_letters(dead)
    r1 = first.run(checkpoint_dir=checkpoint, spark=spark)
    assert r1.completed
    stored = os.listdir(checkpoint / "sparkstate" / "broadcast")
    assert len(stored) == 1  # one rule so far: one file, whatever the number of key groups (8)
    second = case.job(sink).with_settings(**FAST).dead_letters(dead)
    r2 = second.run(checkpoint_dir=checkpoint, spark=spark)
    assert r2.completed
    expected = run_on_harness(case)
    assert canonical(sink.rows()) == canonical(expected)
    assert per_key(sink.rows(), case.out_key) == per_key(expected, case.out_key)
    # the rejected rule: one dead letter (key group 0 reports it), with the function's reason
    assert [r["reason"] for r in dead.rows()] == [
        "Rules.process_broadcast_element rejected it: ValueError: rule neg: negative limit"
    ]
    # one content file per broadcast state the job went through: {big}, {huge}
    assert len(os.listdir(checkpoint / "sparkstate" / "broadcast")) == 2
