"""A small TCP server for the socket source's tests: it sends the lines queued with ``send``
to whichever client is connected, as ``nc -lk PORT`` sends what is typed into it."""

from __future__ import annotations

import queue
import select
import socket
import socketserver
import threading
import time


class LineServer:
    """Serves queued lines on a free port of 127.0.0.1; lines queued while no client is
    connected wait for the next one. Use as a context manager."""

    def __init__(self) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        #: connections accepted so far, and connected now
        self.connections = 0
        self.connected = 0
        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                outer.connections += 1
                outer.connected += 1
                try:
                    while not outer.stopped.is_set() and not outer.hang_up.is_set() and not self._closed():
                        try:
                            line = outer.lines.get(timeout=0.05)
                        except queue.Empty:
                            continue
                        try:
                            self.request.sendall((line + "\n").encode("utf-8"))
                        except OSError:  # the client went away: as with nc, the line is lost
                            return
                finally:
                    outer.connected -= 1

            def _closed(self) -> bool:
                readable, _, _ = select.select([self.request], [], [], 0)
                return bool(readable) and not self.request.recv(1, socket.MSG_PEEK)

        self.stopped = threading.Event()
        #: set: every connection is closed by the server (as when nc is stopped and started again)
        self.hang_up = threading.Event()
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port: int = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def send(self, *lines: str) -> None:
        for line in lines:
            self.lines.put(line)

    def wait_connected(self, n: int, timeout: float = 10.0) -> None:
        """Wait until ``n`` clients are connected (0: the last one has gone)."""
        deadline = time.monotonic() + timeout
        while self.connected != n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.connected} clients connected, not {n}")
            time.sleep(0.02)

    def __enter__(self) -> LineServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.server.shutdown()
        self.server.server_close()

