"""Whether a savepoint's state fits a job, and how its records become the job's: Flink's
rules for restoring after an upgrade.

* the job, its key columns and its number of key groups must be the savepoint's (key groups
  are Flink's max parallelism: state is laid out by them);
* a state the job declares and the savepoint lacks starts empty;
* a state the savepoint holds and the job no longer declares is refused, listing the states
  left behind, unless the user says to drop them (Flink's ``--allowNonRestoredState``);
* a state whose kind changed is refused (a renamed state looks like one removed and one
  added, and is refused as the removal, naming both);
* a value type that changed compatibly is migrated (``migration.py``), an incompatible change
  is refused naming the state, the field and both types.

Everything is decided on the driver before Spark runs a batch; the :class:`RestorePlan` it
returns travels to the executors, where it turns each key group's file into records.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sparkstate.api.state import Record, StateDescriptor
from sparkstate.errors import StateMigrationError
from sparkstate.savepoint.format import read_table, table_to_records


@dataclass(frozen=True)
class RestorePlan:
    """How a savepoint's records become a restored job's: the states kept, and a converter
    per state whose value type changed compatibly. Picklable (it travels to the executors)."""

    keep: tuple[str, ...]
    converters: dict[str, Any] = field(default_factory=dict)

    def records(self, blob: bytes) -> list[tuple[Any, Record]]:
        """A key group's savepoint file as the restored job's ``(key, record)`` pairs."""
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
    problems = []
    if savepoint.get("job") != job_meta["job"]:
        problems.append(f"it is a savepoint of job {savepoint.get('job')!r}, not of {job_meta['job']!r}")
    if list(savepoint.get("key_columns") or []) != list(job_meta["key_columns"]):
        problems.append(f"its key columns are {savepoint.get('key_columns')}, the job's {job_meta['key_columns']} "
                        "(state is per key: other key columns cannot read it)")
    if savepoint.get("key_groups") != job_meta["key_groups"]:
        problems.append(
            f"it has {savepoint.get('key_groups')} key groups and the job {job_meta['key_groups']}: key groups are "
            "fixed for the life of the state (Flink's max parallelism); restore with "
            f"--key-groups {savepoint.get('key_groups')} (any number of partitions works)"
        )
    if problems:
        raise StateMigrationError(f"savepoint {where} cannot be restored: " + "; ".join(problems) + ".")
    saved: dict[str, str] = dict(savepoint.get("state") or {})
    declared = {d.name: d for d in descriptors}
    from sparkstate.savepoint.migration import converter_for

    notes: list[str] = []
    converters: dict[str, Any] = {}
    left = sorted(set(saved) - set(declared))
    added = sorted(set(declared) - set(saved))
    if left and not allow_non_restored_state:
        renamed = ""
        if added:
            renamed = (f" (if {left[0]!r} was renamed to {added[0]!r}: state names are the savepoint's schema, so "
                       "keep the old name in the descriptor)")
        raise StateMigrationError(
            f"savepoint {where} holds state the job no longer declares: {', '.join(repr(n) for n in left)} "
            f"({', '.join(saved[n] for n in left)}){renamed}. Declare it again, or restore with "
            "--allow-non-restored-state (allow_non_restored_state=True) to drop it"
        )
    for name in left:
        notes.append(f"state {name!r} ({saved[name]}) from the savepoint is dropped: the job no longer declares it")
    for name in added:
        notes.append(f"state {name!r} ({declared[name].describe()}) is new: it starts empty")
    types = savepoint.get("state_types") or {}
    for name in sorted(set(saved) & set(declared)):
        convert = converter_for(name, saved[name], types.get(name), declared[name], where)
        if convert is not None:
            converters[name] = convert
            notes.append(f"state {name!r}: values migrate from {saved[name]} to {declared[name].describe()}")
    keep = tuple(sorted(set(saved) & set(declared)))
    return RestorePlan(keep, converters), notes
