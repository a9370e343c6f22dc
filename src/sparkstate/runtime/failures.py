"""A Spark query's failure as one readable message: sparkstate's own error where there is one."""

from __future__ import annotations

import re

from sparkstate.errors import JobFailedError

_ERROR_LINE = re.compile(r"sparkstate\.errors\.(\w+): (.+)")
_ANY_ERROR_LINE = re.compile(r"^([\w.]*(?:Error|Exception|Invalid|Interrupt)): (.+)$")


def clean_failure(exc: BaseException, checkpoint_dir: str, last_batch: int | None) -> JobFailedError:
    """A short message from a Spark failure: sparkstate's own error if there is one, else the
    innermost Python error line, else the first line of Spark's message."""
    text = str(getattr(exc, "desc", None) or exc)
    matches = _ERROR_LINE.findall(text)
    if matches:
        kind, message = matches[-1]
        summary = f"{kind}: {message.strip()}"
    else:
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        errors = [
            ln for ln in lines
            if _ANY_ERROR_LINE.match(ln) and not ln.startswith(("pyspark.errors", "py4j", "org.apache", "java."))
        ]
        summary = (errors[-1] if errors else (lines[0] if lines else type(exc).__name__))[:2000]
    committed = "no batch was committed" if last_batch is None else f"batches up to {last_batch} are committed"
    return JobFailedError(
        f"{summary}\n(The failing batch committed nothing; {committed} in {checkpoint_dir}. "
        "Fix the cause and run again to resume.)"
    )
