"""Writing a savepoint from DataFrames (Flink's State Processor API's bootstrap): a job restored
from it starts with that state, for example opening balances.

``write_savepoint(job, {"balance": df}, path)`` takes, per state the job's function declares,
a frame in the reader's layout (``reader.py``): the job's key columns and

* ValueState, ReducingState, AggregatingState: ``value`` (one row per key);
* ListState: ``value``, one row per element, in ``index`` order when there is such a column
  (else in row order);
* MapState: ``map_key`` and ``value``, one row per entry;

and optionally a timers frame (key columns, ``domain``: ``event_time`` or
``processing_time``, ``timestamp``: epoch ms) for a function with ``on_timer``. A row whose
value is null holds no state. Values are checked against the descriptors' types (an int for
a float state becomes a float).

Each key goes to the key group the engine computes for it (``engine/events.hash_keys``, on
the key columns' Arrow types: the source's declared schema when it has one, else the
frame's), so the restored job finds it where its events arrive. The savepoint has no batch,
no watermark and no source offset: a job restored from it reads its source from the start.
It records the states' signatures and types, so a restore checks them as for any savepoint.
"""

from __future__ import annotations

import copy
import datetime as dt
import os
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from sparkstate.api.job import JobDescription
from sparkstate.api.state import TIMERS_FIELD, MapStateDescriptor, Record, StateDescriptor, make_type_check
from sparkstate.api.time import TimeDomain
from sparkstate.engine.compile import keyed_function
from sparkstate.engine.events import hash_keys
from sparkstate.engine.operator import KeyedOperator
from sparkstate.errors import SavepointError
from sparkstate.savepoint.files import Directory, LocalDirectory, SavepointWriter
from sparkstate.savepoint.format import MISSING
from sparkstate.savepoint.migration import ttl_descriptions, type_info, value_type
from sparkstate.savepoint.reader import DOMAIN_NAMES, kind_of

#: what a timers frame's ``domain`` may say, and the domain's number
_DOMAINS: dict[Any, int] = {**{v: k for k, v in DOMAIN_NAMES.items()}, "event": 0, "processing": 1, 0: 0, 1: 1}


def key_arrow_types(job: JobDescription, frame: pd.DataFrame | None = None) -> list[pa.DataType]:
    """The Arrow types of the job's key columns: the source's declared schema's, else the
    frame's (what the packer hashes: the same keys must land in the same groups)."""
    from sparkstate.api.schema import Schema

    ddl = job.source_spec.schema_ddl if job.source_spec is not None else None
    if ddl:
        schema = Schema.of(ddl).arrow
        if all(c in schema.names for c in job.key_columns):
            return [schema.field(c).type for c in job.key_columns]
    if frame is None:
        raise SavepointError(f"job {job.name!r}: the source declares no schema, so the key columns' types come from a frame")
    table = pa.Table.from_pandas(frame[list(job.key_columns)], preserve_index=False)
    return [table.schema.field(c).type for c in job.key_columns]


def key_groups_of(
    keys: pd.DataFrame, key_columns: list[str], types: list[pa.DataType], key_groups: int,
) -> tuple[np.ndarray, list[Any]]:
    """Each row's key group, and its key as the engine holds it (a value, or a tuple for
    several columns; timestamps as epoch ms)."""
    columns = []
    for name, tp in zip(key_columns, types):
        try:
            columns.append(pa.array(keys[name], type=tp, from_pandas=True))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
            raise SavepointError(f"key column {name!r} does not hold {tp} values as the job's source does: {exc}") from None
        if columns[-1].null_count:
            raise SavepointError(f"key column {name!r} has nulls: a key without its value reaches no state")
    groups = hash_keys(columns) % np.uint64(key_groups)
    values = [_millis(c).to_pylist() for c in columns]
    python_keys = values[0] if len(values) == 1 else list(zip(*values))
    return groups.astype(np.int64), python_keys


def _millis(col: pa.Array) -> pa.Array:
    if pa.types.is_timestamp(col.type):
        return col.cast(pa.timestamp("ms", tz=col.type.tz), safe=False).cast(pa.int64())
    return col


def _pandas(frame: Any, what: str) -> pd.DataFrame:
    if isinstance(frame, pd.DataFrame):
        return frame
    if hasattr(frame, "toPandas"):  # a Spark DataFrame (collected to the driver)
        result: pd.DataFrame = frame.toPandas()
        return result
    raise SavepointError(f"{what}: expected a pandas or Spark DataFrame, got {type(frame).__name__}")


def _values(frame: pd.DataFrame, column: str) -> list[Any]:
    """A column's values as Python objects, ``MISSING`` where null (NaN, None, NaT)."""
    present = frame[column].notna().tolist()
    return [v if p else MISSING for v, p in zip(frame[column].tolist(), present)]


