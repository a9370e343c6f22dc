"""A Parquet output folder holding another checkpoint's batches is refused before Spark
starts: Spark's file sink would drop the new checkpoint's batches of the same ids."""

from __future__ import annotations

import pytest

from sparkstate import Job, ListSource, ParquetSink, SinkError
from sparkstate.runtime.checkpoint.directory import CheckpointDir
from sparkstate.runtime.io.sinks import check_file_sink


def committed(checkpoint, *batches: int) -> CheckpointDir:
    for b in batches:
        for log in ("offsets", "commits"):
            (checkpoint / log).mkdir(parents=True, exist_ok=True)
            (checkpoint / log / str(b)).write_text("v1\n{}\n-\n")
    return CheckpointDir.open(str(checkpoint))


def job_into(path) -> Job:
    return Job("j").source(ListSource([[{"k": "a"}]], "k string")).sink(ParquetSink(str(path)))


@pytest.mark.parametrize("layout", ["_spark_metadata/{}", "_spark_metadata/{}.compact", "batch_id={}/part-0.parquet"])
def test_an_output_folder_ahead_of_the_checkpoint_is_refused(tmp_path, layout):
    out = tmp_path / "out"
    for b in range(4):
        f = out / layout.format(b)
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("")
    job = job_into(out)
    with pytest.raises(SinkError) as failure:
        check_file_sink(job, committed(tmp_path / "new"))
    message = str(failure.value)
    assert f"output folder {out} already holds batches up to 3" in message and "has committed no batch" in message
    assert "would be dropped as already written" in message and "--sink parquet:DIR" in message
    check_file_sink(job, committed(tmp_path / "own", 0, 1, 2))  # its own checkpoint (batch 3 not yet in its log)
    with pytest.raises(SinkError, match="has committed batches up to 1"):
        check_file_sink(job, committed(tmp_path / "behind", 0, 1))


def test_an_empty_or_missing_output_folder_is_fine(tmp_path):
    check_file_sink(job_into(tmp_path / "missing"), committed(tmp_path / "c"))
    (tmp_path / "empty").mkdir()
    check_file_sink(job_into(tmp_path / "empty"), committed(tmp_path / "c"))
