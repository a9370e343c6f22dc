"""Writing and reading a savepoint directory: checksums, atomic publication, and the checks
that refuse a damaged, foreign or newer savepoint before anything uses it.

A savepoint is written under a temporary name beside its final one (``<name>.inprogress``)
and renamed when every file and ``_savepoint.json`` are written, so a savepoint that exists
is complete; a crash leaves only the temporary directory, which is never read. Savepoints are
never deleted by sparkstate (checkpoint retention does not touch them).

Where the bytes go is a :class:`Directory`: a local one here, a Hadoop file system's in
``runtime/`` (through Spark's JVM), both with the same few operations.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa

from sparkstate.api.state import Record
from sparkstate.errors import SavepointError
from sparkstate.savepoint.format import (
    FORMAT_VERSION,
    METADATA_FILE,
    STATE_DIR,
    group_file,
    read_table,
    table_bytes,
    table_to_records,
)

SAVEPOINT_KIND = "sparkstate-savepoint"
#: a broadcast job's broadcast state: one file for all key groups (``meta["broadcast"]``)
BROADCAST_FILE = "broadcast.pkl"
INPROGRESS_SUFFIX = ".inprogress"
#: the file that keeps an empty savepoint's state folder
EMPTY_MARKER = "_empty"


class Directory(Protocol):
    """A directory that a savepoint is written to or read from."""

    @property
    def location(self) -> str: ...

    def read(self, relative: str) -> bytes: ...

    def write(self, relative: str, data: bytes) -> None: ...

    def exists(self, relative: str = "") -> bool: ...

    def publish(self, final: Directory) -> None:
        """Move this (temporary) directory to ``final``'s location, which must not exist."""
        ...

    def remove(self) -> None: ...

    def sibling(self, name: str) -> Directory: ...

    def names(self) -> list[str]:
        """The entries of the directory itself (files and folders)."""
        ...


class LocalDirectory:
    """A savepoint directory on a local (or locally mounted) file system."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path).expanduser().absolute()

    @property
    def location(self) -> str:
        return str(self.path)

    def read(self, relative: str) -> bytes:
        return (self.path / relative).read_bytes()

    def write(self, relative: str, data: bytes) -> None:
        target = self.path / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    def exists(self, relative: str = "") -> bool:
        return (self.path / relative).exists() if relative else self.path.exists()

    def publish(self, final: Directory) -> None:
        assert isinstance(final, LocalDirectory)
        os.rename(self.path, final.path)  # fails if final exists and is not empty

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)

    def sibling(self, name: str) -> LocalDirectory:
        return LocalDirectory(self.path.parent / name)

    def names(self) -> list[str]:
        try:
            return sorted(os.listdir(self.path))
        except FileNotFoundError:
            return []


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class GroupFile:
    """What the metadata says of one key group's file."""

    key_group: int
    path: str
    sha256: str
    bytes: int
    keys: int


