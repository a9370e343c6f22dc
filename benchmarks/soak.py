"""Soak benchmark: one job holding every kind of state, run for an hour of small micro-batches,
to show whether anything grows with the number of batches rather than with the state.

    python benchmarks/soak.py                       # 60 minutes
    python benchmarks/soak.py --minutes 4           # a quick look (the figures are noisy)
    python benchmarks/soak.py --out /work/soak-run --plot /work/soak-run/soak.png

The job (:class:`SoakFunction`, keyed by payer, over an unbounded transaction generator with
``--payers`` payers, so the state stops growing once every payer has been seen, and
``--events-per-second`` of event time, so the TTL and the windows turn over within the run even
when batches are slow): a dedup of
transaction ids in a ``MapState`` with a short event-time TTL and incremental cleanup,
duplicates to a side output (Parquet); a tumbling event-time window of ``WINDOW_MS`` per payer
(a ``MapState`` of window accumulators and an event-time timer per window); a ``ListState``
of recent amounts and a ``ReducingState`` total; a processing-time inactivity timer moved on
every payment; and broadcast rules, read from a folder into which a new rule version is moved
every ``--rule-seconds``. It runs through ``Job.run`` on local Spark (2 cores, RocksDB,
changelog checkpoints, a real checkpoint directory) in a child process, with micro-batches of
``--max-batch`` events taken as fast as Spark runs them.

Every ``--sample-seconds`` this process samples the child's process tree from ``/proc``: the
driver's Python RSS, threads and open files; the JVM's heap after a full GC (``jcmd GC.run``,
``GC.heap_info``), RSS, threads and open files; the Python workers' RSS (the JVM's Python
children); the checkpoint directory (bytes and files: all of it, its ``state/`` part, and the
new state files since the last sample); the state-store entries (``numRowsTotal``);
``checkpoints.jsonl`` and the side output's size. The samples go to ``samples.csv`` in the
work directory (and a PNG with ``--plot``, when matplotlib is installed).

Then, after a warm-up (the first third of the run), each figure's growth per 1,000
micro-batches (least-squares slope against the batch count) and its extrapolation to 30 days
at the measured batch rate, and the write amplification: the state files written per batch
against the bytes of the records the batch touched. The last line is::

    SOAK batches=N minutes=M driver_rss_growth_mb_per_1000_batches=X jvm_heap_growth_mb_per_1000_batches=Y
    worker_rss_growth_mb_per_1000_batches=Z checkpoint_growth_mb_per_1000_batches=C files_growth_per_1000_batches=F

(one line). The checkpoint figures exclude the side output (the job's data, which grows by
design) and count it apart.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
WINDOW_MS = 10_000
#: event-time TTL of the dedup's seen transaction ids
SEEN_TTL = timedelta(seconds=60)
#: a payer with no payment for this long (processing time) loses its recent amounts
IDLE_MS = 20_000
RECENT = 8
OUTPUT = "payer_id string, kind string, window_start bigint, events bigint, amount double, detail string"
DUPLICATE_SCHEMA = "txn_id bigint, payer_id string, amount double"
RULE_SCHEMA = "rule_id string, min_amount double, action string"
_PAGE = os.sysconf("SC_PAGE_SIZE")


# --------------------------------------------------------------------------- the job (child)


def _job(payers: int, max_batch: int, work: Path, trigger: str, key_groups: int, events_per_second: float) -> Any:
    from sparkstate import (
        KeyedBroadcastProcessFunction,
        ListStateDescriptor,
        MapStateDescriptor,
        NoopSink,
        OutputTag,
        ParquetSink,
        ReducingStateDescriptor,
        StateTtlConfig,
        TimeDomain,
        ValueStateDescriptor,
        WatermarkStrategy,
    )
    from sparkstate.connectors.generator import UpiTransactions
    from sparkstate.connectors.sources import FileSource
    from sparkstate.job import Job

    rules_desc: MapStateDescriptor[str, dict] = MapStateDescriptor("rules", str, dict)
    duplicates = OutputTag("duplicates", DUPLICATE_SCHEMA)

    class SoakFunction(KeyedBroadcastProcessFunction):
        """Every kind of state at once (see the module's doc)."""

        def open(self, ctx: Any) -> None:
            ttl = (StateTtlConfig.new_builder(SEEN_TTL).use_event_time()
                   .cleanup_incrementally(2, run_cleanup_for_every_record=True).build())
            self.seen = ctx.get_map_state(MapStateDescriptor("seen", int, bool).enable_time_to_live(ttl))
            self.windows = ctx.get_map_state(MapStateDescriptor("windows", int, list))
            self.recent = ctx.get_list_state(ListStateDescriptor("recent", float))
            self.total = ctx.get_reducing_state(ReducingStateDescriptor("total", lambda a, b: a + b, float))
            self.idle_at = ctx.get_state(ValueStateDescriptor("idle_at", int))

        def process_broadcast_element(self, rule: dict, ctx: Any) -> None:
            ctx.get_broadcast_state(rules_desc).put(rule["rule_id"], rule)

        def process_element(self, tx: dict, ctx: Any) -> Any:
            if self.seen.contains(tx["txn_id"]):
                ctx.output(duplicates, {"txn_id": tx["txn_id"], "payer_id": ctx.get_current_key(), "amount": tx["amount"]})
                return
            self.seen.put(tx["txn_id"], True)
            ts = ctx.timestamp()
            start = ts - ts % WINDOW_MS
            acc = self.windows.get(start) or [0, 0.0]
            if acc[0] == 0:
                ctx.timer_service().register_event_time_timer(start + WINDOW_MS - 1)
            self.windows.put(start, [acc[0] + 1, acc[1] + tx["amount"]])
            self.recent.update([*self.recent.get()[-(RECENT - 1):], tx["amount"]])
            self.total.add(tx["amount"])
            timers = ctx.timer_service()
            old = self.idle_at.value()
            if old is not None:
                timers.delete_processing_time_timer(old)
            at = timers.current_processing_time() + IDLE_MS
            timers.register_processing_time_timer(at)
            self.idle_at.update(at)
            for rule_id, rule in ctx.get_broadcast_state(rules_desc).items():
                if tx["amount"] > rule["min_amount"]:
                    yield (ctx.get_current_key(), "rule", None, None, tx["amount"], f"{rule_id}: {rule['action']}")

        def on_timer(self, timestamp: int, ctx: Any) -> Any:
            if ctx.time_domain() == TimeDomain.PROCESSING_TIME:
                self.recent.clear()
                self.idle_at.clear()
                return
            start = timestamp + 1 - WINDOW_MS
            acc = self.windows.get(start)
            if acc is not None:
                self.windows.remove(start)
                yield (ctx.get_current_key(), "window", start, acc[0], acc[1], f"total {self.total.get():.2f}")

    gen = UpiTransactions(events=None, payers=payers, max_batch=max_batch, duplicates=0.02, seed=17,
                           events_per_second=events_per_second)
    rules = FileSource(str(work / "rules"), RULE_SCHEMA, format="json", name="rules")
    watermark = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(milliseconds=gen.max_out_of_orderness_ms))
    return (
        Job("soak").source(gen, watermark=watermark).key_by("payer_id")
        .connect(rules).broadcast(rules_desc)
        .process(SoakFunction(), output_schema=OUTPUT)
        .side_output(duplicates, ParquetSink(str(work / "side" / "duplicates")))
        .sink(NoopSink())
        .with_settings(state_backend="rocksdb", parallelism=2, trigger_interval=trigger, key_groups=key_groups)
    )


