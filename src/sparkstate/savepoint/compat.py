"""Whether a savepoint's state fits a job, and how its records become the job's: Flink's
rules for restoring after an upgrade (docs/guides/savepoint-evolution.md).

* the job's name is the identity of its state (Flink matches operator state by uid): a
  savepoint of another job is refused; the function's code may change, its class name too;
* the key columns and the number of key groups must be the savepoint's (key groups are
  Flink's max parallelism: state is laid out by them);
* a state the job declares and the savepoint lacks starts empty;
* a state the savepoint holds and the job no longer declares is refused, listing the states
  left behind, unless the user says to drop them (Flink's ``--allowNonRestoredState``); a
  state that looks renamed (one left behind, one new of the same kind) is named as such;
* a state whose kind changed is refused;
* a value type that changed compatibly is migrated (``migration.py``), an incompatible change
  is refused naming the state, the field and both types;
* a state with a time-to-live stores ``(value, last access)`` per value (element, entry). A
  state that gained a TTL since the savepoint has its values wrapped, each with the time the
  savepoint was taken as its last access (:func:`restore_stamp`); one that lost its TTL has
  the times dropped (expired values too: without a TTL nothing expires). A changed TTL
  (duration, options) keeps the saved times. Newer Flink converts the same way
  (``TtlAwareSerializer``); older Flink refused the change.

Everything is decided on the driver before Spark runs a batch (:func:`restore_plan`): the
savepoint's files are checked, pickled contents refused unless the savepoint is trusted, and
every class its values name resolved to one the job declares or has imported. The
:class:`RestorePlan` it returns travels to the executors (pickled with the operator), where
it turns each key group's file into records with exactly those classes.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sparkstate.api.state import Record, StateDescriptor
from sparkstate.errors import SavepointError, StateMigrationError
from sparkstate.savepoint.files import Savepoint
from sparkstate.savepoint.format import read_table, table_to_records
from sparkstate.savepoint.migration import converter_for, kind_of, type_info, value_type
from sparkstate.savepoint.values import Decoder, declared_classes, imported_class


@dataclass(frozen=True)
class RestorePlan:
    """How a savepoint's records become a restored job's: the states kept, and a converter
    per state whose value type changed compatibly. Picklable (it travels to the executors)."""

    keep: tuple[str, ...]
    converters: dict[str, Any] = field(default_factory=dict)
    #: the SHA-256 of every file the driver checked (empty: not checked again)
    checksums: frozenset[str] = frozenset()
    #: how the files' values are read: the classes they name, whether pickles may be read
    decoder: Decoder = field(default_factory=Decoder)

    def records(self, blob: bytes) -> list[tuple[Any, Record]]:
        """A key group's savepoint file as the restored job's ``(key, record)`` pairs; a file
        that is not one the driver checked (changed since) is refused."""
        if self.checksums and hashlib.sha256(blob).hexdigest() not in self.checksums:
            raise SavepointError(
                "a savepoint file read by the restore's first batch is not one the restore checked: the savepoint "
                "changed while the job started. Savepoints must not change: restore again from an unchanged one"
            )
        out = []
        keep = set(self.keep)
        for key, rec in table_to_records(read_table(blob), self.decoder):
            for name in [n for n in rec if not n.startswith("__") and n not in keep]:
                del rec[name]
            for name, convert in self.converters.items():
                if name in rec:
                    rec[name] = convert(rec[name])
            out.append((key, rec))
        return out


def check_restore(
    savepoint: dict[str, Any],
    job_meta: dict[str, Any],
    descriptors: Sequence[StateDescriptor],
    *,
    allow_non_restored_state: bool = False,
    where: str = "",
) -> tuple[RestorePlan, list[str]]:
    """The plan to restore ``savepoint`` (its metadata) into the job described by
    ``job_meta`` (``runtime.checkpoint.job_metadata``) and ``descriptors``, and notes for the
    user; raises :class:`StateMigrationError` on what Flink's rules refuse."""
    where = where or savepoint.get("location", "the savepoint")
    _check_identity(savepoint, job_meta, where)
    saved: dict[str, str] = dict(savepoint.get("state") or {})
    declared = {d.name: d for d in descriptors}
    notes: list[str] = []
    if savepoint.get("function") and job_meta.get("function") and savepoint["function"] != job_meta["function"]:
        notes.append(f"the function changed from {savepoint['function']} to {job_meta['function']}: its state is "
                     "matched by the job's name and the state names")
    notes += _check_windows(savepoint.get("window"), job_meta.get("window"), where)
    left = sorted(set(saved) - set(declared))
    added = sorted(set(declared) - set(saved))
    renames = _renames(left, added, saved, declared)
    if left and not allow_non_restored_state:
        raise StateMigrationError(_left_behind(where, left, saved, renames))
    renamed = dict(renames)
    for name in left:
        lost = f" (if it was renamed to {renamed[name]!r}, that one starts empty)" if name in renamed else ""
        notes.append(f"state {name!r} ({saved[name]}) from the savepoint is dropped: the job no longer declares it"
                     + lost)
    for name in added:
        notes.append(f"state {name!r} ({declared[name].describe()}) is new: it starts empty")
    types = savepoint.get("state_types") or {}
    saved_ttl = savepoint.get("state_ttl") or {}
    converters: dict[str, Any] = {}
    for name in sorted(set(saved) & set(declared)):
        desc = declared[name]
        convert = converter_for(name, saved[name], types.get(name), desc, where)
        if convert is not None and (saved[name] != desc.describe() or _changed(types.get(name), desc)):
            notes.append(f"state {name!r}: values migrate from {saved[name]} to {desc.describe()}")
        had_ttl, has_ttl = name in saved_ttl, desc.ttl_config is not None
        if had_ttl or has_ttl:
            stamp = restore_stamp(savepoint, desc) if has_ttl and not had_ttl else 0
            if had_ttl != has_ttl:
                notes.append(_ttl_note(name, saved_ttl.get(name), desc, stamp))
            if convert is not None or had_ttl != has_ttl:
                convert = TtlRestore(kind_of(saved[name]), convert, had_ttl, has_ttl, stamp)
        if convert is not None:
            converters[name] = convert
    keep = tuple(sorted(set(saved) & set(declared)))
    return RestorePlan(keep, converters, decoder=Decoder(declared_classes(_declared_types(descriptors)))), notes


