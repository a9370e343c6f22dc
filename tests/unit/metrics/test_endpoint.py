"""The metrics endpoint on synthetic progress reports: Flink's REST shapes, Prometheus's text
(read back with prometheus_client's own parser), and what a client does wrong."""

from __future__ import annotations

import json
import re
import socket
import socketserver
import threading
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sparkstate.metrics.endpoint import METRICS, JobMetrics, MetricsPortError, MetricsServer


def progress(batch: int, events: int, *, ms: int = 500, dead: int = 0, late: int = 0, watermark: str | None = None) -> dict:
    p = {
        "batchId": batch, "events": events, "durationMs": {"triggerExecution": ms, "addBatch": ms - 100},
        "sink": {"numOutputRows": events}, "stateOperators": [{"numRowsTotal": 10 * (batch + 1),
                                                              "customMetrics": {"rocksdbSstFileSize": 4096}}],
        "eventTime": {"watermark": watermark} if watermark else {},
        "checkpoint": {"batch_id": batch, "time": "2026-11-24T00:00:00Z", "duration_ms": 40 + batch,
                       "delta_bytes": 1000 + batch, "full_bytes": 5000 + batch},
    }
    if dead or late:
        p["sideOutputs"] = {"dead_letters": dead, "late_data": late}
    return p


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.fixture
def served():
    metrics = JobMetrics("w1", {"key_groups": 128})
    server = MetricsServer(metrics, 0).start()
    yield metrics, server
    server.stop()


def test_flink_shaped_rest_follows_the_batches(served) -> None:
    metrics, server = served
    status, body = get(f"{server.url}/jobs")
    jobs = json.loads(body)["jobs"]
    assert status == 200 and jobs[0]["name"] == "w1" and jobs[0]["status"] == "RUNNING" and len(jobs[0]["id"]) == 32
    metrics.on_progress(progress(0, 1000, dead=2, watermark="2026-11-24T10:00:00.000Z"))
    metrics.on_progress(progress(1, 3000, ms=1000, late=5, watermark="2026-11-24T10:00:05.000Z"))
    names = "numRecordsIn,numRecordsInPerSecond,lastCheckpointDuration,lastCheckpointSize,lastCheckpointFullSize," \
            "numberOfCompletedCheckpoints,currentInputWatermark,stateEntries,deadLetters,lateEvents,noSuchMetric"
    status, body = get(f"{server.url}/jobs/{metrics.id}/metrics?get={names}")
    got = {m["id"]: m.get("value", m.get("error")) for m in json.loads(body)}
    assert got["numRecordsIn"] == "4000" and got["numRecordsInPerSecond"] == "3000.0"
    assert got["lastCheckpointDuration"] == "41" and got["lastCheckpointSize"] == "1001"
    assert got["lastCheckpointFullSize"] == "5001"
    assert got["numberOfCompletedCheckpoints"] == "2" and got["stateEntries"] == "20"
    assert got["currentInputWatermark"] == "1795514405000" and got["deadLetters"] == "2" and got["lateEvents"] == "5"
    assert got["noSuchMetric"].startswith("unknown metric; known: numRecordsIn")
    # by name too, and the list of names without ?get
    assert json.loads(get(f"{server.url}/jobs/w1/metrics")[1]) == [{"id": n} for n in METRICS]
    checkpoints = json.loads(get(f"{server.url}/jobs/{metrics.id}/checkpoints")[1])
    assert checkpoints["counts"] == {"completed": 2, "failed": 0}
    assert [c["batch_id"] for c in checkpoints["history"]] == [1, 0] and checkpoints["latest"]["completed"]["batch_id"] == 1
    status, body = get(f"{server.url}/jobs/other-job/metrics")
    assert status == 404 and "this process runs 'w1'" in body.decode()


def test_prometheus_text_parses_with_units_and_totals(served) -> None:
    metrics, server = served
    metrics.on_progress(progress(0, 1000, dead=3, watermark="2026-11-24T10:00:00.000Z"))
    status, body = get(f"{server.url}/metrics")
    assert status == 200
    samples = {s.name: s for f in text_string_to_metric_families(body.decode()) for s in f.samples}
    assert samples["sparkstate_records_in_total"].value == 1000 and samples["sparkstate_records_in_total"].labels == {"job": "w1"}
    assert samples["sparkstate_dead_letters_total"].value == 3
    assert samples["sparkstate_last_checkpoint_duration_seconds"].value == pytest.approx(0.040)
    assert samples["sparkstate_watermark_seconds"].value == pytest.approx(1795514400.0)
    assert samples["sparkstate_job_running"].value == 1
    metrics.finish("FINISHED")
    assert "sparkstate_job_running{job=\"w1\"} 0.0" in get(f"{server.url}/metrics")[1].decode()


