"""State values and keys as savepoints store them: tagged JSON, which reading never runs code
from (unlike pickle, whose bytes choose what to call).

A value made of ``None``, bools, ints, floats, strings, bytes, dates and times (``datetime``
naive, with a fixed offset or a ``ZoneInfo``; ``date``, ``time``, ``timedelta``), ``Decimal``,
lists, tuples, sets, dicts, dataclass instances and named tuples of those is *encodable*. JSON
holds it as itself where JSON has the type (a dict whose keys are all strings is an object,
unless it is one key starting with ``$``) and as a one-key object tagged ``$...`` where it
has not::

    (1, "a")               {"$tuple": [1, "a"]}
    {(0, 60000): 3}        {"$dict": [[{"$tuple": [0, 60000]}, 3]]}
    b"\\x00"                {"$bytes": "AA=="}
    Point(x=1, y=2)        {"$dataclass": ["app.geo:Point", {"x": 1, "y": 2}]}

A dataclass or named tuple is rebuilt only as a class the reader is given (:class:`Decoder`'s
``classes``: a restore gives the job's declared types and the classes it has imported) and
without calling its ``__init__``, as pickle rebuilds one: the file names a class, it never
makes the reader import or run anything. Any other value (an arbitrary object, a numpy
scalar, a pandas ``Timestamp``) has no safe encoding: :func:`encode` raises
:class:`Unencodable`, and the savepoint pickles that state's column (``format.py``), which a
reader unpickles only when told the savepoint is trusted.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import json
import math
import operator
import pickle
import sys
import typing
from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal
from itertools import chain
from typing import Any
from zoneinfo import ZoneInfo

from sparkstate.errors import SavepointError

#: the JSON encoder of every value (``ensure_ascii``: a string with lone surrogates survives)
_ENCODER = json.JSONEncoder(ensure_ascii=True, allow_nan=False, separators=(",", ":"), check_circular=False)


class Unencodable(Exception):
    """A value with no safe encoding; ``what`` names its type (and where inside the value)."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


def class_name(cls: type) -> str:
    """``module:qualname``, how a file names a dataclass or named tuple."""
    return f"{cls.__module__}:{cls.__qualname__}"


def encode(value: Any, classes: set[str] | None = None) -> str:
    """A value as tagged JSON text; the names of the classes it holds are added to ``classes``."""
    found: set[str] = set()
    try:
        text = _ENCODER.encode(_plain(value, found, False))
    except ValueError:  # a NaN or an infinity, which JSON has not: again, tagging such floats
        text = _ENCODER.encode(_plain(value, found, True))
    if classes is not None:
        classes |= found
    return text


#: the types JSON holds as they are (floats too, unless NaN or infinite: see ``encode``)
_SCALARS = frozenset({str, int, bool, float, type(None)})
_TAGGED = operator.methodcaller("startswith", "$")


def _scalars(items: Any) -> bool:
    """Whether every item is of a type JSON holds as it is (checked in C: no call per item)."""
    return _SCALARS.issuperset(map(type, items))


def _rows(items: Any) -> type | None:
    """``list`` (``tuple``) when every item is a list (a tuple) of scalars: a window's
    accumulators, a TTL'd state's ``(value, time)`` pairs; checked in C."""
    kinds = set(map(type, items))
    if len(kinds) == 1:
        (kind,) = kinds
        if (kind is list or kind is tuple) and _scalars(chain.from_iterable(items)):
            return kind
    return None


