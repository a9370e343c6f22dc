"""The last phase of a run: the query stopped (between two looks at its progress, never inside
one), the batch that committed meanwhile accounted, and the run's time taken without the stop."""

from __future__ import annotations

import time
from typing import Any

from sparkstate.runtime.run.result import RunResult


def finish(query: Any, result: RunResult, started: float, stop: bool = True) -> None:
    """Stop ``query`` (not when its server is gone: ``stop=False``); the run's time is the
    input's processing time, not the stop's."""
    result.seconds = time.monotonic() - started
    if not stop:
        return
    try:
        query.stop()
    except Exception:
        pass  # stopped already, or its session is gone (a Connect server that died): nothing runs
