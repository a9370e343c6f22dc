"""A savepoint's broadcast state: written once (``broadcast.json``), restored into every key group.

A broadcast job's key groups all hold the same broadcast state, so a savepoint keeps one copy
(``SavepointWriter.add_broadcast``), whatever the number of key groups or partitions; a restore
gives it to every key group of the new run (on Spark: the content file is written into the new
checkpoint once and each key group starts from its reference; on the harness: its
``broadcast_states``). The rules for a change of the job between the two are those of keyed
state: a broadcast state the job no longer declares is refused unless
``allow_non_restored_state`` (then dropped, with a note); a newly declared one starts empty.
"""

from __future__ import annotations

from typing import Any

from sparkstate.engine.keygroups import dumps_state
from sparkstate.errors import StateMigrationError
from sparkstate.savepoint.files import Savepoint
from sparkstate.savepoint.values import Decoder


def declared_broadcast(connected: Any) -> dict[str, str]:
    """The broadcast states a job's connected input declares: name -> description."""
    if connected is None or not connected.is_broadcast:
        return {}
    return {d.name: d.describe() for d in connected.broadcast}


def restored_broadcast(
    savepoint: Savepoint, declared: dict[str, str], *, allow_non_restored_state: bool = False,
    decoder: Decoder | None = None,
) -> tuple[bytes | None, list[str]]:
    """The broadcast content a restored job starts from (``engine/broadcast.py``'s; None:
    none) and notes for the user; ``decoder`` reads the savepoint's values (a restore's)."""
    if savepoint.meta.get("broadcast") is None:
        return None, []
    entry = savepoint.meta["broadcast"]
    saved: dict[str, str] = dict(entry.get("states") or {})
    where = savepoint.location
    left = sorted(set(saved) - set(declared))
    if left and not allow_non_restored_state:
        what = ", ".join(f"{n!r} ({saved[n]})" for n in left)
        raise StateMigrationError(
            f"savepoint {where} holds broadcast state {what} that the job no longer declares "
            f"(it declares {', '.join(repr(n) for n in declared) or 'no broadcast state'}); declare it again with "
            ".broadcast(MapStateDescriptor(...)), or restore with --allow-non-restored-state "
            "(allow_non_restored_state=True) to drop it"
        )
    notes = [f"broadcast state {n!r} ({saved[n]}) from the savepoint is dropped: the job no longer declares it"
             for n in left]
    changed = sorted(n for n in set(saved) & set(declared) if saved[n] != declared[n])
    if changed:
        raise StateMigrationError(
            f"savepoint {where}: broadcast state " + ", ".join(f"{n!r} was {saved[n]}, now {declared[n]}" for n in changed)
            + "; broadcast state is restored as it was saved: keep its types, or start without the savepoint"
        )
    notes += [f"broadcast state {n!r} ({declared[n]}) is new: it starts empty" for n in sorted(set(declared) - set(saved))]
    states = savepoint.broadcast_states(decoder) or {}
    kept = {name: m for name, m in states.items() if name in declared}
    return (dumps_state(kept) if kept else None), notes