def _checker(tp: Any, what: str) -> Any:
    check = make_type_check(tp, what)

    if check is None and tp is not float:
        return lambda value: value.item() if isinstance(value, np.generic) else value

    def convert(value: Any) -> Any:
        if isinstance(value, np.generic):
            value = value.item()
        if tp is float and type(value) is int:
            value = float(value)
        if check is not None and not check(value):
            expected = getattr(tp, "__name__", repr(tp))
            raise SavepointError(f"{what}: {type(value).__name__} {value!r} is not a {expected}")
        return value

    return convert


def _columns(frame: pd.DataFrame, needed: list[str], what: str) -> None:
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise SavepointError(f"{what}: the frame has no column(s) {missing}; it needs {needed} (has {list(frame.columns)})")


def _timed(desc: StateDescriptor, frame: pd.DataFrame) -> bool:
    """Whether the frame gives a TTL'd state's values their times (``last_access``, as the
    reader gives them): then they are stored ``(value, last_access)``, as the state keeps them."""
    return desc.ttl_config is not None and "last_access" in frame.columns


def _state_values(desc: StateDescriptor, frame: pd.DataFrame, keys: list[Any], where: str) -> dict[Any, Any]:
    """``{key: value}`` of one state from its frame (rows aligned with ``keys``)."""
    kind = kind_of(desc.describe())
    out: dict[Any, Any] = {}
    times = frame["last_access"].tolist() if _timed(desc, frame) else None

    def stored(convert: Any, value: Any, row: int) -> Any:
        value = convert(value)
        if times is None:
            return value
        try:
            return (value, int(times[row]))
        except (TypeError, ValueError):
            raise SavepointError(f"{where}: last_access {times[row]!r} is not a time in epoch ms") from None

    if kind == "ListState":
        convert = _checker(value_type(desc), f"{where}: an element")
        order = frame["index"].tolist() if "index" in frame.columns else range(len(frame))
        elements: dict[Any, list[tuple[Any, int, Any]]] = defaultdict(list)
        for row, (key, pos, value) in enumerate(zip(keys, order, _values(frame, "value"))):
            if value is not MISSING:
                elements[key].append((pos, row, stored(convert, value, row)))
        return {k: [v for _, _, v in sorted(items, key=lambda e: (e[0], e[1]))] for k, items in elements.items()}
    if kind == "MapState":
        assert isinstance(desc, MapStateDescriptor)
        convert_key = _checker(desc.key_type, f"{where}: a map key")
        convert = _checker(desc.value_type, f"{where}: a map value")
        for row, (key, map_key, value) in enumerate(zip(keys, frame["map_key"].tolist(), _values(frame, "value"))):
            entries = out.setdefault(key, {})
            map_key = convert_key(map_key)
            if map_key in entries:
                raise SavepointError(f"{where}: key {key!r} has map key {map_key!r} twice")
            entries[map_key] = stored(lambda v: None if v is MISSING else convert(v), value, row)
        return out
    convert = _checker(value_type(desc), f"{where}: a value")
    for row, (key, value) in enumerate(zip(keys, _values(frame, "value"))):
        if value is MISSING:
            continue
        if key in out:
            raise SavepointError(f"{where}: key {key!r} has two rows; {desc.describe()} holds one value per key")
        out[key] = stored(convert, value, row)
    return out


def bootstrap_records(
    job: JobDescription,
    state: Mapping[str, Any],
    timers: Any = None,
) -> tuple[dict[int, list[tuple[Any, Record]]], list[StateDescriptor], list[str]]:
    """The records a savepoint of ``job`` holding ``state`` (and ``timers``) has, by key
    group, the job's state descriptors, and the TTL'd states whose values carry their times
    (their frames have ``last_access``; the others' values are restored with the savepoint's
    creation time, see ``compat.restore_stamp``)."""
    if job.window_assigner is not None:
        raise SavepointError(
            f"job {job.name!r} is a window job: its state is its windows' contents, which a bootstrap cannot write; "
            "bootstrap the state of a KeyedProcessFunction instead"
        )
    if not job.key_columns:
        raise SavepointError(f"job {job.name!r} has no key: call .key_by(...) first")
    fn = keyed_function(job)
    descriptors = KeyedOperator(copy.deepcopy(fn), job.key_columns).open()
    declared = {d.name: d for d in descriptors}
    unknown = sorted(set(state) - set(declared))
    if unknown:
        raise SavepointError(
            f"job {job.name!r} declares no state {', '.join(repr(n) for n in unknown)}; its states: "
            + (", ".join(f"{n} ({d.describe()})" for n, d in sorted(declared.items())) or "none")
        )
    key_columns = list(job.key_columns)
    records: dict[Any, Record] = {}
    group_of: dict[Any, int] = {}
    timed: list[str] = []
    for name, given in state.items():
        frame = _pandas(given, f"state {name!r}")
        desc = declared[name]
        if _timed(desc, frame):
            timed.append(name)
        kind = kind_of(desc.describe())
        value_columns = {"MapState": ["map_key", "value"]}.get(kind, ["value"])
        where = f"state {name!r} ({desc.describe()})"
        _columns(frame, key_columns + value_columns, where)
        groups, keys = key_groups_of(frame, key_columns, key_arrow_types(job, frame), job.settings.key_groups)
        group_of.update(zip(keys, groups.tolist()))
        for key, value in _state_values(desc, frame, keys, where).items():
            records.setdefault(key, {})[name] = value
    if timers is not None:
        _add_timers(job, fn, _pandas(timers, "timers"), records, group_of)
    out: dict[int, list[tuple[Any, Record]]] = defaultdict(list)
    for key, rec in records.items():
        out[group_of[key]].append((key, rec))
    return dict(out), descriptors, timed


