"""TTL cleanup (``engine/ttl.py``): expired entries leave the stored state with every strategy,
and nothing unexpired is ever removed.

The reference is a tiny independent model of Flink's rule, ``expired = last_access + ttl <=
now``, kept beside the harness: every entry written, with the time it was written at. After
every batch the harness's stored entries must lie between "the model's unexpired entries"
(nothing alive removed) and "all the model's entries" (nothing invented)."""

from __future__ import annotations

import pickle
import random
from datetime import timedelta

import pytest
from ttl_stub import stub_for

from sparkstate.api.functions import MIN_WATERMARK, KeyedProcessFunction
from sparkstate.api.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from sparkstate.api.ttl import StateTtlConfig
from sparkstate.engine.keygroups import GroupMeta, KeyGroupStore
from sparkstate.engine.ttl import TtlCleanup, config_from_json, config_to_json, expire_record, walk_keys
from sparkstate.testing import KeyedHarness

TTL = 1_000


def ttl(**options) -> StateTtlConfig:
    builder = StateTtlConfig.new_builder(timedelta(milliseconds=TTL))
    if options.get("incremental"):
        builder = builder.cleanup_incrementally(options["incremental"], options.get("every_record", False))
    if options.get("background") is False:
        builder = builder.disable_cleanup_in_background()
    elif options.get("interval"):
        builder = builder.cleanup_in_background(timedelta(milliseconds=options["interval"]))
    if options.get("snapshot"):
        builder = builder.cleanup_full_snapshot()
    return builder.build()


# --------------------------------------------------------------------------- expire_record


def _model_expired(last: int, now: int) -> bool:
    return last + TTL <= now


@pytest.mark.parametrize("seed", range(20))
def test_expire_record_matches_the_rule_for_every_kind(seed):
    rng = random.Random(seed)
    now = rng.randrange(0, 5_000)
    config = ttl()
    stamp = lambda: rng.choice([now - TTL, now - TTL + 1, now - TTL - 1, rng.randrange(-2_000, 5_000)])  # noqa: E731
    rec = {
        "v": ("x", stamp()),
        "l": [(i, stamp()) for i in range(rng.randrange(0, 6))],
        "m": {f"k{i}": (i, stamp()) for i in range(rng.randrange(0, 6))},
        "plain": 3,
    }
    rec = {k: v for k, v in rec.items() if v != [] and v != {}}
    before = pickle.loads(pickle.dumps(rec))
    changed = expire_record(rec, {"v": config, "l": config, "m": config}, now, MIN_WATERMARK)
    expect = {"plain": 3}
    if not _model_expired(before["v"][1], now):
        expect["v"] = before["v"]
    kept = [e for e in before.get("l", []) if not _model_expired(e[1], now)]
    if kept:
        expect["l"] = kept
    entries = {k: e for k, e in before.get("m", {}).items() if not _model_expired(e[1], now)}
    if entries:
        expect["m"] = entries
    assert rec == expect
    assert changed == (rec != before)


def test_the_boundary_itself_is_expired_and_event_time_uses_the_watermark():
    config = ttl()
    rec = {"v": (1, 0)}
    assert not expire_record(rec, {"v": config}, TTL - 1, MIN_WATERMARK) and rec
    assert expire_record(rec, {"v": config}, TTL, MIN_WATERMARK) and rec == {}
    event = StateTtlConfig.new_builder(timedelta(milliseconds=TTL)).use_event_time().build()
    rec = {"v": (1, 0)}
    assert not expire_record(rec, {"v": event}, 10 * TTL, MIN_WATERMARK)  # no watermark yet: nothing expires
    assert expire_record(rec, {"v": event}, 0, TTL) and rec == {}


def test_values_not_in_the_stored_representation_are_left_alone():
    rec = {"v": True, "l": [1, 2], "m": {"a": 1}}
    config = ttl()
    assert not expire_record(rec, {"v": config, "l": config, "m": config}, 10**12, MIN_WATERMARK)
    assert rec == {"v": True, "l": [1, 2], "m": {"a": 1}}


def test_configs_round_trip_through_checkpoint_metadata():
    config = StateTtlConfig.new_builder(timedelta(hours=2)).use_event_time().cleanup_incrementally(7, True) \
        .cleanup_full_snapshot().cleanup_in_background(timedelta(minutes=5)).update_ttl_on_read_and_write().build()
    assert config_from_json(config_to_json(config)) == config


