"""A deterministic, replayable generator of UPI-style payments (seed 004's input).

Event ``i`` is a pure function of ``(seed, i)``: the generator draws in fixed chunks of
``CHUNK`` events, each from its own RNG stream ``default_rng([seed, chunk])``. So any range of
offsets can be produced again, in any process, which is what makes a restart from a Spark
checkpoint replay exactly the events it had lost.

Event time advances by ``1000 / events_per_second`` ms per event, minus a random lateness of
up to ``max_out_of_orderness_ms``: the stream is out of order, but boundedly so.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

CHUNK = 1 << 16
DEVICES = ("android", "ios", "web")
_DEVICE_P = (0.62, 0.28, 0.10)

UPI_SCHEMA = "event_time timestamp, merchant_id string, payer_id string, amount double, device string"
UPI_ARROW_SCHEMA = pa.schema(
    [
        ("event_time", pa.timestamp("us", tz="UTC")),
        ("merchant_id", pa.string()),
        ("payer_id", pa.string()),
        ("amount", pa.float64()),
        ("device", pa.string()),
    ]
)


@functools.lru_cache(maxsize=8)
def _ids(prefix: str, n: int) -> pa.Array:
    width = max(6, len(str(n - 1)))
    return pa.array(np.char.add(prefix, np.char.zfill(np.arange(n).astype(str), width)))


@dataclass(frozen=True)
class UpiPayments:
    """Source spec: UPI payments (event_time, merchant_id, payer_id, amount, device).

    ``events=None`` makes it unbounded. A bounded generator ends with an end-of-input marker
    that advances the watermark to the end of time, so every event-time timer fires, as
    Flink does at the end of a bounded source. ``rate``, ``max_batch`` and ``partitions``
    shape the micro-batches; every other field defines the events themselves.

    Example::

        UpiPayments(events=2_000_000, merchants=100_000, rate=50_000)
    """

    events: int | None = 1_000_000
    merchants: int = 10_000
    payers: int = 1_000_000
    seed: int = 7
    start_ms: int = 1_735_689_600_000  # 2025-01-01T00:00:00Z
    events_per_second: float = 1000.0
    max_out_of_orderness_ms: int = 5000
    #: wall-clock cap in events/s (None: as fast as Spark takes them)
    rate: float | None = None
    #: at most this many events per micro-batch
    max_batch: int = 500_000
    partitions: int = 2
    #: 0 draws merchants uniformly; larger values favour low merchant numbers (hot keys)
    merchant_skew: float = 0.0
    end_of_input: bool = True

    schema_ddl = UPI_SCHEMA
    time_column = "event_time"
    name = "upi-payments"

    def __post_init__(self) -> None:
        from sparkstate.errors import JobDefinitionError

        if self.events is not None and self.events < 0:
            raise JobDefinitionError(f"events must be >= 0, got {self.events}")
        for field_name in ("merchants", "payers", "max_batch", "partitions"):
            if getattr(self, field_name) < 1:
                raise JobDefinitionError(f"{field_name} must be >= 1, got {getattr(self, field_name)}")
        if self.events_per_second <= 0:
            raise JobDefinitionError(f"events_per_second must be > 0, got {self.events_per_second}")
        if self.rate is not None and self.rate <= 0:
            raise JobDefinitionError(f"rate must be > 0 events/s, got {self.rate}")

    @property
    def bounded(self) -> bool:
        return self.events is not None

    @property
    def has_end_marker(self) -> bool:
        return self.events is not None and self.end_of_input

    def always_has_event_time(self, column: str | None) -> bool:
        """Every generated event has its event time (so none can be a dead letter)."""
        return column == self.time_column

    def never_behind_watermark(self, strategy: Any) -> bool:
        """No event is behind a watermark that allows at least the generator's disorder."""
        return strategy.max_out_of_orderness_ms >= self.max_out_of_orderness_ms

    def end_offset(self, marker: bool = True) -> int | None:
        """The offset a finished run has read to (None: unbounded).

        With ``marker`` (a job whose function has timers), two offsets of their own follow the
        last event: the end-of-input marker, and an empty micro-batch in which the final
        watermark fires the remaining timers.
        """
        if self.events is None:
            return None
        return self.events + (2 if marker and self.end_of_input else 0)

    def events_between(self, start: int, end: int) -> int:
        """How many events (not counting the end-of-input marker) offsets ``[start, end)`` hold."""
        if self.events is None:
            return max(end - start, 0)
        return max(min(end, self.events) - min(start, self.events), 0)

    def ends_in(self, start: int, end: int) -> bool:
        """True when offsets ``[start, end)`` include the end-of-input marker."""
        return self.events is not None and self.end_of_input and start <= self.events < end

    def describe(self) -> str:
        n = "unbounded" if self.events is None else f"{self.events:,} events"
        rate = f", {self.rate:,.0f} ev/s" if self.rate else ""
        return f"UPI payment generator ({n}, {self.merchants:,} merchants, seed {self.seed}{rate})"

    def _chunk(self, c: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng([self.seed, c])
        if self.merchant_skew > 0:
            u = rng.random(CHUNK)
            merchant = np.minimum((u ** (1.0 + self.merchant_skew) * self.merchants).astype(np.int64), self.merchants - 1)
        else:
            merchant = rng.integers(0, self.merchants, CHUNK)
        payer = rng.integers(0, self.payers, CHUNK)
        amount = np.round(np.clip(np.exp(rng.normal(6.0, 1.2, CHUNK)), 1.0, 200_000.0), 2)
        device = rng.choice(len(DEVICES), CHUNK, p=_DEVICE_P)
        lateness = rng.integers(0, self.max_out_of_orderness_ms + 1, CHUNK)
        return {"merchant": merchant, "payer": payer, "amount": amount, "device": device, "lateness": lateness}

    def generate(self, start: int, end: int) -> pa.RecordBatch:
        """Events ``[start, end)`` as an Arrow batch (offsets past the last event yield nothing)."""
        stop = end if self.events is None else min(end, self.events)
        parts: dict[str, list[np.ndarray]] = {k: [] for k in ("merchant", "payer", "amount", "device", "lateness")}
        i = start
        while i < stop:
            c = i // CHUNK
            lo, hi = i - c * CHUNK, min(stop - c * CHUNK, CHUNK)
            chunk = self._chunk(c)
            for k in parts:
                parts[k].append(chunk[k][lo:hi])
            i = c * CHUNK + hi
        n = max(stop - start, 0)
        if n:
            cols = {k: np.concatenate(v) for k, v in parts.items()}
            idx = np.arange(start, stop, dtype=np.int64)
            base = self.start_ms + (idx * 1000 / self.events_per_second).astype(np.int64)
            ts = (base - cols["lateness"]) * 1000
            batch = pa.RecordBatch.from_arrays(
                [
                    pa.array(ts, pa.timestamp("us", tz="UTC")),
                    _ids("m", self.merchants).take(pa.array(cols["merchant"])),
                    _ids("p", self.payers).take(pa.array(cols["payer"])),
                    pa.array(cols["amount"], pa.float64()),
                    pa.array(np.array(DEVICES, dtype=object)[cols["device"]], pa.string()),
                ],
                schema=UPI_ARROW_SCHEMA,
            )
        else:
            batch = pa.RecordBatch.from_pylist([], schema=UPI_ARROW_SCHEMA)
        return batch

    def events_as_dicts(self, start: int = 0, end: int | None = None) -> list[dict]:
        """Events ``[start, end)`` as dicts (event_time in epoch ms), e.g. for the test harness."""
        stop = self.events if end is None else end
        if stop is None:
            raise ValueError("an unbounded generator needs an explicit end")
        batch = self.generate(start, min(stop, self.events if self.events is not None else stop))
        table = pa.Table.from_batches([batch])
        table = table.set_column(0, "event_time", table.column(0).cast(pa.timestamp("ms", tz="UTC")).cast(pa.int64()))
        return table.to_pylist()
