"""Second streams for the stream-join seed jobs: merchant profiles and purchases.

Both are generators like those of ``sparkstate.connectors.generator`` (event ``i`` a pure
function of ``(seed, i)``, so a restart replays exactly what it lost), kept in a module of
their own. Importing ``sparkstate.connectors`` registers them in ``GENERATORS``, by which a
Spark data source finds a generator by name, so they run on Spark like the others.

* :class:`MerchantProfiles` - each merchant's profile, changing over time: the first
  ``merchants`` events are every merchant's first profile, in merchant order; the rest are
  updates of random merchants (a new risk tier and daily limit). ``revision`` is the event's
  offset, so a later update of a merchant has a larger revision.
* :class:`Purchases` - purchases in the shop of :class:`~sparkstate.connectors.generator.ClickEvents`,
  by the users active at the time (the same model of who is browsing when), so a purchase
  has clicks of its user shortly before it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from sparkstate.connectors.generator import _TS, CHUNK, GENERATORS, ClickEvents, Generator, _ids

MERCHANT_CATEGORIES = ("grocery", "fuel", "electronics", "restaurant", "travel", "pharmacy", "fashion", "utilities")
RISK_TIERS = ("low", "medium", "high")
_RISK_P = (0.70, 0.25, 0.05)


@dataclass(frozen=True)
class MerchantProfiles(Generator):
    """Merchant profiles (event_time, merchant_id, merchant_name, category, risk_tier,
    daily_limit, revision) for the merchants of :class:`~sparkstate.connectors.generator.UpiPayments`
    (``m000000``...): a first profile of each merchant, then updates.

    Example::

        >>> print(MerchantProfiles(events=20_000, merchants=10_000).describe())
        merchant profile generator (20,000 events, 10,000 merchants, seed 7)
    """

    events: int | None = 20_000
    merchants: int = 10_000
    events_per_second: float = 20.0

    arrow_schema = pa.schema(
        [("event_time", _TS), ("merchant_id", pa.string()), ("merchant_name", pa.string()),
         ("category", pa.string()), ("risk_tier", pa.string()), ("daily_limit", pa.float64()),
         ("revision", pa.int64())]
    )
    schema_ddl = (
        "event_time timestamp, merchant_id string, merchant_name string, category string, risk_tier string, "
        "daily_limit double, revision bigint"
    )
    time_column = "event_time"
    title = "merchant profile generator"
    _positive = ("merchants",)

    def _shape(self) -> str:
        return f", {self.merchants:,} merchants"

    def _chunk(self, c: int) -> dict[str, np.ndarray]:
        values = super()._chunk(c)
        values["offset"] = np.arange(c * CHUNK, (c + 1) * CHUNK, dtype=np.int64)
        return values

    def _draw(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        return {
            "merchant": rng.integers(0, self.merchants, CHUNK),
            "tier": rng.choice(len(RISK_TIERS), CHUNK, p=_RISK_P),
            "limit": np.round(np.exp(rng.normal(10.0, 1.0, CHUNK)), -2),
        }

    def _columns(self, v: dict[str, np.ndarray], event_ms: np.ndarray) -> list[pa.Array]:
        offset = v["offset"]
        merchant = np.where(offset < self.merchants, offset, v["merchant"])
        return [
            _ids("m", merchant, self.merchants),
            _ids("merchant ", merchant, self.merchants),
            pa.array(np.array(MERCHANT_CATEGORIES, dtype=object)[merchant % len(MERCHANT_CATEGORIES)], pa.string()),
            pa.array(np.array(RISK_TIERS, dtype=object)[v["tier"]], pa.string()),
            pa.array(v["limit"], pa.float64()),
            pa.array(offset, pa.int64()),
        ]


@dataclass(frozen=True)
class Purchases(ClickEvents):
    """Purchases (event_time, user_id, item_id, category, amount) in the click stream's shop:
    the same users, browsing at the same times, and the same items. Give it another ``seed``
    than the clicks' (the same seed draws the same users and items as the click events).

    Example::

        >>> print(Purchases(events=10_000, seed=8).describe())
        purchase generator (10,000 events, 20,000 users, 5,000 items, seed 8)
    """

    events_per_second: float = 2.0

    arrow_schema = pa.schema(
        [("event_time", _TS), ("user_id", pa.string()), ("item_id", pa.string()), ("category", pa.string()),
         ("amount", pa.float64())]
    )
    schema_ddl = "event_time timestamp, user_id string, item_id string, category string, amount double"
    title = "purchase generator"

    def _draw(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        values = super()._draw(rng)
        values["amount"] = np.round(np.clip(np.exp(rng.normal(3.5, 0.9, CHUNK)), 1.0, 5_000.0), 2)
        return values

    def _columns(self, v: dict[str, np.ndarray], event_ms: np.ndarray) -> list[pa.Array]:
        user, item, category, _event_type = super()._columns(v, event_ms)
        return [user, item, category, pa.array(v["amount"], pa.float64())]


def in_step_with(first: Generator, share: float) -> dict[str, Any]:
    """Settings of a second stream with ``share`` events for each of ``first``'s, read in step
    with it: its rate and batch size scaled by ``share``, the same partitions and end marker.
    With the same event-time span, a micro-batch then reads about the same stretch of event
    time from both, so neither input's watermark runs far ahead of the other's."""
    return {
        "rate": first.rate * share if first.rate else None,
        "max_batch": max(1, round(first.max_batch * share)),
        "partitions": first.partitions,
        "end_of_input": first.end_of_input,
        "start_ms": first.start_ms,
        "max_out_of_orderness_ms": first.max_out_of_orderness_ms,
    }


GENERATORS.update({g.__name__: g for g in (MerchantProfiles, Purchases)})
