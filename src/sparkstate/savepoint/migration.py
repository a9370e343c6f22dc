"""Value-type migration on restore: which changes of a state's type are compatible, and the
converter that moves a savepoint's values to the new type.

The savepoint records each state's signature (``ValueState[float]``) and, where it can,
a description of its value type (:func:`type_info`). Rules (Flink's POJO and Avro
evolution, in Python terms):

* the same signature: nothing to do;
* the kind changed (ValueState to ListState...): refused;
* ``int`` to ``float``: migrated (``float(v)``);
* a dataclass that gained a field with a default: migrated (old values get the default);
  a field removed: its values are dropped; a field whose type changed: refused, naming the
  field and both types;
* anything else: refused, naming the state and both types.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from sparkstate.api.state import StateDescriptor
from sparkstate.errors import StateMigrationError


def value_type(descriptor: StateDescriptor) -> Any:
    """The type a descriptor's values are checked against (per element for List, per value for Map)."""
    for attr in ("type", "element_type", "value_type", "accumulator_type"):
        if hasattr(descriptor, attr):
            return getattr(descriptor, attr)
    return object


def type_info(tp: Any) -> dict[str, Any]:
    """A JSON description of a value type: its name, and for a dataclass its fields."""
    info: dict[str, Any] = {"name": getattr(tp, "__qualname__", None) or repr(tp),
                            "module": getattr(tp, "__module__", None)}
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        hints = _hints(tp)
        info["fields"] = {f.name: _name(hints.get(f.name, f.type)) for f in dataclasses.fields(tp)}
    return info


def _hints(tp: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(tp)
    except Exception:
        return {}


def _name(tp: Any) -> str:
    return tp if isinstance(tp, str) else getattr(tp, "__name__", None) or repr(tp)


def _kind(signature: str) -> str:
    return signature.split("[", 1)[0]


def converter_for(name: str, saved_signature: str, saved_info: dict | None, descriptor: StateDescriptor, where: str) -> Any:
    """The converter for state ``name`` from the savepoint's type to the descriptor's, None
    when the values are taken as they are; raises when the change is incompatible."""
    now = descriptor.describe()
    if _kind(saved_signature) != _kind(now):
        raise StateMigrationError(
            f"savepoint {where}: state {name!r} was {saved_signature} and the job declares {now}: the kind of a state "
            "cannot change; give the new state another name (and drop the old one with --allow-non-restored-state)"
        )
    tp = value_type(descriptor)
    if saved_info and dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _dataclass_converter(name, saved_info, tp, where)
    if saved_signature == now:
        return None
    old_arg = saved_signature[len(_kind(saved_signature)) + 1 : -1]
    new_arg = now[len(_kind(now)) + 1 : -1]
    if old_arg == "int" and new_arg == "float" and _kind(now) in ("ValueState", "ReducingState"):
        return IntToFloat()
    if old_arg.split(",")[-1].strip() == "int" and new_arg.split(",")[-1].strip() == "float":
        return IntToFloat(container=_kind(now))
    if saved_info and saved_info.get("name") == getattr(tp, "__qualname__", None):
        return None  # the same class, renamed signature text only
    raise StateMigrationError(
        f"savepoint {where}: state {name!r} holds {saved_signature} and the job declares {now}: the value type "
        f"changed from {old_arg} to {new_arg}, which cannot be migrated (compatible: int to float, a dataclass "
        "gaining fields with defaults); keep the old type, or give the new state another name"
    )


@dataclasses.dataclass(frozen=True)
class IntToFloat:
    """int values (or a List's elements, a Map's values) become floats."""

    container: str = ""

    def __call__(self, value: Any) -> Any:
        if self.container == "ListState":
            return [float(v) if type(v) is int else v for v in value]
        if self.container == "MapState":
            return {k: float(v) if type(v) is int else v for k, v in value.items()}
        return float(value) if type(value) is int else value


def _dataclass_converter(name: str, saved: dict, tp: type, where: str) -> Any:
    old_fields: dict[str, str] = saved.get("fields") or {}
    new = type_info(tp)
    new_fields: dict[str, str] = new["fields"]
    for field, old_type in old_fields.items():
        if field in new_fields and new_fields[field] != old_type and not (old_type == "int" and new_fields[field] == "float"):
            raise StateMigrationError(
                f"savepoint {where}: state {name!r}: field {field!r} of {new['name']} was {old_type} and is now "
                f"{new_fields[field]}, which cannot be migrated; keep its type, or add a new field instead"
            )
    required = [f.name for f in dataclasses.fields(tp) if f.name not in old_fields
                and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if required:
        raise StateMigrationError(
            f"savepoint {where}: state {name!r}: {new['name']} gained field(s) {required} without a default, so "
            "the savepoint's values cannot be filled in; give them defaults"
        )
    if old_fields == new_fields:
        return None
    return DataclassMigration(tp, tuple(f for f in new_fields if f in old_fields))


@dataclasses.dataclass(frozen=True)
class DataclassMigration:
    """Rebuild each value as the new dataclass: kept fields carry over, new ones take their defaults."""

    tp: type
    kept: tuple[str, ...]

    def __call__(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self(v) for v in value]
        if isinstance(value, dict) and not dataclasses.is_dataclass(value):
            return {k: self(v) for k, v in value.items()}
        state = getattr(value, "__dict__", {})
        return self.tp(**{f: state[f] for f in self.kept if f in state})