# --------------------------------------------------------------------------- GroupMeta


def test_group_meta_of_a_job_without_ttl_keeps_its_bytes_and_old_metas_load():
    meta = GroupMeta(n_buckets=3, n_keys=40, event_min={1: 5}, proc_min={2: 9}, wake=9)
    old_format = pickle.dumps((meta.version, 3, 40, {1: 5}, {2: 9}, 9), protocol=5)
    assert meta.dumps() == old_format
    loaded = GroupMeta.loads(old_format)
    assert loaded == meta and loaded.ttl_cursor == (0, 0) and loaded.sweep_at is None
    meta.ttl_cursor, meta.sweep_at = (2, 17), 12_345
    assert GroupMeta.loads(meta.dumps()) == meta
    # a meta with a seventh field (a broadcast state reference) and no TTL fields loads too
    seven = pickle.dumps((meta.version, 3, 40, {1: 5}, {2: 9}, 9, "ref"), protocol=5)
    assert GroupMeta.loads(seven).ttl_cursor == (0, 0) and GroupMeta.loads(seven).sweep_at is None
    # and the TTL fields come after that slot, where a reader of the seven fields looks no further
    assert pickle.loads(meta.dumps())[6:] == (None, (2, 17), 12_345)


def test_a_due_sweep_wakes_an_idle_group():
    meta = GroupMeta(sweep_at=5_000)
    assert meta.next_wake(1_000) == 5_000
    assert meta.next_wake(6_000) == 6_001  # overdue: the next call sweeps
    meta.proc_min = {0: 3_000}
    assert meta.next_wake(1_000) == 3_000


# --------------------------------------------------------------------------- the cursor


def _store(n_keys: int, bucket_size: int = 8) -> tuple[KeyGroupStore, dict[int, bytes]]:
    """A key group of ``n_keys`` TTL'd values written at 0, and its buckets as stored."""
    store = KeyGroupStore(GroupMeta(), lambda b: None, bucket_size)
    for k in range(n_keys):
        store.record_for(f"k{k}")["v"] = (k, 0)
    blobs = dict(store.flush([f"k{k}" for k in range(n_keys)]))
    return store, blobs


def test_successive_walks_cover_the_whole_group():
    store, _ = _store(50)
    assert store.meta.n_buckets > 3
    cursor, seen = (0, 0), []
    for _ in range(10):
        cursor, walked = walk_keys(store, cursor, 5, store.meta.n_keys)
        seen += [k for _, k, _ in walked]
    assert sorted(seen) == sorted(f"k{k}" for k in range(50))
    # asking for more than the group holds checks each key once
    _, walked = walk_keys(store, (0, 0), 500, store.meta.n_keys)
    assert len(walked) == len({k for _, k, _ in walked}) == 50


def test_incremental_cleanup_on_a_bucketed_group_writes_back_what_it_changed():
    store, blobs = _store(50)
    meta = store.meta
    cleanup = TtlCleanup([ValueStateDescriptor("v", int).enable_time_to_live(ttl(incremental=10, background=False))])
    keys = []
    for _ in range(5):  # five runs of 10 keys each, from the cursor the meta carries: every key expires
        store = KeyGroupStore(GroupMeta.loads(meta.dumps()), blobs.get, 8)
        touched: dict = {}
        cleanup.run_group(store, store.meta, store.meta.n_keys, touched, 0, 10 * TTL, MIN_WATERMARK, store.adopt)
        keys.append(store.meta.n_keys - len(touched))
        blobs.update(store.flush(touched))
        meta = store.meta
    assert keys == [40, 30, 20, 10, 0] and meta.n_keys == 0
    assert all(pickle.loads(blob) == {} for blob in blobs.values())


# --------------------------------------------------------------------------- on the harness


