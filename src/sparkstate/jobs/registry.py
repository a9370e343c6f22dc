"""The registry of seed jobs and what the CLI needs to know about each."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable

from sparkstate.api.job import Job
from sparkstate.connectors.generator import UpiPayments
from sparkstate.errors import JobDefinitionError


@dataclass(frozen=True)
class SeedJob:
    """A runnable job: how to build it on a generator, and how to summarise its output."""

    name: str
    seed: str
    description: str
    build: Callable[[UpiPayments], Job]
    #: generator settings this job needs to show something (e.g. fewer keys)
    defaults: dict[str, Any] = field(default_factory=dict)
    #: columns to rank the final results by, for the summary table: (order by, keep per key)
    summary_key: str | None = None
    summary_order: str | None = None

    def job(self, **generator: Any) -> Job:
        """The job on a generator with ``self.defaults`` overridden by ``generator``."""
        settings = {**self.defaults, **{k: v for k, v in generator.items() if v is not None}}
        return self.build(UpiPayments(**settings))


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
]

JOBS: dict[str, SeedJob] = {}
for _m in _MODULES:
    _job: SeedJob = importlib.import_module(f"sparkstate.jobs.{_m}").SEED_JOB
    JOBS[_job.name] = _job


def get_job(name: str) -> SeedJob:
    try:
        return JOBS[name]
    except KeyError:
        raise JobDefinitionError(f"no job named {name!r}; `sparkstate jobs` lists {sorted(JOBS)}") from None
