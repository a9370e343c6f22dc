"""The bucketed state layout of a key group (pure Python, no Spark)."""

from __future__ import annotations

import pickle
import random

from sparkstate.api.state import TIMERS_FIELD
from sparkstate.engine.keygroups import GroupMeta, KeyGroupStore, bucket_address, bucket_hash


def test_bucket_hash_is_stable_across_processes():
    # fixed values: a change here would make existing checkpoints unreadable
    assert bucket_hash("m000001") == bucket_hash("m000001")
    assert bucket_hash(("a", 1)) == bucket_hash(("a", 1))
    assert bucket_hash(5) != bucket_hash(6)
    import subprocess
    import sys

    other = subprocess.run(
        [sys.executable, "-c", "from sparkstate.engine.keygroups import bucket_hash; print(bucket_hash('m000001'))"],
        capture_output=True, text=True, check=True,
    )
    assert int(other.stdout) == bucket_hash("m000001")


def test_linear_hashing_addresses_are_in_range_and_split_consistently():
    hashes = [bucket_hash(f"k{i}") for i in range(2000)]
    for n in range(1, 70):
        level = n.bit_length() - 1
        split = n - (1 << level)
        for h in hashes:
            a, b = bucket_address(h, n), bucket_address(h, n + 1)
            assert 0 <= a < n and 0 <= b < n + 1
            # growing by one bucket moves keys only out of the split bucket, into the new one
            assert a == b or (a == split and b == n)


class Memory:
    """A stand-in for the state store: bucket -> blob."""

    def __init__(self):
        self.blobs: dict[int, bytes] = {}
        self.meta = GroupMeta()

    def store(self, size=4):
        return KeyGroupStore(self.meta, self.blobs.get, size)

    def write(self, store, touched):
        for b, blob in store.flush(touched):
            self.blobs[b] = blob
        self.meta = store.meta


def test_records_survive_splits_and_reloads():
    mem = Memory()
    keys = [f"user-{i}" for i in range(300)]
    for _ in range(3):
        store = mem.store()
        for k in keys:
            rec = store.record_for(k)
            rec["n"] = rec.get("n", 0) + 1
        mem.write(store, keys)
    assert mem.meta.n_keys == 300
    assert mem.meta.n_buckets >= 300 // 4
    sizes = [len(pickle.loads(b)) for b in mem.blobs.values()]
    assert sum(sizes) == 300 and max(sizes) <= 3 * 4  # buckets stay near the target size
    store = mem.store()
    assert all(store.record_for(k) == {"n": 3} for k in keys)


def test_a_batch_reads_only_the_buckets_of_touched_keys():
    mem = Memory()
    keys = [f"k{i}" for i in range(4000)]
    store = mem.store(size=8)
    for k in keys:
        store.record_for(k)["v"] = 1
    mem.write(store, keys)
    store = mem.store(size=8)
    sample = random.Random(1).sample(keys, 10)
    for k in sample:
        store.record_for(k)
    assert store.reads <= 10
    writes = store.flush(sample)
    assert len(writes) <= 10


def test_emptied_records_are_dropped():
    mem = Memory()
    store = mem.store()
    store.record_for("a")["v"] = 1
    store.record_for("b")
    mem.write(store, ["a", "b"])
    assert mem.meta.n_keys == 1
    store = mem.store()
    store.record_for("a").clear()
    mem.write(store, ["a"])
    assert mem.meta.n_keys == 0


def test_timer_index_finds_due_buckets():
    mem = Memory()
    store = mem.store(size=2)
    for i in range(20):
        store.record_for(f"k{i}")[TIMERS_FIELD] = {(0, 100 + i)}
    store.record_for("p")[TIMERS_FIELD] = {(1, 50)}
    mem.write(store, [f"k{i}" for i in range(20)] + ["p"])
    assert min(mem.meta.event_min.values()) == 100
    assert list(mem.meta.proc_min.values()) == [50]
    due = mem.store(size=2).due_candidates(watermark=101, processing_time=0)
    due_keys = {k for k, rec in due if any(ts <= 101 for d, ts in rec[TIMERS_FIELD] if d == 0)}
    assert due_keys == {"k0", "k1"}
    assert len(due) < 21  # only the due buckets were loaded


def test_wake_time():
    meta = GroupMeta(proc_min={0: 500})
    assert meta.next_wake(100) == 500
    meta.event_min = {1: 10**15}
    assert meta.next_wake(100) == 101  # event-time timers: poll every batch
    assert GroupMeta().next_wake(100) is None


def test_meta_round_trip():
    meta = GroupMeta(3, 10, {0: 1}, {2: 5}, 77)
    assert GroupMeta.loads(meta.dumps()) == meta
    assert GroupMeta.loads(None) == GroupMeta()


