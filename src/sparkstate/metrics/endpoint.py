"""A running job's metrics over HTTP: Flink's REST shapes for people and scripts, and
Prometheus's text format for scrapers (``run(metrics_port=8081)``, ``--metrics-port``).

    GET /jobs                          {"jobs": [{"id", "name", "status", "start-time"}]}
    GET /jobs/<id>/metrics             the metric names, [{"id": name}, ...]
    GET /jobs/<id>/metrics?get=a,b     [{"id": "a", "value": "..."}, ...] (values as text, as Flink's);
                                       a name not known is answered {"id": n, "error": ...}
    GET /jobs/<id>/checkpoints         {"counts": {...}, "latest": {...}, "history": [...]}
    GET /jobs/<id>/batches?since=N     the batches after batch N, as the dashboard's chart points
    GET /metrics                       Prometheus text (prometheus_client), label job=<name>
    GET /                              the dashboard: a live page of the run's charts (dashboard.py)

Values are a snapshot the run loop updates once per micro-batch from Spark's progress report
and sparkstate's checkpoint record (:meth:`JobMetrics.on_progress`); a request reads the
snapshot under a lock and never waits for a batch. Requests are served by their own threads,
at most ``MAX_HANDLERS`` at once (a request beyond them is answered 503 at once), and each
must be read and answered within ``REQUEST_SECONDS`` in all, however slowly its client sends,
so no client can hold up the job or, for long, other clients. A client that goes away is
dropped quietly. On a loopback address the endpoint answers only requests that name it so
(``Host: localhost``, ``127.0.0.1`` or ``[::1]``, any port): a web page of another site,
whose name was made to point at 127.0.0.1 (DNS rebinding), gets 403.

The endpoint ends with the run; the run's final status (``FINISHED``, ``CANCELED``,
``FAILED``) and its failed checkpoints are recorded in the checkpoint for ``sparkstate report``
(``runtime/checkpoint/run_record.py``).
"""

from __future__ import annotations

import io
import ipaddress
import json
import socket
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from sparkstate.errors import SparkStateError
from sparkstate.runtime.checkpoint.stats import epoch_ms, rows_out, state_bytes

#: Flink's metric names where Flink has them, then sparkstate's own: name -> (what, unit)
METRICS: dict[str, str] = {
    "numRecordsIn": "events read, all batches",
    "numRecordsInPerSecond": "events per second of the last batch",
    "numRecordsOut": "rows written to the sink, all batches",
    "numRecordsOutPerSecond": "rows written per second of the last batch",
    "lastCheckpointDuration": "ms: the last checkpoint's state commit, offset log and commit log",
    "lastCheckpointSize": "bytes the last checkpoint wrote (its delta)",
    "lastCheckpointFullSize": "bytes a restore of the last checkpoint reads",
    "numberOfCompletedCheckpoints": "checkpoints (batches) committed by this run",
    "numberOfFailedCheckpoints": "batches that failed (a failed batch ends the run)",
    "currentInputWatermark": "the watermark, epoch ms (none before the first)",
    "stateSizeBytes": "Spark's figure of the state's size",
    "stateEntries": "state-store entries",
    "deadLetters": "events sent to the dead_letters side output, all batches",
    "lateEvents": "events sent to the late_data side output, all batches",
    "batchDuration": "ms the last micro-batch took",
    "eventTimeLag": "ms: processing time minus the watermark, at the last batch",
    "batches": "micro-batches run",
    "inputRowsWaiting": "input the source held beyond the last batch (Kafka's records lag; none where unknown)",
}
#: batches whose figures the dashboard can chart (about 1 KB each); older ones are dropped
HISTORY = 10_000
#: checkpoints in ``/jobs/<id>/checkpoints``'s history, as Flink's web.checkpoints.history
CHECKPOINT_HISTORY = 100
#: requests served at once (a thread each); one more is answered 503 without a thread
MAX_HANDLERS = 16
#: seconds a request may take in all, from its connection to the end of the answer
REQUEST_SECONDS = 10.0
#: the names a loopback-bound endpoint answers to in a request's Host header (with any port)
LOCAL_NAMES = ("localhost", "127.0.0.1", "[::1]")


class MetricsPortError(SparkStateError):
    """The metrics endpoint's port cannot be bound."""


