"""Reading a savepoint runs no code from it (docs/guides/savepoints.md, "Trust"): declared types are
stored without pickle, pickled values are read only from a trusted savepoint, every path stays
inside the savepoint, and two writers of one target do not corrupt each other. A crafted
savepoint's checksums are recomputed, as its writer would: they prove nothing about intent."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import pickle
import random
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, NamedTuple, TypedDict
from zoneinfo import ZoneInfo

import pyarrow as pa
import pytest
from click.testing import CliRunner
from savepoint_helpers import Sum, sums_job, write_savepoint

from sparkstate import (
    Job,
    KeyedProcessFunction,
    ListStateDescriptor,
    MapStateDescriptor,
    ValueStateDescriptor,
    read_savepoint,
)
from sparkstate.errors import SavepointError
from sparkstate.savepoint.files import LocalDirectory, SavepointWriter, open_savepoint
from sparkstate.savepoint.format import (
    ENCODING,
    KEY_COLUMN,
    KEY_TEXT_COLUMN,
    METADATA_FILE,
    read_table,
    records_to_table,
    table_bytes,
    table_to_records,
)
from sparkstate.savepoint.values import Decoder, Unencodable, class_name, encode
from sparkstate.testing import KeyedHarness


@dataclass
class Point:
    x: int
    y: float
    tags: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Frozen:
    when: dt.datetime
    amount: Decimal


class Reading(TypedDict):
    sensor: str
    value: float


class Pair(NamedTuple):
    left: int
    right: str


class Opaque:
    """A value with no safe encoding (an arbitrary object)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Opaque) and other.n == self.n


class _Boom:
    """Unpickling it writes a marker file: what a crafted savepoint would run."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (Path(self.marker), "pwned"))


def _same(a: Any, b: Any) -> bool:
    """Equal, and of the same types all the way down (``1 == 1.0 == True`` hides a change)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and a != a:
        return b != b
    if isinstance(a, Decimal):
        return str(a) == str(b)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, (set, frozenset)):
        return a == b
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (Point, Frozen)):
        return all(_same(getattr(a, f), getattr(b, f)) for f in a.__dataclass_fields__)
    if isinstance(a, dt.datetime):
        return a == b and a.tzinfo == b.tzinfo and a.fold == b.fold
    return bool(a == b)


def _leaf(rnd: random.Random) -> Any:
    return rnd.choice([
        lambda: rnd.randint(-(2**70), 2**70),
        lambda: rnd.choice([0.0, -0.0, 2.5, float("inf"), -float("inf"), float("nan"), 1e-308]),
        lambda: rnd.choice(["", "m1", "ü ☃", "a\x00b", "$tuple", "\ud800", '{"$x": 1}']),
        lambda: rnd.choice([True, False, None]),
        lambda: rnd.randbytes(rnd.randint(0, 6)),
        lambda: dt.datetime(2026, 1, 2, 3, 4, 5, rnd.randint(0, 999999)),
        lambda: dt.datetime(2026, 3, 29, 2, 30, tzinfo=dt.timezone(dt.timedelta(hours=rnd.randint(-12, 12)))),
        lambda: dt.datetime(2026, 10, 25, 2, 30, fold=rnd.randint(0, 1), tzinfo=ZoneInfo("Europe/Paris")),
        lambda: dt.date(1, 1, 1) + dt.timedelta(days=rnd.randint(0, 700000)),
        lambda: dt.time(rnd.randint(0, 23), 59, 59, 999),
        lambda: dt.timedelta(days=rnd.randint(-9, 9), microseconds=rnd.randint(0, 10**6)),
        lambda: Decimal(rnd.choice(["1.10", "-0", "1E+3", "NaN"])),
    ])()


def _value(rnd: random.Random, depth: int = 0) -> Any:
    if depth >= 3 or rnd.random() < 0.4:
        return _leaf(rnd)
    kids = [_value(rnd, depth + 1) for _ in range(rnd.randint(0, 3))]
    hashable = [k for k in kids if _hashable(k)]
    return rnd.choice([
        lambda: kids,
        lambda: tuple(kids),
        lambda: {f"k{i}": k for i, k in enumerate(kids)},
        lambda: {"$not-a-tag": kids},
        lambda: {k: i for i, k in enumerate(hashable)},
        lambda: set(k for k in hashable if not isinstance(k, (float, Decimal))),  # NaN: not found in a set
        lambda: frozenset(k for k in hashable if not isinstance(k, (float, Decimal))),
        lambda: Point(rnd.randint(0, 9), rnd.random(), [str(k) for k in kids]),
        lambda: Frozen(dt.datetime(2026, 1, 1, tzinfo=dt.UTC), Decimal("12.34")),
        lambda: Reading(sensor="s1", value=rnd.random()),
        lambda: Pair(rnd.randint(0, 9), "r"),
    ])()