def test_a_port_in_use_is_named_with_the_option(served) -> None:
    _, server = served
    with pytest.raises(MetricsPortError, match=rf"cannot listen on 127.0.0.1:{server.port} .*--metrics-port"):
        MetricsServer(JobMetrics("x"), server.port)


def test_a_hung_client_holds_up_no_one(served) -> None:
    metrics, server = served
    hung = socket.create_connection((server.host, server.port))  # connects, never sends a request
    try:
        started = time.monotonic()
        metrics.on_progress(progress(0, 10))  # the batch path does not wait for it either
        status, _ = get(f"{server.url}/jobs/{metrics.id}/metrics?get=numRecordsIn")
        assert status == 200 and time.monotonic() - started < 2
    finally:
        hung.close()


def test_the_dashboard_page_and_its_files_come_from_the_endpoint(served) -> None:
    metrics, server = served
    status, body = get(f"{server.url}/")
    page = body.decode()
    assert status == 200 and "<title>w1 - sparkstate</title>" in page
    # everything the page loads is the endpoint's own: no CDN (the machine may be offline)
    loaded = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert loaded and all(u.startswith(("/static/", "data:", "https://github.com/leeoniya/uPlot")) for u in loaded)
    for name in ("uPlot.iife.min.js", "uPlot.min.css", "dashboard.js", "dashboard.css"):
        assert f"/static/{name}" in page
        status, body = get(f"{server.url}/static/{name}")
        assert status == 200 and len(body) > 500
    for bad in ("/static/../endpoint.py", "/static/nothing.js", "/static/uPlot.LICENSE", "/static/%2e%2e/charts.py"):
        assert get(server.url + bad)[0] == 404


def test_the_batches_route_gives_chart_points_after_a_batch(served) -> None:
    metrics, server = served
    for b in range(3):
        p = progress(b, 1000 * (b + 1), ms=500)
        p["checkpoint"].update(events=1000 * (b + 1), batch_ms=500, rows_out=10, watermark_ms=None, waiting=30 - 10 * b)
        p["inputWaiting"] = 30 - 10 * b
        metrics.on_progress(p)
    status, body = get(f"{server.url}/jobs/w1/batches?since=0")
    points = json.loads(body)
    assert status == 200 and [p["batch_id"] for p in points] == [1, 2]
    assert points[1]["events_per_second"] == 6000.0 and points[1]["rows_out_per_second"] == 20.0
    assert points[1]["lag_seconds"] is None and points[1]["waiting"] == 10
    assert json.loads(get(f"{server.url}/jobs/w1/batches")[1])[0]["batch_id"] == 0  # all of them
    assert get(f"{server.url}/jobs/w1/batches?since=x")[0] == 400
    values = {m["id"]: m["value"] for m in json.loads(get(f"{server.url}/jobs/w1/metrics?get=inputRowsWaiting")[1])}
    assert values == {"inputRowsWaiting": "10"}
    prom = get(f"{server.url}/metrics")[1].decode()
    assert 'sparkstate_input_rows_waiting{job="w1"} 10.0' in prom


def test_the_spark_ui_link_is_asked_for_until_spark_has_one() -> None:
    answers = iter([None, RuntimeError("stopping"), "http://host:4040"])

    def ui() -> str | None:
        a = next(answers)
        if isinstance(a, Exception):
            raise a
        return a

    metrics = JobMetrics("w1", spark_ui=ui)
    assert metrics.job()["spark-ui"] is None and metrics.spark_ui is None
    assert metrics.job()["spark-ui"] == "http://host:4040" and metrics.spark_ui == "http://host:4040"  # kept


def test_requests_while_the_job_stops_are_answered_or_refused() -> None:
    metrics = JobMetrics("w1")
    server = MetricsServer(metrics, 0).start()
    outcomes: list[object] = []
    done = threading.Event()

    def client() -> None:
        while not done.is_set():
            try:
                outcomes.append(get(f"{server.url}/jobs/w1/batches?since=-1")[0])
            except OSError as exc:  # the server has closed: refused, or reset mid-request
                outcomes.append(type(exc).__name__)
                return

    threads = [threading.Thread(target=client) for _ in range(4)]
    for t in threads:
        t.start()
    for b in range(20):
        metrics.on_progress(progress(b, 10))
    metrics.finish("CANCELED")
    started = time.monotonic()
    server.stop()
    assert time.monotonic() - started < 5
    done.set()
    for t in threads:
        t.join(10)
    assert outcomes and set(outcomes) <= {200, "URLError", "ConnectionResetError", "ConnectionRefusedError",
                                          "RemoteDisconnected"}


def _closed_by_server(sock: socket.socket) -> bool:
    """Whether the server has closed (or reset) the connection, without waiting."""
    import select

    if not select.select([sock], [], [], 0)[0]:
        return False
    try:
        return sock.recv(4096) == b""
    except ConnectionError:
        return True


