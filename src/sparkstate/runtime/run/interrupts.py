"""Ctrl-C during a run: stop the query between two looks at its progress, not inside py4j."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def ctrl_c_stops() -> Iterator[threading.Event]:
    """Ctrl-C (SIGINT) while the query runs sets the event, and the run stops the query
    between two looks at its progress; a second Ctrl-C interrupts at once.

    PySpark's own SIGINT handler cancels Spark's jobs through py4j and raises
    KeyboardInterrupt wherever the driver is; inside another py4j call that surfaces as a
    Py4JError ("Gateway must be connected to send cancel cmd") instead, and the run ended
    with a traceback rather than its summary.
    """
    pressed = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield pressed  # signals reach the main thread only
        return

    def handler(signum: int, frame: Any) -> None:
        if pressed.is_set():
            raise KeyboardInterrupt
        pressed.set()

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield pressed
    finally:
        signal.signal(signal.SIGINT, previous)
