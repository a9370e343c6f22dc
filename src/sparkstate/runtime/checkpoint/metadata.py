"""The job a checkpoint belongs to, recorded in its ``sparkstate.json``, and the check on restart.

The metadata names the function, key, key groups, state layout and state descriptors.
Restarting with something incompatible would silently misread the state, so it is refused
with a message that says what differs and what to do. Where the file lives, and everything
else about the directory, is :class:`~sparkstate.runtime.checkpoint.directory.CheckpointDir`'s.
"""

from __future__ import annotations

from typing import Any

from sparkstate.engine.ttl import config_to_json
from sparkstate.errors import CheckpointMismatchError
from sparkstate.runtime.checkpoint.directory import CheckpointDir
from sparkstate.savepoint.migration import ttl_descriptions, type_info, value_type

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
    "connected": "the connected (second) input",
}

_DEFAULTS = {"plan": "python"}

def source_identity(source: Any) -> dict:
    """What a checkpoint's offsets mean: the same offsets must give the same events again."""
    return source.identity()


def job_metadata(job: Any, spec: Any, descriptors: list, settings: dict, path: str) -> dict:
    """What a checkpoint records of its job; ``path`` is the plan the run chose (python or native)."""
    fn = spec.fn
    meta = {
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
        "plan": str(path),
        "state": {d.name: d.describe() for d in descriptors},
        # what a savepoint needs to migrate values when a type changes (savepoint/migration.py)
        "state_types": {d.name: type_info(value_type(d)) for d in descriptors},
        # states with a TTL store (value, last access): the kind of values must not change under a restart
        "state_ttl": ttl_descriptions(descriptors),
        "settings": settings,
        "window": window_identity(job),
        "connected": connected_identity(job),
    }
    ttl = {d.name: config_to_json(d.ttl_config) for d in descriptors if getattr(d, "ttl_config", None) is not None}
    if ttl:
        # what a savepoint taken from the checkpoint (without the job) needs to leave expired entries out
        meta["state_ttl_configs"] = ttl
    return meta


def connected_identity(job: Any) -> dict | None:
    """What a two-input job's state depends on in its second input: its kind, its source (whose
    offsets the checkpoint records beside the first's), its key, its broadcast states."""
    c = job.connected
    if c is None:
        return None
    kind = "broadcast" if c.is_broadcast else "interval join" if c.join_bounds is not None else "keyed"
    out: dict[str, Any] = {"kind": kind, "source": source_identity(c.source)}
    if c.is_broadcast:
        out["broadcast"] = {d.name: d.describe() for d in c.broadcast}
    else:
        out["key_columns"] = list(c.key_columns)
    if c.join_bounds is not None:
        out["join_bounds"] = list(c.join_bounds)
    return out


def window_identity(job: Any) -> dict | None:
    """What a window job's state depends on: how windows are assigned (session windows keep
    a record per key, time windows one per window) and what accumulates in them."""
    if job.window_assigner is None:
        return None
    fn = job.window_function
    aggs = getattr(fn, "aggs", None)  # built-in aggregates: their list is the accumulator's shape
    function = type(fn).__qualname__ if fn is not None else None
    if aggs:
        function = f"{function}[{', '.join(f'{a.function}({a.column or chr(42)})' for a in aggs)}]"
    return {
        "assigner": job.window_assigner.describe(),
        "sessions": type(job.window_assigner).__name__.endswith("SessionWindows"),
        "kind": str(getattr(job.window_kind, "value", job.window_kind)),
        "function": function,
    }


def damaged_metadata(checkpoint: CheckpointDir, exc: Exception) -> str:
    """What it means that ``sparkstate.json`` cannot be read, and what the user can do."""
    if isinstance(exc, OSError) and not isinstance(exc, FileNotFoundError):
        problem = f"cannot read {checkpoint.metadata_path} ({exc.strerror or exc})"
        fix = "make it readable for the user running the job"
    else:
        detail = "not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else str(exc)
        problem = f"{checkpoint.metadata_path} is damaged ({detail})"
        fix = ("put back a copy of it from a backup of the checkpoint directory, or start over with a new checkpoint "
               "directory (`sparkstate run --fresh` deletes this one; state starts empty)")
    return (f"{problem}. It records which job and configuration wrote the checkpoint, and a run checks it before "
            f"resuming, so it cannot resume without it. Spark's offsets and state beside it are not affected. Fix: {fix}")


def check_or_write(checkpoint: CheckpointDir, meta: dict) -> list[str]:
    """Write the metadata of a new checkpoint, or check it against an existing one.

    Returns warnings (settings that the checkpoint overrides); raises on incompatibilities.
    """
    root = checkpoint.root
    have_meta = checkpoint.has_metadata()
    if not have_meta or not checkpoint.committed_batches():
        # nothing committed yet (a new checkpoint, or a first run that failed early): no state
        # exists that another configuration could misread
        if not have_meta and checkpoint.has_offset_log():
            raise CheckpointMismatchError(
                f"{root} holds a Spark checkpoint that sparkstate did not write; "
                "use an empty or new checkpoint directory"
            )
        try:
            checkpoint.write_metadata(meta)
        except OSError as exc:
            raise checkpoint.failed_write(exc) from exc
        return []
    try:
        old = checkpoint.read_metadata()
    except (OSError, ValueError) as exc:
        raise CheckpointMismatchError(damaged_metadata(checkpoint, exc)) from exc
    problems = []
    if old.get("job") != meta["job"]:
        problems.append(f"it belongs to job {old.get('job')!r}, not {meta['job']!r}")
    for field, label in _MUST_MATCH.items():
        default = _DEFAULTS.get(field)  # what checkpoints written before the field existed mean
        was, now = old.get(field, default), meta.get(field, default)
        if was == now:
            continue
        if isinstance(was, dict) and isinstance(now, dict):
            diff = ", ".join(
                f"{k} {was.get(k)!r} -> {now.get(k)!r}" for k in sorted(set(was) | set(now)) if was.get(k) != now.get(k)
            )
            problems.append(f"{label} changed ({diff})")
        else:
            problems.append(f"{label} changed from {was!r} to {now!r}")
    for name, was in old.get("state", {}).items():
        now = meta["state"].get(name)
        if now is not None and now != was:
            problems.append(f"state {name!r} changed from {was} to {now}")
        elif now is not None and (name in old.get("state_ttl", {})) != (name in meta.get("state_ttl", {})):
            # a TTL'd state stores (value, last access): the stored values would be misread
            gained = name in meta.get("state_ttl", {})
            problems.append(
                f"state {name!r} {'gained a time-to-live' if gained else 'lost its time-to-live'} (its stored values "
                f"{'have no' if gained else 'carry their'} access times; a savepoint restore converts them: "
                "`sparkstate savepoint`, then run with --from-savepoint)"
            )
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
