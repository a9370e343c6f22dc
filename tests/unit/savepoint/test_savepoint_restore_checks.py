"""A restore is checked before anything runs or is written (runtime/savepoints/restore.py and the order
in runtime/run/loop.py): bad savepoints are refused with the checkpoint left as it was. No
Spark: the refusals come before a session would start."""

from __future__ import annotations

import json

import pytest
from savepoint_helpers import sums_job as job
from savepoint_helpers import write_savepoint

from sparkstate import ValueStateDescriptor
from sparkstate.errors import SavepointError, StateMigrationError
from sparkstate.savepoint.format import METADATA_FILE


def savepoint(tmp_path, **meta):
    return write_savepoint(tmp_path / "sp", [ValueStateDescriptor("total", int)], {1: [("a", {"total": 5})]},
                           job=meta.pop("job", "sums"), function="Sum", key_columns=("k",), **meta)


def files_under(path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []


def refused(tmp_path, location, error=SavepointError, **kw) -> str:
    checkpoint = tmp_path / "ck"
    before = files_under(checkpoint)
    with pytest.raises(error) as err:
        job(kw.pop("name", "sums")).run(checkpoint_dir=checkpoint, from_savepoint=str(location), **kw)
    # nothing of a run: no sparkstate.json, offsets, commits or state; only the run lock's file
    # (released, it stays: see runtime/checkpoint/run_lock.py)
    assert [f for f in files_under(checkpoint) if f != "sparkstate.lock"] == before
    return str(err.value)


def test_a_missing_savepoint_is_refused_before_anything_is_written(tmp_path):
    msg = refused(tmp_path, tmp_path / "nope")
    assert "does not exist" in msg


def test_a_damaged_file_is_refused_before_anything_is_written(tmp_path):
    sp = savepoint(tmp_path)
    (sp / "state" / "kg-00001.parquet").write_bytes(b"PAR1")
    msg = refused(tmp_path, sp)
    assert "kg-00001.parquet is damaged" in msg


def test_damaged_metadata_is_refused(tmp_path):
    sp = savepoint(tmp_path)
    (sp / METADATA_FILE).write_text("{")
    assert f"{METADATA_FILE} is damaged" in refused(tmp_path, sp)


def test_a_newer_format_is_refused(tmp_path):
    sp = savepoint(tmp_path)
    meta = json.loads((sp / METADATA_FILE).read_text())
    (sp / METADATA_FILE).write_text(json.dumps({**meta, "format": 3}))
    assert "format version 3" in refused(tmp_path, sp)


def test_a_savepoint_of_another_job_is_refused(tmp_path):
    sp = savepoint(tmp_path, job="other")
    msg = refused(tmp_path, sp, StateMigrationError)
    assert "savepoint of job 'other', not of 'sums'" in msg


def test_other_key_groups_are_refused(tmp_path):
    sp = savepoint(tmp_path, key_groups=64)
    msg = refused(tmp_path, sp, StateMigrationError)
    assert "64 key groups" in msg and "--key-groups 64" in msg


def test_a_bad_savepoint_with_fresh_deletes_nothing(tmp_path):
    checkpoint = tmp_path / "ck"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "offsets" / "0").write_text("v1")
    # the job's own checkpoint (one without sparkstate.json is refused before the savepoint is read)
    (checkpoint / "sparkstate.json").write_text(json.dumps({"job": "sums"}))
    msg = refused(tmp_path, tmp_path / "nope", fresh=True)
    assert "does not exist" in msg and (checkpoint / "offsets" / "0").exists()


def test_fresh_with_the_savepoint_a_checkpoint_came_from_checks_and_restores_it_again(tmp_path, monkeypatch):
    sp = savepoint(tmp_path)
    (sp / "state" / "kg-00001.parquet").write_bytes(b"PAR1")
    checkpoint = tmp_path / "ck"
    (checkpoint / "commits").mkdir(parents=True)
    (checkpoint / "commits" / "0").write_text("v1\n{}")
    (checkpoint / "sparkstate.json").write_text(json.dumps({"job": "sums", "restored_from": {"savepoint": str(sp)}}))

    def start_fresh(*args, **kwargs):
        raise AssertionError("--fresh deleted the checkpoint before the savepoint was checked")

    monkeypatch.setattr("sparkstate.runtime.run.open.start_fresh", start_fresh)
    with pytest.raises(SavepointError) as err:
        job().run(checkpoint_dir=checkpoint, from_savepoint=str(sp), fresh=True)
    assert "kg-00001.parquet is damaged" in str(err.value)


def test_the_executors_take_only_the_files_the_driver_checked(tmp_path):
    from savepoint_helpers import job_meta

    from sparkstate.runtime.checkpoint.directory import CheckpointDir
    from sparkstate.runtime.savepoints.restore import prepare_restore

    sp = savepoint(tmp_path)
    total = ValueStateDescriptor("total", int, default=0)
    meta = job_meta([total], job="sums", function="Sum", key_columns=("k",))
    restore = prepare_restore(str(sp), meta, [total], CheckpointDir.open(tmp_path / "ck"))
    blob = (sp / "state" / "kg-00001.parquet").read_bytes()
    assert restore.plan.records(blob) == [("a", {"total": 5})]
    other = write_savepoint(tmp_path / "other", [total], {1: [("a", {"total": 6})]})
    with pytest.raises(SavepointError) as err:
        restore.plan.records((other / "state" / "kg-00001.parquet").read_bytes())
    assert "not one the restore checked" in str(err.value) and "restore again" in str(err.value)