def _write_rules(folder: Path, every: float, stop: threading.Event) -> None:
    """A new version of one of ten rules every ``every`` seconds, moved into ``folder`` whole."""
    version = 0
    while not stop.is_set():
        rule = {"rule_id": f"r{version % 10}", "min_amount": 150_000.0 + (version * 997) % 40_000,
                "action": "block" if version % 3 == 0 else "alert"}
        tmp = folder.parent / f".rule-{version:06d}.json"
        tmp.write_text(json.dumps(rule) + "\n")
        tmp.rename(folder / f"rule-{version:06d}.json")
        version += 1
        stop.wait(every)


def _state_layout(spark: Any, ckpt: Path) -> dict:
    """What the last committed state holds: entries, keys, and the pickled size of buckets and
    of single keys' records (meta entries holding their group's only bucket count as buckets)."""
    import pickle

    from sparkstate.engine.keygroups import GroupMeta

    reader = spark.read.format("statestore").option("path", str(ckpt))
    metas = [r[0] for r in reader.option("stateVarName", "meta").load().select("value.v").collect()]
    buckets = [r[0] for r in reader.option("stateVarName", "buckets").load().select("user_map_value.v").collect()]
    blobs: list[bytes] = [b for b in buckets if b]
    keys = record_bytes = 0
    for m in metas:
        meta = GroupMeta.loads(m)
        keys += meta.n_keys
        inline = getattr(meta, "inline", None)
        if inline:
            blobs.append(inline if isinstance(inline, bytes) else pickle.dumps(inline, protocol=5))
    bucket_sizes = []
    for blob in blobs:
        records = pickle.loads(blob)
        if isinstance(records, dict) and records:
            bucket_sizes.append(len(blob))
            record_bytes += sum(len(pickle.dumps({k: r}, protocol=5)) for k, r in records.items())
    return {"meta_entries": len(metas), "meta_bytes": sum(len(m or b"") for m in metas),
            "buckets": len(bucket_sizes), "bucket_bytes": sum(bucket_sizes), "keys": keys,
            "record_bytes": record_bytes}