def test_a_slow_client_is_dropped_at_the_request_deadline(monkeypatch) -> None:
    """A client sending its request a byte at a time, each well within any per-read timeout,
    is dropped once the request's time is up; the endpoint goes on answering others."""
    from sparkstate.metrics import endpoint

    monkeypatch.setattr(endpoint, "REQUEST_SECONDS", 1.0, raising=False)
    server = MetricsServer(JobMetrics("w1"), 0).start()
    slow = socket.create_connection((server.host, server.port))
    try:
        started = time.monotonic()
        request = b"GET /jobs HTTP/1.0\r\nX-Slow: " + b"a" * 1000
        dropped = None
        for byte in request:
            try:
                slow.sendall(bytes([byte]))
            except ConnectionError:
                dropped = time.monotonic() - started
                break
            if _closed_by_server(slow):
                dropped = time.monotonic() - started
                break
            if time.monotonic() - started > 4:
                break
            time.sleep(0.1)
        assert dropped is not None and 0.8 < dropped < 2.5, f"still connected after {time.monotonic() - started:.1f} s"
        assert get(f"{server.url}/jobs")[0] == 200
    finally:
        slow.close()
        server.stop()


def test_handler_threads_are_capped_and_a_request_beyond_them_is_answered_503(monkeypatch) -> None:
    from sparkstate.metrics import endpoint

    monkeypatch.setattr(endpoint, "MAX_HANDLERS", 2, raising=False)
    monkeypatch.setattr(endpoint, "REQUEST_SECONDS", 2.0, raising=False)
    threads = []  # the requests given a thread of their own (what ThreadingMixIn does per request)
    start_thread = socketserver.ThreadingMixIn.process_request
    monkeypatch.setattr(socketserver.ThreadingMixIn, "process_request",
                        lambda self, *a: (threads.append(a[1]), start_thread(self, *a)))
    server = MetricsServer(JobMetrics("w1"), 0).start()
    silent = [socket.create_connection((server.host, server.port)) for _ in range(2)]  # each holds a handler
    try:
        deadline = time.monotonic() + 2
        while len(threads) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        started = time.monotonic()
        for _ in range(5):
            status, body = get(f"{server.url}/jobs")
            assert status == 503 and b"busy" in body
        assert time.monotonic() - started < 2
        assert len(threads) == 2  # no thread per refused request
        time.sleep(2.5)  # the silent ones reach their deadline and free their handlers
        assert get(f"{server.url}/jobs")[0] == 200
    finally:
        for s in silent:
            s.close()
        server.stop()


def test_a_loopback_endpoint_answers_only_requests_naming_this_machine(served) -> None:
    """DNS rebinding: a page of evil.example, its name pointed at 127.0.0.1, sends Host: evil.example."""
    import http.client

    metrics, server = served

    def status(host: str | None) -> int:
        conn = http.client.HTTPConnection(server.host, server.port, timeout=5)
        try:
            if host is None:
                conn.putrequest("GET", "/jobs", skip_host=True)
                conn.endheaders()
            else:
                conn.request("GET", "/jobs", headers={"Host": host})
            response = conn.getresponse()
            response.read()
            return response.status
        finally:
            conn.close()

    for good in ("localhost", f"localhost:{server.port}", "127.0.0.1", f"127.0.0.1:{server.port}", "[::1]",
                 f"[::1]:{server.port}", "LOCALHOST:80", None):
        assert status(good) == 200, good
    for bad in ("evil.example", f"evil.example:{server.port}", "localhost.evil.example", "127.0.0.1.nip.io",
                "localhost:80@evil", "[::1]evil", "", "10.0.0.1"):
        assert status(bad) == 403, bad
    conn = http.client.HTTPConnection(server.host, server.port, timeout=5)
    conn.request("GET", "/metrics", headers={"Host": "evil.example"})
    body = conn.getresponse().read().decode()
    conn.close()
    assert "http://localhost:" in body and "--metrics-host" in body and "sparkstate_records" not in body


def test_only_a_loopback_endpoint_checks_host() -> None:
    from sparkstate.metrics.endpoint import names_this_machine

    assert names_this_machine("localhost:8081") and not names_this_machine("example.org")
    for host, checks in (("127.0.0.1", True), ("localhost", True), ("0.0.0.0", False)):
        server = MetricsServer(JobMetrics("w1"), 0, host)
        try:
            assert server.checks_host is checks, host
        finally:
            server.stop()


def test_clients_that_go_away_leave_no_traceback(served, capfd) -> None:
    """Clients that reset the connection before or while the answer (the dashboard's 50 KB
    chart library) is written: the endpoint drops them quietly and goes on."""
    import struct

    metrics, server = served
    for _ in range(20):
        c = socket.create_connection((server.host, server.port))
        c.sendall(b"GET /static/uPlot.iife.min.js HTTP/1.0\r\nHost: localhost\r\n\r\n")
        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with a reset
        c.close()
    time.sleep(0.5)
    assert get(f"{server.url}/jobs")[0] == 200
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Error" not in err