def _declared_types(descriptors: Sequence[StateDescriptor]) -> list[Any]:
    """The types state descriptors declare: their values', and a MapState's keys'."""
    return [t for d in descriptors for t in (value_type(d), getattr(d, "key_type", object))]


def restore_plan(
    savepoint: Savepoint,
    job_meta: dict[str, Any],
    descriptors: Sequence[StateDescriptor],
    *,
    allow_non_restored_state: bool = False,
    trusted: bool = False,
    broadcast: Sequence[StateDescriptor] = (),
) -> tuple[RestorePlan, list[str]]:
    """:func:`check_restore`, then the savepoint's files checked (``Savepoint.verify``), its
    pickled contents refused unless ``trusted``, and the classes its values name resolved:
    the plan a restore reads the files with. ``broadcast``: the job's broadcast states."""
    plan, notes = check_restore(savepoint.meta, job_meta, descriptors,
                                allow_non_restored_state=allow_non_restored_state, where=savepoint.location)
    contents = savepoint.verify()
    savepoint.check_trusted(contents, trusted)
    probe = Decoder(declared_classes(_declared_types([*descriptors, *broadcast])))
    classes: dict[str, type] = {}
    for name in sorted(contents.classes):
        cls = probe.resolve(name) or imported_class(name)
        if cls is None:
            raise SavepointError(
                f"savepoint {savepoint.location} holds values of class {name} (module:class), which the job neither "
                "declares as a state's type nor has imported: import it in the job's file (or declare it), so its "
                "values are rebuilt as that class"
            )
        classes[name] = cls
    decoder = Decoder(classes, trusted=trusted, where=f"savepoint {savepoint.location}")
    # the executors read the files again: they take only the bytes checked here
    checksums = frozenset(e["sha256"] for e in savepoint.meta["files"].values())
    return replace(plan, checksums=checksums, decoder=decoder), notes


