"""The dashboard in a real browser: Debian's headless Chromium (scripts/chromium.sh), driven
by Playwright, loads the page a running job serves, waits for its charts to draw, and checks
what it shows against the endpoint's figures and the run's result, with no error on the page."""

from __future__ import annotations

import os
import re
import shutil

import pytest

from sparkstate import Job, NoopSink, UpiPayments
from sparkstate.jobs.running_sum import OUTPUT, RunningSum
from sparkstate.metrics.charts import CHARTS

pytestmark = pytest.mark.spark

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# no network here: without these, Chromium's own connections (updates, sync) fail at every start
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]


@pytest.fixture(scope="module")
def browser():
    if not os.path.exists(CHROMIUM):
        if os.environ.get("CI"):
            pytest.fail("chromium is missing: bash scripts/chromium.sh install")
        pytest.skip("chromium is missing: bash scripts/chromium.sh install")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield browser
        browser.close()


def test_the_dashboard_draws_a_running_job(spark, tmp_path, browser) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 1200})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    notices: list[str] = []
    seen: dict = {}

    def during(p: dict) -> None:  # the job waits here, after its third batch, while the page is read
        if p["batchId"] != 2:
            return
        base = re.search(r"dashboard: (http://\S+)/ ", notices[0]).group(1)
        page.goto(base + "/")
        page.wait_for_function("Number(document.getElementById('chart-throughput').dataset.points) >= 3", timeout=30_000)
        seen.update(
            status=page.inner_text("#status"),
            name=page.inner_text("#job-name"),
            stats={n: page.inner_text(f"#stat-{n}") for n in (
                "numRecordsIn", "batches", "numberOfCompletedCheckpoints", "inputRowsWaiting", "deadLetters",
                "stateEntries")},
            points={c.id: page.get_attribute(f"#chart-{c.id}", "data-points") for c in CHARTS},
            canvases=page.locator("#charts canvas").count(),
            settings=page.text_content("#settings"),  # folded away: in the DOM, not shown
            errors=list(errors),
        )
        page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)

    job = (
        Job("dashboard-w1").source(UpiPayments(events=50_000, merchants=500, max_batch=10_000)).key_by("merchant_id")
        .process(RunningSum(), output_schema=OUTPUT).sink(NoopSink())
    )
    result = job.run(checkpoint_dir=tmp_path / "ckpt", spark=spark, metrics_port=0, on_notice=notices.append,
                     on_progress=during)
    assert result.events == 50_000 and seen, "the page was read during the run"
    assert seen["errors"] == []
    assert seen["status"] == "RUNNING" and seen["name"] == "dashboard-w1"
    # the figures after the third batch, as the endpoint had them
    assert seen["stats"]["numRecordsIn"] == "30,000" and seen["stats"]["batches"] == "3"
    assert seen["stats"]["numberOfCompletedCheckpoints"] == "3"
    assert seen["stats"]["inputRowsWaiting"] == "20,000" and seen["stats"]["deadLetters"] == "0"
    assert seen["stats"]["stateEntries"] != "-"
    assert seen["points"] == {c.id: "3" for c in CHARTS}  # every chart drew the three batches
    assert seen["canvases"] >= len(CHARTS)
    assert "rocksdb" in seen["settings"] and "key_groups" in seen["settings"]
    assert (tmp_path / "dashboard.png").stat().st_size > 10_000
    # the run is over and its endpoint closed: the page says so and keeps the last figures
    page.wait_for_function("document.getElementById('status').textContent === 'unreachable'", timeout=30_000)
    assert page.inner_text("#stat-numRecordsIn") in ("30,000", "40,000", "50,000")
    page.close()


def test_a_report_renders_whatever_its_job_name_holds(tmp_path, browser) -> None:
    """A job name with ``<!--<script>`` once left the report blank (the browser's parser then
    skipped the inline script's end, and ran nothing); ``</script>`` would end it early. The
    page draws its charts and shows the name and settings as they are."""
    from sparkstate.metrics.charts import point
    from sparkstate.metrics.dashboard import report_page
    from sparkstate.metrics.report import values

    name = "w1 <!--<script> </script> & \u2028"  # no "-->": that would end the comment state
    points = [point({"batch_id": b, "time": f"2026-11-24T10:00:0{b}.000Z", "events": 100, "batch_ms": 500,
                     "rows_out": 10, "duration_ms": 20, "delta_bytes": 10, "full_bytes": 100, "state_bytes": 1000,
                     "state_rows": 5}) for b in range(3)]
    job = {"jid": None, "name": name, "state": "FINISHED", "start-time": points[0]["t"] * 1000,
           "settings": {"sink": f"parquet:/tmp/{name}"}}
    html = tmp_path / "report.html"
    html.write_text(report_page(job, values(points), points), encoding="utf-8")
    page = browser.new_page(viewport={"width": 1280, "height": 1200})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(html.as_uri())
    page.wait_for_function("Number(document.getElementById('chart-throughput')?.dataset.points) === 3", timeout=10_000)
    assert page.evaluate("window.SPARKSTATE.job.name") == name
    assert page.evaluate("document.getElementById('job-name').textContent") == name
    assert page.inner_text("#stat-numRecordsIn") == "300" and page.inner_text("#status") == "FINISHED"
    assert name in page.text_content("#settings")
    assert errors == []
    page.close()
