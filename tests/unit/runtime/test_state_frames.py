"""The Spark-side entry points of offline state, where they need no Spark: a local savepoint
(a path or a file:// URI) opens without a session."""

from __future__ import annotations

import pandas as pd

from sparkstate import Job, KeyedProcessFunction, ListSource, MemorySink, ValueStateDescriptor
from sparkstate.runtime.savepoints.state_frames import open_state, write_savepoint


class Total(KeyedProcessFunction):
    def open(self, ctx):
        self.total = ctx.get_state(ValueStateDescriptor("total", float, default=0.0))

    def process_element(self, event, ctx):
        yield {"k": ctx.get_current_key()}


def test_a_local_savepoint_by_path_or_file_uri_needs_no_spark(tmp_path):
    job = (Job("t").source(ListSource([], schema="k string")).key_by("k")
           .process(Total(), output_schema="k string").sink(MemorySink()))
    write_savepoint(job, {"total": pd.DataFrame({"k": ["a"], "value": [2.0]})}, f"file://{tmp_path}/sp")
    assert (tmp_path / "sp" / "_savepoint.json").is_file()
    for where in (tmp_path / "sp", f"file://{tmp_path}/sp"):
        assert open_state(where).key("a").state == {"total": 2.0}
