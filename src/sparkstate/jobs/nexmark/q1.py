"""Nexmark q1, currency conversion: every bid's price from dollars to euros.

The SQL (``queries/q1.sql``)::

    SELECT auction, bidder, 0.908 * price AS price, dateTime, extra FROM bid

``0.908 * price`` is Flink's ``DECIMAL(23, 3)`` (``DECIMAL(3, 3) * BIGINT``), exact: here a
:class:`~decimal.Decimal` with three places (``decimal(23,3)`` in the output schema), not a
float, so that ``0.908 * 15`` is ``13.620`` and not ``13.620000000000001``. Each bid crosses
the keyed operator (keyed by auction) and leaves converted, with no state.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

from sparkstate.api.functions import Context, KeyedProcessFunction
from sparkstate.connectors.nexmark import NexmarkBids
from sparkstate.connectors.sinks import NoopSink
from sparkstate.job import Job
from sparkstate.jobs.nexmark.common import nexmark_seed_job, on

OUTPUT = "auction bigint, bidder bigint, price decimal(23,3), date_time timestamp, extra string"
#: euros per dollar, the SQL's ``0.908`` literal (a ``DECIMAL(3, 3)``)
DOLLAR_TO_EURO = Decimal("0.908")


class CurrencyConversion(KeyedProcessFunction):
    """Each bid with its price in euros."""

    def process_element(self, bid: dict, ctx: Context) -> Iterator[tuple]:
        yield (bid["auction"], bid["bidder"], DOLLAR_TO_EURO * bid["price"], bid["date_time"], bid["extra"])


def build(source: NexmarkBids) -> Job:
    return (
        on("nexmark-q1", source).key_by("auction")
        .process(CurrencyConversion(), output_schema=OUTPUT)
        .sink(NoopSink())
    )


SEED_JOB = nexmark_seed_job(1, "currency conversion: every bid's price times 0.908 (dollars to euros)", build)
