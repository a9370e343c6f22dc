"""A savepoint on a Hadoop file system (through Spark's JVM, as HDFS or S3 would be): written
under a temporary name and published by a rename, read back with its checksums, refused when
it exists. Spark's local file system stands in for HDFS here (a ``file://`` URI given to the
Hadoop directory directly; sparkstate itself reads ``file://`` with Python)."""

from __future__ import annotations

import pytest

from sparkstate.errors import SavepointError
from sparkstate.runtime.checkpoint.hadoop_directory import HadoopDirectory
from sparkstate.savepoint.files import SavepointWriter, open_savepoint

RECORDS = [("m1", {"total": 1.5, "__timers__": {(0, 60_000)}}), ("m2", {"total": 2.0})]
META = {"job": "j", "state": {"total": "ValueState[float]"}, "key_groups": 128, "key_columns": ["merchant_id"]}


def test_a_savepoint_on_a_hadoop_file_system_round_trips(spark, tmp_path):
    location = f"file://{tmp_path}/sp"
    writer = SavepointWriter(HadoopDirectory(location, spark), dict(META), ["total"])
    writer.add_group(7, RECORDS)
    writer.publish()
    assert (tmp_path / "sp" / "_savepoint.json").exists() and not (tmp_path / "sp.inprogress").exists()

    savepoint = open_savepoint(HadoopDirectory(location, spark))
    savepoint.verify()
    assert savepoint.key_groups == [7]
    assert dict(savepoint.records(7)) == dict(RECORDS)

    with pytest.raises(SavepointError, match="already exists"):
        SavepointWriter(HadoopDirectory(location, spark), dict(META), ["total"])
