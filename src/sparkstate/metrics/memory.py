"""Peak resident memory of this process and all its descendants (the JVM and Python workers).

Read from ``/proc`` by a sampling thread, so it works without extra packages; on systems
without ``/proc`` it reports nothing.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def tree_rss_bytes(root: int | None = None) -> int:
    """Resident memory of ``root`` (default: this process) and every process below it."""
    root = root or os.getpid()
    tree = _children()
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE
        except (OSError, ValueError, IndexError):
            pass
        stack.extend(tree.get(pid, ()))
    return total


class PeakMemory:
    """Context manager sampling :func:`tree_rss_bytes` every ``interval`` seconds.

    Example::

        with PeakMemory() as mem:
            job.run(...)
        print(mem.peak_bytes)
    """

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak_bytes = max(self.peak_bytes, tree_rss_bytes())
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakMemory:
        if Path("/proc/self/statm").exists():
            self.peak_bytes = tree_rss_bytes()
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self.peak_bytes = max(self.peak_bytes, tree_rss_bytes())