class Writes(KeyedProcessFunction):
    """Writes TTL'd Value, List and Map state as each event says (``op``: v, l or m)."""

    def __init__(self, config: StateTtlConfig) -> None:
        self.config = config

    def open(self, ctx):
        self.v = stub_for(ctx, ValueStateDescriptor("v", int).enable_time_to_live(self.config))
        self.l = stub_for(ctx, ListStateDescriptor("l", int).enable_time_to_live(self.config))
        self.m = stub_for(ctx, MapStateDescriptor("m", str, int).enable_time_to_live(self.config))
        self.plain = ctx.get_state(ValueStateDescriptor("plain", int, default=0))

    def process_element(self, ev, ctx):
        op = ev["op"]
        if op == "v":
            self.v.update(ev["x"])
        elif op == "l":
            self.l.add(ev["x"])
        elif op == "m":
            self.m.put(f"u{ev['x'] % 3}", ev["x"])
        else:
            self.plain.update(self.plain.value() + 1)  # a key touched without TTL'd writes
        return []


class Model:
    """Every entry written, with its last write time (OnCreateAndWrite): ``(key, state, id) -> t``."""

    def __init__(self) -> None:
        self.entries: dict[tuple, int] = {}
        self.list_seq: dict[str, int] = {}

    def apply(self, ev: dict, now: int) -> None:
        key, op, x = ev["key"], ev["op"], ev["x"]
        if op == "v":
            self.entries[(key, "v", None)] = now
        elif op == "l":
            n = self.list_seq.get(key, 0)
            self.list_seq[key] = n + 1
            self.entries[(key, "l", (x, n))] = now
        elif op == "m":
            self.entries[(key, "m", f"u{x % 3}")] = now

    def alive(self, now: int) -> set[tuple]:
        return {e for e, t in self.entries.items() if not t + TTL <= now}


def stored_entries(h: KeyedHarness) -> set[tuple]:
    out = set()
    for key, rec in h.records.items():
        if "v" in rec:
            out.add((key, "v", None))
        for n, (x, _) in enumerate(rec.get("l", [])):
            out.add((key, "l", n, x))
        for uk in rec.get("m", {}):
            out.add((key, "m", uk))
    return out


def _normalise(model: Model, h: KeyedHarness) -> tuple[set, set, set]:
    """(stored, alive, all) in one shape: list elements by their value (unique per key here)."""
    def shape(e):
        key, state, ident = e
        return (key, "l", ident[0]) if state == "l" else e
    stored = {(e[0], "l", e[3]) if e[1] == "l" else e for e in stored_entries(h)}
    return stored, {shape(e) for e in model.alive(h.processing_time)}, {shape(e) for e in model.entries}


STRATEGIES = {
    "touched only": dict(background=False),
    "incremental": dict(incremental=3, background=False),
    "incremental every record": dict(incremental=1, every_record=True, background=False),
    "background": dict(interval=700),
    "all": dict(incremental=2, interval=1_500),
}


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
@pytest.mark.parametrize("seed", range(6))
def test_cleanup_never_removes_an_unexpired_entry_and_drops_expired_ones(strategy, seed):
    rng = random.Random(seed)
    h = KeyedHarness(Writes(ttl(**STRATEGIES[strategy])), key_by="key", processing_time=1, key_groups=4)
    model = Model()
    now = 1
    counter = 0
    for _ in range(60):
        now += rng.choice([0, 10, 100, 400, 999, 1_000, 1_001])
        batch = []
        for _ in range(rng.randrange(0, 6)):
            counter += 1
            batch.append({"key": f"k{rng.randrange(12)}", "op": rng.choice("vlmp"), "x": counter})
        h.process_batch(batch, processing_time=now)
        for ev in batch:
            if ev["op"] != "p":
                model.apply(ev, now)
        stored, alive, every = _normalise(model, h)
        assert alive <= stored, f"unexpired entries removed: {sorted(alive - stored)}"
        assert stored <= every, f"entries never written: {sorted(stored - every)}"
        # a key the batch touched holds no expired entry
        for ev in batch:
            rec = h.records.get(ev["key"], {})
            assert "v" not in rec or rec["v"][1] + TTL > now
            assert all(t + TTL > now for _, t in rec.get("l", []))
            assert all(t + TTL > now for _, t in rec.get("m", {}).values())
        model.entries = {e: t for e, t in model.entries.items() if _shape_in(e, stored)}


def _shape_in(e: tuple, stored: set) -> bool:
    key, state, ident = e
    return ((key, "l", ident[0]) if state == "l" else e) in stored


