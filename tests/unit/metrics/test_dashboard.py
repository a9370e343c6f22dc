"""The dashboard's data and pages without Spark: a batch's figures from a progress report, the
chart points derived from them, the input a source still holds, and the report's page and values."""

from __future__ import annotations

import json
import re
from pathlib import Path

from sparkstate import ListSource, UpiPayments
from sparkstate.metrics.charts import CHARTS, chart_specs, point
from sparkstate.metrics.dashboard import live_page, report_page
from sparkstate.metrics.report import values
from sparkstate.runtime.checkpoint.stats import CheckpointStats, batch_figures
from sparkstate.runtime.io.sources import input_waiting

REPORTS = json.loads((Path(__file__).parents[1] / "runtime" / "data" / "progress_reports.json").read_text())


def test_a_batch_s_figures_come_from_its_progress_report() -> None:
    p = {**REPORTS["rocksdb"], "events": 10_000, "sideOutputs": {"dead_letters": 3, "late_data": 2}, "inputWaiting": 7,
         "eventTime": {"watermark": "2026-11-24T10:00:00.000Z"}}
    assert batch_figures(p) == {"events": 10_000, "batch_ms": 2381, "rows_out": 10_000, "watermark_ms": 1795514400000,
                                "dead_letters": 3, "late_events": 2, "waiting": 7}
    # before the first watermark (1970) and at the end of input (2262) there is no lag to chart
    for mark in ("1970-01-01T00:00:00.000Z", "2262-04-11T23:47:16.854Z"):
        assert batch_figures({**p, "eventTime": {"watermark": mark}})["watermark_ms"] is None
    # a sink that does not count its rows (-1) has none; a report without the run loop's figures neither
    bare = batch_figures({"durationMs": {}, "sink": {"numOutputRows": -1}})
    assert bare == {"events": None, "batch_ms": None, "rows_out": None, "watermark_ms": None, "dead_letters": 0,
                    "late_events": 0, "waiting": None}
    # and they round-trip through the checkpoint log's records
    record = CheckpointStats(1, "2026-11-24T10:00:02.000Z", **batch_figures(p))
    assert CheckpointStats.from_dict(json.loads(record.to_json())) == record


def test_points_derive_rates_and_lag_and_keep_gaps() -> None:
    pt = point({"batch_id": 4, "time": "2026-11-24T10:00:10.000Z", "events": 5000, "batch_ms": 2000, "rows_out": 100,
                "watermark_ms": 1795514400000})
    assert pt["t"] == 1795514410.0 and pt["events_per_second"] == 2500.0 and pt["rows_out_per_second"] == 50.0
    assert pt["lag_seconds"] == 10.0
    gap = point({"batch_id": 5, "time": "2026-11-24T10:00:12.000Z", "events": 5000, "batch_ms": 0})
    assert gap["events_per_second"] is None and gap["rows_out_per_second"] is None and gap["lag_seconds"] is None
    # every chart's series is a field a point has
    fields = set(point(CheckpointStats(0, "2026-11-24T10:00:00Z").__dict__))
    assert {f for c in CHARTS for _, f in c.series} <= fields
    assert [c["id"] for c in chart_specs()] == [c.id for c in CHARTS]


def test_input_waiting_where_the_source_can_tell() -> None:
    def report(end: str) -> dict:
        return {"sources": [{"endOffset": end}]}

    assert input_waiting(UpiPayments(events=50_000, max_batch=10_000), report('{"offset": 20000}')) == 30_000
    # the end-of-input marker's offset (events + 1) leaves nothing
    assert input_waiting(UpiPayments(events=50_000), report('{"offset": 50001}')) == 0
    assert input_waiting(UpiPayments(events=None), report('{"offset": 20000}')) is None  # unbounded
    assert input_waiting(UpiPayments(events=50_000, rate=1000), report('{"offset": 20000}')) is None  # not arrived yet
    assert input_waiting(ListSource([[{"a": 1}], [{"a": 2}, {"a": 3}]], "a INT"), report('{"offset": 1}')) == 2
    kafka = json.dumps({"topics": {"t": {"0": 5}}, "now": 1, "waiting": 1234})
    assert input_waiting(None, report(kafka)) == 1234
    assert input_waiting(None, report(json.dumps({"topics": {"t": {"0": 5}}}))) is None  # logged before it counted
    assert input_waiting(UpiPayments(events=10), {"sources": []}) is None