def _add_timers(job: JobDescription, fn: Any, frame: pd.DataFrame, records: dict[Any, Record], group_of: dict[Any, int]) -> None:
    if not type(fn).defines_on_timer():
        raise SavepointError(f"timers: the function of job {job.name!r} has no on_timer, so no timer could fire")
    key_columns = list(job.key_columns)
    _columns(frame, key_columns + ["domain", "timestamp"], "timers")
    groups, keys = key_groups_of(frame, key_columns, key_arrow_types(job, frame), job.settings.key_groups)
    group_of.update(zip(keys, groups.tolist()))
    for key, domain, ts in zip(keys, frame["domain"].tolist(), frame["timestamp"].tolist()):
        d = _DOMAINS.get(int(domain) if isinstance(domain, (int, np.integer, TimeDomain)) else domain)
        if d is None:
            raise SavepointError(f"timers: domain {domain!r} of key {key!r} is not event_time or processing_time")
        if isinstance(ts, (pd.Timestamp, dt.datetime)):
            ts = int(pd.Timestamp(ts).value // 1_000_000)
        records.setdefault(key, {}).setdefault(TIMERS_FIELD, set()).add((d, int(ts)))


def bootstrap_metadata(job: JobDescription, descriptors: list[StateDescriptor], timed: Sequence[str] = ()) -> dict[str, Any]:
    """What ``_savepoint.json`` says of a bootstrapped savepoint (files and totals aside);
    ``timed``: the TTL'd states written with their values' times."""
    from sparkstate.savepoint.files import _version

    now = dt.datetime.now(dt.UTC)
    fn = keyed_function(job)
    return {
        "id": f"{job.name}-bootstrap-{now:%Y%m%dT%H%M%S}",
        "origin": "bootstrap",
        "job": job.name,
        "function": type(fn).__qualname__,
        "key_columns": list(job.key_columns),
        "key_groups": job.settings.key_groups,
        "bucket_size": job.settings.bucket_size,
        "state": {d.name: d.describe() for d in sorted(descriptors, key=lambda d: d.name)},
        "state_types": {d.name: type_info(value_type(d)) for d in descriptors},
        "state_ttl": {n: t for n, t in ttl_descriptions(descriptors).items() if n in timed},
        "source": job.source_spec.identity() if job.source_spec is not None else None,
        "source_offset": None,
        "source_files": None,
        "batch": None,
        "watermark_ms": None,
        "processing_time_ms": None,
        "checkpoint": None,
        "state_backend": None,
        "partitions": None,
        "created": now.isoformat(timespec="seconds"),
        "sparkstate_version": _version(),
        "spark_version": None,
    }


def write_savepoint(
    job: JobDescription,
    state: Mapping[str, Any],
    path: str | os.PathLike[str] | Directory,
    *,
    timers: Any = None,
) -> dict[str, Any]:
    """Write a savepoint of ``job`` whose state is ``state`` (state name -> pandas or Spark
    DataFrame, see the module docs) to ``path`` (a new directory); returns its metadata.

    Example::

        write_savepoint(job, {"balance": pd.DataFrame({"account": ["a", "b"], "value": [10.0, 5.0]})}, "sp")
        job.run(from_savepoint="sp")
    """
    groups, descriptors, timed = bootstrap_records(job, state, timers)
    target = LocalDirectory(path) if isinstance(path, (str, os.PathLike)) else path
    writer = SavepointWriter(target, bootstrap_metadata(job, descriptors, timed), sorted(d.name for d in descriptors))
    try:
        for kg in sorted(groups):
            writer.add_group(kg, groups[kg])
        meta = writer.publish()
    except BaseException:
        writer.abort()
        raise
    meta["location"] = target.location
    return meta
