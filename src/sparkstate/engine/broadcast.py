"""Broadcast state stored once: content-addressed files that every key group refers to.

Every key group of a broadcast job holds the same broadcast state (each applies the same
broadcast elements in the same order, ``engine/operator.py``). Keeping a copy in each key
group's state would checkpoint it ``key_groups`` times over (128 by default) and rewrite all of
them whenever a rule changes. Instead the content, the pickled ``{name: map}`` of the states,
is a file named by its SHA-256 (``<dir>/<ref>.pkl``), written once, and each key group keeps
only the reference in its meta entry (``GroupMeta.broadcast``). Since the groups compute
the same content, they compute the same reference, and the first one to save writes the file.

Invariants:

* a file's name is the hash of its bytes, so a file is never changed once written (it is
  written to a temporary name and renamed into place; an existing file is not written again);
* a reference in a committed meta entry names a file that exists: the file is written before
  the state store commits the meta entry that refers to it. A batch that fails after writing
  a file leaves an unreferenced file, which is harmless (a replay writes the same content).
* a file's modification time is when a batch last made it the current state: saving a
  content that is already on disk touches its file. Every key group applies every broadcast
  element (``runtime/streaming/query.py``), so after the batch that saves a content, every key group's
  meta entry refers to it or to a later one.
* hence :meth:`BroadcastStore.prune`: a file is no longer referred to once a *later* file was
  saved before the oldest checkpoint version anyone may read was committed. The driver prunes
  with that commit time (``CheckpointDir.prune_broadcast``), so the files kept are the
  current one and those of the retained checkpoint versions: they do not grow with the run,
  only with how often the broadcast state changes within Spark's retention.

A process keeps the contents of the last :data:`CACHED_CONTENTS` it used only, so its memory
does not grow with them either.

``load`` returns a fresh copy each time: the function may change it in
``process_broadcast_element``, and a rejected element's writes are undone on that copy only
(its keyed writes, through ``apply_to_keyed_state``, are undone by the operator).
The directory must be reachable by every executor as a plain path (a local directory, or a
shared file system mounted at the same place).
"""

from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
import time
from typing import Any

from sparkstate.engine.keygroups import dumps_state

#: a reference: this many hex digits of the content's SHA-256 (128 bits; collisions are not a concern)
REF_LENGTH = 32
SUFFIX = ".pkl"
#: the broadcast states a process keeps in memory (the most recent ones); older ones are read
#: again from their file when asked for
CACHED_CONTENTS = 8

BroadcastStates = dict[str, dict[Any, Any]]


def content_ref(content: bytes) -> str:
    """The reference of a broadcast state's content (its bytes as ``dumps_state`` gives them)."""
    return hashlib.sha256(content).hexdigest()[:REF_LENGTH]


class BroadcastStore:
    """The broadcast state files of one checkpoint directory, with a per-process cache."""

    #: the contents this process read or wrote, by reference (shared by the stores of a process:
    #: a content is the same wherever it is, since its name is its hash)
    _cache: dict[str, bytes] = {}
    #: (directory, reference) pairs this process knows to be on disk
    _seen: set[tuple[str, str]] = set()

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def path(self, ref: str) -> str:
        return os.path.join(self.directory, ref + SUFFIX)

    def load(self, ref: str | None) -> BroadcastStates:
        """A fresh copy of the states ``ref`` names (None: no broadcast state yet, empty)."""
        if ref is None:
            return {}
        content = self._cache.get(ref)
        if content is None:
            try:
                with open(self.path(ref), "rb") as f:
                    content = f.read()
            except FileNotFoundError:
                from sparkstate.errors import CheckpointMismatchError

                raise CheckpointMismatchError(
                    f"the broadcast state {ref} that the checkpoint's state refers to is missing from "
                    f"{self.directory}; the checkpoint directory was copied or cleaned in part. Restore the "
                    "whole directory from a backup, or start from a new checkpoint directory"
                ) from None
            self._remember(ref, content)
        states: BroadcastStates = pickle.loads(content)
        return states

    def save(self, states: BroadcastStates) -> str:
        """Store ``states`` (if not stored yet) and return their reference."""
        return self.save_content(dumps_state(states))

    def save_content(self, content: bytes) -> str:
        ref = content_ref(content)
        target = self.path(ref)
        # an earlier state again is the current one from now: its file is touched (``prune``);
        # a file pruned meanwhile is written again
        if ref in self._cache and self._written(ref) and _touch(target):
            return ref
        if not _touch(target):
            os.makedirs(self.directory, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{ref}.", dir=self.directory)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(content)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, target)  # atomic: readers see the whole file or none
            except BaseException:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
                raise
        self._remember(ref, content)
        self._seen.add((self.directory, ref))
        return ref

    def _remember(self, ref: str, content: bytes) -> None:
        """Cache ``content``, dropping the least recently stored beyond :data:`CACHED_CONTENTS`
        (and forgetting which files were seen, a check that costs one ``stat`` to redo)."""
        self._cache.pop(ref, None)
        self._cache[ref] = content
        while len(self._cache) > CACHED_CONTENTS:
            del self._cache[next(iter(self._cache))]
        if len(self._seen) > 4 * CACHED_CONTENTS:
            self._seen.clear()

    def _written(self, ref: str) -> bool:
        return (self.directory, ref) in self._seen

    def prune(self, saved_before: float, keep: frozenset[str] = frozenset()) -> int:
        """Delete the content files no checkpoint version committed at or after ``saved_before``
        (epoch seconds) refers to: every file older than the newest one saved before then
        (see the module's invariants). ``keep``: references to keep whatever their age (a
        restored savepoint's, which key groups not called since the restore start from).
        Temporary files of writes that died, an hour old, go too. Returns the files deleted."""
        try:
            entries = list(os.scandir(self.directory))
        except FileNotFoundError:
            return 0
        files: list[tuple[float, str, str]] = []
        deleted = 0
        for e in entries:
            try:
                mtime = e.stat().st_mtime
            except FileNotFoundError:
                continue
            if e.name.endswith(SUFFIX) and not e.name.startswith("."):
                files.append((mtime, e.name[: -len(SUFFIX)], e.path))
            elif e.name.startswith(".") and mtime < time.time() - 3600:
                deleted += _unlink(e.path)
        before = [f for f in files if f[0] < saved_before]
        if not before:
            return deleted
        newest = max(before)[0]
        for mtime, ref, path in files:
            if mtime < newest and ref not in keep:
                deleted += self._delete_unless_touched(ref, path, newest)
        return deleted

    def _delete_unless_touched(self, ref: str, path: str, newest: float) -> int:
        """Delete a file unless a batch made it current again since it was listed: moved
        aside first, so that a save from now on finds no file and writes it again, then looked
        at once more (a save just before the move touched it: it goes back)."""
        aside = os.path.join(self.directory, f".{ref}.pruned")
        try:
            os.replace(path, aside)
            touched = os.stat(aside).st_mtime >= newest
        except FileNotFoundError:
            return 0
        if touched:
            os.replace(aside, path)  # a save that wrote it again meanwhile wrote the same bytes
            return 0
        self._cache.pop(ref, None)
        self._seen.discard((self.directory, ref))
        return _unlink(aside)


def _touch(path: str) -> bool:
    """Set a content file's modification time to now; False when there is no such file."""
    try:
        os.utime(path)
    except FileNotFoundError:
        return False
    return True


def _unlink(path: str) -> int:
    try:
        os.unlink(path)
    except FileNotFoundError:
        return 0
    return 1
