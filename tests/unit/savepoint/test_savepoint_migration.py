# ruff: noqa: UP045  (Optional[X] is what users write: it is tested as such)
"""Value-type evolution on restore (savepoint/migration.py): compatible changes are migrated,
values rebuilt as the job's types; incompatible ones are refused naming the state, the field
and both types."""

from __future__ import annotations

import dataclasses
import pickle
import sys
import types
from dataclasses import dataclass, field
from typing import Any, Optional, TypedDict

import cloudpickle
import pytest
from savepoint_helpers import job_meta

from sparkstate.api.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from sparkstate.errors import StateMigrationError
from sparkstate.savepoint.compat import RestorePlan, check_restore
from sparkstate.savepoint.format import records_to_table, table_bytes
from sparkstate.savepoint.migration import Incompatible, IntToFloat, converter, type_info

WHERE = "/sp/x"


def plan_for(saved_type, new_type, kind=ValueStateDescriptor, name="v"):
    def make(tp):
        if kind is MapStateDescriptor:
            return MapStateDescriptor(name, str, tp)
        return kind(name, tp)

    old, new = make(saved_type), make(new_type)
    plan, notes = check_restore(job_meta([old]), job_meta([new]), [new], where=WHERE)
    return plan, notes


def migrate(saved_type, new_type, value, kind=ValueStateDescriptor):
    plan, _ = plan_for(saved_type, new_type, kind)
    convert = plan.converters.get("v")
    return value if convert is None else convert(value)


def refusal(saved_type, new_type, kind=ValueStateDescriptor) -> str:
    with pytest.raises(StateMigrationError) as err:
        plan_for(saved_type, new_type, kind)
    return str(err.value)


# ------------------------------------------------------------------ simple types


def test_int_becomes_float_in_value_list_and_map_state():
    assert type(migrate(int, float, 3)) is float
    assert migrate(int, float, [1, 2], ListStateDescriptor) == [1.0, 2.0]
    assert all(type(v) is float for v in migrate(int, float, [1, 2], ListStateDescriptor))
    got = migrate(int, float, {"a": 1, "b": 2}, MapStateDescriptor)
    assert got == {"a": 1.0, "b": 2.0} and all(type(v) is float for v in got.values())


def test_the_migration_is_noted():
    _, notes = plan_for(int, float)
    assert notes == ["state 'v': values migrate from ValueState[int] to ValueState[float]"]


def test_a_saved_none_stays_none():
    assert migrate(int, float, None) is None


def test_float_to_int_is_refused_naming_the_state_and_both_types():
    msg = refusal(float, int)
    assert "state 'v'" in msg and "from float to int" in msg and "cannot be migrated" in msg
    assert "Keep the old type, or give the new state another name" in msg


def test_str_to_int_in_a_list_is_refused():
    msg = refusal(str, int, ListStateDescriptor)
    assert "state 'v' (ListState[str] -> ListState[int])" in msg and "from str to int" in msg


def test_anything_becomes_object_and_object_does_not_narrow():
    assert migrate(int, object, 3) == 3
    msg = refusal(object, int)
    assert "from object to int" in msg and "any value" in msg


def test_optional_widening_and_narrowing():
    assert migrate(int, Optional[int], 3) == 3
    got = migrate(Optional[int], Optional[float], 3)
    assert type(got) is float and migrate(Optional[int], Optional[float], None) is None
    assert type(migrate(int, float | None, 3)) is float
    msg = refusal(Optional[int], int)
    assert "from Optional[int] to int" in msg and "a saved None would not fit" in msg


def test_wider_unions_keep_their_members():
    assert migrate(int | str, int | str | bytes, "x") == "x"
    msg = refusal(int | str | bytes, int | str)
    assert "bytes would not fit" in msg


def test_generic_containers_convert_their_arguments():
    assert migrate(list[int], list[float], [1, 2]) == [1.0, 2.0]
    assert migrate(dict[str, int], dict[str, float], {"a": 1}) == {"a": 1.0}
    assert type(migrate(tuple[int, str], tuple[float, str], (1, "a"))[0]) is float
    assert migrate(tuple[int, ...], tuple[float, ...], (1, 2)) == (1.0, 2.0)
    assert migrate(set[int], set[int], {1}) == {1}
    msg = refusal(dict[str, str], dict[str, int])
    assert "value type changed from dict[str, str] to dict[str, int]: element '[value]' changed from str to int" in msg
    assert "from list[int] to set[int]" in refusal(list[int], set[int])
    assert "element '[1]' changed from str to bytes" in refusal(tuple[int, str], tuple[int, bytes])


def test_a_plain_dict_value_gaining_a_key_is_taken_as_it_is():
    # a dict declares no fields: the new code reads a new key with .get(name, default)
    assert migrate(dict, dict, {"count": 1}) == {"count": 1}
    plan, notes = plan_for(dict, dict)
    assert plan.converters == {} and notes == []
    assert migrate(dict, dict[str, int], {"a": 1}) == {"a": 1}