@dataclass(frozen=True)
class TtlRestore:
    """A saved value of a state with or without a TTL as the job's state stores it: the saved
    access times are taken off (``had_ttl``), the values go through ``values`` (a
    ``StateConverter``, when their type changed), and times are put back (``ttl``): the saved
    ones, or ``stamp`` for values saved without."""

    kind: str
    values: Any
    had_ttl: bool
    ttl: bool
    stamp: int

    def __call__(self, stored: Any) -> Any:
        if stored is None:
            return None
        if self.kind == "ListState":
            pairs = list(stored) if self.had_ttl else [(e, None) for e in stored]
            elements = [e for e, _ in pairs]
            if self.values is not None:
                elements = self.values(elements)
            return [(e, self._time(t)) for e, (_, t) in zip(elements, pairs)] if self.ttl else elements
        if self.kind == "MapState":
            times = [v[1] for v in stored.values()] if self.had_ttl else [None] * len(stored)
            entries = {k: v[0] for k, v in stored.items()} if self.had_ttl else dict(stored)
            if self.values is not None:
                entries = self.values(entries)
            return {k: (v, self._time(t)) for (k, v), t in zip(entries.items(), times)} if self.ttl else entries
        value, t = stored if self.had_ttl else (stored, None)
        if self.values is not None:
            value = self.values(value)
        return (value, self._time(t)) if self.ttl else value

    def _time(self, saved: int | None) -> int:
        return self.stamp if saved is None else saved


def restore_stamp(savepoint: dict[str, Any], desc: StateDescriptor) -> int:
    """The last-access time a value saved without a TTL gets when restored into a state with
    one: the savepoint's processing time (the batch's), or for an event-time TTL its watermark;
    a savepoint without them (a bootstrapped one) gives the time it was created."""
    cfg = desc.ttl_config
    assert cfg is not None
    watermark = savepoint.get("watermark_ms")
    if cfg.event_time and isinstance(watermark, int) and watermark > 0:
        return watermark
    processing = savepoint.get("processing_time_ms")
    if isinstance(processing, int) and processing > 0:
        return processing
    created = savepoint.get("created")
    try:
        return int(dt.datetime.fromisoformat(str(created)).timestamp() * 1000)
    except ValueError:
        raise StateMigrationError(
            f"state {desc.name!r} gained a time-to-live and the savepoint records no time to give its restored values "
            f"(no processing time, watermark or creation time, created={created!r}): restore it into the job "
            "without the TTL, take a new savepoint from that run, and restore that one"
        ) from None


def _ttl_note(name: str, saved: str | None, desc: StateDescriptor, stamp: int) -> str:
    if desc.ttl_config is None:
        return (f"state {name!r} no longer has a time-to-live ({saved}): its restored values drop their access times "
                "and no longer expire")
    when = dt.datetime.fromtimestamp(stamp / 1000, dt.UTC).isoformat(timespec="milliseconds")
    return (f"state {name!r} now has a time-to-live ({desc.ttl_config.describe()}): its restored values count as "
            f"last accessed at {stamp} ({when}, the savepoint's time) and expire one TTL after it")