def child(args: argparse.Namespace) -> None:
    """Run the job for ``--minutes``, appending each batch's progress to ``progress.jsonl``."""
    from sparkstate.runtime.session.classic import get_spark

    work = Path(args.work)
    (work / "rules").mkdir(parents=True, exist_ok=True)
    spark = get_spark(parallelism=2, log_file=work / "spark.log")
    stop = threading.Event()
    writer = threading.Thread(target=_write_rules, args=(work / "rules", args.rule_seconds, stop), daemon=True)
    writer.start()
    log = (work / "progress.jsonl").open("a", buffering=1)

    def progress(p: dict) -> None:
        ops = p.get("stateOperators") or []
        custom: dict[str, int] = {}
        for op in ops:
            for k, v in (op.get("customMetrics") or {}).items():
                custom[k] = custom.get(k, 0) + int(v)
        log.write(json.dumps({
            "batch": p.get("batchId"), "t": time.time(), "events": p.get("numInputRows", 0),
            "ms": (p.get("durationMs") or {}).get("triggerExecution"), "durations": p.get("durationMs"),
            "rows_total": sum(op.get("numRowsTotal", 0) for op in ops),
            "rows_updated": sum(op.get("numRowsUpdated", 0) for op in ops),
            "commit_ms": sum(op.get("commitTimeMs", 0) for op in ops), "custom": custom,
        }) + "\n")

    job = _job(args.payers, args.max_batch, work, args.trigger, args.key_groups, args.events_per_second)
    try:
        result = job.run(checkpoint_dir=work / "checkpoint", spark=spark, on_progress=progress,
                         timeout=args.minutes * 60, log_file=work / "spark.log", spark_ui=False)
    finally:
        stop.set()
    layout = _state_layout(spark, work / "checkpoint") if result.batches else {}
    print(json.dumps({"batches": result.batches, "events": result.events, "seconds": result.seconds,
                      "status": result.status, "layout": layout}))


# --------------------------------------------------------------------------- sampling (parent)


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            tree.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry.name))
    return tree


def _descendants(root: int, tree: dict[int, list[int]]) -> list[int]:
    out, stack = [], list(tree.get(root, ()))
    while stack:
        pid = stack.pop()
        out.append(pid)
        stack.extend(tree.get(pid, ()))
    return out