class JobMetrics:
    """The figures the endpoint serves for one run, updated per micro-batch (thread-safe)."""

    def __init__(self, name: str, settings: dict[str, Any] | None = None,
                 spark_ui: Callable[[], str | None] | None = None) -> None:
        self.name = name
        #: the Spark UI's address once Spark runs (asked until known)
        self._spark_ui = spark_ui
        self._spark_ui_url: str | None = None
        self.id = uuid.uuid4().hex  # a Flink job id: 32 hex digits
        self.settings = dict(settings or {})
        self.started_ms = int(time.time() * 1000)
        self.status = "RUNNING"
        self._lock = threading.Lock()
        self._values: dict[str, float | int | None] = {n: None for n in METRICS}
        self._values.update(numRecordsIn=0, numRecordsOut=0, numberOfCompletedCheckpoints=0,
                            numberOfFailedCheckpoints=0, deadLetters=0, lateEvents=0, batches=0)
        self._checkpoints: deque[dict[str, Any]] = deque(maxlen=HISTORY)

    def on_progress(self, p: dict[str, Any]) -> None:
        """Take one micro-batch's progress report (the run loop's ``on_progress``)."""
        events = int(p.get("events") or 0)
        ms = int((p.get("durationMs") or {}).get("triggerExecution") or 0)
        out = rows_out(p) or 0
        ops = p.get("stateOperators") or []
        side = p.get("sideOutputs") or {}
        watermark = epoch_ms((p.get("eventTime") or {}).get("watermark"))
        checkpoint = p.get("checkpoint")
        with self._lock:
            v = self._values
            v["numRecordsIn"] = int(v["numRecordsIn"] or 0) + events
            v["numRecordsOut"] = int(v["numRecordsOut"] or 0) + out
            v["numRecordsInPerSecond"] = round(events * 1000 / ms, 3) if ms else 0.0
            v["numRecordsOutPerSecond"] = round(out * 1000 / ms, 3) if ms else 0.0
            v["batchDuration"] = ms
            v["batches"] = int(v["batches"] or 0) + 1
            v["deadLetters"] = int(v["deadLetters"] or 0) + int(side.get("dead_letters") or 0)
            v["lateEvents"] = int(v["lateEvents"] or 0) + int(side.get("late_data") or 0)
            v["inputRowsWaiting"] = p.get("inputWaiting")
            if ops:
                v["stateSizeBytes"] = state_bytes(ops[0])
                v["stateEntries"] = sum(int(op.get("numRowsTotal") or 0) for op in ops)
            if watermark is not None and watermark > 0:  # Spark's 0: no watermark yet
                v["currentInputWatermark"] = watermark
                v["eventTimeLag"] = int(time.time() * 1000) - watermark
            if checkpoint:
                v["numberOfCompletedCheckpoints"] = int(v["numberOfCompletedCheckpoints"] or 0) + 1
                v["lastCheckpointDuration"] = checkpoint.get("duration_ms")
                v["lastCheckpointSize"] = checkpoint.get("delta_bytes")
                v["lastCheckpointFullSize"] = checkpoint.get("full_bytes")
                self._checkpoints.append(dict(checkpoint))

    def finish(self, status: str) -> None:
        """The run ended: ``FINISHED``, ``CANCELED`` (stopped by the user) or ``FAILED``."""
        with self._lock:
            self.status = status
            if status == "FAILED":
                self._values["numberOfFailedCheckpoints"] = int(self._values["numberOfFailedCheckpoints"] or 0) + 1

    def values(self) -> dict[str, float | int | None]:
        with self._lock:
            return dict(self._values)

    def checkpoints(self, last: int | None = None) -> list[dict[str, Any]]:
        """The recorded checkpoints (each batch's record), oldest first; ``last``: only the last ones."""
        with self._lock:
            records = list(self._checkpoints)
        return records[-last:] if last else records

    def batches(self, since: int = -1) -> list[dict[str, Any]]:
        """The chart points (``charts.point``) of the batches after batch ``since``."""
        from sparkstate.metrics.charts import point

        with self._lock:
            records = [c for c in self._checkpoints if c["batch_id"] > since]
        return [point(c) for c in records]

    @property
    def spark_ui(self) -> str | None:
        if self._spark_ui_url is None and self._spark_ui is not None:
            try:
                self._spark_ui_url = self._spark_ui()
            except Exception:  # noqa: BLE001 - Spark stopping or not started: no address yet
                return None
        return self._spark_ui_url

    def job(self) -> dict[str, Any]:
        """The job's details (``/jobs/<id>``)."""
        return {"jid": self.id, "name": self.name, "state": self.status, "start-time": self.started_ms,
                "settings": self.settings, "spark-ui": self.spark_ui}


# --------------------------------------------------------------------------- Prometheus

