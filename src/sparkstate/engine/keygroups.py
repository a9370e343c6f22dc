"""How one key group's records are laid out in Spark's state store.

Spark's Python stateful API pays a JVM round trip (about 0.1-0.2 ms here) for every state
call, so a record per state-store entry costs two round trips per touched key per batch, and
one blob per key group costs a rewrite of the whole group. sparkstate sits in between: each key
group keeps its records in *buckets* (one state-store entry each, a pickled
``{user key: record}``), addressed by linear hashing so that a bucket never holds more than
about ``bucket_size`` keys. A batch reads and writes only the buckets of the keys it touches,
so its cost grows with the touched keys, never with the total state; a dense batch touching
every key costs one round trip per ``bucket_size`` keys. (Measurements:
``docs/design/state-layout.md`` and ``docs/design/performance.md``.)

Per key group a small *meta* entry holds the bucket count, the key count, and for each bucket
its earliest event-time and processing-time timer, which is the timer index: a batch loads
just the buckets whose earliest timer is due.

A group of one bucket (up to ``bucket_size`` keys) may keep that bucket *inline*, in its meta
entry (``GroupMeta.inline``, layout version 2): it is then one state-store entry, read and
written by one round trip each, where a meta entry and a bucket cost two reads. Small batches
touch many small groups, and each round trip is most of what such a group costs. The bucket
moves out when the group splits (:meth:`KeyGroupStore.flush_entries`), and while the group holds
event-time timers: such a group is called every batch and its meta rewritten with a new
wake-up, which would rewrite an inline bucket with it whether the batch touched it or not (with
small batches, every group's keys every batch). Invariant: a meta with ``inline`` set has one
bucket, and no bucket entry of its group holds a record.
"""

from __future__ import annotations

import pickle
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from sparkstate.api.state import Record
from sparkstate.engine.operator import timer_minimums
from sparkstate.errors import CheckpointMismatchError, StateTypeError

PICKLE_PROTOCOL = 5
#: the layout of a meta entry without an inline bucket, which every version reads
LAYOUT_VERSION = 1
#: the layout of a meta entry holding its group's only bucket: earlier versions refuse it,
#: rather than read the group as empty
INLINE_LAYOUT_VERSION = 2
_READABLE_LAYOUTS = (LAYOUT_VERSION, INLINE_LAYOUT_VERSION)


def dumps_state(obj: Any) -> bytes:
    """Pickle state records; fall back to cloudpickle for classes defined in ``__main__``.

    A value that cannot be pickled at all fails with the state name and key that hold it.
    """
    try:
        return pickle.dumps(obj, protocol=PICKLE_PROTOCOL)
    except (pickle.PicklingError, AttributeError, TypeError) as first:
        import cloudpickle

        try:
            data: bytes = cloudpickle.dumps(obj, protocol=PICKLE_PROTOCOL)
            return data
        except Exception:
            raise _unpicklable(obj, first) from first


def _unpicklable(obj: Any, exc: Exception) -> Exception:
    import cloudpickle

    records = obj.items() if isinstance(obj, dict) else []
    for key, rec in records:
        for name, value in (rec.items() if isinstance(rec, dict) else []):
            try:
                cloudpickle.dumps(value)
            except Exception:
                return StateTypeError(
                    f"state {name!r} of key {key!r} holds {type(value).__name__} {value!r}, which cannot be "
                    f"checkpointed (pickled): {exc}"
                )
    return StateTypeError(f"state cannot be checkpointed (pickled): {exc}")


def _fmix32(h: int) -> int:
    # MurmurHash3's finaliser: spreads CRC32's bits so low bits can address buckets.
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    h ^= h >> 16
    return h


