"""The registry of seed jobs and what the CLI needs to know about each."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sparkstate.connectors.generator import Generator, UpiPayments
from sparkstate.connectors.sources import TextLines
from sparkstate.errors import JobDefinitionError
from sparkstate.job import Job


@dataclass(frozen=True)
class SeedJob:
    """A runnable job: how to build it on a generator, and how to summarise its output."""

    name: str
    seed: str
    description: str
    #: ``build(generator)``, and for a job with rules also ``build(generator, rules=SOURCE)``
    build: Callable[..., Job]
    #: generator settings this job needs to show something (e.g. fewer keys)
    defaults: dict[str, Any] = field(default_factory=dict)
    #: columns to rank the final results by, for the summary table: (order by, keep per key)
    summary_key: str | None = None
    summary_order: str | None = None
    #: the generator the job reads (its settings are the CLI's ``--set NAME=VALUE``)
    generator: type[Generator] = UpiPayments
    #: the job's own settings with their defaults (not its generator's), passed to ``build`` as
    #: keyword arguments; ``--set NAME=VALUE`` sets them too (e.g. a join's bounds)
    options: dict[str, Any] = field(default_factory=dict)
    #: the generator of a second input the job derives from its own (a join's other side)
    second: type[Generator] | None = None
    #: a job with a rules input (``sparkstate run JOB --rules DIR``): the rules' columns, the
    #: rules a new rules folder starts with, and how a CLI string becomes a rules source;
    #: ``build`` then takes ``rules=SOURCE`` (None: its own default rules)
    rules_schema: str | None = None
    initial_rules: tuple[dict[str, Any], ...] = ()
    rules_source: Callable[[str], Any] | None = None

    def job(self, rules: Any = None, **generator: Any) -> Job:
        """The job on its generator with ``self.defaults`` overridden by ``generator`` (and
        any of the job's ``options``; for a job with rules, reading ``rules``: a source spec)."""
        given = {k: v for k, v in generator.items() if v is not None}
        options = {**self.options, **{k: given.pop(k) for k in list(given) if k in self.options}}
        settings = {**self.defaults, **given}
        known = self.generator.settings()
        unknown = sorted(set(settings) - set(known))
        if unknown:
            own = f"; the job's own: {', '.join(self.options)}" if self.options else ""
            raise JobDefinitionError(
                f"job {self.name!r} reads {self.generator.__name__}, which has no setting {', '.join(map(repr, unknown))}; "
                f"its settings: {', '.join(known)}{own}"
            )
        if rules is None:
            return self.build(self.generator(**settings), **options)
        if self.rules_schema is None:
            raise JobDefinitionError(f"job {self.name!r} reads no rules; only {', '.join(rules_jobs())} take --rules")
        return self.build(self.generator(**settings), rules=rules, **options)

    def on_source(self, source: Any, rules: Any = None) -> Job:
        """The job reading ``source`` instead of its generator; the events must have the
        generator's columns, and keep its watermark strategy."""
        job = self.job(rules=rules)
        return job.source(source, watermark=job.watermark)

    def text_source(self, spec: str) -> TextLines:
        """A source from a CLI string (``socket://HOST:PORT``, ``file:DIRECTORY``,
        ``kafka://HOST:PORT/TOPIC``) that reads events with the columns and event-time column of
        the job's generator."""
        if spec.startswith("kafka://"):
            return kafka_source(spec, self.generator.schema_ddl, self.generator.time_column)
        from sparkstate.connectors.sources import parse_source

        return parse_source(spec, self.generator.schema_ddl, self.generator.time_column)


#: what a ``kafka://`` source URL may set beside librdkafka's settings (names with a dot)
KAFKA_SOURCE_OPTIONS = ("format", "starting", "max_records")


def kafka_source(spec: str, schema: str, time_column: str | None = None) -> TextLines:
    """``kafka://[USER:PASSWORD@]HOST:PORT/TOPIC?format=json|csv&starting=earliest|latest|TIME&max_records=N``
    as a :class:`~sparkstate.connectors.kafka.source.KafkaSource` of ``schema`` (names with a
    dot are librdkafka settings). Its ``name``, which names a CLI run's checkpoint folder, has
    the topic: another topic is another checkpoint."""
    import re

    from sparkstate.connectors.credentials import mask
    from sparkstate.connectors.kafka.source import KafkaSource, parse_kafka_url
    from sparkstate.connectors.sources import refuse_unknown_kafka_options

    servers, topic, options = parse_kafka_url(spec)
    refuse_unknown_kafka_options(spec, options, KAFKA_SOURCE_OPTIONS, "source")
    fmt = options.pop("format", "json")
    if fmt not in ("json", "csv"):
        raise JobDefinitionError(
            f"source {mask(spec)!r}: format must be json or csv (records whose value holds the job's columns), got {fmt!r}"
        )
    kwargs: dict[str, Any] = {}
    if "starting" in options:
        kwargs["starting"] = options.pop("starting")
    if "max_records" in options:
        text = options.pop("max_records")
        if not text.isdigit() or int(text) < 1:
            raise JobDefinitionError(
                f"source {mask(spec)!r}: max_records must be a positive number of records per micro-batch, got {text!r}"
            )
        kwargs["max_records_per_batch"] = int(text)
    name = "kafka-" + re.sub(r"[^A-Za-z0-9._-]", "_", topic)
    return KafkaSource(servers, topic, schema, format=fmt, time_column=time_column, options=options, name=name, **kwargs)


def _nexmark_queries() -> list[int]:
    """The Nexmark queries the package holds (``jobs/nexmark/qN.py``), in query order."""
    import pkgutil

    from sparkstate.jobs import nexmark

    names = [m.name for m in pkgutil.iter_modules(nexmark.__path__)]
    return sorted(int(n[1:]) for n in names if n[:1] == "q" and n[1:].isdigit())


#: the Nexmark queries, as ``nexmark-qN`` (``jobs/nexmark/qN.py``)
NEXMARK_QUERIES = _nexmark_queries()

_MODULES = [
    "running_sum",
    "count_and_emit",
    "running_max",
    "running_average",
    "buffer_and_flush",
    "feature_map",
    "inactivity_alert",
    "rate_limit",
    "upi_per_minute",
    "taxi_zone_revenue",
    "sessions",
    "hot_items",
    "enrich",
    "click_purchase",
    "fraud_detection",
    "dedup",
    *(f"nexmark.q{n}" for n in NEXMARK_QUERIES),
]

JOBS: dict[str, SeedJob] = {}
for _m in _MODULES:
    _job: SeedJob = importlib.import_module(f"sparkstate.jobs.{_m}").SEED_JOB
    JOBS[_job.name] = _job


def rules_jobs() -> list[str]:
    """The jobs that read rules (``--rules``)."""
    return [name for name, job in JOBS.items() if job.rules_schema is not None]


def get_job(name: str) -> SeedJob:
    try:
        return JOBS[name]
    except KeyError:
        raise JobDefinitionError(f"no job named {name!r}; `sparkstate jobs` lists {sorted(JOBS)}") from None