def _load(h: KeyedHarness, keys: int, op: str = "v") -> None:
    h.process_batch([{"key": f"k{i}", "op": op, "x": i} for i in range(keys)], processing_time=1_000)


def _expired_left(h: KeyedHarness) -> int:
    return sum(1 for rec in h.records.values() if "v" in rec and rec["v"][1] + TTL <= h.processing_time)


def test_touched_keys_lose_expired_entries_but_untouched_ones_stay_without_other_cleanup():
    h = KeyedHarness(Writes(ttl(background=False)), key_by="key", processing_time=1_000)
    _load(h, 20)
    h.process_batch([{"key": f"k{i}", "op": "p", "x": 0} for i in range(5)], processing_time=1_000 + TTL)
    assert all("v" not in h.records[f"k{i}"] for i in range(5))
    assert _expired_left(h) == 15


def test_incremental_cleanup_shrinks_state_batch_by_batch():
    h = KeyedHarness(Writes(ttl(incremental=5, background=False)), key_by="key", processing_time=1_000, key_groups=1)
    _load(h, 40)
    sizes = []
    for i in range(10):
        # each batch touches one key of the (single) key group: the cursor checks 5 more
        h.process_batch([{"key": "other", "op": "p", "x": i}], processing_time=3_000 + i)
        sizes.append(len([k for k in h.records if k != "other"]))
    # (the touched key "other" is in the group too: the walk passes it once)
    assert sizes[:7] == [35, 30, 25, 20, 15, 10, 5] and sizes[-1] == 0


def test_incremental_cleanup_for_every_record_checks_n_per_element():
    h = KeyedHarness(Writes(ttl(incremental=2, every_record=True, background=False)), key_by="key",
                     processing_time=1_000, key_groups=1)
    _load(h, 40)
    h.process_batch([{"key": "other", "op": "p", "x": i} for i in range(4)], processing_time=3_000)
    assert len(h.records) == 1 + 40 - (2 + 2 * 4)


def test_background_sweep_empties_idle_key_groups():
    h = KeyedHarness(Writes(ttl(interval=5_000)), key_by="key", processing_time=1_000, key_groups=8)
    _load(h, 60)
    h.advance_processing_time(5_999)  # the sweep is due at 6,000
    assert len(h.records) == 60
    h.advance_processing_time(6_000)
    assert h.records == {}
    assert all(g.sweep_at is None for g in h._ttl_groups.values())  # nothing left to sweep: no more wake-ups


def test_background_sweep_keeps_what_is_not_expired_and_sweeps_again_later():
    h = KeyedHarness(Writes(ttl(interval=5_000)), key_by="key", processing_time=1_000, key_groups=1)
    _load(h, 10)
    h.process_batch([{"key": "late", "op": "v", "x": 1}], processing_time=5_500)
    h.advance_processing_time(6_000)  # sweep: the ten expired, "late" (5,500 + 1,000) not
    assert list(h.records) == ["late"]
    h.advance_processing_time(10_999)
    assert list(h.records) == ["late"]
    h.advance_processing_time(11_000)  # the next sweep, one interval later
    assert h.records == {}


def test_full_snapshot_cleanup_leaves_expired_entries_out_of_the_savepoint_only(tmp_path):
    from sparkstate.savepoint.files import LocalDirectory, open_savepoint

    h = KeyedHarness(Writes(ttl(snapshot=True, background=False)), key_by="key", processing_time=1_000)
    _load(h, 10)
    h.process_batch([{"key": "k0", "op": "l", "x": 5}, {"key": "k1", "op": "m", "x": 7}], processing_time=1_500)
    h.advance_processing_time(2_000)
    meta = h.savepoint(tmp_path / "sp")
    assert meta["keys"] == 2
    savepoint = open_savepoint(LocalDirectory(tmp_path / "sp"))
    restored = KeyedHarness.from_savepoint(tmp_path / "sp", Writes(ttl(snapshot=True, background=False)), "key")
    assert restored.records == {"k0": {"l": [(5, 1_500)]}, "k1": {"m": {"u1": (7, 1_500)}}}
    assert len(h.records) == 10 and savepoint.meta["processing_time_ms"] == 2_000  # the live state is untouched


