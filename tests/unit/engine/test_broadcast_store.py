"""Broadcast state stored once per content (engine/broadcast.py), and the packing of an
unkeyed (broadcast) input."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from sparkstate import CheckpointMismatchError
from sparkstate.engine.broadcast import BroadcastStore, content_ref
from sparkstate.engine.events import EVERY_KEY_GROUP, Packer, unpack_events
from sparkstate.engine.keygroups import GroupMeta, dumps_state


def test_same_content_is_one_file_and_one_reference(tmp_path):
    a, b = BroadcastStore(str(tmp_path)), BroadcastStore(str(tmp_path))
    states = {"rules": {"big": 10, "small": 1}}
    ref = a.save(states)
    assert b.save({"rules": {"big": 10, "small": 1}}) == ref == content_ref(dumps_state(states))
    assert os.listdir(tmp_path) == [f"{ref}.pkl"]  # written once, no temporary file left
    assert a.save({"rules": {"big": 11}}) != ref
    assert len(os.listdir(tmp_path)) == 2


def test_load_gives_a_fresh_copy_and_none_is_empty(tmp_path):
    store = BroadcastStore(str(tmp_path))
    assert store.load(None) == {}
    ref = store.save({"rules": {"big": 10}})
    first = store.load(ref)
    first["rules"]["big"] = 99  # the function changes its copy
    assert store.load(ref) == {"rules": {"big": 10}}
    BroadcastStore._cache.pop(ref)  # another process: read from the file
    assert BroadcastStore(str(tmp_path)).load(ref) == {"rules": {"big": 10}}


def test_a_process_keeps_only_the_recent_broadcast_states_in_memory(tmp_path):
    store = BroadcastStore(str(tmp_path))
    refs = [store.save({"rules": {"version": v}}) for v in range(1000)]  # a rules update after another
    assert len(BroadcastStore._cache) <= 8 and len(BroadcastStore._seen) <= 32
    assert store.load(refs[0]) == {"rules": {"version": 0}}  # an old one is read again from its file
    assert store.load(refs[-1]) == {"rules": {"version": 999}}
    assert store.save({"rules": {"version": 0}}) == refs[0] and len(os.listdir(tmp_path)) == 1000


def test_a_missing_content_file_says_what_to_do(tmp_path):
    with pytest.raises(CheckpointMismatchError, match="missing from .*Restore the whole directory"):
        BroadcastStore(str(tmp_path)).load("0" * 32)


def test_a_file_rewritten_elsewhere_is_written_there_too(tmp_path):
    ref = BroadcastStore(str(tmp_path / "one")).save({"r": {1: 2}})
    assert BroadcastStore(str(tmp_path / "two")).save({"r": {1: 2}}) == ref
    assert (tmp_path / "two" / f"{ref}.pkl").exists()


def test_group_meta_keeps_the_reference():
    meta = GroupMeta(broadcast="ab" * 16)
    assert GroupMeta.loads(meta.dumps()).broadcast == "ab" * 16
    assert GroupMeta.loads(GroupMeta().dumps()).broadcast is None


def test_an_unkeyed_input_packs_for_every_key_group_and_its_dead_letters_for_group_0():
    packer = Packer([], 8, None)
    batch = pa.RecordBatch.from_pylist([{"name": "big", "limit": 10}, {"name": "small", "limit": 1}])
    rows = packer.pack(batch, part=0, seq=0, dead=[{"raw": "x", "reason": "not JSON"}]).to_pylist()
    assert [r["kg"] for r in rows] == [EVERY_KEY_GROUP, 0]
    assert rows[0]["ts"] is None
    events = unpack_events([(r["part"], r["seq"], r["blob"]) for r in rows])
    assert list(events) == [{"name": "big", "limit": 10}, {"name": "small", "limit": 1}]
    assert events.dead_letters == [{"raw": "x", "reason": "not JSON"}]