#: Prometheus names (units in the name, counters end in _total): (name, Flink-side name, kind, scale)
_PROMETHEUS = [
    ("sparkstate_records_in", "numRecordsIn", "counter", 1),
    ("sparkstate_records_out", "numRecordsOut", "counter", 1),
    ("sparkstate_records_in_per_second", "numRecordsInPerSecond", "gauge", 1),
    ("sparkstate_records_out_per_second", "numRecordsOutPerSecond", "gauge", 1),
    ("sparkstate_batches", "batches", "counter", 1),
    ("sparkstate_batch_duration_seconds", "batchDuration", "gauge", 0.001),
    ("sparkstate_checkpoints_completed", "numberOfCompletedCheckpoints", "counter", 1),
    ("sparkstate_checkpoints_failed", "numberOfFailedCheckpoints", "counter", 1),
    ("sparkstate_last_checkpoint_duration_seconds", "lastCheckpointDuration", "gauge", 0.001),
    ("sparkstate_last_checkpoint_size_bytes", "lastCheckpointSize", "gauge", 1),
    ("sparkstate_last_checkpoint_full_size_bytes", "lastCheckpointFullSize", "gauge", 1),
    ("sparkstate_watermark_seconds", "currentInputWatermark", "gauge", 0.001),
    ("sparkstate_event_time_lag_seconds", "eventTimeLag", "gauge", 0.001),
    ("sparkstate_state_size_bytes", "stateSizeBytes", "gauge", 1),
    ("sparkstate_state_entries", "stateEntries", "gauge", 1),
    ("sparkstate_dead_letters", "deadLetters", "counter", 1),
    ("sparkstate_late_events", "lateEvents", "counter", 1),
    ("sparkstate_input_rows_waiting", "inputRowsWaiting", "gauge", 1),
]


class _Collector:
    """prometheus_client's view of one run's :class:`JobMetrics`."""

    def __init__(self, metrics: JobMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        values = self.metrics.values()
        for name, flink, kind, scale in _PROMETHEUS:
            value = values.get(flink)
            if value is None:
                continue
            family = (CounterMetricFamily if kind == "counter" else GaugeMetricFamily)(
                name, f"{METRICS[flink]} ({flink})", labels=["job"])
            family.add_metric([self.metrics.name], float(value) * scale)
            yield family
        up = GaugeMetricFamily("sparkstate_job_running", "1 while the job runs", labels=["job"])
        up.add_metric([self.metrics.name], 1.0 if self.metrics.status == "RUNNING" else 0.0)
        yield up


# --------------------------------------------------------------------------- HTTP


class MetricsServer:
    """Serves one run's :class:`JobMetrics` on ``host:port`` from a thread of its own."""

    def __init__(self, metrics: JobMetrics, port: int, host: str = "127.0.0.1") -> None:
        from prometheus_client import CollectorRegistry

        self.metrics = metrics
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(metrics))  # type: ignore[arg-type]
        #: whether requests must name the endpoint as this machine (see :func:`names_this_machine`)
        self.checks_host = _is_loopback(host)
        self.request_seconds = REQUEST_SECONDS
        try:
            self._server = _Server((host, port), _handler(self), MAX_HANDLERS)
        except OSError as exc:
            raise MetricsPortError(
                f"metrics endpoint: cannot listen on {host}:{port} ({exc.strerror or exc}); choose another port "
                "with --metrics-port (run(metrics_port=...)), or 0 for any free one"
            ) from None
        self.host, self.port = host, int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name="sparkstate-metrics", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread.ident is not None:  # started: else shutdown() would wait for a loop that never ran
            self._server.shutdown()
        self._server.server_close()

    def answer(self, path: str, query: dict[str, list[str]]) -> tuple[int, str, bytes]:
        """``(status, content type, body)`` for a GET of ``path``."""
        m = self.metrics
        if path in ("/", "/index.html"):
            from sparkstate.metrics.dashboard import live_page

            return 200, "text/html; charset=utf-8", live_page(m.name).encode()
        if path.startswith("/static/"):
            return _static(path.removeprefix("/static/"))
        if path == "/metrics":
            from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

            return 200, CONTENT_TYPE_LATEST, generate_latest(self.registry)
        if path in ("/jobs", "/jobs/", "/jobs/overview"):
            job = {"id": m.id, "name": m.name, "status": m.status, "state": m.status, "start-time": m.started_ms}
            return _json(200, {"jobs": [job]})
        parts = [p for p in path.split("/") if p]
        if len(parts) >= 2 and parts[0] == "jobs" and parts[1] not in (m.id, m.name):
            return _json(404, {"errors": [f"no job {parts[1]!r}; this process runs {m.name!r} ({m.id})"]})
        if len(parts) == 2:
            return _json(200, m.job())
        if len(parts) == 3 and parts[2] == "metrics":
            asked = [n for v in query.get("get", []) for n in v.split(",") if n]
            if not asked:
                return _json(200, [{"id": n} for n in METRICS])
            values = m.values()
            known = ", ".join(METRICS)
            return _json(200, [
                {"id": n, "value": _text(values[n])} if n in METRICS else {"id": n, "error": f"unknown metric; known: {known}"}
                for n in asked
            ])
        if len(parts) == 3 and parts[2] == "batches":
            since = (query.get("since") or ["-1"])[0]
            if not since.lstrip("-").isdigit():
                return _json(400, {"errors": [f"since={since!r}: give a batch id, e.g. since=-1 for all"]})
            return _json(200, m.batches(int(since)))
        if len(parts) == 3 and parts[2] == "checkpoints":
            history = m.checkpoints(CHECKPOINT_HISTORY)
            values = m.values()
            return _json(200, {
                "counts": {"completed": values["numberOfCompletedCheckpoints"], "failed": values["numberOfFailedCheckpoints"]},
                "latest": {"completed": history[-1] if history else None},
                "history": list(reversed(history)),
            })
        return _json(404, {"errors": [
            f"not found: {path}; try /, /jobs, /jobs/{m.id}/metrics, /jobs/{m.id}/checkpoints, /metrics"]})