def test_without_snapshot_cleanup_a_savepoint_keeps_expired_entries(tmp_path):
    h = KeyedHarness(Writes(ttl(background=False)), key_by="key", processing_time=1_000)
    _load(h, 10)
    h.advance_processing_time(5_000)
    assert h.savepoint(tmp_path / "sp")["keys"] == 10


def test_a_restored_harness_sweeps_the_restored_state(tmp_path):
    h = KeyedHarness(Writes(ttl(interval=5_000)), key_by="key", processing_time=1_000, key_groups=4)
    _load(h, 20)
    h.savepoint(tmp_path / "sp")
    restored = KeyedHarness.from_savepoint(tmp_path / "sp", Writes(ttl(interval=5_000)), "key")
    restored.advance_processing_time(2_000)  # the restored groups' first sweep: one interval from here
    assert len(restored.records) == 20
    restored.advance_processing_time(7_000)
    assert restored.records == {}


# --------------------------------------------------------------------------- savepoints taken from a checkpoint


def test_a_checkpoint_records_ttl_configs_and_its_savepoint_files_leave_expired_entries_out():
    from types import SimpleNamespace

    from sparkstate.runtime.checkpoint.metadata import job_metadata
    from sparkstate.runtime.savepoints.take import _group_frame, snapshot_cleanup
    from sparkstate.savepoint.format import read_table, table_to_records

    snap = ValueStateDescriptor("v", int).enable_time_to_live(ttl(snapshot=True))
    kept = ListStateDescriptor("l", int).enable_time_to_live(ttl())
    plain = ValueStateDescriptor("plain", int)
    job = SimpleNamespace(name="j", source_spec=SimpleNamespace(identity=lambda: {}), settings=SimpleNamespace(
        key_groups=4, state_backend="rocksdb"), window_assigner=None, connected=None)
    spec = SimpleNamespace(fn=Writes(ttl()), key_columns=("key",), bucket_size=8, time_mode="ProcessingTime")
    meta = job_metadata(job, spec, [snap, kept, plain], {}, "python")
    assert set(meta["state_ttl_configs"]) == {"v", "l"}
    assert "state_ttl_configs" not in job_metadata(job, spec, [plain], {}, "python")  # no TTL: as before

    records = {"a": {"v": (1, 0), "l": [(1, 0)]}, "b": {"v": (2, 900)}, "c": {"v": (3, 0)}, "d": {"plain": 4}}
    blob = pickle.dumps(records)
    assert snapshot_cleanup(meta, None, None) is None  # no processing time: nothing to judge by
    expire = snapshot_cleanup(meta, 1_500, 0)
    frame = _group_frame(3, [blob], ["l", "plain", "v"], expire)
    saved = dict(table_to_records(read_table(frame["data"][0])))
    # v expired at 1,000 where written at 0: left out, and "c" with it; l has no snapshot cleanup
    assert saved == {"a": {"l": [(1, 0)]}, "b": {"v": (2, 900)}, "d": {"plain": 4}}
    assert int(frame["keys"][0]) == 3


def test_a_key_group_restored_on_spark_is_swept_one_interval_later():
    from types import SimpleNamespace

    from sparkstate.runtime.streaming.processor import KeyGroupRunner

    class Plan:
        def records(self, blob):
            return [("a", {"v": (1, 0)}), ("b", {"plain": 2})]

    class Written:
        inline = False

        def write(self, buckets, meta, deleted=()):
            self.meta = meta

    cleanup = TtlCleanup([ValueStateDescriptor("v", int).enable_time_to_live(ttl(interval=700))])
    runner = SimpleNamespace(spec=SimpleNamespace(restore=Plan(), bucket_size=8), cleanup=cleanup)
    written = Written()
    KeyGroupRunner._restore(runner, [b"group"], written, 5_000)  # type: ignore[arg-type]
    meta = GroupMeta.loads(written.meta)
    assert meta.sweep_at == 5_700 and meta.next_wake(5_000) == 5_700
    plain = SimpleNamespace(spec=runner.spec, cleanup=TtlCleanup([]))
    KeyGroupRunner._restore(plain, [b"group"], written, 5_000)  # type: ignore[arg-type]
    assert GroupMeta.loads(written.meta).sweep_at is None
