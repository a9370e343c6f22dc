"""Nexmark q0, pass-through: every bid's ``auction, bidder, price, dateTime, extra``.

The reference measures the cost of reading and writing with no work between; here each bid
crosses the keyed operator (keyed by auction) and leaves unchanged, with no state.
"""

from __future__ import annotations

from collections.abc import Iterator

from sparkstate.api.functions import Context, KeyedProcessFunction
from sparkstate.connectors.nexmark import NexmarkBids
from sparkstate.connectors.sinks import NoopSink
from sparkstate.job import Job
from sparkstate.jobs.nexmark.common import nexmark_seed_job, on

OUTPUT = "auction bigint, bidder bigint, price bigint, date_time timestamp, extra string"


class PassThrough(KeyedProcessFunction):
    """Each bid's columns as they are."""

    def process_element(self, bid: dict, ctx: Context) -> Iterator[tuple]:
        yield (bid["auction"], bid["bidder"], bid["price"], bid["date_time"], bid["extra"])


def build(source: NexmarkBids) -> Job:
    return on("nexmark-q0", source).key_by("auction").process(PassThrough(), output_schema=OUTPUT).sink(NoopSink())


SEED_JOB = nexmark_seed_job(0, "pass-through: every bid as it is", build)