def _hashable(v: Any) -> bool:
    try:
        hash(v)
    except TypeError:
        return False
    return True


@pytest.mark.parametrize("seed", range(60))
def test_every_declared_kind_of_value_round_trips_without_pickle(seed):
    rnd = random.Random(seed)
    values = [_value(rnd) for _ in range(rnd.randint(1, 6))]
    keys = [rnd.choice([f"k{i}", i, (f"k{i}", i), (i, dt.date(2026, 1, 1 + i % 28))]) for i in range(len(values))]
    records = [(k, {"v": v}) for k, v in zip(keys, values)]
    table = records_to_table(records, ["v"])
    assert table.schema.field("v").metadata[ENCODING] in (b"arrow", b"json")
    assert table.schema.field(KEY_COLUMN).metadata[ENCODING] in (b"arrow", b"json")
    back = table_to_records(read_table(table_bytes(table)), Decoder({"x:Point": Point}, imported=True))
    assert len(back) == len(records)
    for (k1, r1), (k2, r2) in zip(records, back):
        assert _same(k1, k2) and _same(r1["v"], r2["v"]), (k1, r1, k2, r2)


def test_tagged_json_is_plain_json_where_json_has_the_type():
    assert encode({"a": [1, "x", None, True, 1.5]}) == '{"a":[1,"x",null,true,1.5]}'
    assert encode((1, "a")) == '{"$tuple":[1,"a"]}'
    assert encode({(0, 60000): 3}) == '{"$dict":[[{"$tuple":[0,60000]},3]]}'
    assert encode(Point(1, 2.0)) == f'{{"$dataclass":["{__name__}:Point",{{"x":1,"y":2.0,"tags":[]}}]}}'
    for opaque in (Opaque(1), pa.scalar(1), object(), [1, Opaque(2)], dt.datetime(2026, 1, 1, tzinfo=_OddZone())):
        with pytest.raises(Unencodable):
            encode(opaque)


class _OddZone(dt.tzinfo):
    def utcoffset(self, d):
        return dt.timedelta(0)


def test_a_class_the_reader_does_not_have_is_a_dict_for_a_reader_and_refused_for_a_restore():
    text = encode(Point(1, 2.0))
    assert Decoder(lenient=True).decode(text) == {"x": 1, "y": 2.0, "tags": []}
    with pytest.raises(SavepointError, match=f"class {__name__}:Point, which the job does not declare"):
        Decoder().decode(text)
    # a class is never imported because a file names it
    crafted = '{"$dataclass": ["antigravity:Anything", {}]}'
    assert Decoder(imported=True, lenient=True).decode(crafted) == {}
    assert "antigravity" not in __import__("sys").modules
    # a class found by name must be a dataclass to be built as one
    assert Decoder(imported=True, lenient=True).decode('{"$dataclass": ["os:_wrap_close", {"a": 1}]}') == {"a": 1}


def test_rebuilding_a_dataclass_calls_no_init():
    calls = []

    @dataclass
    class Tracked:
        n: int

        def __post_init__(self):
            calls.append(self.n)

    value = Decoder({class_name(Tracked): Tracked}).decode(encode(Tracked(3)))
    assert type(value) is Tracked and value.n == 3 and calls == [3]  # the one call was encode's Tracked(3)


# --------------------------------------------------------------------------- crafted savepoints


class Anything(KeyedProcessFunction):
    def open(self, ctx):
        self.thing = ctx.get_state(ValueStateDescriptor("thing"))  # declared as any object

    def process_element(self, e, ctx):
        self.thing.update(Opaque(e["v"]))
        yield {"k": ctx.get_current_key(), "total": e["v"]}


def _job(fn: KeyedProcessFunction | None = None) -> Job:
    return sums_job(fn=fn)


def _rewrite(sp: Path, relative: str, data: bytes, *, meta_edit=None) -> None:
    """Replace a savepoint's file and recompute its checksum, as a crafted savepoint's writer would."""
    (sp / relative).write_bytes(data)
    meta = json.loads((sp / METADATA_FILE).read_text())
    for entry in [*meta["files"].values(), meta.get("broadcast") or {}]:
        if entry.get("path") == relative:
            entry.update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
    if meta_edit is not None:
        meta_edit(meta)
    (sp / METADATA_FILE).write_text(json.dumps(meta))


