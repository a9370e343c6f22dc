"""The savepoint's fast paths give what the plain ones give: the column-wise table builder and
reader of ``savepoint/format.py``, and the restore's one-step bucket layout
(``KeyGroupRunner._restore``) against :class:`KeyGroupStore`'s bucket-by-bucket splitting."""

from __future__ import annotations

import json
import pickle
import random
from types import SimpleNamespace

import pytest

from sparkstate.api.state import HELD_FIELD, TIMERS_FIELD
from sparkstate.engine.keygroups import GroupMeta, KeyGroupStore
from sparkstate.savepoint.format import (
    ENCODING,
    KEY_COLUMN,
    KEY_TEXT_COLUMN,
    decode_column,
    key_text,
    read_table,
    records_to_table,
    table_bytes,
    table_to_records,
)
from sparkstate.savepoint.values import Decoder

KEYS = ["a", 'q"uo\\te\n\t', "ünï ☃", "", 7, -3, 2**80, (1, "x"), 1.5, None, True, ("a", ("b", 2)), frozenset({1})]
STATES = ["s1", "s2", "s3"]


def _value(rng: random.Random):
    return rng.choice([None, 1, -(2**63), 2**63, 1.5, "s", b"b", True, [1, 2], {"a": 1}, (1, "x")])


def _records(rng: random.Random, typed: bool) -> list[tuple]:
    out = []
    for i, key in enumerate(rng.sample(KEYS, rng.randint(1, len(KEYS)))):
        rec: dict = {}
        for name in STATES:
            if rng.random() < 0.7:
                rec[name] = (i if name == "s1" else float(i)) if typed else _value(rng)
        if rng.random() < 0.3:
            rec[TIMERS_FIELD] = {(rng.randint(0, 1), rng.randint(-5, 10**12)) for _ in range(rng.randint(1, 3))}
        if rng.random() < 0.3:
            rec[HELD_FIELD] = rng.randint(0, 10**12)
        if rng.random() < 0.2:
            rec["undeclared"] = 1
        out.append((key, rec))
    return out


def _exact(records: list) -> list:
    """Records compared by type and value (``1 == True == 1.0`` would hide a changed type)."""
    return [(repr(k), sorted((n, type(v).__name__, repr(sorted(v) if isinstance(v, set) else v)) for n, v in r.items()))
            for k, r in records]


def test_key_text_is_json_without_ascii_escapes_else_repr():
    for key in KEYS[:-1]:
        assert key_text(key) == json.dumps(key, ensure_ascii=False)
    assert key_text(frozenset({1})) == "frozenset({1})"
    assert key_text(float("nan")) == "NaN"


@pytest.mark.parametrize("seed", range(40))
def test_records_round_trip_through_the_column_wise_table(seed):
    rng = random.Random(seed)
    records = _records(rng, typed=seed % 2 == 0)
    table = read_table(table_bytes(records_to_table(records, STATES)))
    expected = [(k, {n: v for n, v in r.items() if n != "undeclared"}) for k, r in records]
    assert _exact(table_to_records(table)) == _exact(expected)
    assert table.column(KEY_TEXT_COLUMN).to_pylist() == [key_text(k) for k, _ in records]
    keys = decode_column(table, KEY_COLUMN, Decoder())
    assert _exact([(k, {}) for k in keys]) == _exact([(k, {}) for k, _ in records])
    for name in STATES:  # typed exactly when every present value is one simple type that fits
        present = [r[name] for _, r in records if name in r]
        kinds = {type(v) for v in present}
        simple = len(kinds) == 1 and kinds <= {int, float, str, bool, bytes} and None not in present
        fits = simple and (kinds != {int} or all(-(2**63) <= v < 2**63 for v in present))
        assert table.schema.field(name).metadata[ENCODING] == (b"arrow" if fits else b"json")


class _Plan:
    def __init__(self, groups: dict[bytes, list]) -> None:
        self.groups = groups

    def records(self, blob: bytes) -> list:
        return [(k, dict(r)) for k, r in self.groups[blob]]


class _Written:
    def __init__(self, inline: bool = False):
        self.inline = inline

    def write(self, buckets, meta, deleted=()):
        self.buckets, self.meta = buckets, meta


def _model_layout(records: list, bucket_size: int, inline: bool):
    """The layout a store reaches key by key, splitting as it fills (the pre-existing path)."""
    meta = GroupMeta()
    store = KeyGroupStore(meta, lambda b: None, bucket_size)
    keys = []
    for key, rec in records:
        store.record_for(key).update(rec)
        keys.append(key)
    return (store.flush_entries(keys)[0] if inline else store.flush(keys)), meta


@pytest.mark.parametrize("inline", [False, True])
@pytest.mark.parametrize(("n_keys", "bucket_size"), [(1, 4), (3, 4), (5, 4), (300, 4), (1000, 128), (129, 128)])
def test_restore_lays_out_buckets_as_splitting_would(n_keys, bucket_size, inline):
    from sparkstate.runtime.streaming.processor import KeyGroupRunner

    rng = random.Random(n_keys)
    records = [(f"k{i}", {"v": i, TIMERS_FIELD: {(i % 2, rng.randint(0, 10**6))}} if i % 3 else {"v": i})
               for i in range(n_keys)]
    records.append(("emptied", {}))  # a record whose states were all dropped is not kept
    half = len(records) // 2
    plan = _Plan({b"first": records[:half], b"second": records[half:]})
    runner = SimpleNamespace(spec=SimpleNamespace(restore=plan, bucket_size=bucket_size))
    written = _Written(inline)
    dumped = KeyGroupRunner._restore(runner, [b"first", b"second"], written)  # type: ignore[arg-type]
    expected_writes, expected_meta = _model_layout(records, bucket_size, inline)
    assert written.meta == dumped
    got = GroupMeta.loads(dumped)
    assert (got.n_buckets, got.n_keys, got.event_min, got.proc_min) == (
        expected_meta.n_buckets, expected_meta.n_keys, expected_meta.event_min, expected_meta.proc_min)
    # a one-bucket group holds its bucket inline, as a run would have left it (RocksDB backend),
    # unless it holds event-time timers (its meta is rewritten every batch)
    assert (got.inline is not None) == (inline and got.n_buckets == 1 and not got.event_min)
    if got.inline is not None:
        assert pickle.loads(got.inline) == pickle.loads(expected_meta.inline)
    # the same keys in the same buckets (a bucket left empty by the splits need not be written:
    # an absent bucket reads as an empty one)
    got_buckets = {b: pickle.loads(blob) for b, blob in written.buckets}
    assert got_buckets == {b: d for b, blob in expected_writes if (d := pickle.loads(blob))}
