"""Nexmark q2, selection: the bids of every 123rd auction, with their price.

The SQL (``queries/q2.sql``)::

    SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0

A filter: each bid crosses the keyed operator (keyed by auction) and leaves as
``(auction, price)`` when its auction id is a multiple of 123, with no state.
"""

from __future__ import annotations

from collections.abc import Iterator

from sparkstate.api.functions import Context, KeyedProcessFunction
from sparkstate.connectors.nexmark import NexmarkBids
from sparkstate.connectors.sinks import NoopSink
from sparkstate.job import Job
from sparkstate.jobs.nexmark.common import nexmark_seed_job, on

OUTPUT = "auction bigint, price bigint"
#: the SQL's ``MOD(auction, 123) = 0``
AUCTION_MODULUS = 123


class Selection(KeyedProcessFunction):
    """The ``(auction, price)`` of each bid whose auction id is a multiple of 123."""

    def process_element(self, bid: dict, ctx: Context) -> Iterator[tuple]:
        if bid["auction"] % AUCTION_MODULUS == 0:
            yield (bid["auction"], bid["price"])


def build(source: NexmarkBids) -> Job:
    return on("nexmark-q2", source).key_by("auction").process(Selection(), output_schema=OUTPUT).sink(NoopSink())


SEED_JOB = nexmark_seed_job(2, "selection: the auction and price of the bids of every 123rd auction", build)
