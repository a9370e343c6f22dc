"""Reading state offline (Flink's State Processor API): a savepoint's state, or a stopped job's
checkpoint's, as pandas DataFrames, and one key's state and timers in readable form.

One frame per state descriptor, with the job's key columns first (a key of several columns
is split into one column each):

* ValueState, ReducingState, AggregatingState: one row per key, ``value``;
* ListState: one row per element, ``index`` (its position) and ``value``;
* MapState: one row per entry, ``map_key`` and ``value``;
* a state with a time-to-live has ``last_access`` (epoch ms) after ``value``: each value's
  (element's, entry's) time of last access, which ``write_savepoint`` takes back;
* a window job's ``windows`` state: one row per key and window, ``window_start``,
  ``window_end`` (epoch ms) and ``accumulator`` (the window's contents: the accumulator, the
  reduced element, or the list of elements of a process window function).

Timers are a frame of their own: the key columns, ``domain`` (``event_time`` or
``processing_time``) and ``timestamp`` (epoch ms).

Example::

    from sparkstate.savepoint.reader import read_savepoint

    sp = read_savepoint(".sparkstate/savepoints/running-sum-b000004-20260101T120000")
    sp.state("total")          # merchant_id, value
    sp.timers()                # merchant_id, domain, timestamp
    print(sp.key("m000042"))   # all of one key's state and timers

A checkpoint is read through Spark (``sparkstate.runtime.savepoints.state_frames.read_checkpoint``);
the frames are the same. Everything here is plain Python, pyarrow and pandas.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from sparkstate.api.state import HELD_FIELD, TIMERS_FIELD, Record
from sparkstate.api.time import TimeDomain
from sparkstate.engine.events import iso_time, key_group_of
from sparkstate.errors import SavepointError
from sparkstate.savepoint.files import Directory, LocalDirectory, Savepoint, open_savepoint
from sparkstate.savepoint.format import KEY_COLUMN, MISSING, TIMERS_COLUMN, decode_column, key_text

#: the state a window job keeps its windows' contents in (``engine/windows.py``)
WINDOWS_STATE = "windows"
WINDOW_FUNCTION = "WindowOperator"
DOMAIN_NAMES = {int(TimeDomain.EVENT_TIME): "event_time", int(TimeDomain.PROCESSING_TIME): "processing_time"}


def kind_of(signature: str) -> str:
    """``ValueState`` of ``ValueState[float]``."""
    return signature.split("[", 1)[0]


class _Groups:
    """Where a reader's records come from: the key groups that hold state, a group's records,
    and one state's ``(key, value)`` pairs of a group (all a savepoint's file needs to decode)."""

    key_groups: list[int]

    def records(self, kg: int) -> list[tuple[Any, Record]]:
        raise NotImplementedError

    def values(self, kg: int, name: str) -> Iterator[tuple[Any, Any]]:
        for key, rec in self.records(kg):
            if name in rec:
                yield key, rec[name]

    def timers(self, kg: int) -> Iterator[tuple[Any, set[tuple[int, int]]]]:
        """``(key, timers)`` of the records of a group that have timers."""
        for key, rec in self.records(kg):
            if rec.get(TIMERS_FIELD):
                yield key, rec[TIMERS_FIELD]


class _SavepointGroups(_Groups):
    def __init__(self, savepoint: Savepoint) -> None:
        self.savepoint = savepoint
        self.key_groups = savepoint.key_groups

    def records(self, kg: int) -> list[tuple[Any, Record]]:
        return self.savepoint.records(kg)

    def values(self, kg: int, name: str) -> Iterator[tuple[Any, Any]]:
        table = self.savepoint.table(kg)
        if name not in table.column_names:
            return
        decoder = self.savepoint.decoder
        values = decode_column(table, name, decoder)
        for key, value in zip(decode_column(table, KEY_COLUMN, decoder), values):
            if value is not MISSING:
                yield key, value

    def timers(self, kg: int) -> Iterator[tuple[Any, set[tuple[int, int]]]]:
        table = self.savepoint.table(kg)
        keys = decode_column(table, KEY_COLUMN, self.savepoint.decoder)
        for key, timers in zip(keys, table.column(TIMERS_COLUMN).to_pylist()):
            if timers:
                yield key, {(t["domain"], t["timestamp"]) for t in timers}


class _RecordGroups(_Groups):
    """Records already in memory: ``{key group: [(key, record)]}`` (a checkpoint's batch)."""

    def __init__(self, groups: dict[int, list[tuple[Any, Record]]]) -> None:
        self.groups = groups
        self.key_groups = sorted(groups)

    def records(self, kg: int) -> list[tuple[Any, Record]]:
        return self.groups.get(kg, [])


@dataclass
class KeyState:
    """One key's state and timers, as a lookup returns them.

    ``state`` maps each state name to its value; ``timers`` lists ``(domain, timestamp)``
    with domain ``event_time`` or ``processing_time``; a window job's key has ``windows``
    instead: ``(window_start, window_end, accumulator)``, with each window's timers in
    ``timers``.
    """

    key: Any
    key_group: int
    state: dict[str, Any] = field(default_factory=dict)
    timers: list[tuple[str, int]] = field(default_factory=list)
    windows: list[tuple[int, int, Any]] = field(default_factory=list)
    #: the watermark its event-time timers wait past (Flink fires them at the next watermark)
    held: int | None = None
    signatures: dict[str, str] = field(default_factory=dict)

    def lines(self) -> list[str]:
        """The key's state as lines of text (what ``sparkstate state --key`` prints)."""
        out = [f"key {key_text(self.key)} (key group {self.key_group})"]
        width = max((len(n) for n in self.state), default=0)
        kinds = max((len(self.signatures.get(n, "")) for n in self.state), default=0)
        for name, value in self.state.items():
            out.append(f"  {name.ljust(width)}  {self.signatures.get(name, '').ljust(kinds)}  {_value_text(value)}")
        for start, end, contents in self.windows:
            out.append(f"  window [{iso_time(start)}, {iso_time(end)})  {_value_text(contents)}")
        for domain, ts in sorted(self.timers, key=lambda t: (t[1], t[0])):
            out.append(f"  timer  {domain.replace('_', ' ')} {iso_time(ts)} ({ts})")
        if self.held is not None:
            out.append(f"  event-time timers at or before {iso_time(self.held)} wait for the next watermark")
        if not self.state and not self.windows and not self.timers:
            out.append("  (no state)")
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())