def _status(pid: int) -> dict[str, int]:
    """RSS bytes, threads and open file descriptors of a process (zeros once it is gone)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
        rss = int(re.search(r"VmRSS:\s+(\d+) kB", text).group(1)) * 1024  # type: ignore[union-attr]
        threads = int(re.search(r"Threads:\s+(\d+)", text).group(1))  # type: ignore[union-attr]
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, AttributeError):
        return {"rss": 0, "threads": 0, "fds": 0}
    return {"rss": rss, "threads": threads, "fds": fds}


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _heap_after_gc(jvm: int) -> int | None:
    """The JVM's live heap: its old generation right after a full GC (``jcmd GC.run``, which
    compacts every live object into it; ``jstat -gc``'s ``OU``), in bytes; the smaller of two
    GCs in a row, as one alone sometimes leaves a large object that is dead by the next."""
    seen = []
    for _ in range(2):
        try:
            subprocess.run(["jcmd", str(jvm), "GC.run"], capture_output=True, timeout=60, check=True)
            out = subprocess.run(["jstat", "-gc", str(jvm)], capture_output=True, text=True, timeout=60).stdout
            head, values = out.split("\n")[:2]
            seen.append(int(float(dict(zip(head.split(), values.split(), strict=True))["OU"]) * 1024))
        except (OSError, subprocess.SubprocessError, ValueError, KeyError):
            pass
    return min(seen) if seen else None


def _tree_size(path: Path) -> tuple[int, int]:
    total = files = 0
    for root, _, names in os.walk(path):
        for n in names:
            try:
                total += os.stat(os.path.join(root, n)).st_size
                files += 1
            except OSError:
                pass
    return total, files


class Sampler:
    """Samples the child's processes and the work directory; keeps the new state files' bytes."""

    def __init__(self, child_pid: int, work: Path) -> None:
        self.pid, self.work = child_pid, work
        self.ckpt = work / "checkpoint"
        self.seen_state: set[str] = set()
        self.started = time.time()
        self._progress_pos = 0
        self.last_progress: dict = {}

    def _latest_progress(self) -> dict:
        path = self.work / "progress.jsonl"
        if path.exists():
            with path.open() as f:
                f.seek(self._progress_pos)
                for line in f:
                    if line.endswith("\n"):
                        self._progress_pos += len(line.encode())
                        self.last_progress = json.loads(line)
                    else:
                        break
        return self.last_progress

    def _new_state_files(self) -> tuple[int, int, int]:
        """Bytes and count of the state files that appeared since the last sample (changelogs,
        snapshots, SST files), and of those the changelogs' bytes."""
        new_bytes = new_files = changelog = 0
        for root, _, names in os.walk(self.ckpt / "state"):
            for n in names:
                p = os.path.join(root, n)
                if p in self.seen_state or n.endswith(".crc") or n.endswith(".tmp"):
                    continue
                try:
                    size = os.stat(p).st_size
                except OSError:
                    continue
                self.seen_state.add(p)
                new_bytes += size
                new_files += 1
                if n.endswith(".changelog"):
                    changelog += size
        return new_bytes, new_files, changelog

    def sample(self) -> dict:
        tree = _children()
        procs = _descendants(self.pid, tree)
        jvm = next((p for p in procs if _cmdline(p).split(" ")[0].endswith("java")), None)
        workers = [p for p in _descendants(jvm, tree) if "python" in _cmdline(p)] if jvm else []
        driver, jvm_s = _status(self.pid), _status(jvm) if jvm else {"rss": 0, "threads": 0, "fds": 0}
        heap = _heap_after_gc(jvm) if jvm else None
        p = self._latest_progress()
        ck_bytes, ck_files = _tree_size(self.ckpt)
        side_bytes, side_files = _tree_size(self.work / "side")
        state_bytes, state_files = _tree_size(self.ckpt / "state")
        new_bytes, new_files, changelog = self._new_state_files()
        stats = self.ckpt / "sparkstate" / "checkpoints.jsonl"
        return {
            "seconds": round(time.time() - self.started, 1), "batches": (p.get("batch", -1) + 1) if p else 0,
            "driver_rss": driver["rss"], "driver_threads": driver["threads"], "driver_fds": driver["fds"],
            "jvm_heap": heap, "jvm_rss": jvm_s["rss"], "jvm_threads": jvm_s["threads"], "jvm_fds": jvm_s["fds"],
            "workers": len(workers), "worker_rss": sum(_status(w)["rss"] for w in workers),
            # the checkpoint without the side output, which lives outside it
            "checkpoint_bytes": ck_bytes, "checkpoint_files": ck_files,
            "state_dir_bytes": state_bytes, "state_dir_files": state_files,
            "new_state_bytes": new_bytes, "new_state_files": new_files, "new_changelog_bytes": changelog,
            "state_entries": p.get("rows_total"), "checkpoints_jsonl": stats.stat().st_size if stats.exists() else 0,
            "side_bytes": side_bytes, "side_files": side_files,
        }


# --------------------------------------------------------------------------- figures


