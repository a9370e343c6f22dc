"""``sparkstate report``: the charts of a run that had no dashboard open, from what its
checkpoint directory records (``<checkpoint>/sparkstate/checkpoints.jsonl``, one record per
retained batch, the newest ``checkpoint_stats.MAX_RECORDS`` at most: see
``runtime/checkpoint/stats.py``).

It writes one self-contained HTML page (the dashboard's page with the data inlined:
``dashboard.report_page``) and a PNG of each of its charts (``charts.CHARTS``, drawn by
matplotlib without a display). The figures cover the batches the checkpoint retains
(``--retained``, 100 by default), as ``sparkstate checkpoints`` lists them; the status is how
the last run ended, and the failed checkpoints those of every run (``runtime/checkpoint/run_record.py``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sparkstate.metrics.charts import CHARTS, Chart, point
from sparkstate.metrics.dashboard import report_page
from sparkstate.runtime.checkpoint.directory import CheckpointDir
from sparkstate.runtime.checkpoint.run_record import RunRecord, last_run
from sparkstate.runtime.checkpoint.stats import retained_checkpoints
from sparkstate.runtime.run.terminal import human_bytes


@dataclass
class Report:
    """What :func:`write_report` wrote."""

    html: Path
    pngs: list[Path]
    batches: int
    notes: list[str] = field(default_factory=list)
    #: how the checkpoint's last run ended (None: not recorded)
    last_run: RunRecord | None = None


def values(points: list[dict[str, Any]]) -> dict[str, Any]:
    """The endpoint's metric values (``endpoint.METRICS``) as the recorded batches give them:
    totals over the batches, and the last batch's figures."""
    last = points[-1] if points else {}

    def total(name: str) -> int | None:
        known = [p[name] for p in points if p.get(name) is not None]
        return sum(known) if known else None

    def latest(name: str) -> Any:
        return next((p[name] for p in reversed(points) if p.get(name) is not None), None)

    lag = last.get("lag_seconds")
    return {
        "numRecordsIn": total("events"), "numRecordsOut": total("rows_out"),
        "numRecordsInPerSecond": last.get("events_per_second"), "numRecordsOutPerSecond": last.get("rows_out_per_second"),
        "batches": len(points), "batchDuration": last.get("batch_ms"), "numberOfCompletedCheckpoints": len(points),
        "lastCheckpointDuration": last.get("duration_ms"), "lastCheckpointSize": last.get("delta_bytes"),
        "lastCheckpointFullSize": last.get("full_bytes"), "currentInputWatermark": latest("watermark_ms"),
        "eventTimeLag": round(lag * 1000) if lag is not None else None, "stateSizeBytes": last.get("state_bytes"),
        "stateEntries": last.get("state_rows"), "deadLetters": total("dead_letters"), "lateEvents": total("late_events"),
        "inputRowsWaiting": last.get("waiting"),
    }


def write_report(checkpoint: CheckpointDir, out: Path, job_name: str) -> Report:
    """Write ``out/report.html`` and ``out/<chart>.png`` for the checkpoint's retained batches."""
    from sparkstate.extras import require

    require("report", "sparkstate report")
    notes: list[str] = []
    points = [point(asdict(r)) for r in retained_checkpoints(checkpoint, notes)]
    try:
        meta = checkpoint.read_metadata()
    except (OSError, ValueError):
        meta = {}
    settings = {k: meta.get(k) for k in ("key_groups", "state_backend", "plan", "function", "key_columns") if k in meta}
    settings.update(meta.get("settings") or {})
    settings["checkpoint"] = checkpoint.root
    run = last_run(checkpoint)
    figures = values(points)
    if run is not None:
        settings["last run"] = run.describe()
        figures["numberOfFailedCheckpoints"] = run.failed_checkpoints
    started = points[0]["t"] * 1000 if points else None
    job = {"jid": None, "name": job_name, "state": run.status if run is not None else "REPORT", "start-time": started,
           "settings": settings}
    out.mkdir(parents=True, exist_ok=True)
    html = out / "report.html"
    html.write_text(report_page(job, figures, points), encoding="utf-8")
    pngs = [_png(chart, points, out / f"{chart.id}.png", job_name) for chart in CHARTS]
    return Report(html, pngs, len(points), notes, run)


def _png(chart: Chart, points: list[dict[str, Any]], path: Path, job_name: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    times = mdates.date2num([datetime.fromtimestamp(p["t"], UTC) for p in points])
    fig, ax = plt.subplots(figsize=(8, 3.2), dpi=100)
    try:
        for label, name in chart.series:
            ys = [math.nan if p.get(name) is None else float(p[name]) for p in points]
            ax.plot(times, ys, label=label, linewidth=1.5, marker="o" if len(points) < 30 else None, markersize=3)
        ax.set_title(f"{job_name}: {chart.title}", fontsize=11)
        ax.set_ylabel(chart.unit)
        if chart.scale == "bytes":
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: human_bytes(v)))
        else:
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if abs(v) >= 10 else f"{v:,.2g}"))
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S"))
        ax.set_xlabel("batch completed (UTC)")
        ax.grid(alpha=0.3)
        if len(chart.series) > 1:
            ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(path)
    finally:
        plt.close(fig)
    return path