# --------------------------------------------------------------------------- inline buckets


class Entries:
    """A stand-in for the RocksDB backend's state: the meta entry (bytes, as stored) and the
    bucket entries, written as ``KeyGroupRunner`` writes them (``flush_entries``)."""

    def __init__(self, size: int = 4):
        self.meta_blob: bytes | None = None
        self.entries: dict[int, bytes] = {}
        self.size = size
        self.bucket_reads = 0

    def _read(self, b: int) -> bytes | None:
        self.bucket_reads += 1
        return self.entries.get(b)

    def store(self) -> KeyGroupStore:
        return KeyGroupStore(GroupMeta.loads(self.meta_blob), self._read, self.size)

    def write(self, store: KeyGroupStore, touched) -> None:
        writes, deleted = store.flush_entries(touched)
        for b, blob in writes:
            self.entries[b] = blob
        for b in deleted:
            self.entries.pop(b, None)
        self.meta_blob = store.meta.dumps()

    def records(self) -> dict:
        """Every record, read the way a savepoint reads them: bucket entries and the inline one."""
        out: dict = {}
        meta = GroupMeta.loads(self.meta_blob)
        for blob in [*self.entries.values(), meta.inline]:
            for key, rec in (pickle.loads(blob) if blob else {}).items():
                assert key not in out, f"{key!r} is held twice"
                out[key] = rec
        return out


def test_a_small_group_is_one_entry_read_and_written_once():
    state = Entries(size=4)
    store = state.store()
    store.record_for("a")["v"] = 1
    state.write(store, ["a"])
    assert state.entries == {} and GroupMeta.loads(state.meta_blob).inline is not None
    assert pickle.loads(state.meta_blob)[0] == 2  # the inline layout's version: older versions refuse it
    store = state.store()
    store.record_for("a")["v"] += 1
    store.record_for("b")["v"] = 5
    state.write(store, ["a", "b"])
    assert state.bucket_reads == 0  # the bucket came with the meta entry
    assert state.entries == {} and state.records() == {"a": {"v": 2}, "b": {"v": 5}}


def test_a_group_that_splits_moves_its_bucket_out_and_back_to_version_1():
    state = Entries(size=2)
    keys = [f"k{i}" for i in range(7)]
    for k in keys:
        store = state.store()
        store.record_for(k)["v"] = k
        state.write(store, [k])
    meta = GroupMeta.loads(state.meta_blob)
    assert meta.n_buckets > 1 and meta.inline is None and pickle.loads(state.meta_blob)[0] == 1
    assert sorted(state.entries) == list(range(meta.n_buckets))
    assert state.records() == {k: {"v": k} for k in keys}


def test_a_group_holding_event_time_timers_keeps_its_bucket_out_of_its_meta():
    """Such a group is called every batch for its timers, and its meta rewritten with the next
    wake-up: the meta must not carry the bucket, or every batch would rewrite every key."""
    state = Entries(size=8)
    store = state.store()
    for k in "abc":
        store.record_for(k)["v"] = "x" * 200
    store.record_for("a")[TIMERS_FIELD] = {(0, 5_000)}  # an event-time timer
    state.write(store, list("abc"))
    meta = GroupMeta.loads(state.meta_blob)
    assert meta.inline is None and meta.event_min == {0: 5_000} and set(state.entries) == {0}
    # a batch that touches no key: the meta changes (its wake-up), and it carries no records
    poll = state.store()
    poll.meta.wake = 1_234
    state.write(poll, [])
    assert state.bucket_reads == 0 and len(state.meta_blob) < 200
    # once its last event-time timer is gone, the bucket goes back inline (and its entry away)
    store = state.store()
    store.record_for("a").pop(TIMERS_FIELD)
    state.write(store, ["a"])
    meta = GroupMeta.loads(state.meta_blob)
    assert meta.inline is not None and not meta.event_min and state.entries == {}
    assert state.records() == {k: {"v": "x" * 200} for k in "abc"}
    # processing-time timers wake the group at their time only: the bucket stays inline
    store = state.store()
    store.record_for("b")[TIMERS_FIELD] = {(1, 9_000)}
    state.write(store, ["b"])
    assert GroupMeta.loads(state.meta_blob).inline is not None and state.entries == {}