def slope(xs: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of ``ys`` against ``xs`` (None with fewer than two distinct xs)."""
    pairs = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
    if len({x for x, _ in pairs}) < 2:
        return None
    n = len(pairs)
    mx = sum(x for x, _ in pairs) / n
    my = sum(y for _, y in pairs) / n
    return sum((x - mx) * (y - my) for x, y in pairs) / sum((x - mx) ** 2 for x, _ in pairs)


#: (label, sample column, unit divisor, unit, SOAK name)
FIGURES = [
    ("driver Python RSS", "driver_rss", 2**20, "MB", "driver_rss_growth_mb_per_1000_batches"),
    ("JVM heap after GC", "jvm_heap", 2**20, "MB", "jvm_heap_growth_mb_per_1000_batches"),
    ("Python workers' RSS", "worker_rss", 2**20, "MB", "worker_rss_growth_mb_per_1000_batches"),
    ("checkpoint directory", "checkpoint_bytes", 2**20, "MB", "checkpoint_growth_mb_per_1000_batches"),
    ("checkpoint files", "checkpoint_files", 1, "files", "files_growth_per_1000_batches"),
    ("JVM RSS", "jvm_rss", 2**20, "MB", None),
    ("state/ bytes", "state_dir_bytes", 2**20, "MB", None),
    ("state entries (numRowsTotal)", "state_entries", 1, "entries", None),
    ("checkpoints.jsonl", "checkpoints_jsonl", 2**10, "KB", None),
    ("side output (Parquet)", "side_bytes", 2**20, "MB", None),
    ("side output files", "side_files", 1, "files", None),
    ("driver threads", "driver_threads", 1, "threads", None),
    ("driver open files", "driver_fds", 1, "fds", None),
    ("JVM threads", "jvm_threads", 1, "threads", None),
    ("JVM open files", "jvm_fds", 1, "fds", None),
    ("Python workers", "workers", 1, "processes", None),
]


def growth(samples: list[dict], warmup: float = 1 / 3) -> tuple[list[dict], dict]:
    """Per figure: the first and last value after the warm-up (that share of the run's time),
    the slope per 1,000 batches and its extrapolation to 30 days at the batch rate measured
    after the warm-up."""
    run_s = samples[-1]["seconds"]
    steady = [s for s in samples if s["seconds"] >= run_s * warmup and s["batches"] > 0]
    if len(steady) < 2:
        steady = samples[-2:]
    first, last = steady[0], steady[-1]
    rate = (last["batches"] - first["batches"]) / max(last["seconds"] - first["seconds"], 1e-9)
    month = rate * 30 * 86400
    rows, soak = [], {}
    for label, col, div, unit, name in FIGURES:
        k = slope([s["batches"] for s in steady], [s[col] for s in steady])
        per_1000 = None if k is None else k * 1000 / div
        rows.append({"label": label, "unit": unit, "first": _val(first[col], div), "last": _val(last[col], div),
                     "per_1000": per_1000, "month": None if k is None else k * month / div})
        if name:
            soak[name] = per_1000
    return rows, {"rate": rate, "steady_from": first["seconds"], "soak": soak}


def _val(v: Any, div: float) -> float | None:
    return None if v is None else v / div


def write_amplification(samples: list[dict], result: dict, progress: list[dict], payers: int) -> dict:
    """What a batch writes after the warm-up: the state files (changelogs, snapshots) and the
    bytes put into RocksDB (Spark's ``rocksdbTotalBytesWritten``), against the records it touched."""
    run_s = samples[-1]["seconds"]
    steady = [s for s in samples if s["seconds"] >= run_s / 3]
    batches = steady[-1]["batches"] - steady[0]["batches"] if len(steady) > 1 else 0
    written = sum(s["new_state_bytes"] for s in steady[1:])
    changelog = sum(s["new_changelog_bytes"] for s in steady[1:])
    later = [p for p in progress if p["batch"] >= steady[0]["batches"]] or progress[-1:]
    n = len(later) or 1
    events = result["events"] / result["batches"] if result["batches"] else 0  # the generator's, per batch
    layout = result.get("layout") or {}
    keys = layout.get("keys") or 0
    per_key = layout.get("record_bytes", 0) / keys if keys else None
    # a batch of n events over P payers touches P * (1 - (1 - 1/P)^n) payers on average
    touched = payers * (1 - (1 - 1 / payers) ** events)
    return {
        "batches": batches, "written_per_batch": written / batches if batches else None,
        "changelog_per_batch": changelog / batches if batches else None,
        "events": events, "touched_keys": touched, "record_bytes": per_key,
        "touched_bytes": touched * per_key if per_key else None,
        "rocksdb_bytes": sum(p["custom"].get("rocksdbTotalBytesWritten", 0) for p in later) / n,
        "rocksdb_puts": sum(p["custom"].get("rocksdbPutCount", 0) for p in later) / n,
        "entries_updated": sum(p.get("rows_updated", 0) for p in later) / n,
        "bucket_bytes": layout.get("bucket_bytes", 0) / layout["buckets"] if layout.get("buckets") else None,
        "layout": layout,
    }


#: (keys, keys touched per batch, bucket size) of ``--layout``'s rows
LAYOUT_CASES = [(2_000, 20, 128), (2_000, 140, 128), (10_000, 20, 128), (10_000, 200, 128), (20_000, 200, 128),
                (20_000, 200, 32), (20_000, 200, 16), (20_000, 200, 4)]


def layout_writes(keys: int, touched: int, bucket_size: int, record: int = 120, groups: int = 128,
                  batches: int = 40) -> dict:
    """The bytes a batch puts into the state store, by sparkstate's key-group layout alone (no
    Spark): ``keys`` keys with records of about ``record`` bytes, each holding an event-time
    timer (a window), in ``groups`` key groups; each batch touches ``touched`` random keys, and
    every group holding event-time timers gets a new wake-up, as ``KeyGroupRunner`` gives it."""
    import random
    import zlib

    from sparkstate.api.state import TIMERS_FIELD
    from sparkstate.engine.keygroups import GroupMeta, KeyGroupStore

    rng = random.Random(3)
    metas: list[bytes | None] = [None] * groups
    entries: list[dict[int, bytes]] = [{} for _ in range(groups)]
    names = [f"p{i:07d}" for i in range(keys)]
    group_of = {k: zlib.crc32(k.encode()) % groups for k in names}

    def run_group(g: int, keys_touched: list[str], now: int) -> tuple[int, int]:
        stored = metas[g]
        store = KeyGroupStore(GroupMeta.loads(stored), entries[g].get, bucket_size)
        for k in keys_touched:
            rec = store.record_for(k)
            rec["v"] = rng.randbytes(record)
            rec[TIMERS_FIELD] = {(0, now + 600_000)}
        writes, deleted = store.flush_entries(keys_touched)
        if store.meta.event_min:
            store.meta.wake = now + 1
        for b, blob in writes:
            entries[g][b] = blob
        for b in deleted:
            entries[g].pop(b, None)
        dumped = store.meta.dumps()
        changed = dumped != stored
        metas[g] = dumped
        return sum(len(blob) for _, blob in writes) + (len(dumped) if changed else 0), len(writes) + changed

    by_group: dict[int, list[str]] = {}
    for k in names:
        by_group.setdefault(group_of[k], []).append(k)
    for g, ks in by_group.items():  # every key once, 50 at a time
        for i in range(0, len(ks), 50):
            run_group(g, ks[i:i + 50], 0)
    written = puts = 0
    for b in range(1, batches + 1):
        chosen: dict[int, list[str]] = {}
        for k in rng.sample(names, touched):
            chosen.setdefault(group_of[k], []).append(k)
        for g in range(groups):
            w, p = run_group(g, chosen.get(g, []), b * 1000)
            written += w
            puts += p
    state = sum(len(m or b"") for m in metas) + sum(len(v) for e in entries for v in e.values())
    return {"keys": keys, "touched": touched, "bucket_size": bucket_size, "state": state,
            "written": written / batches, "puts": puts / batches, "touched_bytes": touched * (record + 40)}


def print_layout_writes() -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Bytes a batch puts into the state store, by the key-group layout alone "
                        "(128 key groups, every key with an event-time timer)", title_justify="left")
    for col in ("keys", "touched/batch", "bucket size", "state", "put per batch", "puts per batch", "x touched records"):
        table.add_column(col, justify="right")
    for keys, touched, size in LAYOUT_CASES:
        r = layout_writes(keys, touched, size)
        table.add_row(f"{keys:,}", f"{touched:,}", str(size), f"{r['state'] / 2**10:,.0f} KB",
                      f"{r['written'] / 2**10:,.1f} KB", f"{r['puts']:,.0f}", f"{r['written'] / r['touched_bytes']:,.1f}")
    Console(highlight=False, width=130).print(table)


def _plot(samples: list[dict], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    xs = [s["batches"] for s in samples]
    panels = [("MB", [("driver RSS", "driver_rss"), ("JVM heap after GC", "jvm_heap"), ("workers' RSS", "worker_rss"),
                      ("JVM RSS", "jvm_rss")]),
              ("MB", [("checkpoint", "checkpoint_bytes"), ("state/", "state_dir_bytes"), ("side output", "side_bytes")]),
              ("count", [("checkpoint files", "checkpoint_files"), ("JVM threads", "jvm_threads"),
                         ("JVM open files", "jvm_fds"), ("driver threads", "driver_threads")])]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for ax, (unit, lines) in zip(axes, panels, strict=True):
        for label, col in lines:
            div = 2**20 if unit == "MB" else 1
            ax.plot(xs, [None if s[col] is None else s[col] / div for s in samples], label=label)
        ax.set_xlabel("micro-batches")
        ax.set_ylabel(unit)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=70)
    return True


def _num(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--sample-seconds", type=float, default=30)
    parser.add_argument("--max-batch", type=int, default=200, help="events per micro-batch")
    parser.add_argument("--payers", type=int, default=2_000, help="keys (the state's steady size)")
    parser.add_argument("--events-per-second", type=float, default=20,
                        help="event time's pace: events per second of event time (the TTL and windows turn over with it)")
    parser.add_argument("--trigger", default="0 seconds", help="Spark trigger interval")
    parser.add_argument("--key-groups", type=int, default=128, help="key groups (sparkstate's default: 128)")
    parser.add_argument("--rule-seconds", type=float, default=10, help="a new rule version every so often")
    parser.add_argument("--out", help="work directory (kept; default: a temporary one, removed)")
    parser.add_argument("--plot", help="a PNG of the samples (needs matplotlib)")
    parser.add_argument("--report", metavar="DIR", help="print the report of a finished run's work directory again")
    parser.add_argument("--layout", action="store_true",
                        help="only the bytes a batch puts by the key-group layout (pure Python, a few seconds)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    if args.report:
        report_again(Path(args.report), args)
        return
    if args.layout:
        print_layout_writes()
        return

    work = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="sparkstate-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    for old in ("checkpoint", "side", "rules", "progress.jsonl"):  # a new run each time
        target = work / old
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
    (work / "run.json").write_text(json.dumps({k: getattr(args, k) for k in RUN_ARGS}))
    print(f"soak: {args.minutes:g} minutes, micro-batches of {args.max_batch} events over {args.payers:,} payers, "
          f"{args.events_per_second:g} events per second of event time, trigger {args.trigger!r}, {args.key_groups} key groups; "
          f"work directory {work}", flush=True)
    cmd = [sys.executable, str(HERE), "--child", "--work", str(work), "--minutes", str(args.minutes),
           "--max-batch", str(args.max_batch), "--payers", str(args.payers), "--trigger", args.trigger,
           "--rule-seconds", str(args.rule_seconds), "--key-groups", str(args.key_groups),
           "--events-per-second", str(args.events_per_second)]
    with (work / "child.out").open("w") as out, (work / "child.err").open("w") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err)
        sampler = Sampler(proc.pid, work)
        samples: list[dict] = []
        with (work / "samples.csv").open("w", newline="") as f:
            table: csv.DictWriter | None = None
            while True:
                done = proc.poll() is not None
                if not done:
                    s = sampler.sample()
                    if s["batches"] > 0:
                        samples.append(s)
                        table = table or csv.DictWriter(f, fieldnames=list(s))
                        if f.tell() == 0:
                            table.writeheader()
                        table.writerow(s)
                        f.flush()
                        print(f"  {s['seconds']:>7.0f} s  {s['batches']:>6} batches  driver {s['driver_rss'] / 2**20:6.1f} MB"
                              f"  heap {_num(None if s['jvm_heap'] is None else s['jvm_heap'] / 2**20, 1)} MB"
                              f"  workers {s['worker_rss'] / 2**20:6.1f} MB  checkpoint {s['checkpoint_bytes'] / 2**20:6.1f} MB"
                              f" / {s['checkpoint_files']} files", flush=True)
                if done:
                    break
                deadline = time.monotonic() + args.sample_seconds
                while time.monotonic() < deadline and proc.poll() is None:
                    time.sleep(0.5)
    if proc.returncode != 0:
        raise SystemExit(f"the soak job failed (exit {proc.returncode}):\n{(work / 'child.err').read_text()[-3000:]}")
    result = json.loads((work / "child.out").read_text().strip().splitlines()[-1])
    if len(samples) < 2:
        raise SystemExit("fewer than two samples: run longer or sample more often (--sample-seconds)")
    _report(samples, result, args, work)
    if not args.out:
        shutil.rmtree(work, ignore_errors=True)


#: the arguments a run records in its work directory, for ``--report``
RUN_ARGS = ("minutes", "max_batch", "payers", "trigger", "key_groups", "rule_seconds", "events_per_second")


def report_again(work: Path, args: argparse.Namespace) -> None:
    """The report of a finished run, from its work directory (``samples.csv``, ``child.out``,
    ``progress.jsonl``; ``run.json`` for its arguments, else those given)."""
    recorded = work / "run.json"
    if recorded.exists():
        vars(args).update(json.loads(recorded.read_text()))
    with (work / "samples.csv").open() as f:
        samples = [{k: _parse(v) for k, v in row.items()} for row in csv.DictReader(f)]
    result = json.loads((work / "child.out").read_text().strip().splitlines()[-1])
    _report(samples, result, args, work)


def _parse(v: str) -> Any:
    if v == "":
        return None
    try:
        return int(v)
    except ValueError:
        return float(v)


def _report(samples: list[dict], result: dict, args: argparse.Namespace, work: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    rows, info = growth(samples)
    progress = [json.loads(line) for line in (work / "progress.jsonl").read_text().splitlines() if line.strip()]
    amp = write_amplification(samples, result, progress, args.payers)
    console = Console(highlight=False, width=max(130, Console().width))
    events_s = result["events"] / result["seconds"] if result["seconds"] else 0
    console.print(f"{result['batches']:,} micro-batches, {result['events']:,} events in {result['seconds']:.0f} s "
                  f"({events_s:,.0f} events/s, {info['rate']:.2f} batches/s after the warm-up); peak memory "
                  f"{max(s['driver_rss'] + s['jvm_rss'] + s['worker_rss'] for s in samples) / 2**20:,.1f} MB")
    table = Table(title=f"Footprint after the warm-up (from {info['steady_from']:.0f} s; {len(samples)} samples)",
                  title_justify="left")
    # the second half alone: what is left once the checkpoint holds its retained batches
    half, _ = growth(samples, 1 / 2)
    for col in ("figure", "unit", "after warm-up", "at end", "growth per 1,000 batches", "in 30 days",
                "per 1,000 (2nd half)"):
        table.add_column(col, justify="left" if col in ("figure", "unit") else "right")
    for r, h in zip(rows, half, strict=True):
        table.add_row(r["label"], r["unit"], _num(r["first"], 1), _num(r["last"], 1), _num(r["per_1000"], 3),
                      _num(r["month"], 1), _num(h["per_1000"], 3))
    console.print(table)
    layout = amp["layout"]
    ratio = amp["written_per_batch"] / amp["touched_bytes"] if amp["written_per_batch"] and amp["touched_bytes"] else None
    kb = 1024
    console.print(
        f"write amplification, per batch after the warm-up ({amp['events']:,.0f} events, about "
        f"{amp['touched_keys']:,.0f} keys touched, their records {_num(amp['record_bytes'], 0)} bytes each on average: "
        f"{_num(amp['touched_bytes'] and amp['touched_bytes'] / kb, 1)} KB): "
        f"{_num(amp['rocksdb_bytes'] / kb, 1)} KB put into RocksDB in {amp['rocksdb_puts']:,.0f} puts "
        f"({amp['entries_updated']:,.0f} state entries updated); "
        f"{_num(amp['written_per_batch'] and amp['written_per_batch'] / kb, 1)} KB of new state files "
        f"({_num(amp['changelog_per_batch'] and amp['changelog_per_batch'] / kb, 1)} KB of changelog): "
        f"{_num(ratio, 1)}x the touched records. State at the end: {layout.get('keys', 0):,} keys in "
        f"{layout.get('buckets', 0):,} buckets of {_num(amp['bucket_bytes'], 0)} bytes on average "
        f"({layout.get('meta_entries', 0):,} key groups)"
    )
    if args.plot:
        if not _plot(samples, Path(args.plot)):
            console.print("no plot: matplotlib is not installed (the samples are in samples.csv)")
    console.print(f"samples: {work / 'samples.csv'}")
    print(soak_line(result["batches"], args.minutes, info["soak"]))


def soak_line(batches: int, minutes: float, growths: dict[str, float | None]) -> str:
    """The last line: the run's size and each figure's growth per 1,000 batches (nan: unknown)."""
    return f"SOAK batches={batches} minutes={minutes:g} " + " ".join(
        f"{k}={'nan' if v is None else f'{v:.3f}'}" for k, v in growths.items())


if __name__ == "__main__":
    main()
