"""The dashboard page: the live page the metrics endpoint serves at ``/``, and the
self-contained page ``sparkstate report`` writes, from one template and one script.

The live page loads its script and uPlot (the charting library, MIT, shipped in
``metrics/static``: no CDN, the machine may be offline) from the endpoint and polls it once a
second; the report inlines both, with the run's data, so the file opens anywhere. The script
(``static/dashboard.js``) reads ``window.SPARKSTATE``: the chart definitions
(``charts.CHARTS``), and in a report the job, its metric values and its chart points.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from sparkstate.metrics.charts import chart_specs

STATIC = Path(__file__).with_name("static")

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>{title}</title>
{styles}
</head>
<body>
<header>
  <h1><span id="job-name">{name}</span> <span id="status" class="status">{status}</span></h1>
  <p id="job-info"></p>
</header>
<section id="stats" class="stats"></section>
<section id="charts" class="charts"></section>
<details id="settings-box"><summary>Settings</summary><table id="settings"></table></details>
<footer>sparkstate {what}; charts by <a href="https://github.com/leeoniya/uPlot">uPlot</a> (MIT).</footer>
<script>window.SPARKSTATE = {config};</script>
{scripts}
</body>
</html>
"""


#: what cannot stand in an inline script: ``<`` and ``>`` (``</script>`` ends it, ``<!--`` then
#: ``<script>`` makes the parser skip its end), ``&``, and U+2028/U+2029 (line ends to older JavaScript)
_SCRIPT_ESCAPES = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026",
                                 "\u2028": "\\u2028", "\u2029": "\\u2029"})


def script_json(value: Any) -> str:
    """``value`` as JSON to inline in an HTML ``<script>``: the characters above as ``\\u``
    escapes, which only JSON strings hold, so the same value reads back whatever text it
    holds (a job name, a path, a setting) and none of it can end or hide the script's end."""
    return json.dumps(value).translate(_SCRIPT_ESCAPES)


def _config(mode: str, **extra: Any) -> str:
    return script_json({"mode": mode, "charts": chart_specs(), **extra})


def live_page(name: str) -> str:
    """The page at the endpoint's ``/``: it fetches everything else from the endpoint."""
    return _PAGE.format(
        title=html.escape(f"{name} - sparkstate"), name=html.escape(name), status="connecting",
        what="dashboard (live: updated every second)",
        styles='<link rel="stylesheet" href="/static/uPlot.min.css">\n<link rel="stylesheet" href="/static/dashboard.css">',
        config=_config("live"),
        scripts='<script src="/static/uPlot.iife.min.js"></script>\n<script src="/static/dashboard.js"></script>',
    )


def report_page(job: dict[str, Any], values: dict[str, Any], points: list[dict[str, Any]]) -> str:
    """One HTML file with everything inlined: the run's ``job`` details (as ``/jobs/<id>``
    gives them), its metric ``values`` (as ``/jobs/<id>/metrics``) and its chart ``points``."""
    styles = "".join(f"<style>\n{(STATIC / n).read_text()}\n</style>\n" for n in ("uPlot.min.css", "dashboard.css"))
    scripts = "".join(f"<script>\n{(STATIC / n).read_text()}\n</script>\n" for n in ("uPlot.iife.min.js", "dashboard.js"))
    return _PAGE.format(
        title=html.escape(f"{job['name']} - sparkstate report"), name=html.escape(str(job["name"])),
        status=html.escape(str(job.get("state", ""))), what="report (the checkpoint's record of the run)",
        styles=styles, config=_config("report", job=job, values=values, points=points), scripts=scripts,
    )