def test_a_group_written_before_inline_buckets_moves_its_bucket_in_when_touched():
    old = GroupMeta(n_keys=2)  # the layout every earlier version wrote: bucket 0 in an entry
    state = Entries(size=4)
    state.meta_blob = old.dumps()
    state.entries = {0: pickle.dumps({"a": {"v": 1}, "b": {"v": 2}})}
    untouched = state.store()
    state.write(untouched, [])  # a call that touched nothing (a timer) leaves it where it is
    assert 0 in state.entries and GroupMeta.loads(state.meta_blob).inline is None
    store = state.store()
    store.record_for("a")["v"] = 10
    state.write(store, ["a"])
    assert state.bucket_reads == 1 and state.entries == {}  # read from its entry, then deleted
    assert state.records() == {"a": {"v": 10}, "b": {"v": 2}}


def test_inline_buckets_hold_every_record_once_against_a_model():
    rng = random.Random(7)
    for trial in range(40):
        state, model = Entries(size=rng.choice([1, 2, 3, 8])), {}
        if rng.random() < 0.3:  # some groups start in the earlier layout
            model = {f"o{i}": {"v": i} for i in range(rng.randint(1, 3))}
            state.meta_blob = GroupMeta(n_keys=len(model), n_buckets=1).dumps()
            state.entries = {0: pickle.dumps(model)}
            model = {k: dict(v) for k, v in model.items()}
        for _ in range(rng.randint(1, 30)):
            store = state.store()
            touched = rng.sample([f"k{i}" for i in range(25)] + list(model), rng.randint(0, 6))
            for key in touched:
                rec = store.record_for(key)
                if rng.random() < 0.2:
                    rec.clear()
                    model.pop(key, None)
                else:
                    rec["v"] = model.setdefault(key, {"v": 0})["v"] + 1
                    model[key]["v"] = rec["v"]
            state.write(store, touched)
            meta = GroupMeta.loads(state.meta_blob)
            assert state.records() == model, trial
            assert meta.n_keys == len(model)
            if meta.inline is not None:  # the invariant: one bucket, and no entry holds a record
                assert meta.n_buckets == 1
                assert not any(pickle.loads(b) for b in state.entries.values())


def test_a_batch_written_as_entries_after_inline_ones_leaves_no_stale_inline_bucket():
    """The entries-only layout (``flush``, as the hashmap backend and earlier versions write)
    over a group whose bucket is inline: the entries win, split or not."""
    for size, added in ((2, ["b", "c"]), (4, ["b"])):
        state = Entries(size=size)
        store = state.store()
        store.record_for("a")["v"] = 1
        state.write(store, ["a"])
        assert GroupMeta.loads(state.meta_blob).inline is not None
        store = state.store()
        store.record_for("a")["v"] = 2
        for k in added:
            store.record_for(k)["v"] = k
        for b, blob in store.flush(["a", *added]):
            state.entries[b] = blob
        state.meta_blob = store.meta.dumps()
        assert GroupMeta.loads(state.meta_blob).inline is None
        expected = {"a": {"v": 2}, **{k: {"v": k} for k in added}}
        assert state.records() == expected
        reread = state.store()
        assert dict(reread.all_records()) == expected


def test_meta_layouts_read_and_refused():
    inline = GroupMeta(1, 1, inline=pickle.dumps({"a": {"v": 1}}))
    assert GroupMeta.loads(inline.dumps()).inline == inline.inline
    assert GroupMeta.loads(GroupMeta(2, 5).dumps()).inline is None
    import pytest

    from sparkstate.errors import CheckpointMismatchError

    with pytest.raises(CheckpointMismatchError, match="layout version 3"):
        GroupMeta.loads(pickle.dumps((3, 1, 0, {}, {}, None)))


def test_a_restored_one_bucket_group_is_written_inline_on_rocksdb_only():
    from types import SimpleNamespace

    from sparkstate.engine.ttl import TtlCleanup
    from sparkstate.runtime.streaming.processor import KeyGroupRunner

    class Plan:
        def records(self, blob):
            return [("a", {"v": 1}), ("b", {"v": 2})]

    class Written:
        def __init__(self, inline):
            self.inline = inline

        def write(self, buckets, meta, deleted=()):
            self.buckets, self.meta = buckets, meta

    for inline, size in ((True, 8), (False, 8), (True, 1)):
        runner = SimpleNamespace(spec=SimpleNamespace(restore=Plan(), bucket_size=size), cleanup=TtlCleanup([]))
        written = Written(inline)
        KeyGroupRunner._restore(runner, [b"group"], written, 5_000)  # type: ignore[arg-type]
        meta = GroupMeta.loads(written.meta)
        held = {k: r for blob in [*(b for _, b in written.buckets), meta.inline] if blob
                for k, r in pickle.loads(blob).items()}
        assert held == {"a": {"v": 1}, "b": {"v": 2}}
        assert (meta.inline is not None) == (inline and meta.n_buckets == 1)
