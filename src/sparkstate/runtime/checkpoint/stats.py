"""Figures per checkpoint: how long it took, how large the state is, and what it wrote.

Each committed micro-batch is a checkpoint: batch ``b`` writes version ``b + 1`` of every
state store, under ``<checkpoint>/state/<operator>/<partition>/``:

* RocksDB with incremental (changelog) checkpoints: ``N.changelog``, the entries the batch
  changed; every 10th version also gets a snapshot, uploaded in the background.
* RocksDB without: ``N.zip`` (RocksDB's manifest and options, and a ``metadata`` entry that
  lists the version's SST files with their sizes) plus the SST files under ``SSTs/`` that
  the directory does not hold yet; SST files shared with earlier versions are not copied again.
* hashmap: ``N.delta``, the changed entries; every 10th version a ``N.snapshot`` in the background.

From those files a checkpoint's *delta* is what its version wrote (changelog or delta file,
plus a snapshot's zip and new SST files when the version has one), and its *full* size is
what restoring it reads: the latest snapshot at or before the version (with all its SST
files) and the incremental files after it. Spark's own figure of the state's size (RocksDB's
SST files, or the hashmap's current version) comes from the progress report.

The figures of every checkpoint that Spark retains are kept in
``<checkpoint>/sparkstate/checkpoints.jsonl`` (one JSON object per line, by batch id; a
replayed batch replaces its line), so ``sparkstate checkpoints`` can show them later. The log
holds the last :data:`MAX_RECORDS` of them at most (about 500 bytes each), however many
batches Spark is told to retain and however long the job runs; an older retained batch shows
without its recorded durations, as one committed before sparkstate recorded them.
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta

from sparkstate.runtime.checkpoint.directory import CheckpointDir
from sparkstate.runtime.checkpoint.storage import Entry

_INCREMENTAL = (".changelog", ".delta")
_SNAPSHOT = (".zip", ".snapshot")
#: the records ``checkpoints.jsonl`` keeps at most (the newest batches): about 500 KB; more than
#: Spark retains by default (100), so with that default every retained batch has its record
MAX_RECORDS = 1000
#: ``N.changelog``, or ``N_<id>.changelog`` with Spark's checkpoint format version 2
_VERSION_FILE = re.compile(r"^(\d+)(?:_[\w-]+)?(\.changelog|\.delta|\.zip|\.snapshot)$")


def state_bytes(operator: dict) -> int | None:
    """Spark's figure of a state operator's size: RocksDB's SST files when RocksDB is the
    backend, else the hashmap's current version (its memory also holds older versions)."""
    custom = operator.get("customMetrics") or {}
    for name in ("rocksdbSstFileSize", "stateOnCurrentVersionSizeBytes"):
        if name in custom:
            return int(custom[name])
    return operator.get("memoryUsedBytes")


@dataclass(frozen=True)
class CheckpointStats:
    """One checkpoint (one committed micro-batch).

    ``duration_ms`` is the part of the batch that makes it durable: the state stores' commit
    (``commit_ms``: Spark's ``commitTimeMs``, added up over the state store instances, that
    is over the tasks that commit in parallel), writing the offsets to the write-ahead log
    before the batch (``wal_ms``: ``durationMs.walCommit``) and the commit log after it
    (``commit_log_ms``: ``durationMs.commitOffsets``).
    """

    batch_id: int
    #: when the checkpoint completed (the batch's end), ISO 8601 in UTC
    time: str
    #: None where unknown: a batch committed before sparkstate recorded its figures
    duration_ms: int | None = None
    commit_ms: int | None = None
    wal_ms: int | None = None
    commit_log_ms: int | None = None
    #: Spark's figure of the state's size and its entries (None: no state operator)
    state_bytes: int | None = None
    state_rows: int | None = None
    #: bytes of the files this checkpoint's state version wrote
    delta_bytes: int | None = None
    #: bytes a restore of this checkpoint reads (latest snapshot + incremental files since)
    full_bytes: int | None = None
    #: "incremental", "incremental + snapshot", "full", or "-" (no state files found)
    kind: str = "-"
    #: the batch itself (:func:`batch_figures`), for the dashboard and ``sparkstate report``:
    #: events read, ms it took, rows written, the watermark after it (epoch ms), its dead
    #: letters and late events, and the input rows still waiting when it ended (None: unknown)
    events: int | None = None
    batch_ms: int | None = None
    rows_out: int | None = None
    watermark_ms: int | None = None
    dead_letters: int | None = None
    late_events: int | None = None
    waiting: int | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict) -> CheckpointStats:
        """The figures of a log line (``ValueError`` when it is not a record of them)."""
        if not isinstance(d, dict) or type(d.get("batch_id")) is not int or not isinstance(d.get("time"), str):
            raise ValueError("not a checkpoint record: it needs an integer batch_id and a time")
        fields = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        for k, v in fields.items():
            if k not in ("batch_id", "time", "kind") and v is not None and type(v) is not int:
                raise ValueError(f"{k} is {v!r}, not a whole number")
        if not isinstance(fields.get("kind", "-"), str):
            raise ValueError(f"kind is {fields['kind']!r}, not text")
        return cls(**fields)