_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}


def _static(name: str) -> tuple[int, str, bytes]:
    """The dashboard's script and style sheets (``metrics/static``), by name only."""
    from sparkstate.metrics.dashboard import STATIC

    kind = _TYPES.get(Path(name).suffix)
    if "/" in name or kind is None or not (STATIC / name).is_file():
        return _json(404, {"errors": [f"not found: /static/{name}"]})
    return 200, kind, (STATIC / name).read_bytes()


def _text(value: Any) -> str | None:
    """A value as Flink's REST API gives it: text."""
    return None if value is None else str(value)


def _json(status: int, body: Any) -> tuple[int, str, bytes]:
    return status, "application/json", json.dumps(body).encode()


def _is_loopback(host: str) -> bool:
    """Whether ``host`` (the address the endpoint listens on) is this machine's loopback."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def names_this_machine(host_header: str | None) -> bool:
    """Whether a request's ``Host`` header names this machine (:data:`LOCAL_NAMES`, with or
    without a port). A browser always sends one; a request without one is not a browser's."""
    if host_header is None:
        return True
    value = host_header.strip().lower()
    if value.startswith("["):  # an IPv6 literal: [::1] or [::1]:port
        end = value.find("]") + 1
        name, port = value[:end], value[end:]
    else:
        name, colon, rest = value.partition(":")
        port = colon + rest
    return name in LOCAL_NAMES and (port == "" or (port[0] == ":" and port[1:].isdigit()))


def _answer_busy(request: socket.socket) -> None:
    """Answer 503 on a connection no handler thread is free for, without waiting on its client."""
    body = json.dumps({"errors": [f"busy: {MAX_HANDLERS} requests are being served; try again in a second"]}).encode()
    head = ("HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    try:
        request.setblocking(False)
        try:  # the request that came with the connection: closing with it unread would reset the answer
            request.recv(65536)
        except OSError:
            pass
        request.settimeout(1.0)  # a small answer: it fits the socket's buffer unless the client is gone
        request.sendall(head + body)
    except OSError:
        pass


class _Server(ThreadingHTTPServer):
    """The endpoint's HTTP server: a thread per request, at most ``max_handlers`` at once, and
    quiet about clients that go away or take too long."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], max_handlers: int) -> None:
        self._slots = threading.BoundedSemaphore(max_handlers)
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            _answer_busy(request)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)  # starts the request's thread
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return  # the client went away, or took too long: nothing to report
        super().handle_error(request, client_address)


class _ReadBy(io.RawIOBase):
    """A socket's input that ends at a deadline: each read waits only for the time left, so a
    client sending a byte at a time cannot stretch a request past it."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock, self.deadline = sock, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request was not read in time")
        self.sock.settimeout(left)
        return self.sock.recv_into(buffer)


def _handler(server: MetricsServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        timeout = server.request_seconds  # the deadline below bounds the whole request, not each read

        def setup(self) -> None:
            super().setup()
            self.deadline = time.monotonic() + server.request_seconds
            self.rfile = io.BufferedReader(_ReadBy(self.connection, self.deadline))

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            url = urlparse(self.path)
            if server.checks_host and not names_this_machine(self.headers.get("Host")):
                status, kind, body = _json(403, {"errors": [
                    f"Host {str(self.headers.get('Host'))[:100]!r}: this endpoint listens on {server.host} and answers requests "
                    f"for localhost, 127.0.0.1 or [::1] only (a page of another site must not read it); use "
                    f"http://localhost:{server.port}/, or --metrics-host to listen on another address"]})
            else:
                try:
                    status, kind, body = server.answer(url.path, parse_qs(url.query))
                except Exception as exc:  # noqa: BLE001 - a request never takes the job down
                    status, kind, body = _json(500, {"errors": [f"{type(exc).__name__}: {exc}"]})
            # the answer too within the deadline: a client that does not read it is dropped
            self.connection.settimeout(max(self.deadline - time.monotonic(), 0.001))
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # requests are not the job's output
            pass

    return Handler