def _plain(v: Any, classes: set[str], floats: bool) -> Any:  # noqa: C901 (one branch a type, in order of frequency)
    """``v`` as what the JSON encoder takes; ``floats``: tag the floats that are not finite.
    Containers of scalars go to the encoder as they are (a savepoint spends its time here)."""
    t = type(v)
    if t in _SCALARS:
        return {"$float": repr(v)} if floats and t is float and not math.isfinite(v) else v
    fast = not floats
    if t is list or t is tuple:
        if not fast:
            items = [_plain(x, classes, floats) for x in v]
        elif _scalars(v):
            items = v
        else:
            rows = _rows(v)
            items = v if rows is list else [{"$tuple": x} for x in v] if rows is tuple else \
                [x if type(x) in _SCALARS else _plain(x, classes, floats) for x in v]
        return items if t is list else {"$tuple": items}
    if t is dict:
        # only a one-key object can read as a tag: only then does a key's "$" matter
        if set(map(type, v)) != {str} or (len(v) == 1 and any(map(_TAGGED, v))):
            if not v:
                return v
            return {"$dict": [[_plain(k, classes, floats), _plain(x, classes, floats)] for k, x in v.items()]}
        if fast:
            values = v.values()
            if _scalars(values):
                return v
            rows = _rows(values)
            if rows is list:
                return v
            if rows is tuple:
                return {k: {"$tuple": x} for k, x in v.items()}
        return {k: x if fast and type(x) in _SCALARS else _plain(x, classes, floats) for k, x in v.items()}
    if t is bytes or t is bytearray:
        return {"$" + t.__name__: base64.b64encode(v).decode("ascii")}
    if t is set or t is frozenset:
        return {"$" + t.__name__: [_plain(x, classes, floats) for x in v]}
    if t is dt.datetime:
        return {"$datetime": _datetime(v)}
    if t is dt.date:
        return {"$date": v.isoformat()}
    if t is dt.time:
        if v.tzinfo is not None and not isinstance(v.tzinfo, dt.timezone):
            raise Unencodable(f"a time with tzinfo {type(v.tzinfo).__name__}")
        return {"$time": v.isoformat()}
    if t is dt.timedelta:
        return {"$timedelta": [v.days, v.seconds, v.microseconds]}
    if t is Decimal:
        return {"$decimal": str(v)}
    if dataclasses.is_dataclass(t):
        classes.add(name := class_name(t))
        fields = {}
        for f in dataclasses.fields(v):
            try:
                fields[f.name] = _plain(getattr(v, f.name), classes, floats)
            except AttributeError:
                continue  # a field never set (init=False, no default): rebuilt unset too
            except Unencodable as exc:
                raise Unencodable(f"{exc.what} in field {f.name!r} of {t.__qualname__}") from None
        return {"$dataclass": [name, fields]}
    if issubclass(t, tuple) and isinstance(getattr(t, "_fields", None), tuple):
        classes.add(name := class_name(t))
        return {"$namedtuple": [name, [_plain(x, classes, floats) for x in v]]}
    raise Unencodable(f"{t.__module__}.{t.__qualname__}" if t.__module__ != "builtins" else t.__qualname__)


def _datetime(v: dt.datetime) -> list[Any]:
    """``[ISO text, zone, fold]``: a ``ZoneInfo`` datetime by its wall time and zone key."""
    tz = v.tzinfo
    if tz is None or isinstance(tz, dt.timezone):
        return [v.isoformat(), None, v.fold]
    if isinstance(tz, ZoneInfo) and tz.key:
        return [v.replace(tzinfo=None).isoformat(), tz.key, v.fold]
    raise Unencodable(f"a datetime with tzinfo {type(tz).__name__}")


# --------------------------------------------------------------------------- decoding


class Decoder:
    """Tagged JSON back to values.

    ``classes`` maps ``module:qualname`` to the class to rebuild (a class may also be found by
    its name alone, as migration matches classes: a script's ``__main__:Acc`` is the job
    module's ``Acc`` on a restore, when only one given class has that name);
    ``imported`` also looks a name up in the modules already imported (never importing one).
    A class found neither way is an error, unless ``lenient`` (a reader showing state), which
    gives its fields as a dict. Pickled values are unpickled only when ``trusted``; else they
    are an error naming ``where``, or with ``lenient`` a :class:`Pickled` placeholder.
    """

    def __init__(self, classes: Mapping[str, type] | None = None, *, imported: bool = False,
                 lenient: bool = False, trusted: bool = False, where: str = "the savepoint") -> None:
        self.classes = dict(classes or {})
        self.imported = imported
        self.lenient = lenient
        self.trusted = trusted
        self.where = where
        names: dict[str, list[type]] = {}
        for cls in self.classes.values():
            names.setdefault(cls.__name__, []).append(cls)
        self._by_name = {name: found[0] for name, found in names.items() if len(set(found)) == 1}

    def unpickler(self, what: str, *, shown: bool = True) -> Callable[[bytes], Any]:
        """How pickled values of ``what`` (``state 'x'``) are read under this decoder's trust
        (``shown``: a lenient decoder may give placeholders; keys it may not)."""
        if self.trusted:
            return pickle.loads
        if self.lenient and shown:
            return Pickled
        raise SavepointError(untrusted(self.where, what))

    def decode(self, text: str) -> Any:
        return json.loads(text, object_hook=self._hook)

    def resolve(self, name: str) -> type | None:
        """The class a file's ``module:qualname`` names, or None."""
        found = self.classes.get(name) or self._by_name.get(name.rsplit(":", 1)[-1].rsplit(".", 1)[-1])
        if found is None and self.imported:
            found = imported_class(name)
        return found

    def _hook(self, obj: dict[str, Any]) -> Any:
        if len(obj) != 1:
            return obj
        ((tag, body),) = obj.items()
        if not tag.startswith("$"):
            return obj
        build = _TAGS.get(tag)
        if build is not None:
            return build(body)
        if tag == "$dataclass":
            return self._dataclass(*body)
        if tag == "$namedtuple":
            return self._namedtuple(*body)
        raise SavepointError(f"a savepoint value is tagged {tag!r}, which this sparkstate does not know: the "
                             "savepoint is damaged, or written by a newer sparkstate (read it with that version)")

    def _class(self, name: str, kind: str) -> type | None:
        cls = self.resolve(name)
        ok = cls is not None and (dataclasses.is_dataclass(cls) if kind == "dataclass" else _is_namedtuple(cls))
        if ok:
            return cls
        if self.lenient:
            return None
        raise SavepointError(
            f"a savepoint value is a {kind} of class {name}, which the job does not declare"
            + ("" if cls is None else f" as a {kind} (it is {cls!r})")
            + ": declare it as the state's type (or a field's), or import its module in the job's file, so the "
            "value is rebuilt as that class"
        )

    def _dataclass(self, name: str, fields: dict[str, Any]) -> Any:
        cls = self._class(name, "dataclass")
        if cls is None:
            return fields
        obj: Any = object.__new__(cls)  # as pickle does: no __init__ or __post_init__ runs
        for key, value in fields.items():
            object.__setattr__(obj, key, value)
        return obj

    def _namedtuple(self, name: str, values: list[Any]) -> Any:
        cls = self._class(name, "named tuple")
        if cls is None:
            return tuple(values)
        return tuple.__new__(cls, values)


