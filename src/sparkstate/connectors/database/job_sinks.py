"""A job's database sinks: bound to the job (table and marker identity from its name), and
where its side outputs go when they have no sink of their own."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from sparkstate.connectors.kafka.sink import KafkaSink
from sparkstate.connectors.sinks import DatabaseSink

#: the sinks a job binds to its name (their writer identity) and whose side outputs go beside them
BOUND_SINKS = (DatabaseSink, KafkaSink)


def bind_job_sinks(job: Any, restored_from: str | None = None) -> Any:
    """``job`` with its database sinks bound: table and marker identity filled in from the
    job's name (see :meth:`DatabaseSink.for_job` and :meth:`DatabaseSink.for_side_output`);
    ``restored_from``: the id of the savepoint the job's checkpoint was restored from, which
    gives its writers identities of their own (:attr:`DatabaseSink.marker`)."""
    from dataclasses import replace

    def restored(sink: Any) -> Any:
        return replace(sink, restored_from=restored_from) if isinstance(sink, BOUND_SINKS) else sink

    main = job.sink_spec
    if isinstance(main, BOUND_SINKS):
        main = restored(main.for_job(job.name))
    sides = tuple(
        (n, restored(s.for_side_output(job.name, n, main)) if isinstance(s, BOUND_SINKS) else s) for n, s in job.side_sinks
    )
    return replace(job, sink_spec=main, side_sinks=sides)


def side_sinks(job: Any) -> dict[str, Any]:
    """Each side output's sink, for a bound job: its own, or when the main sink is a database
    a table beside the main one (Kafka: a topic); None where neither applies (the caller's default)."""
    own = dict(job.side_sinks)
    main = job.sink_spec
    return {
        n: own.get(n) or (main.side_table(n) if isinstance(main, BOUND_SINKS) else None) for n in job.side_output_names
    }


def dead_letter_sink(job: Any) -> Any:
    """Where a bound job's dead letters go, also the rows a database sink refuses when the
    job has no dead-letter output of its own: its own sink, or a table beside a database
    main sink (``<table>_dead_letters``); None when neither applies (the caller's default)."""
    from sparkstate.api.functions import DEAD_LETTERS

    own = dict(job.side_sinks).get(DEAD_LETTERS.name)
    if own is not None:
        return own
    main = job.sink_spec
    return main.side_table(DEAD_LETTERS.name) if isinstance(main, BOUND_SINKS) else None


def job_database_sinks(job: Any, with_side_outputs: bool = True) -> list[tuple[Any, pa.Schema | None]]:
    """The database sinks of a bound job, each with the Arrow schema of what it receives.

    When the main sink is a database and the rows it refuses go to a database sink that gets
    no batch otherwise (the job has no dead-letter output of its own), that sink comes last
    with schema None: it is written only for batches with refused rows.
    """
    out = []
    if isinstance(job.sink_spec, DatabaseSink):
        out.append((job.sink_spec, job.output.arrow if job.output is not None else None))
    if with_side_outputs:
        for name, sink in side_sinks(job).items():
            if isinstance(sink, DatabaseSink):
                schema = job.side_output_schema(name)
                out.append((sink, schema.arrow if schema is not None else None))
    refusals = dead_letter_sink(job)
    if out and isinstance(refusals, DatabaseSink) and all(s != refusals for s, _ in out):
        out.append((refusals, None))
    return out


def job_kafka_sinks(job: Any, with_side_outputs: bool = True) -> list[KafkaSink]:
    """The Kafka sinks of a bound job: main, side outputs, and where refused rows go."""
    out: list[KafkaSink] = [job.sink_spec] if isinstance(job.sink_spec, KafkaSink) else []
    if with_side_outputs:
        out += [s for s in side_sinks(job).values() if isinstance(s, KafkaSink)]
    refusals = dead_letter_sink(job)
    if out and isinstance(refusals, KafkaSink) and all(s != refusals for s in out):
        out.append(refusals)
    return out