# ------------------------------------------------------------------ the progress report


def _iso(when: datetime) -> str:
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def timings(progress: dict) -> dict | None:
    """The checkpoint figures in one of Spark's progress reports (``query.lastProgress``),
    or None when the report is not of a committed batch (an idle trigger writes no commit)."""
    durations = progress.get("durationMs") or {}
    if "commitOffsets" not in durations or "batchId" not in progress:
        return None
    ops = progress.get("stateOperators") or []
    commit = sum(int(op.get("commitTimeMs") or 0) for op in ops)
    wal, log = int(durations.get("walCommit") or 0), int(durations["commitOffsets"])
    sizes = [state_bytes(op) for op in ops]
    started = datetime.strptime(progress["timestamp"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    return {
        "batch_id": int(progress["batchId"]),
        "time": _iso(started + timedelta(milliseconds=int(durations.get("triggerExecution") or 0))),
        "duration_ms": commit + wal + log,
        "commit_ms": commit,
        "wal_ms": wal,
        "commit_log_ms": log,
        "state_bytes": sum(sizes) if ops and None not in sizes else None,
        "state_rows": sum(int(op.get("numRowsTotal") or 0) for op in ops) if ops else None,
    }


#: Spark's watermark at the end of input (the year 2262) and later: no lag to speak of
_END_OF_TIME_MS = 9_000_000_000_000


def epoch_ms(iso: object) -> int | None:
    """A time of Spark's progress report (ISO 8601, ``Z``) in epoch ms, or None."""
    if not isinstance(iso, str):
        return None
    try:
        return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).astimezone(UTC).timestamp() * 1000)
    except ValueError:
        return None


def rows_out(progress: dict) -> int | None:
    """The rows a batch wrote to the main sink: the run loop's count (``rowsOut``), else
    Spark's own figure where the sink has one (only its ``noop`` sink does), else None."""
    if progress.get("rowsOut") is not None:
        return int(progress["rowsOut"])
    out = (progress.get("sink") or {}).get("numOutputRows")
    return int(out) if out is not None and out >= 0 else None


def batch_figures(progress: dict) -> dict:
    """The batch's own figures in a progress report, as the run loop completed it (``events``,
    ``sideOutputs``, ``inputWaiting``): see :class:`CheckpointStats`."""
    durations = progress.get("durationMs") or {}
    side = progress.get("sideOutputs") or {}
    watermark_ms = epoch_ms((progress.get("eventTime") or {}).get("watermark"))
    return {
        "events": int(progress["events"]) if progress.get("events") is not None else None,
        "batch_ms": int(durations["triggerExecution"]) if "triggerExecution" in durations else None,
        "rows_out": rows_out(progress),
        # Spark reports 1970-01-01 before the first watermark, and 2262 once the input ended
        "watermark_ms": watermark_ms if watermark_ms and 0 < watermark_ms < _END_OF_TIME_MS else None,
        "dead_letters": int(side.get("dead_letters") or 0),
        "late_events": int(side.get("late_data") or 0),
        "waiting": progress.get("inputWaiting"),
    }


# ------------------------------------------------------------------ the state files


@dataclass
class _Version:
    incremental: int = 0
    snapshot: str | None = None  # the snapshot file's name
    snapshot_size: int = 0


