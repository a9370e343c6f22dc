"""A Spark query's failure as one readable message: sparkstate's own error where there is one."""

from __future__ import annotations

import re

from sparkstate.errors import JobFailedError
from sparkstate.runtime.checkpoint.directory import CheckpointDir

_ERROR_LINE = re.compile(r"sparkstate\.errors\.(\w+): (.+)")
_ANY_ERROR_LINE = re.compile(r"^([\w.]*(?:Error|Exception|Invalid|Interrupt)): (.+)$")


def batch_input(checkpoint: CheckpointDir, batch: int) -> str | None:
    """What micro-batch ``batch`` read, from the offset log: the files of a file source, the
    offset range of any other; None when Spark logged no offsets for it."""
    end = checkpoint.batch_source_offsets(batch)
    if not end:
        return None
    start = (checkpoint.batch_source_offsets(batch - 1) if batch > 0 else None) or []
    parts = []
    for i, offset in enumerate(end):
        before = start[i] if i < len(start) else None
        if isinstance(offset, dict) and "logOffset" in offset:  # Spark's file source
            after = int(before["logOffset"]) if isinstance(before, dict) and "logOffset" in before else -1
            files = [f.removeprefix("file://") for f in checkpoint.source_files(i, after, int(offset["logOffset"]))]
            if files:
                more = f" and {len(files) - 5} more" if len(files) > 5 else ""
                parts.append(f"file{'s' if len(files) > 1 else ''} {', '.join(files[:5])}{more}")
        elif isinstance(offset, dict) and "mtime" in offset and "files" in offset:  # sparkstate's file source
            count, first, last = int(offset["files"]), offset.get("first"), offset.get("path")
            parts.append(f"file {last}" if count == 1 else f"{count} files, {first} to {last} by (modification time, path)")
        elif isinstance(offset, dict) and "offset" in offset:  # sparkstate's own sources
            first = before.get("offset", 0) if isinstance(before, dict) else 0
            parts.append(f"source offsets {first} to {offset['offset']}")
        elif offset is not None:
            parts.append(f"source offsets {_json(before)} to {_json(offset)}")
    return "; ".join(parts) or None


def _json(value: object) -> str:
    import json

    return "the start" if value is None else json.dumps(value)[:200]


def clean_failure(
    exc: BaseException, checkpoint_dir: str, last_batch: int | None, read: str | None = None
) -> JobFailedError:
    """A short message from a Spark failure: sparkstate's own error if there is one (it names
    the key and the record where it knows them), else the innermost Python error line, else
    the first line of Spark's message; then the failing batch and what it read (``read``,
    from :func:`batch_input`)."""
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
    failing = 0 if last_batch is None else last_batch + 1
    input_ = f" Batch {failing} read {read}." if read else ""
    # a sink that lost its connection in the commit cannot know; its own message says so, and
    # the batch's marker settles it on the next run
    outcome = "Spark did not commit the failing batch" if "is unknown" in summary else "The failing batch committed nothing"
    return JobFailedError(
        f"{summary}\n({outcome}; {committed} in {checkpoint_dir}.{input_} "
        f"Fix the cause and run again to resume: batch {failing} is run again on the same input.)"
    )
