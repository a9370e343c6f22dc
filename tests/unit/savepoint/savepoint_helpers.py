"""Savepoints and job metadata for the savepoint unit tests, built without Spark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sparkstate import Job, KeyedProcessFunction, ListSource, MemorySink, ValueStateDescriptor
from sparkstate.api.state import StateDescriptor
from sparkstate.savepoint.files import LocalDirectory, SavepointWriter
from sparkstate.savepoint.migration import type_info, value_type


class Sum(KeyedProcessFunction):
    """A running total per key ("total", an int)."""

    def open(self, ctx):
        self.total = ctx.get_state(ValueStateDescriptor("total", int, default=0))

    def process_element(self, e, ctx):
        self.total.update(self.total.value() + e["v"])
        yield {"k": ctx.get_current_key(), "total": self.total.value()}


def sums_job(name: str = "sums", fn: KeyedProcessFunction | None = None) -> Job:
    """A job keyed by ``k`` running ``fn`` (a :class:`Sum`) on one event."""
    source = ListSource([[{"k": "a", "v": 1}]], "k string, v bigint")
    return (Job(name).source(source).key_by("k").process(fn or Sum(), output_schema="k string, total bigint")
            .sink(MemorySink()))


def job_meta(descriptors: list[StateDescriptor], *, job: str = "payments", function: str = "RunningSum",
             key_columns: tuple[str, ...] = ("merchant_id",), key_groups: int = 128) -> dict[str, Any]:
    """What ``runtime.checkpoint.job_metadata`` records of a job (the fields a restore reads)."""
    return {
        "job": job,
        "function": function,
        "key_columns": list(key_columns),
        "key_groups": key_groups,
        "state": {d.name: d.describe() for d in descriptors},
        "state_types": {d.name: type_info(value_type(d)) for d in descriptors},
    }


def write_savepoint(path: Path, descriptors: list[StateDescriptor], groups: dict[int, list[tuple[Any, dict]]],
                    **meta: Any) -> Path:
    """A savepoint of a job declaring ``descriptors`` holding ``groups`` ({key group: records})."""
    metadata = {**job_meta(descriptors, **meta), "batch": 3, "watermark_ms": 0, "sparkstate_version": "test"}
    writer = SavepointWriter(LocalDirectory(path), metadata, sorted(metadata["state"]))
    for kg, records in sorted(groups.items()):
        writer.add_group(kg, records)
    writer.publish()
    return path