def untrusted(where: str, what: str) -> str:
    """Why pickled state is not read, and how to read it."""
    return (
        f"{where} stores {what} pickled, and unpickling runs whatever code the file's writer put in it, so "
        "sparkstate reads it only from a savepoint you trust: if you or your team wrote it, pass --trust-savepoint "
        "(trust_savepoint=True, read_savepoint(..., trusted=True)). Values get a safe encoding when their types "
        "are numbers, strings, bytes, dates and times, dataclasses or named tuples of those, and lists, tuples, "
        "sets and dicts of them (docs/guides/savepoints.md); a savepoint of format 1 pickled every key"
    )


class Pickled:
    """A pickled value shown, not read (an untrusted savepoint's, in a reader)."""

    def __init__(self, blob: bytes) -> None:
        self.size = len(blob)

    def __repr__(self) -> str:
        return f"<pickled value, {self.size} bytes: not read from an untrusted savepoint>"


def _datetime_of(body: list[Any]) -> dt.datetime:
    text, zone, fold = body
    value = dt.datetime.fromisoformat(text)
    if zone is not None:
        value = value.replace(tzinfo=ZoneInfo(zone))
    return value.replace(fold=fold) if fold else value


_TAGS: dict[str, Any] = {
    "$tuple": tuple,
    "$dict": lambda pairs: {k: v for k, v in pairs},
    "$set": set,
    "$frozenset": frozenset,
    "$bytes": base64.b64decode,
    "$bytearray": lambda text: bytearray(base64.b64decode(text)),
    "$float": float,
    "$datetime": _datetime_of,
    "$date": dt.date.fromisoformat,
    "$time": dt.time.fromisoformat,
    "$timedelta": lambda parts: dt.timedelta(*parts),
    "$decimal": Decimal,
}


def _is_namedtuple(cls: Any) -> bool:
    return isinstance(cls, type) and issubclass(cls, tuple) and isinstance(getattr(cls, "_fields", None), tuple)


def imported_class(name: str) -> type | None:
    """The class ``module:qualname`` names in a module already imported (None: not there, or
    not a class); nothing is imported."""
    module_name, _, qualname = name.partition(":")
    obj: Any = sys.modules.get(module_name)
    for part in qualname.split("."):
        if obj is None or part == "<locals>":
            return None
        obj = getattr(obj, part, None)
    return obj if isinstance(obj, type) else None


def declared_classes(types_: Iterable[Any]) -> dict[str, type]:
    """The dataclasses and named tuples that declared types name, inside generics, unions and
    fields too: ``module:qualname`` -> class."""
    found: dict[str, type] = {}
    todo = list(types_)
    seen: set[int] = set()
    while todo:
        tp = todo.pop()
        if id(tp) in seen:
            continue
        seen.add(id(tp))
        todo.extend(typing.get_args(tp))
        if isinstance(tp, type) and (dataclasses.is_dataclass(tp) or _is_namedtuple(tp) or typing.is_typeddict(tp)):
            if not typing.is_typeddict(tp):
                found[class_name(tp)] = tp
            try:
                todo.extend(typing.get_type_hints(tp).values())
            except Exception:
                todo.extend(getattr(tp, "__annotations__", {}).values())
    return found
