"""Savepoints and job metadata for the savepoint unit tests, built without Spark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sparkstate.api.state import StateDescriptor
from sparkstate.savepoint.files import LocalDirectory, SavepointWriter
from sparkstate.savepoint.migration import type_info, value_type


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
