"""The charts of a run, defined once for the live dashboard, ``sparkstate report``'s HTML page
(both drawn by uPlot in the browser, from :data:`CHARTS` sent as JSON) and its PNGs (drawn by
matplotlib).

A chart's series are fields of a batch's *point* (:func:`point`): the batch's checkpoint
record (:class:`~sparkstate.runtime.checkpoint.stats.CheckpointStats` as a dict) with the
figures derived from it. A point's ``t`` is when the batch completed, in epoch seconds; a
field that is None is a gap in its series (a figure the batch did not have).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class Chart:
    id: str
    title: str
    unit: str
    #: (label, point field) per line
    series: tuple[tuple[str, str], ...]
    #: "bytes": the axis shows KB, MB, GB
    scale: str = "number"


CHARTS: tuple[Chart, ...] = (
    Chart("throughput", "Throughput", "per second",
          (("events in", "events_per_second"), ("rows out", "rows_out_per_second"))),
    Chart("batch-duration", "Batch duration", "ms", (("batch", "batch_ms"),)),
    Chart("event-time-lag", "Event-time lag (processing time minus watermark)", "s", (("lag", "lag_seconds"),)),
    Chart("state-size", "State size (Spark's figure)", "bytes", (("state", "state_bytes"),), "bytes"),
    Chart("state-entries", "State entries", "entries", (("entries", "state_rows"),)),
    Chart("checkpoint-duration", "Checkpoint duration", "ms",
          (("total", "duration_ms"), ("state commit", "commit_ms"))),
    Chart("checkpoint-size", "Checkpoint size", "bytes",
          (("delta (written)", "delta_bytes"), ("full (a restore reads)", "full_bytes")), "bytes"),
    Chart("side-outputs", "Dead letters and late events", "events per batch",
          (("dead letters", "dead_letters"), ("late events", "late_events"))),
    Chart("input-waiting", "Input rows waiting", "rows", (("waiting", "waiting"),)),
)


def chart_specs() -> list[dict[str, Any]]:
    """:data:`CHARTS` as JSON for the page's script."""
    return [asdict(c) for c in CHARTS]


def point(record: dict[str, Any]) -> dict[str, Any]:
    """A batch's checkpoint record with ``t`` (its completion, epoch s) and the derived figures:
    events and rows out per second of the batch, and the event-time lag at its end."""
    t = datetime.fromisoformat(str(record["time"]).replace("Z", "+00:00")).timestamp()
    ms, events, out, watermark = (record.get(k) for k in ("batch_ms", "events", "rows_out", "watermark_ms"))
    return {
        **record,
        "t": round(t, 3),
        "events_per_second": round(events * 1000 / ms, 1) if events is not None and ms else None,
        "rows_out_per_second": round(out * 1000 / ms, 1) if out is not None and ms else None,
        "lag_seconds": round(t - watermark / 1000, 3) if watermark is not None else None,
    }
