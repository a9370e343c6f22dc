"""Starting a job over (``Job.run(fresh=True)``, ``sparkstate run --fresh``): delete only
what sparkstate provably made for the job, and say what was kept and why.

* The checkpoint directory's entries go when it holds sparkstate's metadata
  (``sparkstate.json``) of this job, or nothing but what an early-stopped first run leaves;
  a directory without it that holds anything else is no checkpoint of this job: the run is
  refused and it is kept. Only the names of the checkpoint's layout go (Spark's and
  sparkstate's, see ``checkpoint_dir.py``), and the default output ``output/`` when it holds
  the claim of a job run on this checkpoint; anything else beside them stays, and the run
  says so. The run's lock stays too (the run holds it).
* A Parquet output folder goes when it holds the job's claim, ``_sparkstate.json`` naming the
  job: a run writes it into an output folder that is new or empty (or already the job's), so
  a folder it finds holding other files is never claimed. Such a folder is kept and the run
  refused (Spark's file sink would otherwise mix the new run's files with them, or, finding
  another ``_spark_metadata`` log, skip the new run's batches as already written).
* A database table goes when the table's record in the database says this job created it
  (``sparkstate_tables``, see ``connectors/database/protocol.py``). A table it did not create
  is kept, its rows too, and the job's markers are deleted so its batch ids can start at 0
  again; the run goes on, appending to it, and says so. The markers deleted are the old
  checkpoint's writer's and the new run's (a checkpoint restored from a savepoint writes
  under an identity of its own).
* A Kafka topic's records cannot be deleted: they stay, and the run says so. The job's
  writers get a reset marker (``connectors/kafka/protocol.py``, :func:`reset`), so that the
  new checkpoint's batch ids, which start at 0 again, are written and not skipped.

Everything is checked before anything is deleted, and the database first (it can be
unreachable): a refusal leaves all as it was. The run holds the checkpoint's lock throughout.
"""

from __future__ import annotations

import json
from typing import Any

from sparkstate.connectors import database
from sparkstate.connectors.kafka import protocol as kafka
from sparkstate.connectors.sinks import ParquetSink
from sparkstate.errors import CheckpointMismatchError, SinkError
from sparkstate.runtime.checkpoint.directory import CLAIM_FILE, CheckpointDir, read_claim, shown_names
from sparkstate.runtime.checkpoint.storage import Storage, open_storage

#: what Spark's file sink writes into an output folder besides the data files
_SPARK_LOG = "_spark_metadata"


def parquet_sinks(job: Any) -> list[ParquetSink]:
    """The job's Parquet sinks: its main sink and side-output sinks of their own."""
    sinks = [job.sink_spec, *(s for _, s in job.side_sinks)]
    return [s for s in sinks if isinstance(s, ParquetSink)]


def claim_outputs(job: Any, checkpoint: CheckpointDir, spark: Any = None) -> None:
    """Record the job in each of its Parquet output folders that is new, empty or already its
    own, so that a later ``--fresh`` may delete it; a folder holding other files is left as
    it is (and ``--fresh`` keeps it)."""
    for sink in parquet_sinks(job):
        storage = open_storage(sink.path, spark)
        entries = storage.list()
        claim = read_claim(storage) if any(e.name == CLAIM_FILE for e in entries) else None
        if entries and (claim is None or claim.get("job") != job.name):
            continue
        if claim is None or claim.get("checkpoint") != checkpoint.root:
            record = {"job": job.name, "checkpoint": checkpoint.root}
            try:
                storage.write_atomic(json.dumps(record, indent=2).encode(), CLAIM_FILE)
            except OSError as exc:
                raise SinkError(f"cannot write to output folder {sink.path}: {exc.strerror or exc}; "
                                "make it writable or choose another (parquet:PATH)") from exc


def start_fresh(
    job: Any, checkpoint: CheckpointDir, spark: Any = None, restored_ids: tuple[str | None, ...] = (), partitions: int = 1,
) -> list[str]:
    """Delete the job's checkpoint and outputs (a bound job: its database sinks carry their
    tables); returns what was kept, as notes for the user. Raises, deleting nothing, when the
    checkpoint directory or an output folder holds what is not the job's.

    A database sink's batch markers go for its writer and for its writers restored from the
    savepoints ``restored_ids`` (see :func:`~sparkstate.connectors.database.reset`): the
    identity the old checkpoint wrote with and the one the new run writes with."""
    _check_checkpoint(job, checkpoint)
    outputs = [(sink, open_storage(sink.path, spark)) for sink in parquet_sinks(job)]
    for sink, storage in outputs:
        _check_output(job, sink, storage)
    kafka_sinks = database.job_kafka_sinks(job)
    for kafka_sink in kafka_sinks:  # an unreachable broker refuses the run before anything is reset
        kafka.check_reachable(kafka_sink)
    notes = []
    for db_sink, _ in database.job_database_sinks(job):
        kept = database.reset(db_sink, restored_ids)
        if kept:
            notes.append(kept)
    for kafka_sink in kafka_sinks:
        # the main sink's parts are the batch's partitions, written by their tasks
        kept = kafka.reset(kafka_sink, restored_ids, parts=partitions if kafka_sink is job.sink_spec else 1)
        if kept:
            notes.append(kept)
    for _, storage in outputs:
        storage.delete()
    others = checkpoint.clear()
    if others:
        notes.append(f"--fresh kept {shown_names(others)} in {checkpoint.root}: not part of a checkpoint (--fresh "
                     "deletes only Spark's and sparkstate's own entries there); move them out of the checkpoint directory")
    return notes


def _check_checkpoint(job: Any, checkpoint: CheckpointDir) -> None:
    root = checkpoint.root
    if checkpoint.has_metadata():
        try:
            owner = checkpoint.read_metadata().get("job")
        except (OSError, ValueError):
            return  # sparkstate's own file, damaged: starting over is the fix
        if owner not in (None, job.name):
            raise CheckpointMismatchError(
                f"--fresh keeps {root}: it is the checkpoint of job {owner!r}, not {job.name!r}. "
                "Give this job its own checkpoint directory, or delete that one yourself if it is no longer needed; "
                "nothing was deleted"
            )
        return
    checkpoint.check_usable(fresh=True)


def _check_output(job: Any, sink: ParquetSink, storage: Storage) -> None:
    names = {e.name for e in storage.list()}
    if not names:
        return
    claim = read_claim(storage) if CLAIM_FILE in names else None
    if claim is not None and claim.get("job") == job.name:
        return
    if claim is not None:
        why = f"it is the output of job {claim.get('job')!r}"
    elif _SPARK_LOG in names:
        why = (f"its {_SPARK_LOG} log does not say it was written for job {job.name!r} (no {CLAIM_FILE}: another "
               "job's output, or one written by an older sparkstate)")
    else:
        why = "it holds files sparkstate did not write"
    raise SinkError(
        f"--fresh keeps output folder {sink.path}: {why}, and --fresh deletes only what sparkstate wrote for this "
        "job. Write to a new folder (--sink parquet:PATH), or delete that one yourself if it is no longer needed; "
        "nothing was deleted"
    )