def _check_identity(savepoint: dict[str, Any], job_meta: dict[str, Any], where: str) -> None:
    """The job, its key columns and its key groups must be the savepoint's."""
    problems = []
    if savepoint.get("job") != job_meta["job"]:
        problems.append(
            f"it is a savepoint of job {savepoint.get('job')!r}, not of {job_meta['job']!r} (a job's name is the "
            "identity of its state, like Flink's operator uid): restore a savepoint of this job, or, if the job was "
            f"renamed, keep its old name {savepoint.get('job')!r}"
        )
    if list(savepoint.get("key_columns") or []) != list(job_meta["key_columns"]):
        problems.append(
            f"its key columns are {savepoint.get('key_columns')} and the job's {job_meta['key_columns']} (state "
            "is kept per key, so other key columns cannot find it): key the job by "
            f"{savepoint.get('key_columns')} again, or start it without the savepoint"
        )
    if savepoint.get("key_groups") != job_meta["key_groups"]:
        problems.append(
            f"it has {savepoint.get('key_groups')} key groups and the job {job_meta['key_groups']}: key groups "
            "are fixed for the life of the state (Flink's max parallelism: every key's place depends on them); "
            f"restore with --key-groups {savepoint.get('key_groups')} "
            f"(with_settings(key_groups={savepoint.get('key_groups')})): any number of partitions works"
        )
    if problems:
        raise StateMigrationError(f"savepoint {where} cannot be restored: " + "; ".join(problems) + ".")


def _renames(
    left: list[str], added: list[str], saved: dict[str, str], declared: dict[str, StateDescriptor]
) -> list[tuple[str, str]]:
    """Saved states that look renamed: each left-behind state paired with a new state of the
    same signature, else of the same kind."""
    pairs: list[tuple[str, str]] = []
    free = list(added)
    for same in (lambda old, new: saved[old] == declared[new].describe(),
                 lambda old, new: kind_of(saved[old]) == kind_of(declared[new].describe())):
        for old in left:
            if any(o == old for o, _ in pairs):
                continue
            match = next((new for new in free if same(old, new)), None)
            if match is not None:
                pairs.append((old, match))
                free.remove(match)
    return sorted(pairs)


def _left_behind(where: str, left: list[str], saved: dict[str, str], renames: list[tuple[str, str]]) -> str:
    states = ", ".join(f"{n!r} ({saved[n]})" for n in left)
    message = f"savepoint {where} holds state the job no longer declares: {states}."
    if renames:
        names = "; ".join(f"{old!r} -> {new!r}" for old, new in renames)
        message += (f" It looks renamed ({names}): state names are the savepoint's schema, so a renamed state "
                    "would start empty and the saved one be lost; keep the old name in the descriptor.")
    return message + (" Declare it again, or restore with --allow-non-restored-state (allow_non_restored_state=True) "
                      "to drop it")


def _changed(saved_info: Any, descriptor: StateDescriptor) -> bool:
    return bool(saved_info) and saved_info != type_info(value_type(descriptor))


def _check_windows(saved: dict | None, now: dict | None, where: str) -> list[str]:
    """A window job's windows may change size (restored windows keep their bounds and fire at
    their own end, as in Flink); what accumulates in them, and whether they are sessions (a
    record per key) or time windows (a record per window), may not."""
    if not saved or not now:
        return []
    problems = []
    if saved.get("sessions") != now.get("sessions"):
        problems.append(f"its windows were {saved.get('assigner')} and the job's are {now.get('assigner')}: session "
                        "windows and time windows keep their state differently")
    if saved.get("kind") != now.get("kind") or saved.get("function") != now.get("function"):
        problems.append(f"its windows accumulate with {saved.get('kind')}({saved.get('function')}) and the job's with "
                        f"{now.get('kind')}({now.get('function')}): the saved accumulators would not fit")
    if problems:
        raise StateMigrationError(
            f"savepoint {where} cannot be restored: " + "; ".join(problems)
            + ". Restore it into the job as it was, or start the changed job from empty state"
        )
    if saved.get("assigner") != now.get("assigner"):
        return [f"the windows changed from {saved.get('assigner')} to {now.get('assigner')}: restored windows keep "
                "their bounds and fire at their own end; new events go to the new windows"]
    return []
