"""The transactional database sinks (PostgreSQL, SQLite): each micro-batch written exactly
once, in one transaction with a ``(job, batch_id)`` marker.

* ``protocol`` - the exactly-once protocol and its invariants: prepare, write, reset.
* ``dialects`` - what each database does its own way (types, catalog, loading rows).
* ``arrow`` - Arrow values as the databases store them (nested values as JSON text).
* ``job_sinks`` - binding a job's sinks, and where its side outputs go.
"""

from sparkstate.connectors.database.dialects import Column, Dialect, dialect_of, quote, upsert_statement
from sparkstate.connectors.database.job_sinks import (
    bind_job_sinks,
    dead_letter_sink,
    job_database_sinks,
    job_kafka_sinks,
    side_sinks,
)
from sparkstate.connectors.database.protocol import (
    MARKER_TABLE,
    BatchOutcome,
    commit_batch,
    count_rows,
    prepare,
    reset,
    top_marker,
    write,
)

__all__ = [
    "MARKER_TABLE",
    "BatchOutcome",
    "Column",
    "Dialect",
    "bind_job_sinks",
    "commit_batch",
    "count_rows",
    "dead_letter_sink",
    "dialect_of",
    "job_database_sinks",
    "job_kafka_sinks",
    "prepare",
    "quote",
    "reset",
    "side_sinks",
    "top_marker",
    "upsert_statement",
    "write",
]
