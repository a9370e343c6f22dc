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
