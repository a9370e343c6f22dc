"""Writing and opening savepoint directories (savepoint/files.py): atomic publication, and the
refusal of every kind of bad input with what is wrong and what to do."""

from __future__ import annotations

import json

import pytest
from savepoint_helpers import write_savepoint

from sparkstate.api.state import ValueStateDescriptor
from sparkstate.errors import SavepointError
from sparkstate.savepoint.files import LocalDirectory, SavepointWriter, open_savepoint
from sparkstate.savepoint.format import FORMAT_VERSION, METADATA_FILE

TOTAL = ValueStateDescriptor("total", int)
GROUPS = {3: [("a", {"total": 1}), ("b", {"total": 2})], 9: [("c", {"total": 3, "__timers__": {(0, 10)}})]}


@pytest.fixture
def sp(tmp_path):
    return write_savepoint(tmp_path / "payments-b000003", [TOTAL], GROUPS)


def refusal(path) -> str:
    with pytest.raises(SavepointError) as err:
        open_savepoint(LocalDirectory(path)).verify()
    return str(err.value)


def edit_meta(sp, change):
    meta = json.loads((sp / METADATA_FILE).read_text())
    change(meta)
    (sp / METADATA_FILE).write_text(json.dumps(meta))


def test_a_published_savepoint_reads_back(sp):
    opened = open_savepoint(LocalDirectory(sp))
    opened.verify()
    assert opened.key_groups == [3, 9] and opened.meta["keys"] == 3
    assert sorted(k for _, k, _ in opened.all_records()) == ["a", "b", "c"]
    assert not (sp.parent / (sp.name + ".inprogress")).exists()


def test_a_savepoint_is_never_overwritten(sp):
    with pytest.raises(SavepointError) as err:
        SavepointWriter(LocalDirectory(sp), {}, [])
    assert "already exists" in str(err.value) and "never overwritten" in str(err.value)


def test_an_aborted_writer_leaves_nothing(tmp_path):
    writer = SavepointWriter(LocalDirectory(tmp_path / "sp"), {"job": "j"}, ["total"])
    writer.add_group(1, [("a", {"total": 1})])
    writer.abort()
    assert list(tmp_path.iterdir()) == []


def test_a_missing_path_is_refused(tmp_path):
    msg = refusal(tmp_path / "nope")
    assert f"savepoint {tmp_path / 'nope'} does not exist" in msg and "Check the path" in msg
    assert "sparkstate savepoints" in msg


def test_an_unfinished_savepoint_is_refused_as_such(tmp_path):
    writer = SavepointWriter(LocalDirectory(tmp_path / "sp"), {"job": "j"}, ["total"])
    writer.add_group(1, [("a", {"total": 1})])  # the writer stops before publishing
    msg = refusal(tmp_path / "sp")
    assert "sp.inprogress-" in msg and "has not finished" in msg and "Take a new savepoint" in msg


def test_a_directory_without_metadata_is_refused(tmp_path):
    (tmp_path / "ck").mkdir()
    msg = refusal(tmp_path / "ck")
    assert "is not a savepoint" in msg and f"no {METADATA_FILE}" in msg and "--batch" in msg


def test_damaged_metadata_is_refused(sp):
    data = (sp / METADATA_FILE).read_bytes()
    (sp / METADATA_FILE).write_bytes(data[: len(data) // 2])
    msg = refusal(sp)
    assert f"{METADATA_FILE} is damaged" in msg and "Restore the file from a copy, or take a new savepoint" in msg


def test_metadata_that_is_not_text_is_refused(sp):
    (sp / METADATA_FILE).write_bytes(b"\xff\xfe\x00")
    assert f"{METADATA_FILE} is damaged" in refusal(sp)


@pytest.mark.parametrize("change, problem", [
    (lambda m: m.pop("files"), "'files' is None"),
    (lambda m: m.update(key_groups="128"), "'key_groups' is '128'"),
    (lambda m: m["files"]["3"].pop("sha256"), "the entry of key group 3"),
    (lambda m: m["files"].update(x={}), "key group 'x'"),
])
def test_metadata_missing_what_reading_needs_is_refused(sp, change, problem):
    edit_meta(sp, change)
    msg = refusal(sp)
    assert f"{METADATA_FILE} is damaged" in msg and problem in msg


def test_something_else_s_json_is_refused(sp):
    edit_meta(sp, lambda m: m.update(kind="something-else"))
    msg = refusal(sp)
    assert "is not a sparkstate savepoint's metadata" in msg and "'something-else'" in msg


@pytest.mark.parametrize("version", [FORMAT_VERSION + 1, 99, "2", None, 0])
def test_a_newer_or_unknown_format_version_is_refused(sp, version):
    edit_meta(sp, lambda m: m.update(format=version, sparkstate_version="9.0"))
    msg = refusal(sp)
    assert f"format version {version!r}" in msg and f"reads versions 1 to {FORMAT_VERSION}" in msg
    assert "written by sparkstate 9.0" in msg and "restore it with that version or a newer one" in msg


def test_a_truncated_file_is_refused_naming_it(sp):
    path = sp / "state" / "kg-00003.parquet"
    data = path.read_bytes()
    path.write_bytes(data[:-10])
    msg = refusal(sp)
    assert str(path) in msg and "is damaged" in msg and f"it has {len(data) - 10} bytes, recorded {len(data)}" in msg
    assert "take a new one, or restore the file from a copy" in msg


def test_a_corrupted_file_of_the_same_size_fails_its_checksum(sp):
    path = sp / "state" / "kg-00009.parquet"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    msg = refusal(sp)
    assert str(path) in msg and "SHA-256" in msg and "damaged" in msg


def test_a_missing_file_is_refused(sp):
    (sp / "state" / "kg-00003.parquet").unlink()
    msg = refusal(sp)
    assert "is incomplete" in msg and "kg-00003.parquet is missing" in msg


def test_a_key_group_file_the_metadata_does_not_list_is_refused(sp):
    (sp / "state" / "kg-00004.parquet").write_bytes((sp / "state" / "kg-00003.parquet").read_bytes())
    msg = refusal(sp)
    assert "kg-00004.parquet" in msg and "does not list" in msg and "restored unchecked" in msg


def test_a_savepoint_without_state_keeps_its_state_folder(tmp_path):
    # a restore reads the folder with Spark's file source, which refuses a missing path
    sp = write_savepoint(tmp_path / "sp", [TOTAL], {})
    opened = open_savepoint(LocalDirectory(sp))
    opened.verify()
    assert opened.key_groups == [] and opened.meta["keys"] == 0
    assert [p.name for p in (sp / "state").iterdir()] == ["_empty"]