# ------------------------------------------------------------------ dataclasses


def classes(**versions: dict[str, Any]) -> dict[str, type]:
    """Dataclasses named by the keys, with fields ``{name: type or (type, default)}``."""
    out = {}
    for cls_name, fields in versions.items():
        spec = []
        for f, t in fields.items():
            spec.append((f, t[0], field(default=t[1])) if isinstance(t, tuple) else (f, t))
        out[cls_name] = dataclasses.make_dataclass(cls_name.rstrip("0123456789"), spec)
    return out


def test_a_dataclass_gaining_a_field_with_a_default_is_rebuilt_as_the_new_class():
    c = classes(Acc1={"count": int}, Acc2={"count": int, "total": (float, 0.0)})
    old, new = c["Acc1"], c["Acc2"]
    value = migrate(old, new, old(count=3))
    assert type(value) is new and value == new(count=3, total=0.0)
    _, notes = plan_for(old, new)
    assert notes == ["state 'v': values migrate from ValueState[Acc] to ValueState[Acc]"]


def test_a_dataclass_losing_a_field_drops_its_values():
    c = classes(Acc1={"count": int, "old": str}, Acc2={"count": int})
    assert migrate(c["Acc1"], c["Acc2"], c["Acc1"](count=3, old="x")) == c["Acc2"](count=3)


def test_a_dataclass_fields_int_to_float_and_optional_migrate():
    c = classes(P1={"n": int, "m": int}, P2={"n": float, "m": Optional[int]})
    got = migrate(c["P1"], c["P2"], c["P1"](n=1, m=2))
    assert type(got.n) is float and got.m == 2


def test_dataclasses_in_lists_and_maps_migrate():
    c = classes(A1={"n": int}, A2={"n": int, "tag": (str, "-")})
    assert migrate(c["A1"], c["A2"], [c["A1"](1)], ListStateDescriptor) == [c["A2"](1, "-")]
    assert migrate(c["A1"], c["A2"], {"k": c["A1"](1)}, MapStateDescriptor) == {"k": c["A2"](1, "-")}


def test_a_nested_dataclass_gaining_a_field_migrates():
    inner = classes(In1={"a": int}, In2={"a": int, "b": (int, 7)})
    outer1 = dataclasses.make_dataclass("Out", [("inner", inner["In1"]), ("n", int)])
    outer2 = dataclasses.make_dataclass("Out", [("inner", inner["In2"]), ("n", int)])
    got = migrate(outer1, outer2, outer1(inner["In1"](1), 2))
    assert type(got) is outer2 and type(got.inner) is inner["In2"] and got.inner.b == 7


def test_a_gained_field_without_a_default_is_refused_naming_it():
    c = classes(Acc1={"count": int}, Acc2={"count": int, "total": float})
    msg = refusal(c["Acc1"], c["Acc2"])
    assert "state 'v'" in msg and "field 'total'" in msg and "without a default" in msg


def test_a_fields_incompatible_type_is_refused_naming_the_field_and_both_types():
    c = classes(Acc1={"count": int, "label": str}, Acc2={"count": int, "label": int})
    msg = refusal(c["Acc1"], c["Acc2"])
    assert "state 'v'" in msg and "field 'label'" in msg and "from str to int" in msg


def test_a_nested_fields_incompatible_type_names_its_path():
    inner = classes(In1={"a": str}, In2={"a": bytes})
    outer1 = dataclasses.make_dataclass("Out", [("inner", inner["In1"])])
    outer2 = dataclasses.make_dataclass("Out", [("inner", inner["In2"])])
    msg = refusal(outer1, outer2)
    assert "field 'inner.a'" in msg and "from str to bytes" in msg


def test_another_class_is_refused():
    a = dataclasses.make_dataclass("Acc", [("n", int)])
    b = dataclasses.make_dataclass("Total", [("n", int)])
    msg = refusal(a, b)
    assert "from Acc to Total" in msg and "the class changed" in msg


@dataclass
class Node:
    value: int
    next: Optional[Node] = None


def test_a_self_referencing_dataclass_is_described_without_end():
    info = type_info(Node)
    assert info["fields"]["next"]["union"][0]["name"] == "Node"
    assert migrate(Node, Node, Node(1, Node(2))) == Node(1, Node(2))


def test_older_descriptions_with_field_names_only_still_compare():
    c = classes(Acc2={"count": int, "total": (float, 0.0)})
    convert = converter({"name": "Acc", "fields": {"count": "int"}}, c["Acc2"])
    assert convert is not None and convert(types.SimpleNamespace(count=2)) == c["Acc2"](2, 0.0)


# ------------------------------------------------------------------ TypedDict (fields of dataclasses)


class Point1(TypedDict):
    x: int


class _Point2(TypedDict):
    x: float


class Point2(_Point2, total=False):
    label: str


class Point3(TypedDict):
    x: int
    label: str


