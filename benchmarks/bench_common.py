"""What the benchmarks share: each measurement in a child process, warmed up, memory sampled."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path


def measure(once: Callable[[int, Path], dict], events: int, warmup: int) -> dict:
    """An unmeasured warm-up run of ``warmup`` events, then the measured run with peak memory."""
    from sparkstate.metrics.memory import PeakMemory

    work = Path(tempfile.mkdtemp(prefix="sparkstate-bench-"))
    try:
        once(min(warmup, events), work / "warmup")
        with PeakMemory() as mem:
            result = once(events, work / "measured")
        result["peak_bytes"] = mem.peak_bytes
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_child(script: Path, args: list[str]) -> dict | list:
    """Run ``script --child ARGS`` in a fresh process; its last stdout line is the JSON result."""
    proc = subprocess.run([sys.executable, str(script), "--child", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"benchmark step failed: {' '.join(args)}\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def mb(n: float | None) -> str:
    """Bytes as megabytes for a table ("-" when unknown)."""
    return "-" if n is None else f"{n / 2**20:,.1f} MB"


def progress_until_read(query, events: int) -> list[dict]:
    """The progress of a running Spark query (one of sparkstate's sources) until its source has
    read ``events`` offsets; the query is stopped then, or on failure."""
    import time

    from sparkstate.runtime.io.sources import source_offset

    try:
        while True:
            progress = [p if isinstance(p, dict) else json.loads(p.json) for p in query.recentProgress]
            if progress and source_offset(progress[-1]["sources"][0]) == events:
                return progress
            if not query.isActive:
                raise RuntimeError(f"query stopped: {query.exception()}")
            time.sleep(0.05)
    finally:
        query.stop()


#: the CSV files' columns (header-less; ``event_time`` as ``YYYY-MM-DD HH:MM:SS.fff``, UTC)
CSV_SCHEMA = "event_time timestamp, merchant_id string, payer_id string, amount double, device string"
#: events per CSV file: a micro-batch of the file rows is a whole number of files
CSV_FILE_EVENTS = 100_000


def write_payments_csv(folder: Path, events: int, keys: int, max_batch: int, seed: int = 11) -> Path:
    """The payment generator's events as CSV files of :data:`CSV_FILE_EVENTS` lines in ``folder``
    (each written beside it and moved in, as a file source expects): the same events as the
    generator rows read, for sparkstate's file source and for Flink's."""
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    from sparkstate import UpiPayments

    gen = UpiPayments(events=events, merchants=keys, max_batch=max_batch, seed=seed)
    folder.mkdir(parents=True, exist_ok=True)
    for i, at in enumerate(range(0, events, CSV_FILE_EVENTS)):
        batch = gen.generate(at, min(at + CSV_FILE_EVENTS, events))
        # milliseconds, no zone: the text Flink's CSV format reads for TIMESTAMP(3)
        times = batch.column("event_time").cast(pa.timestamp("ms")).cast(pa.string())
        table = pa.Table.from_batches([batch]).set_column(0, "event_time", times)
        tmp = folder.parent / f".{folder.name}-{i:05d}.csv"
        pa_csv.write_csv(table, tmp, write_options=pa_csv.WriteOptions(include_header=False, quoting_style="none"))
        tmp.rename(folder / f"part-{i:05d}.csv")
    return folder


#: PyFlink's interpreter, when ``benchmarks/flink/setup.sh`` has made it (its rows are skipped otherwise)
FLINK_PYTHON = Path(__file__).resolve().parent / "flink" / ".venv" / "bin" / "python"


def run_flink(job: str, csv_dir: Path, events: int, warmup_dir: Path | None = None) -> dict:
    """One of ``benchmarks/flink/jobs.py``'s jobs in PyFlink's own interpreter; its JSON result."""
    args = [str(FLINK_PYTHON), str(FLINK_PYTHON.parents[2] / "jobs.py"), job, "--csv", str(csv_dir), "--events", str(events)]
    if warmup_dir is not None:
        args += ["--warmup-csv", str(warmup_dir)]
    proc = subprocess.run(args, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"Flink job {job} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def csv_source(csv_dir: str, events: int, max_batch: int):
    """sparkstate's file source over :func:`write_payments_csv`'s files, ``max_batch`` events
    (whole files) per micro-batch."""
    from sparkstate import FileSource

    return FileSource(csv_dir, CSV_SCHEMA, format="csv", time_column="event_time",
                      max_files_per_trigger=max(1, min(max_batch, events) // CSV_FILE_EVENTS))


def run_until_read(job, ckpt: Path, spark, events: int):
    """Run a job over an unbounded source (files) until it has read ``events`` events."""
    return job.run(checkpoint_dir=ckpt, spark=spark, until=lambda r: r.events >= events, timeout=3600)


def prepare_csv(work: Path, events: int, keys: int, max_batch: int, prefix_events: int = 0) -> dict[str, str]:
    """The CSV directories the file and Flink rows read: ``csv`` (every event), ``warmup``
    (its first file) and, with ``prefix_events``, ``prefix`` (its first files, for the slow rows,
    holding ``prefix_events`` events: whole files)."""
    import os

    csv_dir = write_payments_csv(work / "csv", events, keys, max_batch)
    dirs = {"csv": str(csv_dir), "warmup": str(work / "csv-warmup")}
    files = sorted(csv_dir.iterdir())
    (work / "csv-warmup").mkdir()
    os.link(files[0], work / "csv-warmup" / files[0].name)
    if prefix_events:
        (work / "csv-prefix").mkdir()
        chosen = files[: -(-prefix_events // CSV_FILE_EVENTS)]  # whole files, at least the events asked
        for f in chosen:
            os.link(f, work / "csv-prefix" / f.name)
        dirs["prefix"] = str(work / "csv-prefix")
        dirs["prefix_events"] = str(min(events, len(chosen) * CSV_FILE_EVENTS))
    return dirs


def flink_row(job: str, csv_dir: str, events: int, warmup_dir: str) -> dict:
    """A Flink row: the job in PyFlink's interpreter (warmed up in the same JVM), with the peak
    resident memory of its process tree."""
    from sparkstate.metrics.memory import PeakMemory

    with PeakMemory() as mem:
        result = run_flink(job, Path(csv_dir), events, Path(warmup_dir))
    return {**result, "peak_bytes": mem.peak_bytes}
