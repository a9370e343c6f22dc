"""Value-type migration on restore: which changes of a state's value type are compatible, and
the converter that moves a savepoint's values to the new type.

A checkpoint and a savepoint record, per state, a JSON description of its value type
(:func:`type_info`: the class, and for a dataclass or TypedDict its fields, recursively; for
``Optional``/unions their members; for ``list[int]``-style aliases their arguments). On
restore, each saved description is compared with the type the job now declares. The rules
follow Flink's POJO and Avro schema evolution, in Python terms (docs/guides/savepoint-evolution.md):

* the same type: the values are taken as they are;
* ``int`` to ``float``: migrated (``float(v)``), also inside containers and fields;
* ``X`` to ``Optional[X]`` (or ``Optional[X]`` to ``Optional[Y]`` when ``X`` to ``Y`` is):
  migrated; ``Optional[X]`` to ``X`` is refused (a saved ``None`` has nowhere to go);
* a dataclass (matched by class name, not module: a script's class is ``__main__.X``) that
  gained a field with a default: migrated, old values get the default; a removed field's
  values are dropped; a field whose type changed follows these rules recursively (nested
  dataclasses too); a field gained without a default is refused. Values are rebuilt as the
  job's class, so a class defined in ``__main__`` (pickled by value) becomes the new one;
* a TypedDict that gained a key that is not required: kept as is; a required key: refused;
* ``list[X]``, ``set[X]``, ``tuple[X, ...]``, ``dict[K, V]``: their arguments follow these
  rules; a plain ``dict`` (or ``list``) declares no fields, so its contents are taken as they
  are (a dict gaining a key: read it with ``.get(name, default)``);
* to ``object``/``Any``: anything is accepted; from ``object`` to a narrower type, and any
  other change: refused, naming the state, the field and both types.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from typing import Any

from sparkstate.api.state import StateDescriptor
from sparkstate.errors import StateMigrationError

#: how deep :func:`type_info` describes nested types (a self-referencing class stops earlier)
_MAX_DEPTH = 8
_ANY_NAMES = frozenset({"object", "Any", "typing.Any"})


def value_type(descriptor: StateDescriptor) -> Any:
    """The type a descriptor's values are checked against (per element for List, per value for Map)."""
    for attr in ("type", "element_type", "value_type", "accumulator_type"):
        if hasattr(descriptor, attr):
            return getattr(descriptor, attr)
    return object


# --------------------------------------------------------------------------- descriptions


def ttl_descriptions(descriptors: Any) -> dict[str, str]:
    """``{state name: its TTL}`` of the states with a time-to-live, as a checkpoint and a
    savepoint record them: such a state stores ``(value, last access)`` (``api/state_ttl.py``),
    so a restore must know whether the saved values carry times."""
    return {d.name: d.ttl_config.describe() for d in descriptors if d.ttl_config is not None}


