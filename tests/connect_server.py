"""A Spark Connect server for the tests (``scripts/connect.sh``), on a port of its own."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ConnectServer:
    """A Connect server started by ``scripts/connect.sh`` in ``folder``, on ``port``."""

    def __init__(self, folder: Path, port: int) -> None:
        self.folder, self.port = folder, port
        self.url = f"sc://127.0.0.1:{port}"

    def _script(self, action: str) -> subprocess.CompletedProcess:
        env = {**os.environ, "SPARKSTATE_CONNECT_PORT": str(self.port)}
        return subprocess.run(["bash", "scripts/connect.sh", action, str(self.folder)], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=240)

    def start(self) -> None:
        done = self._script("start")
        if done.returncode != 0:
            log = (self.folder / "server.log").read_text()[-3000:] if (self.folder / "server.log").exists() else ""
            raise RuntimeError(f"{done.stdout}{done.stderr}\n{log}")

    def stop(self) -> None:
        self._script("stop")

    def kill(self) -> None:
        """SIGKILL the server (its JVM and, with it, the query's Python workers)."""
        pid = int((self.folder / "server.pid").read_text())
        subprocess.run(["pkill", "-9", "-P", str(pid)], check=False)
        os.kill(pid, 9)