class StateFiles:
    """The state stores' files of a checkpoint directory, measured per version.

    Locations are relative to the checkpoint's ``state/``. A snapshot zip's SST list is read
    once (snapshots do not change once written), and forgotten once Spark deleted the zip, so
    that a recorder measuring every batch of a months-long run keeps only the retained ones.
    """

    def __init__(self, checkpoint: CheckpointDir) -> None:
        self.checkpoint = checkpoint
        #: per store directory: snapshot zip name -> its SST files (name -> bytes)
        self._ssts: dict[tuple[str, ...], dict[str, dict[str, int]]] = {}

    def cached_snapshots(self) -> int:
        """The snapshot zips whose SST lists are held in memory."""
        return sum(len(held) for held in self._ssts.values())

    def _store_dirs(self) -> list[tuple[str, ...]]:
        """``<op>/<partition>`` and the named stores inside it (a join's four stores)."""
        dirs: list[tuple[str, ...]] = []
        for op in self._subdirs():
            for part in self._subdirs(op):
                base = (op, part)
                dirs.append(base)
                dirs += [(*base, d) for d in self._subdirs(*base, digits=False)]
        return dirs

    def _subdirs(self, *parts: str, digits: bool = True) -> list[str]:
        return [
            e.name for e in self.checkpoint.list_state(*parts)
            if e.is_dir and (e.name.isdigit() if digits else not e.name.startswith(("_", ".")) and e.name != "SSTs")
        ]

    @staticmethod
    def _versions(entries: list[Entry]) -> dict[int, _Version]:
        out: dict[int, _Version] = {}
        for e in entries:
            m = _VERSION_FILE.match(e.name)
            if m is None or e.is_dir:
                continue
            v = out.setdefault(int(m.group(1)), _Version())
            if m.group(2) in _INCREMENTAL:
                v.incremental += e.size
            else:
                v.snapshot, v.snapshot_size = e.name, e.size
        return out

    def _sst_files(self, where: tuple[str, ...], zip_name: str) -> dict[str, int]:
        """The SST files (name -> bytes) of a RocksDB snapshot, from its zip's ``metadata``."""
        held = self._ssts.setdefault(where, {})
        if zip_name not in held:
            try:
                with zipfile.ZipFile(io.BytesIO(self.checkpoint.read_state(*where, zip_name))) as z:
                    lines = z.read("metadata").decode().splitlines()
                meta = json.loads(lines[1]) if len(lines) > 1 else {}
                held[zip_name] = {f["dfsSstFileName"]: int(f["sizeBytes"]) for f in meta.get("sstFiles", [])}
            except (OSError, KeyError, ValueError, zipfile.BadZipFile):  # cleaned up meanwhile, or not ours to read
                return {}
        return held[zip_name]

    def _snapshot_bytes(self, where: tuple[str, ...], versions: dict[int, _Version], v: int) -> tuple[int, int]:
        """``(written, total)`` bytes of version ``v``'s snapshot: a RocksDB zip's SST files are
        written only when no earlier snapshot holds them, and all of them are read to restore."""
        snap = versions[v]
        if not snap.snapshot or not snap.snapshot.endswith(".zip"):
            return snap.snapshot_size, snap.snapshot_size
        ssts = self._sst_files(where, snap.snapshot)
        earlier = [u for u in versions if u < v and versions[u].snapshot]
        shared = self._sst_files(where, versions[max(earlier)].snapshot) if earlier else {}  # type: ignore[arg-type]
        new = sum(size for name, size in ssts.items() if name not in shared)
        return snap.snapshot_size + new, snap.snapshot_size + sum(ssts.values())

    def measure(self, versions: list[int]) -> dict[int, tuple[int, int, str]]:
        """``{version: (delta_bytes, full_bytes, kind)}`` over every state store."""
        sizes = {v: [0, 0] for v in versions}  # delta and full bytes
        kinds: dict[int, set[str]] = {v: set() for v in versions}
        for where in self._store_dirs():
            files = self._versions(self.checkpoint.list_state(*where))
            if where in self._ssts:  # forget the snapshots Spark deleted
                present = {f.snapshot for f in files.values()}
                self._ssts[where] = {z: s for z, s in self._ssts[where].items() if z in present}
            for v in versions:
                here = files.get(v)
                if here is None:  # not written yet, or cleaned up
                    continue
                written = here.incremental
                if here.snapshot:
                    written += self._snapshot_bytes(where, files, v)[0]
                    kinds[v].add("snapshot")
                if here.incremental:
                    kinds[v].add("incremental")
                base = max((u for u in files if u <= v and files[u].snapshot), default=0)
                full = self._snapshot_bytes(where, files, base)[1] if base else 0
                sizes[v][0] += written
                sizes[v][1] += full + sum(f.incremental for u, f in files.items() if base < u <= v)
        return {v: (d, f, _kind(kinds[v])) for v, (d, f) in sizes.items()}


def _kind(kinds: set[str]) -> str:
    if "incremental" in kinds:
        return "incremental + snapshot" if "snapshot" in kinds else "incremental"
    return "full" if kinds else "-"


# ------------------------------------------------------------------ the log