def _value_text(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 2000 else text[:2000] + f"... ({len(text):,} characters)"


class StateReader:
    """The state of one savepoint (or one committed batch of a checkpoint), read by descriptor
    or by key. ``meta`` is the savepoint's metadata (or the checkpoint's, with the batch)."""

    def __init__(self, meta: dict[str, Any], groups: _Groups, location: str) -> None:
        self.meta = meta
        self._groups = groups
        self.location = location

    @property
    def job(self) -> str:
        return str(self.meta.get("job"))

    @property
    def key_columns(self) -> list[str]:
        return list(self.meta.get("key_columns") or ["key"])

    @property
    def states(self) -> dict[str, str]:
        """State name -> signature (``ValueState[float]``)."""
        return dict(self.meta.get("state") or {})

    @property
    def key_groups(self) -> list[int]:
        """The key groups that hold state."""
        return list(self._groups.key_groups)

    @property
    def is_window_job(self) -> bool:
        return self.meta.get("function") == WINDOW_FUNCTION and WINDOWS_STATE in self.states

    def records(self) -> Iterator[tuple[int, Any, Record]]:
        """Every ``(key group, key, record)``, as the engine keeps them."""
        for kg in self._groups.key_groups:
            for key, rec in self._groups.records(kg):
                yield kg, key, rec

    # ------------------------------------------------------------------ frames

    def _key_values(self, key: Any) -> list[Any]:
        n = len(self.key_columns)
        if n == 1:
            return [key]
        return list(key) if isinstance(key, tuple) and len(key) == n else [key] + [None] * (n - 1)

    def _check_state(self, name: str) -> str:
        if name not in self.states:
            known = ", ".join(f"{n} ({s})" for n, s in sorted(self.states.items())) or "none"
            raise SavepointError(f"{self.location} holds no state {name!r} of job {self.job!r}; its states: {known}")
        return kind_of(self.states[name])

    def state(self, name: str, limit: int | None = None) -> pd.DataFrame:
        """All values of state ``name``: a frame as described in the module docs (the first
        ``limit`` rows when given, in key-group order)."""
        kind = self._check_state(name)
        if self.is_window_job and name == WINDOWS_STATE:
            return self._window_frame(limit)
        extra = {"ListState": ["index", "value"], "MapState": ["map_key", "value"]}.get(kind, ["value"])
        # a TTL'd state stores (value, last access) per value: the time gets a column of its own
        ttl = name in (self.meta.get("state_ttl") or {})
        columns = self.key_columns + extra + (["last_access"] if ttl else [])
        rows: list[list[Any]] = []
        for kg in self._groups.key_groups:
            for key, value in self._groups.values(kg, name):
                head = self._key_values(key)
                if kind == "ListState":
                    rows.extend([*head, i, *(v if ttl else (v,))] for i, v in enumerate(value))
                elif kind == "MapState":
                    rows.extend([*head, k, *(v if ttl else (v,))] for k, v in value.items())
                else:
                    rows.append([*head, *(value if ttl else (value,))])
                if limit is not None and len(rows) >= limit:
                    return _frame(rows[:limit], columns)
        return _frame(rows, columns)

    def timers(self, limit: int | None = None) -> pd.DataFrame:
        """Every timer: the key columns, ``domain`` and ``timestamp`` (epoch ms); a window
        job's also ``window_start`` and ``window_end`` for the timers of a window (their key
        columns are empty: a window of tumbling or sliding windows fires for all its keys)."""
        windows = self.is_window_job
        columns = self.key_columns + ["domain", "timestamp"] + (["window_start", "window_end"] if windows else [])
        rows: list[list[Any]] = []
        for kg in self._groups.key_groups:
            # a window job's records say whether their key is a window; other timers need no records
            found = ((k, r[TIMERS_FIELD], self._is_pane(k, r)) for k, r in self._groups.records(kg)
                     if r.get(TIMERS_FIELD)) if windows else ((k, t, False) for k, t in self._groups.timers(kg))
            for key, timers, pane in found:
                head = [None] * len(self.key_columns) if pane else self._key_values(key)
                tail = list(key) if pane else [None, None] if windows else []
                rows.extend([*head, DOMAIN_NAMES.get(d, str(d)), ts, *tail] for d, ts in sorted(timers))
                if limit is not None and len(rows) >= limit:
                    return _frame(rows[:limit], columns)
        return _frame(rows, columns)

    def _window_frame(self, limit: int | None) -> pd.DataFrame:
        columns = self.key_columns + ["window_start", "window_end", "accumulator"]
        rows: list[list[Any]] = []
        for _kg, key, rec in self.records():
            for user_key, (start, end), contents in self._windows_of(key, rec):
                rows.append([*self._key_values(user_key), start, end, contents])
            if limit is not None and len(rows) >= limit:
                return _frame(rows[:limit], columns)
        return _frame(rows, columns)

    def _windows_of(self, key: Any, rec: Record) -> Iterator[tuple[Any, tuple[int, int], Any]]:
        """``(user key, window, contents)`` of a window job's record."""
        windows = rec.get(WINDOWS_STATE) or {}
        if self._is_pane(key, rec):
            for user_key, contents in windows.items():
                yield user_key, key, contents
        else:
            for window, contents in windows.items():
                yield key, window, contents

    def _is_pane(self, key: Any, rec: Record) -> bool:
        """Whether a window job's record is a *pane* (tumbling and sliding windows: keyed by
        its window ``(start, end)``, holding ``{user key: contents}``) rather than a key's
        sessions (keyed by the user key, holding ``{(start, end): contents}``)."""
        if not _is_window(key):
            return False
        windows = rec.get(WINDOWS_STATE) or {}
        if len(self.key_columns) != 2 or not all(_is_window(w) for w in windows):
            return True  # a user key cannot look like a window, or the contents are not by window
        # two int key columns: both readings are possible. A record's earliest timer is the end
        # of its earliest window (less 1 ms): the record key's for a pane, a session's otherwise
        timers = rec.get(TIMERS_FIELD) or set()
        if not timers or not windows:
            return True
        first = min(ts for _, ts in timers)
        return first != min(w[1] for w in windows) - 1

    # ------------------------------------------------------------------ one key

    def key(self, key: Any) -> KeyState | None:
        """All state and timers of ``key`` (a value, or a tuple for several key columns), or
        None when the savepoint holds nothing for it."""
        found = self._lookup(lambda k: k == key, [key])
        return found[0] if found else None

    def find(self, text: str) -> list[KeyState]:
        """The keys that ``text`` names: a key's JSON text (``"m1"``, ``42``, ``["a", 1]``) or
        a string key as it is (``m1``). Several when text names both (the string ``"42"``
        and the number 42)."""
        texts = {text, json.dumps(text, ensure_ascii=False)}
        candidates: list[Any] = [text]
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = MISSING
        if parsed is not MISSING:
            parsed = tuple(parsed) if isinstance(parsed, list) else parsed
            candidates.append(parsed)
            texts.add(key_text(parsed))
        return self._lookup(lambda k: key_text(k) in texts, candidates)

    def _lookup(self, match: Callable[[Any], bool], candidates: Sequence[Any]) -> list[KeyState]:
        groups = set(self._groups.key_groups)
        n = int(self.meta.get("key_groups") or 0)
        likely = sorted({g for g in (_group(c, n) for c in candidates) if g in groups})
        found = self._lookup_in(likely, match)
        if not found:  # a key whose source column has another Arrow type than its Python value's
            found = self._lookup_in([g for g in self._groups.key_groups if g not in likely], match)
        return found

    def _lookup_in(self, key_groups: Iterable[int], match: Callable[[Any], bool]) -> list[KeyState]:
        found: dict[str, KeyState] = {}
        window_job = self.is_window_job
        for kg in key_groups:
            for key, rec in self._groups.records(kg):
                if window_job:
                    for user_key, (start, end), contents in self._windows_of(key, rec):
                        if match(user_key):
                            ks = found.setdefault(key_text(user_key), self._key_state(user_key, kg))
                            ks.windows.append((start, end, contents))
                            if self._is_pane(key, rec):
                                ks.timers.extend(self._timer_list(rec))
                    if not self._is_pane(key, rec) and match(key):
                        ks = found.setdefault(key_text(key), self._key_state(key, kg))
                        ks.timers.extend(self._timer_list(rec))
                        ks.held = rec.get(HELD_FIELD)
                elif match(key):
                    ks = found.setdefault(key_text(key), self._key_state(key, kg))
                    ks.state.update({n: v for n, v in rec.items() if not n.startswith("__")})
                    ks.timers.extend(self._timer_list(rec))
                    ks.held = rec.get(HELD_FIELD)
        for ks in found.values():
            ks.windows.sort(key=lambda w: (w[0], w[1]))
            ks.timers = sorted(set(ks.timers), key=lambda t: (t[1], t[0]))
        return list(found.values())

    def _key_state(self, key: Any, kg: int) -> KeyState:
        return KeyState(key, kg, signatures=self.states)

    @staticmethod
    def _timer_list(rec: Record) -> list[tuple[str, int]]:
        return [(DOMAIN_NAMES.get(d, str(d)), ts) for d, ts in sorted(rec.get(TIMERS_FIELD) or ())]

    # ------------------------------------------------------------------ summary

    def describe(self) -> list[tuple[str, str]]:
        """What the savepoint is, as ``(field, text)`` pairs."""
        m = self.meta
        offset = m.get("source_offset")
        return [
            ("location", self.location),
            ("job", f"{self.job} ({m.get('function') or '?'})"),
            ("batch", "bootstrapped (no batch)" if m.get("batch") is None else str(m.get("batch"))),
            ("key columns", ", ".join(self.key_columns)),
            ("key groups", f"{len(self.key_groups):,} of {m.get('key_groups')} hold state"),
            ("keys", f"{m['keys']:,}" if isinstance(m.get("keys"), int) else "?"),
            ("state", ", ".join(f"{n} {s}" for n, s in sorted(self.states.items())) or "none"),
            ("watermark", watermark_text(m.get("watermark_ms"))),
            ("source offset", "none: the source starts from its beginning" if offset is None else json.dumps(offset)),
        ]


def watermark_text(ms: Any) -> str:
    """A savepoint's watermark for people (none when the job has none yet)."""
    return iso_time(int(ms)) if isinstance(ms, int) and ms > 0 else "none"


def _is_window(value: Any) -> bool:
    return type(value) is tuple and len(value) == 2 and all(type(v) is int for v in value) and value[0] < value[1]


def _group(key: Any, key_groups: int) -> int | None:
    """The key group of a key given as a Python value (None when it cannot be hashed so)."""
    if key_groups < 1:
        return None
    try:
        return key_group_of(key, key_groups)
    except Exception:
        return None


def _frame(rows: list[list[Any]], columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=columns) if rows else pd.DataFrame({c: pd.Series(dtype=object) for c in columns})


def read_savepoint(location: str | os.PathLike[str] | Directory | Savepoint, *, trusted: bool = False) -> StateReader:
    """A savepoint's state for reading (a local path, or a :class:`Directory`); refuses a
    missing, unfinished, foreign or newer savepoint, and a damaged file when it is read.

    Reading runs no code from the savepoint: dataclass values come back as their classes when
    this process has imported them (else as dicts of their fields), and pickled values (state
    with no safe encoding, or every key of a format-1 savepoint) are shown as placeholders
    unless ``trusted`` says you trust who wrote it (then they are unpickled)."""
    if isinstance(location, Savepoint):
        savepoint = location
    else:
        directory = LocalDirectory(location) if isinstance(location, (str, os.PathLike)) else location
        savepoint = open_savepoint(directory, trusted=trusted)
    return StateReader(savepoint.meta, _SavepointGroups(savepoint), savepoint.location)


def reader_of_records(meta: dict[str, Any], groups: dict[int, list[tuple[Any, Record]]], location: str) -> StateReader:
    """A reader over records in memory (``{key group: [(key, record)]}``), e.g. a checkpoint's."""
    return StateReader(meta, _RecordGroups(groups), location)


def read_state(location: str | os.PathLike[str] | Directory, name: str, limit: int | None = None) -> pd.DataFrame:
    """State ``name`` of the savepoint at ``location`` as a pandas DataFrame (see the module docs)."""
    return read_savepoint(location).state(name, limit)


def read_timers(location: str | os.PathLike[str] | Directory) -> pd.DataFrame:
    """The timers of the savepoint at ``location``: key columns, ``domain``, ``timestamp``."""
    return read_savepoint(location).timers()


def read_key(location: str | os.PathLike[str] | Directory, key: Any) -> KeyState | None:
    """All state and timers of one key (a tuple for several key columns) of the savepoint."""
    return read_savepoint(location).key(key)
