"""Progress lines while a job runs and the summary when it ends.

Figures come from Spark's own progress reports (one per micro-batch): batch duration, the
state store's entry count and size (RocksDB's SST files, or the hashmap's current version),
and the watermark; event counts come from sparkstate's source offsets, and each checkpoint's
duration and size from ``runtime/checkpoint/stats.py``.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from sparkstate.runtime.checkpoint.stats import CheckpointStats, state_bytes
from sparkstate.runtime.run.result import CheckpointTotals, RunResult
from sparkstate.runtime.run.terminal import human_bytes, labelled, text


class ProgressPrinter:
    """Prints one line per completed micro-batch."""

    def __init__(self, console: Console | None = None, total_events: int | None = None) -> None:
        self.console = console or Console(stderr=True, highlight=False)
        self.total = total_events
        self.done = 0
        self.started = time.monotonic()

    def __call__(self, p: dict) -> None:
        events = int(p.get("events") or 0)
        self.done += events
        ms = (p.get("durationMs") or {}).get("triggerExecution", 0)
        rate = events * 1000.0 / ms if ms else 0.0
        ops = p.get("stateOperators") or [{}]
        op = ops[0] if ops else {}
        progress = f"{self.done:,}" + (f"/{self.total:,}" if self.total else "")
        watermark = (p.get("eventTime") or {}).get("watermark")
        parts: list[Any] = [
            text(f"batch {p.get('batchId')}", "bold"),
            f"{events:,} ev in {ms / 1000:.2f} s ({rate:,.0f}/s)",
            progress,
            f"state {op.get('numRowsTotal', 0):,} entries {human_bytes(state_bytes(op))}",
        ]
        checkpoint = p.get("checkpoint")
        if checkpoint:
            parts.append(f"checkpoint {checkpoint['duration_ms']:,} ms, {human_bytes(checkpoint['delta_bytes'])} written")
        else:
            parts.append(f"commit {op.get('commitTimeMs', 0):,} ms")
        for name, n in sorted((p.get("sideOutputs") or {}).items()):
            if n:
                parts.append(text(f"{n:,} {name.replace('_', ' ')}", "yellow"))
        if watermark and watermark.startswith("2262"):
            parts.append("wm end of input")  # the end-of-input marker's watermark
        elif watermark and not watermark.startswith("1970"):
            parts.append(f"wm {watermark[:19].replace('T', ' ')}")
        self.console.print(Text(" | ").join(x if isinstance(x, Text) else Text(x) for x in parts))


def summary_table(result: RunResult, title: str | None = None) -> Table:
    """The figures of a run as a two-column table."""
    table = Table(title=text(title or f"sparkstate run: {result.job}"), show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value")
    status = "already complete" if result.already_complete else ("complete" if result.completed else "stopped")
    table.add_row("status", status)
    table.add_row("events", f"{result.events:,}")
    if result.output_rows is not None:
        table.add_row("output rows", f"{result.output_rows:,}")
    table.add_row("micro-batches", f"{result.batches:,}")
    table.add_row("wall time", f"{result.seconds:,.1f} s (first batch {result.first_batch_seconds:,.1f} s)")
    table.add_row("throughput", f"{result.events_per_second:,.0f} events/s")
    steady = result.steady_events_per_second
    if steady:
        table.add_row("after the first batch", f"{steady:,.0f} events/s")
    keys = f"{result.state_keys:,} keys in " if result.state_keys is not None else ""
    table.add_row("state", f"{keys}{result.state_rows or 0:,} entries, {human_bytes(result.state_bytes)}")
    _checkpoint_rows(table, result.checkpoint_totals.summary())  # of every checkpoint of the run
    table.add_row("path", result.plan + (" (Spark SQL)" if result.plan == "native" else ""))
    for name, n in sorted(result.side_outputs.items()):
        table.add_row(text(name.replace("_", " ")), f"{n:,} rows (side output)")
    if result.peak_memory_bytes:
        table.add_row("peak memory", f"{human_bytes(result.peak_memory_bytes)} (driver, JVM and Python workers)")
    table.add_row("checkpoint", text(result.checkpoint_dir))
    return table


def checkpoint_summary(stats: list[CheckpointStats]) -> dict[str, Any]:
    """Mean and max duration, mean delta, the last full and state sizes, and the kinds."""
    totals = CheckpointTotals()
    for s in stats:
        totals.add(s)
    return totals.summary()


def _checkpoint_rows(table: Table, figures: dict[str, Any]) -> None:
    if figures["mean_duration_ms"] is None:
        return
    table.add_row(
        "checkpoint duration",
        f"mean {figures['mean_duration_ms']:,.0f} ms, max {figures['max_duration_ms']:,} ms"
        f" ({figures['checkpoints']:,} checkpoints)",
    )
    if figures["mean_delta_bytes"] is not None:
        table.add_row(
            "checkpoint size",
            f"delta {human_bytes(figures['mean_delta_bytes'])} (mean), full {human_bytes(figures['last_full_bytes'])} "
            f"(last); {', '.join(figures['kinds'])}",
        )


def checkpoints_table(checkpoints: list[CheckpointStats], title: str) -> Table:
    """One row per retained checkpoint (``sparkstate checkpoints``)."""
    table = Table(title=text(title), title_justify="left")
    for name, justify in (("batch", "right"), ("completed (UTC)", "left"), ("duration", "right"), ("state size", "right"),
                          ("delta", "right"), ("full", "right"), ("kind", "left")):
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for c in checkpoints:
        table.add_row(
            f"{c.batch_id:,}", c.time.replace("T", " ").rstrip("Z"),
            "-" if c.duration_ms is None else f"{c.duration_ms:,} ms",
            human_bytes(c.state_bytes), human_bytes(c.delta_bytes), human_bytes(c.full_bytes), c.kind,
        )
    return table


def print_summary(result: RunResult, console: Console | None = None, title: str | None = None) -> None:
    console = console or Console(highlight=False)
    console.print(summary_table(result, title))
    for w in result.warnings:
        console.print(labelled("warning:", "yellow", w), soft_wrap=True)


def results_table(rows: list[dict[str, Any]], title: str) -> Table:
    """Output rows (data: shown as text, never as markup)."""
    table = Table(title=text(title), title_justify="left")
    if not rows:
        return table
    for col in rows[0]:
        table.add_column(text(col), justify="right" if isinstance(rows[0][col], (int, float)) else "left")
    for r in rows:
        table.add_row(
            *[text(f"{v:,.2f}" if isinstance(v, float) else (f"{v:,}" if isinstance(v, int) else v)) for v in r.values()]
        )
    return table