class CheckpointLog:
    """``<checkpoint>/sparkstate/checkpoints.jsonl``: the figures of the retained checkpoints."""

    def __init__(self, checkpoint: CheckpointDir) -> None:
        self.checkpoint = checkpoint
        #: line numbers (from 1) of the lines the last :meth:`load` could not read
        self.damaged: list[int] = []
        #: the records :meth:`save` last wrote, with their lines
        self._lines: dict[int, tuple[CheckpointStats, str]] = {}

    def load(self) -> dict[int, CheckpointStats]:
        """The records; lines that are not one (damaged, or from another version of sparkstate)
        are skipped and listed in :attr:`damaged`."""
        self.damaged = []
        try:
            data = self.checkpoint.storage.read_bytes(self.checkpoint.OWN_DIR, self.checkpoint.STATS_LOG)
        except FileNotFoundError:
            return {}
        out: dict[int, CheckpointStats] = {}
        for n, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            if not line.strip():
                continue
            try:
                stats = CheckpointStats.from_dict(json.loads(line))
            except (ValueError, TypeError, RecursionError):
                self.damaged.append(n)
                continue
            out[stats.batch_id] = stats
        return out

    def damage_note(self) -> str | None:
        """What the last :meth:`load` skipped, and what that means, for the user; or None."""
        if not self.damaged:
            return None
        lines = ", ".join(map(str, self.damaged[:10])) + (" ..." if len(self.damaged) > 10 else "")
        return (f"{self.checkpoint.stats_log_path} is damaged: line {lines} is not a checkpoint record and was skipped. "
                "Only these figures are lost (the batches show without their recorded durations); the checkpoint "
                "itself is not affected, and the next run's checkpoints rewrite the log")

    def save(self, entries: dict[int, CheckpointStats]) -> None:
        # the log is written whole after every batch: each record's line is encoded once
        known = self._lines
        self._lines = {}
        for b in sorted(entries):
            held = known.get(b)
            self._lines[b] = held if held is not None and held[0] is entries[b] else (entries[b], entries[b].to_json())
        self.checkpoint.write_stats_log("\n".join(line for _, line in self._lines.values()) + "\n")


class CheckpointRecorder:
    """Records each committed micro-batch's checkpoint figures as the driver sees its progress.

    The log keeps the batches Spark retains (those in its commit log), the last
    :data:`MAX_RECORDS` of them at most, so it stays as small as ``retained`` (and never
    larger than about 500 KB); a batch replayed after a failure replaces its entry.
    """

    def __init__(self, checkpoint: CheckpointDir) -> None:
        self.checkpoint = checkpoint
        self.files = StateFiles(checkpoint)
        self.log = CheckpointLog(checkpoint)
        self.entries = self.log.load()

    def record(self, progress: dict) -> CheckpointStats | None:
        """Measure and store the checkpoint of ``progress``'s batch (``OSError`` when the
        checkpoint directory cannot be written)."""
        base = timings(progress)
        if base is None:
            return None
        version = base["batch_id"] + 1
        delta, full, kind = self.files.measure([version])[version]
        has_state = kind != "-"
        stats = CheckpointStats(
            **base, **batch_figures(progress), delta_bytes=delta if has_state else None,
            full_bytes=full if has_state else None, kind=kind,
        )
        self.entries[stats.batch_id] = stats
        oldest = self.checkpoint.committed_batches()[:1]
        if oldest:
            self.entries = {b: s for b, s in self.entries.items() if b >= oldest[0]}
        if len(self.entries) > MAX_RECORDS:  # Spark retains more (or its commit log could not be listed)
            self.entries = {b: self.entries[b] for b in sorted(self.entries)[-MAX_RECORDS:]}
        self.log.save(self.entries)
        return stats


def retained_checkpoints(checkpoint: CheckpointDir, notes: list[str] | None = None) -> list[CheckpointStats]:
    """The checkpoints Spark retains (its commit log), oldest first, with their recorded
    figures, and delta and full sizes measured on the files now (a snapshot that Spark
    uploaded after the batch counts). A batch without a record (written before sparkstate
    recorded them, or whose record is damaged) gets its commit file's time and no duration;
    ``notes`` gets what was damaged."""
    commit_times = checkpoint.commit_times()
    batches = sorted(commit_times)
    log = CheckpointLog(checkpoint)
    recorded = log.load()
    note = log.damage_note()
    if note and notes is not None:
        notes.append(note)
    sizes = StateFiles(checkpoint).measure([b + 1 for b in batches])
    out = []
    for b in batches:
        delta, full, kind = sizes[b + 1]
        stats = recorded.get(b)
        if stats is None:
            stats = CheckpointStats(b, _iso(datetime.fromtimestamp(commit_times[b] / 1000, UTC)))
        if kind != "-":  # the files are there: they are the truth
            stats = CheckpointStats(**{**asdict(stats), "delta_bytes": delta, "full_bytes": full, "kind": kind})
        out.append(stats)
    return out