def bucket_hash(key: Any) -> int:
    """A 32-bit hash of a user key that is the same in every process (unlike ``hash``)."""
    if type(key) is str:
        data = key.encode("utf-8", "surrogatepass")
    elif type(key) is int:
        data = key.to_bytes((key.bit_length() + 8) // 8 or 1, "little", signed=True)
    else:
        data = pickle.dumps(key, protocol=4)
    return _fmix32(zlib.crc32(data))


def bucket_address(h: int, n_buckets: int) -> int:
    """Linear hashing: the bucket of hash ``h`` when the group has ``n_buckets`` buckets."""
    level = n_buckets.bit_length() - 1  # 2**level <= n_buckets < 2**(level+1)
    addr = h & ((2 << level) - 1)
    if addr >= n_buckets:
        addr = h & ((1 << level) - 1)
    return addr


#: where a meta entry's TTL cleanup fields start: after the six base fields and the slot of the
#: group's broadcast state reference (a seventh field that older metas may or may not have)
_TTL_FIELDS = 7


@dataclass
class GroupMeta:
    """What a key group remembers besides its buckets."""

    n_buckets: int = 1
    n_keys: int = 0
    #: bucket -> earliest event-time / processing-time timer in it
    event_min: dict[int, int] = field(default_factory=dict)
    proc_min: dict[int, int] = field(default_factory=dict)
    #: the Spark timer currently registered to wake this group, if any
    wake: int | None = None
    #: the group's broadcast state: the reference of its content (``engine/broadcast.py``)
    broadcast: str | None = None
    #: TTL cleanup (``engine/ttl.py``): where the incremental cleanup goes on, as
    #: ``(bucket, offset in the bucket)``, and when the group is next swept whole
    ttl_cursor: tuple[int, int] = (0, 0)
    sweep_at: int | None = None
    #: the group's only bucket, pickled, when it is kept here rather than in a bucket entry
    inline: bytes | None = None

    @property
    def version(self) -> int:
        """The layout this meta is written in: whether it holds its group's bucket decides it."""
        return LAYOUT_VERSION if self.inline is None else INLINE_LAYOUT_VERSION

    def dumps(self) -> bytes:
        fields: tuple[Any, ...] = (self.version, self.n_buckets, self.n_keys, self.event_min, self.proc_min, self.wake)
        # the later fields only when set: a meta without them keeps the format it always had
        if self.inline is not None:
            fields += (self.broadcast, self.ttl_cursor, self.sweep_at, self.inline)
        elif self.ttl_cursor != (0, 0) or self.sweep_at is not None:
            fields += (self.broadcast, self.ttl_cursor, self.sweep_at)
        elif self.broadcast is not None:
            fields += (self.broadcast,)
        return pickle.dumps(fields, protocol=PICKLE_PROTOCOL)

    @staticmethod
    def loads(blob: bytes | None) -> GroupMeta:
        if not blob:
            return GroupMeta()
        fields = pickle.loads(blob)
        version = fields[0]
        if version not in _READABLE_LAYOUTS:
            raise CheckpointMismatchError(
                f"the checkpoint's state is in layout version {version}, which this version of sparkstate "
                f"does not read (it reads {', '.join(map(str, _READABLE_LAYOUTS))}); run the sparkstate version "
                "that wrote it, or start from a new checkpoint directory"
            )
        _, n_buckets, n_keys, event_min, proc_min, wake = fields[:6]
        # metas written before TTL cleanup existed have six fields (seven with a broadcast reference)
        broadcast = fields[6] if len(fields) > 6 else None
        cursor, sweep_at = fields[_TTL_FIELDS:_TTL_FIELDS + 2] if len(fields) >= _TTL_FIELDS + 2 else ((0, 0), None)
        inline = fields[_TTL_FIELDS + 2] if len(fields) > _TTL_FIELDS + 2 else None
        return GroupMeta(n_buckets, n_keys, event_min, proc_min, wake, broadcast, tuple(cursor), sweep_at, inline)

    def next_wake(self, processing_time: int) -> int | None:
        """When Spark should call this group next though no input arrives for it.

        Processing-time timers wake it at their time, and so does a due TTL sweep
        (``sweep_at``). Event-time timers depend on a watermark that only moves between
        batches, so a group holding any is polled every batch.
        """
        candidates = list(self.proc_min.values())
        if self.event_min:
            candidates.append(processing_time + 1)
        if self.sweep_at is not None:
            candidates.append(max(self.sweep_at, processing_time + 1))
        return min(candidates) if candidates else None


class KeyGroupStore:
    """One key group's buckets during one batch: load on demand, write back what was touched."""

    def __init__(
        self,
        meta: GroupMeta,
        read_bucket: Callable[[int], bytes | None],
        bucket_size: int,
    ) -> None:
        self.meta = meta
        self._read = read_bucket
        # where bucket 0 may be an entry of its own: the group has keys and no inline bucket
        # (more than one bucket, or a checkpoint written before buckets went inline)
        self._bucket0_entry = meta.inline is None and meta.n_keys > 0
        self.bucket_size = bucket_size
        self.buckets: dict[int, dict[Any, Record]] = {}
        self._sizes_before: dict[int, int] = {}
        self._bucket_of_key: dict[Any, int] = {}
        self.reads = 0

    def bucket(self, b: int) -> dict[Any, Record]:
        """Bucket ``b``'s ``{key: record}``, read from the state store the first time."""
        bucket = self.buckets.get(b)
        if bucket is None:
            # an inline bucket is bucket 0 (its group has one bucket); any other is an entry
            inline = self.meta.inline if b == 0 else None
            blob = inline if inline is not None else self._read(b) if self.meta.n_keys else None
            if blob is not None:
                self.reads += 1
            bucket = pickle.loads(blob) if blob else {}
            self.buckets[b] = bucket
            self._sizes_before[b] = len(bucket)
        return bucket

    def record_for(self, key: Any) -> Record:
        """The record of ``key`` (a new empty one, placed in its bucket, if it has none)."""
        b = bucket_address(bucket_hash(key), self.meta.n_buckets)
        self._bucket_of_key[key] = b
        bucket = self.bucket(b)
        rec = bucket.get(key)
        if rec is None:
            rec = bucket[key] = {}
        return rec

    def all_records(self) -> Iterator[tuple[Any, Record]]:
        """Every record of the group, bucket by bucket (all buckets are read)."""
        for b in range(self.meta.n_buckets):
            for key, rec in list(self.bucket(b).items()):
                self._bucket_of_key[key] = b
                yield key, rec

    def segments(self) -> int:
        """The group's buckets, as the TTL cleanup walks them (``engine/ttl.py``)."""
        return self.meta.n_buckets

    def segment(self, b: int) -> dict[Any, Record]:
        return self.bucket(b)

    def adopt(self, b: int, key: Any, rec: Record) -> None:
        """Write ``key``'s record (in bucket ``b``) back at :meth:`flush` though the batch did not
        touch it (the TTL cleanup changed it)."""
        self._bucket_of_key[key] = b

    def due_candidates(self, watermark: int, processing_time: int) -> list[tuple[Any, Record]]:
        """Records of every bucket whose earliest timer is due."""
        meta = self.meta
        due = {b for b, ts in meta.event_min.items() if ts <= watermark}
        due.update(b for b, ts in meta.proc_min.items() if ts <= processing_time)
        out: list[tuple[Any, Record]] = []
        for b in sorted(due):
            for key, rec in self.bucket(b).items():
                self._bucket_of_key[key] = b
                out.append((key, rec))
        return out

    def flush(self, touched: Iterable[Any]) -> list[tuple[int, bytes]]:
        """Drop emptied records, split full buckets, refresh the timer index.

        Returns ``(bucket, blob)`` for every bucket to write; ``self.meta`` is updated.
        """
        meta = self.meta
        dirty: set[int] = set()
        for key in touched:
            b = self._bucket_of_key[key]
            bucket = self.buckets[b]
            rec = bucket.get(key)
            if rec is not None and not rec:
                del bucket[key]
            dirty.add(b)
        for b in dirty:
            meta.n_keys += len(self.buckets[b]) - self._sizes_before[b]
            self._sizes_before[b] = len(self.buckets[b])
        while meta.n_keys > meta.n_buckets * self.bucket_size:
            dirty.update(self._split())
        for b in dirty:
            ev, pt = timer_minimums(self.buckets[b].values())
            _set_or_drop(meta.event_min, b, ev)
            _set_or_drop(meta.proc_min, b, pt)
        if dirty:
            # the buckets are written as entries now (bucket 0 among them), so an inline copy
            # would be stale: :meth:`flush_entries` puts a one-bucket group's back
            meta.inline = None
        return [(b, dumps_state(self.buckets[b])) for b in sorted(dirty)]

    def flush_entries(self, touched: Iterable[Any]) -> tuple[list[tuple[int, bytes]], list[int]]:
        """:meth:`flush` with small groups' buckets kept inline: the bucket entries to write
        and those to delete. A group left with one bucket and no event-time timer keeps it in
        ``meta.inline`` (its old entry, if any, is deleted); a group that split out of one, or
        holds event-time timers, writes its buckets as entries."""
        writes = self.flush(touched)
        meta = self.meta
        if meta.n_buckets > 1:  # a split rewrote bucket 0, so it is among the writes
            return writes, []
        if not writes:
            return [], []
        if meta.event_min:
            # a group holding event-time timers is called, and its meta rewritten (a new
            # wake-up), every batch: inline, its whole bucket would be written with it each
            # time, touched or not; as an entry, the bucket is written only when it changes
            return writes, []
        meta.inline = writes[0][1]
        return [], [0] if self._bucket0_entry else []

    def _split(self) -> tuple[int, int]:
        meta = self.meta
        n = meta.n_buckets
        level = n.bit_length() - 1
        old = n - (1 << level)
        source = self.bucket(old)
        new: dict[Any, Record] = {}
        meta.n_buckets = n + 1
        for key in [k for k in source if bucket_address(bucket_hash(k), n + 1) != old]:
            new[key] = source.pop(key)
        self.buckets[n] = new
        self._sizes_before[n] = len(new)
        self._sizes_before[old] = len(source)
        for key in new:
            self._bucket_of_key[key] = n
        return old, n


def _set_or_drop(d: dict[int, int], b: int, value: int | None) -> None:
    if value is None:
        d.pop(b, None)
    else:
        d[b] = value