def _crafted(tmp_path: Path, where: str) -> tuple[Path, Path]:
    """A savepoint whose keys (``key``) or state column (``state``) unpickle to a marker file."""
    marker = tmp_path / "pwned"
    sp = write_savepoint(tmp_path / "sp", [ValueStateDescriptor("total", int)], {1: [("a", {"total": 5})]},
                         job="sums", function="Sum", key_columns=("k",))
    table = read_table((sp / "state" / "kg-00001.parquet").read_bytes())
    boom = pickle.dumps(_Boom(str(marker)))
    if where == "key":
        column, name, fmt = KEY_COLUMN, KEY_COLUMN, 1  # a format-1 savepoint: its keys were pickled
    else:
        column, name, fmt = "total", "total", 2
    index = table.schema.get_field_index(column)
    table = table.set_column(index, pa.field(name, pa.binary(), metadata={ENCODING: b"pickle"}),
                             pa.array([boom], pa.binary()))
    _rewrite(sp, "state/kg-00001.parquet", table_bytes(table), meta_edit=lambda m: m.update(format=fmt))
    return sp, marker


@pytest.mark.parametrize("where", ["key", "state"])
def test_a_crafted_savepoint_runs_nothing_when_read_or_restored(tmp_path, where):
    sp, marker = _crafted(tmp_path, where)
    reader = read_savepoint(sp)
    reader.describe()
    if where == "state":
        assert "pickled value" in repr(reader.state("total")["value"][0])
        assert "pickled value" in str(reader.key("a"))
    else:
        with pytest.raises(SavepointError, match="stores the keys pickled"):
            reader.state("total")
    with pytest.raises(SavepointError, match="--trust-savepoint"):
        _job().run(checkpoint_dir=tmp_path / "ck", from_savepoint=str(sp))
    with pytest.raises(SavepointError, match="trust_savepoint=True"):
        KeyedHarness(Sum(), "k", from_savepoint=sp)
    from sparkstate.cli import main

    shown = CliRunner().invoke(main, ["state", str(sp), "--key", "a"])
    assert not marker.exists(), "reading a savepoint ran code from it"
    assert shown.exit_code == (0 if where == "state" else 1), shown.output
    # told it is trusted, the reader does unpickle: that is what the flag is for
    read_savepoint(sp, trusted=True).state("total")
    assert marker.exists()


def test_a_crafted_broadcast_file_runs_nothing(tmp_path):
    from behaviour_cases import CASES_BY_NAME

    case = CASES_BY_NAME["broadcast-rules"]
    h = case.job().harness()
    h.process_batch(case.batches[0], broadcast=case.second_batches()[0])
    h.savepoint(tmp_path / "sp")
    marker = tmp_path / "pwned"

    def to_pickle(meta):
        meta["broadcast"].update(path="broadcast.pkl", encoding="pickle")

    data = pickle.dumps(_Boom(str(marker)))
    (tmp_path / "sp" / "broadcast.json").unlink()
    meta = json.loads((tmp_path / "sp" / METADATA_FILE).read_text())
    meta["broadcast"]["path"] = "broadcast.pkl"
    (tmp_path / "sp" / METADATA_FILE).write_text(json.dumps(meta))
    _rewrite(tmp_path / "sp", "broadcast.pkl", data, meta_edit=to_pickle)
    with pytest.raises(SavepointError, match="its broadcast state pickled"):
        case.job().harness(from_savepoint=tmp_path / "sp")
    assert not marker.exists()


def test_state_of_an_arbitrary_object_is_pickled_and_restored_only_when_trusted(tmp_path):
    h = _job(Anything()).harness()
    h.process_element({"k": "a", "v": 7})
    meta = h.savepoint(tmp_path / "sp")
    assert meta["pickled"] == ["thing"]
    with pytest.raises(SavepointError, match="stores state 'thing' pickled"):
        _job(Anything()).harness(from_savepoint=tmp_path / "sp")
    restored = _job(Anything()).harness(from_savepoint=tmp_path / "sp", trust_savepoint=True)
    assert restored.state("a") == {"thing": Opaque(7)}
    assert "pickled value" in repr(read_savepoint(tmp_path / "sp").key("a").state["thing"])
    assert read_savepoint(tmp_path / "sp", trusted=True).key("a").state["thing"] == Opaque(7)


