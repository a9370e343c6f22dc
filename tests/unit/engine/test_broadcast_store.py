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


def _age(store: BroadcastStore, ref: str, at: float) -> None:
    os.utime(store.path(ref), (at, at))


def test_prune_keeps_the_newest_state_saved_before_the_cutoff_and_all_later_ones(tmp_path):
    store = BroadcastStore(str(tmp_path))
    refs = [store.save({"rules": {"version": v}}) for v in range(5)]
    for i, ref in enumerate(refs):
        _age(store, ref, 1000.0 + i)
    (tmp_path / ".dead-write.tmp").write_bytes(b"x")  # a write that died
    os.utime(tmp_path / ".dead-write.tmp", (1.0, 1.0))
    assert store.prune(saved_before=1002.5, keep=frozenset([refs[0]])) == 2  # refs[1] and the dead write
    assert sorted(os.listdir(tmp_path)) == sorted(f"{r}.pkl" for r in (refs[0], refs[2], refs[3], refs[4]))
    assert store.prune(saved_before=999.0) == 0  # nothing saved before: nothing is known unreferenced
    assert store.load(refs[2]) == {"rules": {"version": 2}}


def test_an_earlier_state_saved_again_is_current_and_a_pruned_one_is_written_again(tmp_path):
    store = BroadcastStore(str(tmp_path))
    old, new = store.save({"rules": {"v": 1}}), store.save({"rules": {"v": 2}})
    _age(store, old, 1000.0)
    _age(store, new, 1001.0)
    assert store.save({"rules": {"v": 1}}) == old  # back to the first rules: touched now
    assert store.prune(saved_before=os.stat(store.path(old)).st_mtime + 1) == 1
    assert os.listdir(tmp_path) == [f"{old}.pkl"]
    assert store.save({"rules": {"v": 2}}) == new  # cached and seen by this process, but pruned: written again
    assert os.path.exists(store.path(new))


def test_a_state_made_current_while_it_is_pruned_stays(tmp_path):
    store = BroadcastStore(str(tmp_path))
    ref = store.save({"rules": {"v": 1}})  # touched just now, after the listing said it was old
    assert store._delete_unless_touched(ref, store.path(ref), newest=1000.0) == 0
    assert os.listdir(tmp_path) == [f"{ref}.pkl"]


@pytest.mark.parametrize("seed", range(20))
def test_prune_never_deletes_a_state_a_retained_version_refers_to(tmp_path, seed):
    """An independent model: batch b (run at time b, committed at b + 0.5) saves the broadcast
    state of its rules, drawn from a few contents so that earlier ones come back; Spark retains
    the last ``retain`` versions. After every batch, pruning with the oldest retained batch's
    commit time must leave each retained version's file, and the files kept stay bounded."""
    import random

    rng = random.Random(seed)
    store = BroadcastStore(str(tmp_path))
    retain = rng.randint(1, 6)
    versions: list[str] = []  # the reference every key group holds after batch b
    current = store.save({"rules": {"v": 0}})
    for b in range(200):
        if rng.random() < 0.4:  # a batch with broadcast elements
            current = store.save({"rules": {"v": rng.randint(0, 12)}})
            _age(store, current, float(b))  # saved while batch b runs
        versions.append(current)
        retained = versions[-retain:]
        oldest = len(versions) - len(retained)
        store.prune(saved_before=oldest + 0.5)
        on_disk = {name[:-4] for name in os.listdir(tmp_path)}
        assert set(retained) <= on_disk
        assert len(on_disk) <= retain + 1
