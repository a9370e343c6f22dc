"""Whether a savepoint's state fits a job, and how its records become the job's: Flink's
rules for restoring after an upgrade (docs/savepoint-evolution.md).

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
  is refused naming the state, the field and both types.

Everything is decided on the driver before Spark runs a batch; the :class:`RestorePlan` it
returns travels to the executors (pickled with the operator), where it turns each key
group's file into records.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sparkstate.api.state import Record, StateDescriptor
from sparkstate.errors import SavepointError, StateMigrationError
from sparkstate.savepoint.format import read_table, table_to_records
from sparkstate.savepoint.migration import converter_for, kind_of, type_info, value_type


@dataclass(frozen=True)
class RestorePlan:
    """How a savepoint's records become a restored job's: the states kept, and a converter
    per state whose value type changed compatibly. Picklable (it travels to the executors)."""

    keep: tuple[str, ...]
    converters: dict[str, Any] = field(default_factory=dict)
    #: the SHA-256 of every file the driver checked (empty: not checked again)
    checksums: frozenset[str] = frozenset()

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
        for key, rec in table_to_records(read_table(blob)):
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
    converters: dict[str, Any] = {}
    for name in sorted(set(saved) & set(declared)):
        convert = converter_for(name, saved[name], types.get(name), declared[name], where)
        if convert is not None:
            converters[name] = convert
            if saved[name] != declared[name].describe() or _changed(types.get(name), declared[name]):
                notes.append(f"state {name!r}: values migrate from {saved[name]} to {declared[name].describe()}")
    keep = tuple(sorted(set(saved) & set(declared)))
    return RestorePlan(keep, converters), notes


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