def test_declared_dataclasses_restore_as_the_job_s_classes(tmp_path):
    class Points(KeyedProcessFunction):
        def open(self, ctx):
            self.last = ctx.get_state(ValueStateDescriptor("last", Point))
            self.seen = ctx.get_list_state(ListStateDescriptor("seen", Frozen))
            self.by = ctx.get_map_state(MapStateDescriptor("by", str, Pair))

        def process_element(self, e, ctx):
            self.last.update(Point(e["v"], 0.5, ["t"]))
            self.seen.add(Frozen(dt.datetime(2026, 1, 1, tzinfo=ZoneInfo("UTC")), Decimal("1.5")))
            self.by.put("p", Pair(e["v"], "x"))
            yield {"k": ctx.get_current_key(), "total": e["v"]}

    h = _job(Points()).harness()
    h.process_element({"k": "a", "v": 3})
    meta = h.savepoint(tmp_path / "sp")
    assert meta["pickled"] == []
    restored = _job(Points()).harness(from_savepoint=tmp_path / "sp")
    assert restored.state("a") == h.state("a")
    assert type(restored.state("a")["last"]) is Point and type(restored.state("a")["by"]["p"]) is Pair


# --------------------------------------------------------------------------- paths and writers


@pytest.mark.parametrize("path", ["../../../../etc/passwd", "/etc/passwd", "state/../../x.parquet",
                                  "state/kg-00002.parquet"])
def test_a_path_outside_its_entry_is_refused(tmp_path, path):
    sp = write_savepoint(tmp_path / "sp", [ValueStateDescriptor("total", int)], {1: [("a", {"total": 5})]},
                         job="sums", function="Sum", key_columns=("k",))
    meta = json.loads((sp / METADATA_FILE).read_text())
    meta["files"]["1"]["path"] = path
    (sp / METADATA_FILE).write_text(json.dumps(meta))
    with pytest.raises(SavepointError, match=f"{METADATA_FILE} is damaged .*the file of key group 1"):
        open_savepoint(LocalDirectory(sp))


def test_a_broadcast_path_outside_the_savepoint_is_refused(tmp_path):
    sp = write_savepoint(tmp_path / "sp", [ValueStateDescriptor("total", int)], {1: [("a", {"total": 5})]},
                         job="sums", function="Sum", key_columns=("k",))
    meta = json.loads((sp / METADATA_FILE).read_text())
    meta["broadcast"] = {"path": "/etc/passwd", "sha256": "0" * 64, "bytes": 1, "states": {}}
    (sp / METADATA_FILE).write_text(json.dumps(meta))
    with pytest.raises(SavepointError, match="broadcast state's file is '/etc/passwd'"):
        open_savepoint(LocalDirectory(sp))


def test_a_file_that_links_out_of_the_savepoint_is_refused(tmp_path):
    outside = tmp_path / "secret.parquet"
    sp = write_savepoint(tmp_path / "sp", [ValueStateDescriptor("total", int)], {1: [("a", {"total": 5})]},
                         job="sums", function="Sum", key_columns=("k",))
    target = sp / "state" / "kg-00001.parquet"
    outside.write_bytes(target.read_bytes())
    target.unlink()
    os.symlink(outside, target)
    with pytest.raises(SavepointError, match="leads out of"):
        read_savepoint(sp).state("total")


def test_two_writers_of_one_target_do_not_corrupt_each_other(tmp_path):
    target = LocalDirectory(tmp_path / "sp")
    first = SavepointWriter(target, {"job": "j", "files": {}, "state": {}, "key_groups": 4, "key_columns": ["k"]},
                            ["total"])
    second = SavepointWriter(target, {"job": "j", "files": {}, "state": {}, "key_groups": 4, "key_columns": ["k"]},
                             ["total"])
    first.add_group(1, [("a", {"total": 1})])
    second.add_group(1, [("a", {"total": 2})])
    second.add_group(2, [("b", {"total": 3})])
    first.publish()
    with pytest.raises(SavepointError, match="already exists"):
        second.publish()
    published = open_savepoint(target)
    published.verify()
    assert [r for kg in published.key_groups for r in published.records(kg)] == [("a", {"total": 1})]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sp"], "the refused writer leaves nothing behind"


def test_the_key_text_column_stays_plain_json():
    table = records_to_table([(("a", 1), {"v": 1})], ["v"])
    assert table.column(KEY_TEXT_COLUMN).to_pylist() == ['["a", 1]']