@dataclass
class SavepointWriter:
    """Writes a savepoint group by group, then publishes it (metadata last, then the rename).

    Usage: ``w = SavepointWriter(target, metadata, states)``, ``w.add_group(kg, records)`` per
    key group, ``w.publish()``. ``metadata`` is everything but the files and totals.
    """

    target: Directory
    metadata: dict[str, Any]
    states: list[str]
    files: list[GroupFile] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.target.exists() and self.target.names():
            raise SavepointError(
                f"savepoint {self.target.location} already exists; savepoints are never overwritten: "
                "choose another path (or delete it yourself)"
            )
        self._temp = self.target.sibling(Path(self.target.location.rstrip("/")).name + INPROGRESS_SUFFIX)
        self._temp.remove()

    def add_group(self, key_group: int, records: list[tuple[Any, Record]]) -> None:
        from sparkstate.savepoint.format import records_to_table

        if not records:
            return
        self.add_table(key_group, records_to_table(records, self.states))

    def add_table(self, key_group: int, table: pa.Table) -> None:
        self.add_file(key_group, table_bytes(table), table.num_rows)

    def add_file(self, key_group: int, data: bytes, keys: int) -> None:
        """A key group's file already serialised (``table_bytes``), holding ``keys`` records."""
        path = group_file(key_group)
        self._temp.write(path, data)
        self.files.append(GroupFile(key_group, path, sha256(data), len(data), keys))

    def add_broadcast(self, content: bytes, states: dict[str, str]) -> None:
        """A broadcast job's broadcast state (``engine/broadcast.py``'s content: the pickled
        ``{name: map}``), written once for every key group; ``states``: name -> description."""
        self._temp.write(BROADCAST_FILE, content)
        self.metadata["broadcast"] = {"path": BROADCAST_FILE, "sha256": sha256(content), "bytes": len(content),
                                      "states": dict(states)}

    def publish(self) -> dict[str, Any]:
        meta = dict(self.metadata)
        meta.update({
            "kind": SAVEPOINT_KIND,
            "format": FORMAT_VERSION,
            "keys": sum(f.keys for f in self.files),
            "bytes": sum(f.bytes for f in self.files),
            "files": {str(f.key_group): {"path": f.path, "sha256": f.sha256, "bytes": f.bytes, "keys": f.keys}
                      for f in sorted(self.files, key=lambda f: f.key_group)},
        })
        if not self.files:
            # a savepoint without state still has its state folder: a restore reads the folder
            # with Spark's file source, which refuses a path that does not exist (a hidden
            # file: Spark's file sources skip names starting with "." or "_")
            self._temp.write(f"{STATE_DIR}/{EMPTY_MARKER}", b"")
        self._temp.write(METADATA_FILE, json.dumps(meta, indent=1, sort_keys=True).encode("utf-8"))
        self._temp.publish(self.target)
        return meta

    def abort(self) -> None:
        self._temp.remove()


class Savepoint:
    """A savepoint opened for reading: its metadata checked, its files read on demand and
    checked against their checksums."""

    def __init__(self, directory: Directory, meta: dict[str, Any]) -> None:
        self.directory = directory
        self.meta = meta

    @property
    def location(self) -> str:
        return self.directory.location

    @property
    def key_groups(self) -> list[int]:
        """The key groups that hold state."""
        return sorted(int(kg) for kg in self.meta["files"])

    def group_bytes(self, key_group: int) -> bytes:
        """The bytes of a key group's file, checked against the metadata's checksum."""
        return self._checked(self.meta["files"][str(key_group)])

    def broadcast_bytes(self) -> bytes | None:
        """The broadcast state's content (None: the savepoint has none), checked against the
        metadata's checksum."""
        entry = self.meta.get("broadcast")
        return self._checked(entry, " (its broadcast state)") if entry else None

    def _checked(self, entry: dict[str, Any], what: str = "") -> bytes:
        """The bytes of the file a metadata entry (``path``, ``bytes``, ``sha256``) lists."""
        where = f"{self.location}/{entry['path']}"
        try:
            data = self.directory.read(entry["path"])
        except FileNotFoundError:
            raise SavepointError(
                f"savepoint {self.location} is incomplete: {where}{what} is missing. The savepoint cannot be used; "
                "take a new one, or restore the file from a copy"
            ) from None
        if len(data) != entry["bytes"]:
            problem = f"it has {len(data)} bytes, recorded {entry['bytes']} (truncated or overwritten)"
        elif sha256(data) != entry["sha256"]:
            problem = f"its SHA-256 is not the one {METADATA_FILE} records (its bytes changed)"
        else:
            return data
        raise SavepointError(
            f"savepoint file {where}{what} is damaged: {problem}. The savepoint cannot be used; take a new one, "
            "or restore the file from a copy"
        )

    def table(self, key_group: int) -> pa.Table:
        return read_table(self.group_bytes(key_group))

    def records(self, key_group: int) -> list[tuple[Any, Record]]:
        return table_to_records(self.table(key_group))

    def all_records(self) -> Iterator[tuple[int, Any, Record]]:
        for kg in self.key_groups:
            for key, rec in self.records(kg):
                yield kg, key, rec

    def verify(self) -> None:
        """Check the savepoint before a restore runs anything: every file listed is there with
        its checksum, and its ``state/`` folder holds no key-group file the metadata does not
        list (a restore reads every ``kg-*.parquet`` file there)."""
        for kg in self.key_groups:
            self.group_bytes(kg)
        self.broadcast_bytes()
        listed = {Path(e["path"]).name for e in self.meta["files"].values()}
        state = self.directory.sibling(f"{Path(self.location.rstrip('/')).name}/{STATE_DIR}")
        present = state.names() if state.exists() else []
        stray = [n for n in present if n.startswith("kg-") and n.endswith(".parquet") and n not in listed]
        if stray:
            raise SavepointError(
                f"savepoint {self.location} is damaged: {STATE_DIR}/ holds key-group files that {METADATA_FILE} does "
                f"not list ({', '.join(stray[:5])}{', ...' if len(stray) > 5 else ''}), so their state would be "
                "restored unchecked. The savepoint cannot be used; take a new one, or remove the files that do not "
                "belong to it"
            )