def test_the_report_page_holds_everything_it_shows() -> None:
    points = [point({"batch_id": b, "time": f"2026-11-24T10:00:0{b}.000Z", "events": 100, "batch_ms": 500,
                     "rows_out": None, "dead_letters": b, "late_events": 0, "duration_ms": 20 + b, "delta_bytes": 10,
                     "full_bytes": 100 * (b + 1), "state_bytes": 1000, "state_rows": 5, "waiting": 300 - 100 * b})
              for b in range(3)]
    v = values(points)
    assert v["numRecordsIn"] == 300 and v["numRecordsOut"] is None and v["batches"] == 3
    assert v["deadLetters"] == 3 and v["lastCheckpointDuration"] == 22 and v["lastCheckpointFullSize"] == 300
    assert v["inputRowsWaiting"] == 100 and v["currentInputWatermark"] is None
    job = {"jid": None, "name": "w1 </script><b>", "state": "REPORT", "start-time": None, "settings": {}}
    page = report_page(job, v, points)
    # self-contained: no file or address to load, and a name cannot end the inline script
    assert not re.search(r'<(script|link)[^>]+(src|href)="(?!data:)', page)
    assert "w1 &lt;/script&gt;&lt;b&gt;" in page and "w1 \\u003c/script\\u003e" in page
    config = json.loads(re.search(r"window\.SPARKSTATE = (.*?);</script>", page).group(1))
    assert config["mode"] == "report" and len(config["points"]) == 3 and config["values"]["numRecordsIn"] == 300
    assert 'src="/static/dashboard.js"' in live_page("w1")


def _inline_config(page: str) -> tuple[str, dict]:
    """The inline script that sets ``window.SPARKSTATE``, as an HTML parser splits the page,
    and the value it sets."""
    from html.parser import HTMLParser

    scripts: list[str] = []

    class Scripts(HTMLParser):
        def handle_data(self, data: str) -> None:
            if self.lasttag == "script" and data.startswith("window.SPARKSTATE = "):
                scripts.append(data)

    Scripts().feed(page)
    assert len(scripts) == 1
    body = scripts[0]
    assert body.startswith("window.SPARKSTATE = ") and body.endswith(";")
    return body, json.loads(body.removeprefix("window.SPARKSTATE = ").removesuffix(";"))


def test_any_text_in_the_report_s_data_stays_data() -> None:
    """``<!--<script>`` in a string would put the HTML parser in the state where ``</script>``
    no longer ends the script (the page then ran nothing: blank); ``</script>`` would end it
    early. Every string of the inlined JSON reads back as it was, and the script holds neither."""
    nasty = "a <!--<script> b </script> c <!-- d --> e & f \u2028 g \u2029 h </SCRIPT> <\\/"
    job = {"jid": None, "name": f"w1 {nasty}", "state": "REPORT", "start-time": None,
           "settings": {"sink": f"parquet:/tmp/{nasty}", nasty: nasty}}
    page = report_page(job, {"numRecordsIn": 1}, [])
    body, config = _inline_config(page)
    assert config["job"] == job  # the same value, every string whole
    lowered = body.lower()
    assert "<!--" not in lowered and "<script" not in lowered and "</" not in lowered and "-->" not in lowered
    assert "\u2028" not in body and "\u2029" not in body
    # one helper: a live page's data goes through it too, and it is plain JSON
    from sparkstate.metrics.dashboard import script_json

    assert json.loads(script_json([nasty])) == [nasty] and "<" not in script_json([nasty])
    assert _inline_config(live_page(nasty))[1]["mode"] == "live"
