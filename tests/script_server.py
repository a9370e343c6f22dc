"""A local server for the tests that a script in ``scripts/`` runs (``start DIR`` prints its
address, ``stop DIR`` stops it), with its data in a temporary folder of its own."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


class ScriptServer:
    """One server of ``script`` in its own temporary folder (under /tmp)."""

    script = ""
    #: seconds a script call may take (a first start may install the server)
    timeout = 120

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix=f"sparkstate-{Path(self.script).stem}-")
        self.address: str | None = None

    def _run(self, *args: str) -> str:
        done = subprocess.run(
            ["bash", str(SCRIPTS / self.script), *args], capture_output=True, text=True, timeout=self.timeout
        )
        if done.returncode != 0:
            raise RuntimeError(f"scripts/{self.script} {' '.join(args)} failed:\n{done.stderr.strip() or done.stdout.strip()}")
        return done.stdout.strip()

    def start(self) -> str:
        """Start (or restart, on the same port and data) and return the server's address."""
        self.address = self._run("start", self.dir).splitlines()[-1]
        return self.address

    def stop(self) -> None:
        self._run("stop", self.dir)

    def remove(self) -> None:
        try:
            self.stop()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