def open_savepoint(directory: Directory) -> Savepoint:
    """Open a savepoint, refusing a missing path, an unfinished or foreign directory, damaged
    metadata and a newer format, with what is wrong and what to do."""
    where = directory.location
    if not directory.exists():
        partial = directory.sibling(Path(where.rstrip("/")).name + INPROGRESS_SUFFIX)
        if partial.exists():
            raise SavepointError(
                f"savepoint {where} does not exist: {partial.location} is a savepoint whose writing never finished "
                "(its writer stopped), and it cannot be used. Take a new savepoint (`sparkstate savepoint JOB`)"
            )
        raise SavepointError(
            f"savepoint {where} does not exist. Check the path: give the directory `sparkstate savepoint` printed "
            "(`sparkstate savepoints` lists the savepoints there are)"
        )
    try:
        raw = directory.read(METADATA_FILE)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        raise SavepointError(
            f"{where} is not a savepoint: it has no {METADATA_FILE}. Give the directory `sparkstate savepoint` "
            "printed (`sparkstate savepoints` lists them); a checkpoint directory is not a savepoint (take one "
            "from it with `sparkstate savepoint JOB --batch N`)"
        ) from None
    try:
        meta = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise SavepointError(
            f"savepoint {where}: {METADATA_FILE} is damaged ({exc}); the savepoint cannot be used without it. "
            "Restore the file from a copy, or take a new savepoint"
        ) from None
    if not isinstance(meta, dict) or meta.get("kind") != SAVEPOINT_KIND:
        raise SavepointError(
            f"{where}/{METADATA_FILE} is not a sparkstate savepoint's metadata (its kind is "
            f"{meta.get('kind') if isinstance(meta, dict) else None!r}, not {SAVEPOINT_KIND!r}). Give the directory "
            "`sparkstate savepoint` printed"
        )
    version = meta.get("format")
    if not isinstance(version, int) or isinstance(version, bool) or version > FORMAT_VERSION or version < 1:
        raise SavepointError(
            f"savepoint {where} is in format version {version!r}, which this sparkstate ({_version()}) cannot read "
            f"(it reads versions 1 to {FORMAT_VERSION}); it was written by sparkstate "
            f"{meta.get('sparkstate_version', '?')}: restore it with that version or a newer one"
        )
    problem = _metadata_problem(meta)
    if problem:
        raise SavepointError(
            f"savepoint {where}: {METADATA_FILE} is damaged ({problem}); the savepoint cannot be used without it. "
            "Restore the file from a copy, or take a new savepoint"
        )
    return Savepoint(directory, meta)


def _metadata_problem(meta: dict[str, Any]) -> str | None:
    """What is wrong with a savepoint's metadata that reading it relies on, if anything."""
    for name, kind in (("job", str), ("files", dict), ("state", dict), ("key_groups", int), ("key_columns", list)):
        if not isinstance(meta.get(name), kind):
            return f"{name!r} is {meta.get(name)!r}, not a {kind.__name__}"
    for kg, entry in meta["files"].items():
        if not str(kg).isdigit():
            return f"files has the key group {kg!r}"
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str) or \
                not isinstance(entry.get("sha256"), str) or not isinstance(entry.get("bytes"), int):
            return f"the entry of key group {kg} in files is {entry!r}"
    return None


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("sparkstate")
    except Exception:
        return "?"
