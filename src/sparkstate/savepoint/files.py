"""Writing and reading a savepoint directory: checksums, atomic publication, and the checks
that refuse a damaged, foreign or newer savepoint before anything uses it.

A savepoint is written under a temporary name of its writer's beside its final one
(``<name>.inprogress-<random>``) and renamed when every file and ``_savepoint.json`` are
written, so a savepoint that exists is complete; two writers of one target never share a
file, and the second to finish is refused; a crash leaves only the temporary directory,
which is never read. Savepoints are never deleted by sparkstate (checkpoint retention does
not touch them).

Every path ``_savepoint.json`` names is the one the format gives its entry (``state/kg-N.parquet``,
``broadcast.json``): a savepoint cannot make a reader open a file outside it.

Where the bytes go is a :class:`Directory`: a local one here, a Hadoop file system's in
``runtime/`` (through Spark's JVM), both with the same few operations.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
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
    column_classes,
    column_what,
    dumps,
    group_file,
    pickled_columns,
    read_schema,
    read_table,
    table_bytes,
    table_to_records,
)
from sparkstate.savepoint.values import Decoder, Unencodable, encode, untrusted

SAVEPOINT_KIND = "sparkstate-savepoint"
#: a broadcast job's broadcast state: one file for all key groups (``meta["broadcast"]``), as
#: tagged JSON, or pickled when a value has no safe encoding (format 1 always pickled it)
BROADCAST_FILES = {"json": "broadcast.json", "pickle": "broadcast.pkl"}
#: a writer's temporary directory is ``<name>.inprogress-<random>``
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
        target = (self.path / relative).resolve()
        if not target.is_relative_to(self.path.resolve()):  # a link out of the savepoint
            raise SavepointError(f"{self.path / relative} leads out of {self.path} (to {target}); a savepoint's "
                                 "files are inside it: the savepoint is damaged or crafted, and cannot be used")
        return target.read_bytes()

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
        try:
            os.rename(self.path, final.path)  # fails if final exists and is not empty
        except OSError as exc:
            raise FileExistsError(str(final.path)) from exc

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
    #: the columns some file stores pickled (values with no safe encoding)
    pickled: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        if self.target.exists() and self.target.names():
            raise self._exists()
        # this writer's own: another writer of the same target writes beside it, never into it
        name = Path(self.target.location.rstrip("/")).name
        self._temp = self.target.sibling(f"{name}{INPROGRESS_SUFFIX}-{uuid.uuid4().hex[:12]}")

    def _exists(self) -> SavepointError:
        return SavepointError(f"savepoint {self.target.location} already exists; savepoints are never overwritten: "
                              "choose another path (or delete it yourself)")

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
        self.pickled.update(pickled_columns(read_schema(data)))

    def add_broadcast(self, value: dict[str, Any], states: dict[str, str]) -> None:
        """A broadcast job's broadcast state (``{name: map}``), written once for every key
        group; ``states``: name -> description."""
        classes: set[str] = set()
        try:
            content, encoding = encode(value, classes).encode("utf-8"), "json"
        except Unencodable:
            content, encoding = dumps(value), "pickle"
        path = BROADCAST_FILES[encoding]
        self._temp.write(path, content)
        self.metadata["broadcast"] = {"path": path, "sha256": sha256(content), "bytes": len(content),
                                      "states": dict(states), "encoding": encoding, "classes": sorted(classes)}

    def publish(self) -> dict[str, Any]:
        """Write the metadata and rename the directory into place; refused (nothing of this
        writer's left) when another writer published the target first."""
        meta = dict(self.metadata)
        meta.update({
            "kind": SAVEPOINT_KIND,
            "format": FORMAT_VERSION,
            "keys": sum(f.keys for f in self.files),
            "bytes": sum(f.bytes for f in self.files),
            "files": {str(f.key_group): {"path": f.path, "sha256": f.sha256, "bytes": f.bytes, "keys": f.keys}
                      for f in sorted(self.files, key=lambda f: f.key_group)},
            # what a restore must be trusted to read (informative: a reader checks each file's own)
            "pickled": sorted(self.pickled),
        })
        if not self.files:
            # a savepoint without state still has its state folder: a restore reads the folder
            # with Spark's file source, which refuses a path that does not exist (a hidden
            # file: Spark's file sources skip names starting with "." or "_")
            self._temp.write(f"{STATE_DIR}/{EMPTY_MARKER}", b"")
        self._temp.write(METADATA_FILE, json.dumps(meta, indent=1, sort_keys=True).encode("utf-8"))
        try:  # refused where the target is there and not empty (another writer's, published first)
            self._temp.publish(self.target)
        except FileExistsError:
            self.abort()
            raise self._exists() from None
        return meta

    def abort(self) -> None:
        self._temp.remove()


class Savepoint:
    """A savepoint opened for reading: its metadata checked, its files read on demand and
    checked against their checksums, their values read by ``decoder`` (by default as a
    reader shows them: classes the process has imported, pickled values unread unless
    ``trusted``)."""

    def __init__(self, directory: Directory, meta: dict[str, Any], *, trusted: bool = False) -> None:
        self.directory = directory
        self.meta = meta
        self.decoder = Decoder(imported=True, lenient=True, trusted=trusted, where=f"savepoint {directory.location}")

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
        """The broadcast state's file (None: the savepoint has none), checked against the
        metadata's checksum."""
        entry = self.meta.get("broadcast")
        return self._checked(entry, " (its broadcast state)") if entry else None

    def broadcast_states(self, decoder: Decoder | None = None) -> dict[str, Any] | None:
        """The broadcast state, ``{name: map}`` (None: the savepoint has none)."""
        content = self.broadcast_bytes()
        if content is None:
            return None
        decoder = decoder or self.decoder
        if self._broadcast_pickled():
            states = decoder.unpickler("its broadcast state")(content)
        else:
            states = decoder.decode(content.decode("utf-8"))
        if not isinstance(states, dict):
            raise SavepointError(f"savepoint {self.location}: its broadcast state is {type(states).__name__}, not the "
                                 "{name: map} a broadcast state is; the savepoint is damaged")
        return states

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

    def _broadcast_pickled(self) -> bool:
        """Whether the broadcast state's file is pickled (format 1 always pickled it)."""
        return bool(self.meta["broadcast"].get("encoding", "pickle") == "pickle")

    def table(self, key_group: int) -> pa.Table:
        return read_table(self.group_bytes(key_group))

    def records(self, key_group: int) -> list[tuple[Any, Record]]:
        return table_to_records(self.table(key_group), self.decoder)

    def all_records(self) -> Iterator[tuple[int, Any, Record]]:
        for kg in self.key_groups:
            for key, rec in self.records(kg):
                yield kg, key, rec

    def verify(self) -> Contents:
        """Check the savepoint before a restore runs anything: every file listed is there with
        its checksum, and its ``state/`` folder holds no key-group file the metadata does not
        list (a restore reads every ``kg-*.parquet`` file there). Returns what the files hold
        that reading them depends on."""
        contents = Contents()
        for kg in self.key_groups:
            schema = read_schema(self.group_bytes(kg))
            contents.classes |= column_classes(schema)
            contents.pickled.update(map(column_what, pickled_columns(schema)))
        if self.broadcast_bytes() is not None:
            contents.classes.update(self.meta["broadcast"].get("classes") or ())
            if self._broadcast_pickled():
                contents.pickled.add("its broadcast state")
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
        return contents

    def check_trusted(self, contents: Contents, trusted: bool) -> None:
        """Refuse pickled contents unless the savepoint is trusted."""
        if contents.pickled and not trusted:
            raise SavepointError(untrusted(f"savepoint {self.location}", ", ".join(sorted(contents.pickled))))


@dataclass
class Contents:
    """What a savepoint's files hold that reading them depends on: the classes their values
    name (``module:qualname``), and what they store pickled (``state 'x'``, ``the keys``)."""

    classes: set[str] = field(default_factory=set)
    pickled: set[str] = field(default_factory=set)


def open_savepoint(directory: Directory, *, trusted: bool = False) -> Savepoint:
    """Open a savepoint, refusing a missing path, an unfinished or foreign directory, damaged
    metadata and a newer format, with what is wrong and what to do. ``trusted``: its pickled
    values, if any, may be unpickled (``values.Decoder``)."""
    where = directory.location
    if not directory.exists():
        name = Path(where.rstrip("/")).name + INPROGRESS_SUFFIX
        partial = [n for n in directory.sibling("").names() if n.startswith(name)]
        if partial:
            raise SavepointError(
                f"savepoint {where} does not exist: {partial[0]} beside it is a savepoint whose writing has not "
                "finished (its writer is still writing, or stopped), and it cannot be used. Take a new savepoint "
                "(`sparkstate savepoint JOB`)"
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
    return Savepoint(directory, meta, trusted=trusted)


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
        # the format fixes every path: none may lead elsewhere (``..``, an absolute path)
        if entry["path"] != group_file(int(kg)):
            return f"the file of key group {kg} is {entry['path']!r}, not {group_file(int(kg))!r}"
    broadcast = meta.get("broadcast")
    if broadcast is not None:
        if not isinstance(broadcast, dict) or not isinstance(broadcast.get("sha256"), str) or \
                not isinstance(broadcast.get("bytes"), int):
            return f"broadcast is {broadcast!r}"
        encoding = broadcast.get("encoding", "pickle")
        if encoding not in BROADCAST_FILES or broadcast.get("path") != BROADCAST_FILES[encoding]:
            return f"the broadcast state's file is {broadcast.get('path')!r} in encoding {encoding!r}"
    return None


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("sparkstate")
    except Exception:
        return "?"