def test_a_typeddict_gaining_an_optional_key_migrates_and_a_required_one_is_refused():
    info = {**type_info(Point1), "name": "Point"}
    Point2.__name__ = Point3.__name__ = "Point"
    try:
        convert = converter(info, Point2)
        assert convert is not None and convert({"x": 1}) == {"x": 1.0} and type(convert({"x": 1})["x"]) is float
        with pytest.raises(Incompatible) as err:
            converter(info, Point3)
        assert err.value.path == "label" and "without a default" in err.value.why
    finally:
        Point2.__name__, Point3.__name__ = "Point2", "Point3"


# ------------------------------------------------------------------ on the executors


def _module_with(name: str, source: str) -> types.ModuleType:
    """A module that cannot be imported by name (like a script's ``__main__`` on an executor)."""
    module = types.ModuleType(name)
    exec(compile(source, name, "exec", dont_inherit=True), module.__dict__)
    return module


def test_a_plan_is_pickled_to_the_executors_and_rebuilds_values_as_the_new_class():
    old_mod = _module_with("job_v1", "from dataclasses import dataclass\n@dataclass\nclass Acc:\n    n: int\n")
    new_mod = _module_with(
        "job_v2", "from dataclasses import dataclass\n@dataclass\nclass Acc:\n    n: float\n    seen: int = 0\n")
    old_d, new_d = ValueStateDescriptor("acc", old_mod.Acc), ValueStateDescriptor("acc", new_mod.Acc)
    table = records_to_table([("k1", {"acc": old_mod.Acc(2), "__timers__": {(0, 5)}}),
                              ("k2", {"acc": None})], ["acc"])
    blob = table_bytes(table)
    plan, _ = check_restore(job_meta([old_d]), job_meta([new_d]), [new_d], where=WHERE)
    shipped: RestorePlan = cloudpickle.loads(cloudpickle.dumps(plan))
    (k1, r1), (k2, r2) = shipped.records(blob)
    acc = r1["acc"]
    assert type(acc).__name__ == "Acc" and type(acc) is shipped.converters["acc"].values.tp
    assert (acc.n, acc.seen) == (2.0, 0) and type(acc.n) is float
    assert r1["__timers__"] == {(0, 5)} and r2 == {"acc": None}


def test_values_of_a_main_class_are_saved_by_value_and_rebuilt_as_the_job_s_class():
    main = sys.modules["__main__"]
    old = dataclasses.make_dataclass("MainAcc", [("n", int)])
    old.__module__ = "__main__"
    main.MainAcc = old  # plain pickle would refer to it by name: unreadable on an executor
    try:
        blob = table_bytes(records_to_table([("k", {"acc": old(4)})], ["acc"]))
        assert b"__main__" in pickle.dumps(old(4))
    finally:
        del main.MainAcc
    new = dataclasses.make_dataclass("MainAcc", [("n", int), ("extra", str, field(default="-"))])
    new.__module__ = "__main__"
    d_old, d_new = ValueStateDescriptor("acc", old), ValueStateDescriptor("acc", new)
    plan, _ = check_restore(job_meta([d_old]), job_meta([d_new]), [d_new], where=WHERE)
    (_, rec), = plan.records(blob)
    assert type(rec["acc"]) is new and rec["acc"] == new(4, "-")


def test_the_same_class_defined_again_is_rebuilt_as_the_job_s():
    old = dataclasses.make_dataclass("Acc", [("n", int)])
    new = dataclasses.make_dataclass("Acc", [("n", int)])
    plan, notes = plan_for(old, new)
    assert notes == []
    value = plan.converters["v"](old(1))
    assert type(value) is new
    same = new(1)
    assert plan.converters["v"](same) is same


def test_converters_are_plain_picklable_objects():
    plan, _ = plan_for(dict[str, list[int]], dict[str, list[float]])
    again = pickle.loads(pickle.dumps(plan))
    assert again.converters["v"]({"a": [1]}) == {"a": [1.0]}
    assert pickle.loads(pickle.dumps(IntToFloat()))(True) is True  # a bool is not an int here


@pytest.mark.parametrize("tp, value", [
    (int, 3), (float, 1.5), (str, "x"), (bytes, b"x"), (bool, True), (object, {1}), (Any, None),
    (list, [1]), (dict, {"a": 1}), (list[int], [1]), (dict[str, list[float]], {"a": [1.0]}),
    (tuple[int, str], (1, "a")), (tuple[int, ...], (1, 2)), (frozenset[str], frozenset("ab")),
    (Optional[int], None), (int | str, "a"), (Node, Node(1, Node(2))), (Point1, {"x": 1}),
])
def test_the_same_type_takes_values_as_they_are(tp, value):
    convert = converter(type_info(tp), tp)
    assert convert is None or convert(value) == value


def test_a_field_refusal_reads_well_when_the_class_keeps_its_name():
    c = classes(Acc1={"label": str}, Acc2={"label": int})
    msg = refusal(c["Acc1"], c["Acc2"])
    assert "state 'v' (ValueState[Acc] -> ValueState[Acc]): its value type Acc: field 'label' changed from str to " \
           "int, which cannot be migrated" in msg
