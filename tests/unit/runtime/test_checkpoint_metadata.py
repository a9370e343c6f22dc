"""sparkstate.json in a checkpoint: a checkpoint of another job or layout is refused."""

from __future__ import annotations

import json

import pytest

from sparkstate import CheckpointMismatchError, CheckpointStorageError
from sparkstate.runtime.checkpoint import metadata as checkpoint
from sparkstate.runtime.checkpoint.directory import CheckpointDir


def check_or_write(directory, meta):
    return checkpoint.check_or_write(CheckpointDir.open(directory), meta)


def meta(**changes):
    m = {
        "format": 1, "job": "j", "function": "F", "source": {"type": "ListSource"}, "key_columns": ["k"], "key_groups": 128,
        "bucket_size": 128, "time_mode": "None", "state_backend": "rocksdb", "state": {"total": "ValueState[float]"},
        "settings": {"parallelism": 2},
    }
    m.update(changes)
    return m


def committed(path):
    (path / "commits").mkdir(parents=True, exist_ok=True)
    (path / "commits" / "0").write_text("v1\n{}\n")


def test_first_run_writes_then_same_job_passes(tmp_path):
    assert check_or_write(tmp_path, meta()) == []
    assert json.loads((tmp_path / "sparkstate.json").read_text())["job"] == "j"
    assert check_or_write(tmp_path, meta()) == []


@pytest.mark.parametrize(
    "change, message",
    [
        ({"job": "other"}, "belongs to job 'j', not 'other'"),
        ({"key_columns": ["x"]}, "the key columns changed from \\['k'\\] to \\['x'\\]"),
        ({"source": {"type": "UpiPayments", "seed": 1}}, "the source changed"),
        ({"key_groups": 64}, "the number of key groups changed from 128 to 64"),
        ({"plan": "native"}, "the execution path .* changed from 'python' to 'native'"),
        ({"state_backend": "hashmap"}, "the state backend changed from 'rocksdb' to 'hashmap'"),
        ({"state": {"total": "ListState[float]"}}, "state 'total' changed from ValueState\\[float\\] to ListState\\[float\\]"),
        ({"state_ttl": {"total": "ttl 1 day"}}, "state 'total' gained a time-to-live .*a savepoint restore converts"),
    ],
)
def test_incompatible_restart_is_refused(tmp_path, change, message):
    check_or_write(tmp_path, meta())
    committed(tmp_path)
    with pytest.raises(CheckpointMismatchError, match=message):
        check_or_write(tmp_path, meta(**change))


def test_new_state_is_allowed_and_changed_settings_warn(tmp_path):
    check_or_write(tmp_path, meta())
    committed(tmp_path)
    warnings = check_or_write(tmp_path, meta(state={"total": "ValueState[float]", "n": "ValueState[int]"},
                                             settings={"parallelism": 4}))
    assert len(warnings) == 1 and "parallelism" in warnings[0] and "Spark keeps that value" in warnings[0]


def test_removed_state_warns(tmp_path):
    check_or_write(tmp_path, meta())
    committed(tmp_path)
    warnings = check_or_write(tmp_path, meta(state={}))
    assert warnings == [
        "state 'total' (ValueState[float]) is no longer declared: its values are dropped as their keys are next touched"
    ]


def test_a_checkpoint_without_committed_batches_takes_the_new_configuration(tmp_path):
    check_or_write(tmp_path, meta())
    assert check_or_write(tmp_path, meta(key_columns=["x"])) == []  # the first run failed early
    committed(tmp_path)
    with pytest.raises(CheckpointMismatchError):
        check_or_write(tmp_path, meta())


def test_foreign_spark_checkpoint_is_refused(tmp_path):
    (tmp_path / "offsets").mkdir()
    with pytest.raises(CheckpointMismatchError, match="sparkstate did not write"):
        check_or_write(tmp_path, meta())


def test_a_directory_that_cannot_be_created_is_named(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(
        CheckpointStorageError, match="checkpoint directory .*/file/ckpt cannot be created: part of its path is a file"
    ):
        check_or_write(blocker / "ckpt", meta())


def test_last_committed_offset(tmp_path):
    assert CheckpointDir.open(tmp_path).last_committed_offset() == (None, None)
    (tmp_path / "offsets").mkdir()
    (tmp_path / "commits").mkdir()
    for b in (0, 1):
        (tmp_path / "offsets" / str(b)).write_text(f'v1\n{{}}\n{{"offset": {10 * (b + 1)}}}\n')
    (tmp_path / "commits" / "0").write_text("v1\n{}\n")
    assert CheckpointDir.open(tmp_path).last_committed_offset() == (0, {"offset": 10})


def test_a_state_that_lost_its_ttl_is_refused_and_a_changed_ttl_is_not(tmp_path):
    """A TTL'd state stores (value, last access): switching the TTL on or off under a restart
    would misread it; another duration keeps the layout."""
    check_or_write(tmp_path, meta(state_ttl={"total": "ttl 1 day"}))
    committed(tmp_path)
    assert check_or_write(tmp_path, meta(state_ttl={"total": "ttl 2 days"})) == []
    with pytest.raises(CheckpointMismatchError, match="state 'total' lost its time-to-live"):
        check_or_write(tmp_path, meta())