def type_info(tp: Any, _depth: int = 0, _seen: tuple[Any, ...] = ()) -> dict[str, Any]:
    """A JSON description of a value type (see the module's docs)."""
    info: dict[str, Any] = {"name": type_name(tp), "module": getattr(tp, "__module__", None)}
    if _depth >= _MAX_DEPTH or tp in _seen:
        return info
    seen = (*_seen, tp)
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        info["union"] = [type_info(a, _depth + 1, seen) for a in typing.get_args(tp)]
    elif origin is not None:
        info["origin"] = type_name(origin)
        info["args"] = [type_info(a, _depth + 1, seen) for a in typing.get_args(tp) if a is not Ellipsis]
        if Ellipsis in typing.get_args(tp):
            info["variadic"] = True
    elif dataclasses.is_dataclass(tp) and isinstance(tp, type):
        hints = _hints(tp)
        fields = [f for f in dataclasses.fields(tp) if f.init]
        info["fields"] = {f.name: type_info(hints.get(f.name, f.type), _depth + 1, seen) for f in fields}
        info["required"] = [f.name for f in fields
                            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    elif typing.is_typeddict(tp):
        hints = _hints(tp)
        info["typeddict"] = True
        info["fields"] = {k: type_info(v, _depth + 1, seen) for k, v in hints.items()}
        info["required"] = sorted(getattr(tp, "__required_keys__", ()))
    return info


def type_name(tp: Any) -> str:
    """A type as people write it: ``int``, ``Point``, ``list[int]``, ``Optional[int]``."""
    if isinstance(tp, str):
        return tp
    if tp is None or tp is type(None):
        return "None"
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        args = typing.get_args(tp)
        if len(args) == 2 and type(None) in args:
            (inner,) = [a for a in args if a is not type(None)]
            return f"Optional[{type_name(inner)}]"
        return " | ".join(type_name(a) for a in args)
    if origin is not None:
        shown = ", ".join("..." if a is Ellipsis else type_name(a) for a in typing.get_args(tp))
        return f"{type_name(origin)}[{shown}]"
    if tp is Any:
        return "Any"
    return getattr(tp, "__name__", None) or repr(tp)


def _hints(tp: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(tp)
    except Exception:
        return dict(getattr(tp, "__annotations__", {}))


def _desc(info: Any) -> dict[str, Any]:
    """A saved description (older ones held field types as bare names)."""
    return info if isinstance(info, dict) else {"name": str(info)}


# --------------------------------------------------------------------------- converters
# Converters travel to the executors inside the restore plan: frozen dataclasses, no lambdas.

Converter = Callable[[Any], Any]


@dataclasses.dataclass(frozen=True)
class IntToFloat:
    """An ``int`` becomes a ``float`` (other values, a bool too, stay as they are)."""

    def __call__(self, value: Any) -> Any:
        return float(value) if type(value) is int else value


@dataclasses.dataclass(frozen=True)
class Nullable:
    """``None`` stays ``None``; anything else goes through ``inner``."""

    inner: Converter

    def __call__(self, value: Any) -> Any:
        return None if value is None else self.inner(value)


@dataclasses.dataclass(frozen=True)
class Elements:
    """Each element of a list, tuple, set or frozenset goes through ``inner``."""

    inner: Converter

    def __call__(self, value: Any) -> Any:
        if isinstance(value, (list, tuple, set, frozenset)):
            return type(value)(self.inner(v) for v in value)
        return value


@dataclasses.dataclass(frozen=True)
class Positions:
    """Each position of a fixed-length tuple goes through its converter (None: kept)."""

    inner: tuple[Converter | None, ...]

    def __call__(self, value: Any) -> Any:
        if not isinstance(value, tuple) or len(value) != len(self.inner):
            return value
        return tuple(v if c is None else c(v) for c, v in zip(self.inner, value))


@dataclasses.dataclass(frozen=True)
class Entries:
    """A dict's keys and values go through their converters (None: kept)."""

    keys: Converter | None
    values: Converter | None

    def __call__(self, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        k, v = self.keys, self.values
        return {(x if k is None else k(x)): (y if v is None else v(y)) for x, y in value.items()}


@dataclasses.dataclass(frozen=True)
class DataclassMigration:
    """Rebuild a value as the job's dataclass ``tp``: kept fields carry over (through their
    converter when their type changed), fields new to ``tp`` take their defaults, fields
    ``tp`` no longer has are dropped. A value already of ``tp`` with nothing to convert is
    kept as it is."""

    tp: type
    fields: tuple[tuple[str, Converter | None], ...]
    same: bool = False

    def __call__(self, value: Any) -> Any:
        if value is None or (self.same and type(value) is self.tp):
            return value
        kwargs = {}
        for name, convert in self.fields:
            try:
                item = getattr(value, name)
            except AttributeError:
                continue  # a field the old value lacks takes the default
            kwargs[name] = item if convert is None else convert(item)
        return self.tp(**kwargs)


@dataclasses.dataclass(frozen=True)
class TypedDictMigration:
    """A TypedDict value's keys go through their converters; keys new to the type stay absent."""

    fields: tuple[tuple[str, Converter], ...]

    def __call__(self, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        out = dict(value)
        for name, convert in self.fields:
            if name in out:
                out[name] = convert(out[name])
        return out


@dataclasses.dataclass(frozen=True)
class StateConverter:
    """A whole state's value: per element for ListState, per value for MapState (keys through
    ``keys``), the value itself for the other kinds; a saved ``None`` stays ``None``."""

    kind: str
    values: Converter | None
    keys: Converter | None = None

    def __call__(self, value: Any) -> Any:
        if value is None:
            return None
        if self.kind == "ListState":
            return Elements(self.values)(value) if self.values is not None else value
        if self.kind == "MapState":
            return Entries(self.keys, self.values)(value)
        return value if self.values is None else self.values(value)


# --------------------------------------------------------------------------- compatibility


class Incompatible(Exception):
    """A type change that cannot be migrated: where (a field path) and why."""

    def __init__(self, path: str, old: str, new: str, why: str = "") -> None:
        super().__init__(path, old, new, why)
        self.path, self.old, self.new, self.why = path, old, new, why


def converter(old: Any, new_tp: Any, path: str = "") -> Converter | None:
    """The converter from values described by ``old`` (a :func:`type_info`) to ``new_tp``;
    None when values are taken as they are; raises :class:`Incompatible`."""
    old = _desc(old)
    new = type_info(new_tp)
    if new["name"] in _ANY_NAMES:
        return None
    old_name = old.get("name")
    if old_name in _ANY_NAMES:
        raise Incompatible(path, str(old_name), new["name"],
                           "the saved values were declared as any value, so sparkstate cannot tell they fit")
    if "union" in new or "union" in old:
        return _union(old, new_tp, new, path)
    if old_name == "int" and new["name"] == "float":
        return IntToFloat()
    if "fields" in new or "fields" in old:
        return _record(old, new_tp, new, path)
    if "origin" in new or "origin" in old:
        return _generic(old, new_tp, new, path)
    if old_name != new["name"]:
        raise Incompatible(path, str(old_name), new["name"])
    return None


def _members(tp: Any) -> list[Any]:
    return list(typing.get_args(tp))


def _union(old: dict[str, Any], new_tp: Any, new: dict[str, Any], path: str) -> Converter | None:
    old_members = [_desc(m) for m in old.get("union", [old])]
    new_members = _members(new_tp) if "union" in new else [new_tp]
    old_none = any(m.get("name") == "None" for m in old_members)
    new_none = type(None) in new_members
    if old_none and not new_none:
        raise Incompatible(path, old["name"], new["name"], "a saved None would not fit")
    old_rest = [m for m in old_members if m.get("name") != "None"]
    new_rest = [m for m in new_members if m is not type(None)]
    if len(old_rest) == 1 and len(new_rest) == 1:  # Optional[X] (or X) to Optional[Y]
        inner = converter(old_rest[0], new_rest[0], path)
        return None if inner is None else Nullable(inner)
    # wider unions: each saved member must be one of the new members, as it is
    new_names = {type_name(m) for m in new_rest}
    lost = [m.get("name") for m in old_rest if m.get("name") not in new_names]
    if lost:
        raise Incompatible(path, old["name"], new["name"], f"{', '.join(map(str, lost))} would not fit")
    return None


def _record(old: dict[str, Any], new_tp: Any, new: dict[str, Any], path: str) -> Converter | None:
    """Dataclasses and TypedDicts: matched by class name, fields one by one."""
    if old.get("name") != new["name"] or ("fields" in old and "fields" not in new):
        raise Incompatible(path, str(old.get("name")), new["name"], "the class changed")
    if "fields" not in old:
        return None  # described by name only (a self-reference): taken as it is
    old_fields: dict[str, Any] = old.get("fields") or {}
    convs: dict[str, Converter | None] = {}
    for field_name, field_info in old_fields.items():
        if field_name in new["fields"]:
            sub = f"{path}.{field_name}" if path else field_name
            convs[field_name] = converter(field_info, _field_type(new_tp, field_name), sub)
    gained = [f for f in new.get("required", []) if f not in old_fields]
    if gained:
        where = f"{path}." if path else ""
        raise Incompatible(
            ", ".join(where + g for g in gained), str(old.get("name")), new["name"],
            f"{new['name']} gained required field(s) {', '.join(gained)} without a default, so saved values "
            "cannot be filled in",
        )
    if new.get("typeddict"):
        changed = tuple((f, c) for f, c in convs.items() if c is not None)
        return TypedDictMigration(changed) if changed else None
    same = set(old_fields) == set(new["fields"]) and all(c is None for c in convs.values())
    kept = tuple((f, convs.get(f)) for f in new["fields"] if f in old_fields)
    return DataclassMigration(new_tp, kept, same)


def _field_type(tp: Any, name: str) -> Any:
    hints = _hints(tp)
    if name in hints:
        return hints[name]
    for f in dataclasses.fields(tp) if dataclasses.is_dataclass(tp) else ():
        if f.name == name:
            return f.type
    return object


def _generic(old: dict[str, Any], new_tp: Any, new: dict[str, Any], path: str) -> Converter | None:
    """``list[X]``, ``dict[K, V]``, ``tuple[...]``: the container must stay, arguments convert."""
    old_origin = old.get("origin", old.get("name"))
    new_origin = new.get("origin", new["name"])
    if old_origin != new_origin:
        raise Incompatible(path, str(old.get("name")), new["name"])
    old_args = [_desc(a) for a in old.get("args", [])]
    new_args = list(typing.get_args(new_tp))
    if not old_args or not new_args:
        return None  # a bare container on either side: its contents were not declared
    variadic = Ellipsis in new_args
    new_args = [a for a in new_args if a is not Ellipsis]
    if len(old_args) != len(new_args) or bool(old.get("variadic")) != variadic:
        raise Incompatible(path, str(old.get("name")), new["name"])
    if new_origin == "dict":
        parts = ["[key]", "[value]"]
    elif new_origin == "tuple" and not variadic:
        parts = [f"[{i}]" for i in range(len(new_args))]
    else:
        parts = ["[]"] * len(new_args)
    convs = [converter(o, n, path + p) for o, n, p in zip(old_args, new_args, parts)]
    if all(c is None for c in convs):
        return None
    if new_origin == "dict":
        return Entries(convs[0], convs[1])
    if new_origin == "tuple" and not variadic:
        return Positions(tuple(convs))
    inner = convs[0]
    return None if inner is None else Elements(inner)


# --------------------------------------------------------------------------- a state


def kind_of(signature: str) -> str:
    """``ValueState`` of ``ValueState[int]``."""
    return signature.split("[", 1)[0]


def map_key_name(signature: str) -> str | None:
    """The key type's name in a ``MapState[K, V]`` signature."""
    if kind_of(signature) != "MapState" or "[" not in signature:
        return None
    return signature[len("MapState["):].split(",", 1)[0].strip()


def _arg(signature: str) -> str:
    """``int`` of ``ValueState[int]`` (the last argument: ``AggregatingState[Fn, acc]``)."""
    inner = signature[len(kind_of(signature)) + 1 : -1]
    return inner.rsplit(", ", 1)[-1] if kind_of(signature) in ("MapState", "AggregatingState") else inner


def converter_for(
    name: str, saved_signature: str, saved_info: dict[str, Any] | None, descriptor: StateDescriptor, where: str
) -> Converter | None:
    """The converter for state ``name`` from the savepoint's values to the descriptor's, None
    when the values are taken as they are; raises :class:`StateMigrationError` when the
    change cannot be migrated, naming the state, the field and both types."""
    now = descriptor.describe()
    kind = kind_of(now)
    if kind_of(saved_signature) != kind:
        raise StateMigrationError(
            f"savepoint {where}: state {name!r} was {saved_signature} and the job declares {now}: the kind of a state "
            "cannot change. Keep it a " + kind_of(saved_signature) + ", or give the new state another name (and "
            "drop the old one with --allow-non-restored-state)"
        )
    keys: Converter | None = None
    if kind == "MapState":
        old_key, new_key = map_key_name(saved_signature), map_key_name(now)
        if old_key != new_key and new_key not in _ANY_NAMES:
            raise StateMigrationError(
                f"savepoint {where}: state {name!r}: its map keys were {old_key} and the job declares {new_key}: "
                f"the key type of a MapState cannot change. Keep {old_key} (or object), or give the new state "
                "another name"
            )
    old_info = _desc(saved_info) if saved_info else {"name": _arg(saved_signature)}
    new_tp = value_type(descriptor)
    try:
        values = converter(old_info, new_tp)
    except Incompatible as exc:
        old_name, new_name = old_info.get("name"), type_name(new_tp)
        what = f"its value type changed from {old_name} to {new_name}" if old_name != new_name else \
            f"its value type {new_name}"
        if exc.path:
            part = "field" if exc.path[0].isalpha() else "element"
            what += f": {part} {exc.path!r} changed from {exc.old} to {exc.new}"
        why = f" ({exc.why})" if exc.why else ""
        raise StateMigrationError(
            f"savepoint {where}: state {name!r} ({saved_signature} -> {now}): {what}{why}, which cannot be migrated. "
            "Compatible changes: int to float, X to Optional[X], a dataclass gaining fields with defaults or losing "
            "fields. Keep the old type, or give the new state another name (and drop the old one with "
            "--allow-non-restored-state)"
        ) from None
    if values is None and keys is None:
        return None
    return StateConverter(kind, values, keys)
