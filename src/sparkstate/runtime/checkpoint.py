"""What sparkstate keeps in a checkpoint directory beside Spark's own files.

``sparkstate.json`` records the job a checkpoint belongs to (function, key, key groups, state
layout, state descriptors). Restarting with something incompatible would silently misread the
state, so it is refused with a message that says what differs and what to do. Spark's own
offset and commit logs are read (never written) to tell whether a bounded job has finished.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from sparkstate.errors import CheckpointMismatchError
from sparkstate.runtime.planner import plan

METADATA_FILE = "sparkstate.json"
FORMAT_VERSION = 1

#: fields that must match for the state in a checkpoint to be read correctly
_MUST_MATCH = {
    "function": "the keyed function",
    "source": "the source",
    "key_columns": "the key columns",
    "key_groups": "the number of key groups",
    "bucket_size": "the state bucket size",
    "time_mode": "the Spark time mode (timers/watermark use)",
    "state_backend": "the state backend",
    "plan": "the execution path (python or native; see sparkstate explain)",
}

_DEFAULTS = {"plan": "python"}

#: generator fields that only shape micro-batches; any other change alters the events
_BATCH_SHAPING = {"rate", "max_batch", "partitions"}


def source_identity(source: Any) -> dict:
    """What a checkpoint's offsets mean: the same offsets must give the same events again."""
    from sparkstate.connectors.generator import Generator

    if isinstance(source, Generator):
        return {"type": type(source).__name__, **{k: getattr(source, k) for k in source.settings() if k not in _BATCH_SHAPING}}
    # a ListSource may grow by whole batches between runs; a Spark source keeps its own offsets
    return {"type": type(source).__name__}


def job_metadata(job: Any, spec: Any, descriptors: list, settings: dict) -> dict:
    fn = spec.fn
    return {
        "format": FORMAT_VERSION,
        "job": job.name,
        # the class name only: a script's function is __main__.X when run, module.X when imported
        "function": type(fn).__qualname__,
        "source": source_identity(job.source_spec),
        "key_columns": list(spec.key_columns),
        "key_groups": job.settings.key_groups,
        "bucket_size": spec.bucket_size,
        "time_mode": spec.time_mode,
        "state_backend": job.settings.state_backend,
        "plan": plan(job).path,
        "state": {d.name: d.describe() for d in descriptors},
        "settings": settings,
    }


def check_or_write(checkpoint_dir: str | os.PathLike, meta: dict) -> list[str]:
    """Write the metadata of a new checkpoint, or check it against an existing one.

    Returns warnings (settings that the checkpoint overrides); raises on incompatibilities.
    """
    root = Path(checkpoint_dir)
    path = root / METADATA_FILE
    committed = bool(_batch_ids(root / "commits"))
    if not path.exists() or not committed:
        # nothing committed yet (a new checkpoint, or a first run that failed early): no state
        # exists that another configuration could misread
        if not path.exists() and (root / "offsets").exists():
            raise CheckpointMismatchError(
                f"{root} holds a Spark checkpoint that sparkstate did not write; "
                "use an empty or new checkpoint directory"
            )
        try:
            root.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(meta, indent=2, sort_keys=True))
            os.replace(tmp, path)
        except OSError as exc:
            raise CheckpointMismatchError(
                f"cannot write to checkpoint directory {root}: {exc.strerror or exc}; "
                "choose a directory you can write to"
            ) from exc
        return []
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CheckpointMismatchError(f"cannot read {path}: {exc}") from exc
    problems = []
    if old.get("job") != meta["job"]:
        problems.append(f"it belongs to job {old.get('job')!r}, not {meta['job']!r}")
    for field, label in _MUST_MATCH.items():
        default = _DEFAULTS.get(field)  # what checkpoints written before the field existed mean
        was, now = old.get(field, default), meta.get(field, default)
        if was == now:
            continue
        if isinstance(was, dict) and isinstance(now, dict):
            diff = ", ".join(f"{k} {was.get(k)!r} -> {now.get(k)!r}" for k in sorted(set(was) | set(now)) if was.get(k) != now.get(k))
            problems.append(f"{label} changed ({diff})")
        else:
            problems.append(f"{label} changed from {was!r} to {now!r}")
    for name, was in old.get("state", {}).items():
        now = meta["state"].get(name)
        if now is not None and now != was:
            problems.append(f"state {name!r} changed from {was} to {now}")
    if problems:
        raise CheckpointMismatchError(
            f"checkpoint {root} cannot be used for this job: " + "; ".join(problems)
            + ". Run it as before, or start from a new checkpoint directory (state starts empty; "
            "`sparkstate run --fresh` deletes the old one)."
        )
    warnings = [
        f"state {name!r} ({was}) is no longer declared: its values are dropped as their keys are next touched"
        for name, was in old.get("state", {}).items()
        if name not in meta["state"]
    ]
    for key, value in meta.get("settings", {}).items():
        was = old.get("settings", {}).get(key)
        if was is not None and was != value:
            warnings.append(
                f"{key}: the checkpoint was written with {was!r}; Spark keeps that value on restart, "
                f"so {value!r} is ignored"
            )
    return warnings


def last_committed_offset(checkpoint_dir: str | os.PathLike) -> tuple[int | None, Any]:
    """``(batch_id, first source offset)`` of the last committed micro-batch, or ``(None, None)``."""
    root = Path(checkpoint_dir)
    commits = _batch_ids(root / "commits")
    if not commits:
        return None, None
    batch = max(commits)
    try:
        lines = (root / "offsets" / str(batch)).read_text().splitlines()
        offset = json.loads(lines[2]) if len(lines) > 2 and lines[2] not in ("-", "") else None
    except (OSError, ValueError):
        offset = None
    return batch, offset


def _batch_ids(directory: Path) -> list[int]:
    if not directory.is_dir():
        return []
    return [int(p.name) for p in directory.iterdir() if p.name.isdigit()]
