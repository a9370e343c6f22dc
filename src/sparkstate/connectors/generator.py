"""Deterministic, replayable event generators: UPI payments, taxi rides, shop click streams.

Event ``i`` is a pure function of ``(seed, i)``: a generator draws in fixed chunks of ``CHUNK``
events, each from its own RNG stream ``default_rng([seed, chunk])``. So any range of offsets
can be produced again, in any process, which is what makes a restart from a Spark checkpoint
replay exactly the events it had lost.

Event time advances by ``1000 / events_per_second`` ms per event, minus a random lateness of
up to ``max_out_of_orderness_ms``: the stream is out of order, but boundedly so.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from sparkstate.api.io import Guarantee
from sparkstate.connectors.sources import EXACTLY_ONCE, SourceBase
from sparkstate.errors import JobDefinitionError

CHUNK = 1 << 16
DEVICES = ("android", "ios", "web")
_DEVICE_P = (0.62, 0.28, 0.10)
#: NYC's taxi zones are numbered 1..265 (PULocationID / DOLocationID)
TAXI_ZONES = 265
CLICK_TYPES = ("view", "click", "cart", "purchase")
_CLICK_P = (0.70, 0.20, 0.07, 0.03)
_TS = pa.timestamp("us", tz="UTC")


def _ids(prefix: str, numbers: np.ndarray, n: int) -> pa.Array:
    """Id ``number`` of ``n`` for each of ``numbers``: ``prefix`` and the number zero-padded to
    the width of ``n - 1`` (at least 6 digits), e.g. ``m000042``. Written straight into one
    Arrow string buffer, digit by digit, so a batch costs its events, not the ``n`` ids: 50
    million merchants cost what 100 do."""
    width = max(6, len(str(n - 1)))
    head = prefix.encode("ascii")
    size = len(head) + width
    numbers = np.asarray(numbers, dtype=np.int64)
    data = np.empty((len(numbers), size), dtype=np.uint8)
    data[:, : len(head)] = np.frombuffer(head, dtype=np.uint8)
    rest = numbers.copy()
    for digit in range(size - 1, len(head) - 1, -1):  # the last digit first
        data[:, digit] = rest % 10 + 48
        rest //= 10
    offsets = np.arange(0, (len(numbers) + 1) * size, size, dtype=np.int32)
    return pa.StringArray.from_buffers(len(numbers), pa.py_buffer(offsets), pa.py_buffer(data))


def _skewed(rng: np.random.Generator, n: int, skew: float) -> np.ndarray:
    """``CHUNK`` draws from ``range(n)``: uniform at skew 0, favouring low numbers above it."""
    if skew <= 0:
        return rng.integers(0, n, CHUNK)
    u = rng.random(CHUNK)
    return np.minimum((u ** (1.0 + skew) * n).astype(np.int64), n - 1)


@dataclass(frozen=True)
class Generator(SourceBase):
    """What every generator shares: offsets, event time, batch shaping, the end-of-input marker.

    ``events=None`` makes it unbounded. A bounded generator ends with an end-of-input marker
    that advances the watermark to the end of time, so every event-time timer fires, as Flink
    does at the end of a bounded source. ``rate``, ``max_batch`` and ``partitions`` shape the
    micro-batches; every other field defines the events themselves. A subclass names its
    columns (``arrow_schema``, ``schema_ddl``) and draws a chunk's values (``_draw``, ``_columns``).
    """

    events: int | None = 1_000_000
    seed: int = 7
    start_ms: int = 1_735_689_600_000  # 2025-01-01T00:00:00Z
    events_per_second: float = 1000.0
    max_out_of_orderness_ms: int = 5000
    #: wall-clock cap in events/s (None: as fast as Spark takes them)
    rate: float | None = None
    #: at most this many events per micro-batch
    max_batch: int = 500_000
    partitions: int = 2
    end_of_input: bool = True

    arrow_schema: ClassVar[pa.Schema]
    schema_ddl: ClassVar[str]
    time_column: ClassVar[str]
    #: what ``describe`` calls it
    title: ClassVar[str]
    #: fields that must be >= 1
    _positive: ClassVar[tuple[str, ...]] = ()
    #: the same offsets give the same events, so a failed batch is read again exactly
    guarantee: ClassVar[Guarantee] = EXACTLY_ONCE
    guarantee_why: ClassVar[str] = "replayable"
    #: fields that only shape micro-batches; any other change alters the events
    _batch_shaping: ClassVar[frozenset[str]] = frozenset({"rate", "max_batch", "partitions"})

    def __post_init__(self) -> None:

        if self.events is not None and self.events < 0:
            raise JobDefinitionError(f"events must be >= 0, got {self.events}")
        for field_name in ("max_batch", "partitions", *self._positive):
            if getattr(self, field_name) < 1:
                raise JobDefinitionError(f"{field_name} must be >= 1, got {getattr(self, field_name)}")
        if self.events_per_second <= 0:
            raise JobDefinitionError(f"events_per_second must be > 0, got {self.events_per_second}")
        if self.rate is not None and self.rate <= 0:
            raise JobDefinitionError(f"rate must be > 0 events/s, got {self.rate}")
        if self.max_out_of_orderness_ms < 0:
            raise JobDefinitionError(f"max_out_of_orderness_ms must be >= 0, got {self.max_out_of_orderness_ms}")

    @classmethod
    def settings(cls) -> tuple[str, ...]:
        """The names of the settings this generator takes."""
        return tuple(f.name for f in fields(cls))

    @property
    def bounded(self) -> bool:
        return self.events is not None

    @property
    def has_end_marker(self) -> bool:
        return self.events is not None and self.end_of_input

    def always_has_event_time(self, column: str | None) -> bool:
        """Every generated event has its event time (so none can be a dead letter)."""
        return column == self.time_column

    def never_null_keys(self, key_columns: Sequence[str]) -> bool:
        """Generated columns are never null."""
        return True

    def never_behind_watermark(self, strategy: Any) -> bool:
        """No event is behind a watermark that allows at least the generator's disorder."""
        return strategy.timestamp_assigner is None and strategy.max_out_of_orderness_ms >= self.max_out_of_orderness_ms

    def end_offset(self, marker: bool = True) -> int | None:
        """The offset a finished run has read to (None: unbounded).

        With ``marker`` (a job whose function has timers), two offsets follow the last event:
        the end-of-input marker (read with the last events), and an empty micro-batch in
        which the final watermark fires the remaining timers.
        """
        if self.events is None:
            return None
        return self.events + (2 if marker and self.end_of_input else 0)

    def events_between(self, start: int, end: int) -> int:
        """How many events (not counting the end-of-input marker) offsets ``[start, end)`` hold."""
        if self.events is None:
            return max(end - start, 0)
        return max(min(end, self.events) - min(start, self.events), 0)

    def identity(self) -> dict:
        """The generator and every setting that defines its events (not the batch shaping)."""
        return {"type": type(self).__name__, **{k: getattr(self, k) for k in self.settings() if k not in self._batch_shaping}}

    def ends_in(self, start: int, end: int) -> bool:
        """True when offsets ``[start, end)`` include the end-of-input marker."""
        return self.events is not None and self.end_of_input and start <= self.events < end

    def describe(self) -> str:
        n = "unbounded" if self.events is None else f"{self.events:,} events"
        rate = f", {self.rate:,.0f} ev/s" if self.rate else ""
        return f"{self.title} ({n}{self._shape()}, seed {self.seed}{rate})"

    def _shape(self) -> str:
        return ""

    def _draw(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """One chunk's random values (``CHUNK`` of each), drawn in a fixed order."""
        raise NotImplementedError

    def _columns(self, values: dict[str, np.ndarray], event_ms: np.ndarray) -> list[pa.Array]:
        """The Arrow columns of ``arrow_schema`` after the event time, from drawn values."""
        raise NotImplementedError

    def _chunk(self, c: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng([self.seed, c])
        values = self._draw(rng)
        values["lateness"] = rng.integers(0, self.max_out_of_orderness_ms + 1, CHUNK)
        return values

    def generate(self, start: int, end: int) -> pa.RecordBatch:
        """Events ``[start, end)`` as an Arrow batch (offsets past the last event yield nothing)."""
        stop = end if self.events is None else min(end, self.events)
        if stop <= start:
            return pa.RecordBatch.from_pylist([], schema=self.arrow_schema)
        parts: dict[str, list[np.ndarray]] = {}
        i = start
        while i < stop:
            c = i // CHUNK
            lo, hi = i - c * CHUNK, min(stop - c * CHUNK, CHUNK)
            for k, v in self._chunk(c).items():
                parts.setdefault(k, []).append(v[lo:hi])
            i = c * CHUNK + hi
        values = {k: np.concatenate(v) for k, v in parts.items()}
        idx = np.arange(start, stop, dtype=np.int64)
        event_ms = self.start_ms + (idx * 1000 / self.events_per_second).astype(np.int64) - values["lateness"]
        arrays = [pa.array(event_ms * 1000, _TS), *self._columns(values, event_ms)]
        return pa.RecordBatch.from_arrays(arrays, schema=self.arrow_schema)

    def events_as_dicts(self, start: int = 0, end: int | None = None) -> list[dict]:
        """Events ``[start, end)`` as dicts (timestamps in epoch ms), e.g. for the test harness."""
        stop = self.events if end is None else end
        if stop is None:
            raise JobDefinitionError(f"{type(self).__name__} is unbounded (events=None): pass end=... to events_as_dicts")
        batch = self.generate(start, min(stop, self.events if self.events is not None else stop))
        table = pa.Table.from_batches([batch])
        for i, f in enumerate(table.schema):
            if pa.types.is_timestamp(f.type):
                ms = table.column(i).cast(pa.timestamp("ms", tz="UTC")).cast(pa.int64())
                table = table.set_column(i, f.name, ms)
        return table.to_pylist()


UPI_ARROW_SCHEMA = pa.schema(
    [("event_time", _TS), ("merchant_id", pa.string()), ("payer_id", pa.string()), ("amount", pa.float64()),
     ("device", pa.string())]
)


@dataclass(frozen=True)
class UpiPayments(Generator):
    """UPI payments (event_time, merchant_id, payer_id, amount, device): seed 004's input.

    Example::

        >>> print(UpiPayments(events=2_000_000, merchants=100_000, rate=50_000).describe())
        UPI payment generator (2,000,000 events, 100,000 merchants, seed 7, 50,000 ev/s)
    """

    merchants: int = 10_000
    payers: int = 1_000_000
    #: 0 draws merchants uniformly; larger values favour low merchant numbers (hot keys)
    merchant_skew: float = 0.0

    arrow_schema = UPI_ARROW_SCHEMA
    schema_ddl = "event_time timestamp, merchant_id string, payer_id string, amount double, device string"
    time_column = "event_time"
    title = "UPI payment generator"
    _positive = ("merchants", "payers")

    def _shape(self) -> str:
        return f", {self.merchants:,} merchants"

    def _draw(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        merchant = _skewed(rng, self.merchants, self.merchant_skew)
        payer = rng.integers(0, self.payers, CHUNK)
        amount = np.round(np.clip(np.exp(rng.normal(6.0, 1.2, CHUNK)), 1.0, 200_000.0), 2)
        device = rng.choice(len(DEVICES), CHUNK, p=_DEVICE_P)
        return {"merchant": merchant, "payer": payer, "amount": amount, "device": device}

    def _columns(self, v: dict[str, np.ndarray], event_ms: np.ndarray) -> list[pa.Array]:
        return [
            _ids("m", v["merchant"], self.merchants),
            _ids("p", v["payer"], self.payers),
            pa.array(v["amount"], pa.float64()),
            pa.array(np.array(DEVICES, dtype=object)[v["device"]], pa.string()),
        ]


#: the kinds of fraud :class:`FraudPayments` injects, in the order its patterns draw them
FRAUD_KINDS = ("velocity", "amount-spike", "new-device")
#: payments in each kind's pattern; its last payment is the one that should raise the alert
_FRAUD_LENGTH = (5, 4, 3)
#: a pattern spans at most this much event time (plus the generator's disorder)
FRAUD_SPAN_MS = 120_000


@dataclass(frozen=True)
class InjectedFraud:
    """One injected fraud pattern: its kind, its payer (used by no other payment), and the
    offset of the payment that completes it (the one whose alert is expected)."""

    kind: str
    payer_id: str
    offset: int
    #: offsets of all its payments, the last one included
    offsets: tuple[int, ...]


@dataclass(frozen=True)
class FraudPayments(UpiPayments):
    """UPI payments with known fraud patterns injected (seed 003 pattern 1, seed 004's rule).

    ``fraud`` is the number of patterns per payment (0.001: one pattern per thousand payments).
    Each pattern belongs to a payer of its own (``f000000042``, never drawn otherwise) and
    overwrites a few payments of the underlying :class:`UpiPayments` stream, which are
    otherwise the same events (the patterns draw from RNG streams of their own):

    * ``velocity``: 5 payments within :data:`FRAUD_SPAN_MS` of event time (100-1,000 each);
    * ``amount-spike``: 3 payments of 100-1,000 on one device, then one of 20-50 times their
      average on the same device;
    * ``new-device``: 2 payments of 1,000-10,000 on one device, then one above 50,000 from
      another device (seed 004's "block any payment over 50,000 from a new device").

    Deterministic: a pattern is a function of ``(seed, chunk)`` like every event, so a replay
    gives the same patterns. :meth:`injected` lists them for a test.

    Example::

        >>> g = FraudPayments(events=100_000, fraud=0.001)
        >>> sorted({f.kind for f in g.injected()})
        ['amount-spike', 'new-device', 'velocity']
    """

    fraud: float = 0.001

    title = "UPI payment generator with injected fraud"

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 <= self.fraud <= 0.02:
            raise JobDefinitionError(
                f"fraud must be between 0 and 0.02 patterns per payment (each needs room for its payments), got {self.fraud}"
            )

    def _shape(self) -> str:
        return f"{super()._shape()}, {self.fraud:g} fraud patterns per payment"

    def _patterns(self, c: int) -> list[tuple[int, int, np.ndarray]]:
        """The patterns of chunk ``c``: ``(number, kind, positions in the chunk)``."""
        n = round(self.fraud * CHUNK)
        if n == 0:
            return []
        rng = np.random.default_rng([self.seed, c, 0xF4A0D])
        slot = CHUNK // n
        ms_per_event = 1000.0 / self.events_per_second
        gap = max(1, min(slot // 5, int(FRAUD_SPAN_MS / ms_per_event) // 5))
        out = []
        for i in range(n):
            kind = int(rng.integers(0, len(FRAUD_KINDS)))
            length = _FRAUD_LENGTH[kind]
            start = i * slot + int(rng.integers(0, slot - (length - 1) * gap))
            out.append((c * n + i, kind, start + gap * np.arange(length)))
        return out

    def _chunk(self, c: int) -> dict[str, np.ndarray]:
        values = super()._chunk(c)
        patterns = self._patterns(c)
        fraud_payer = np.full(CHUNK, -1, np.int64)
        amount, device = values["amount"].copy(), values["device"].copy()
        rng = np.random.default_rng([self.seed, c, 0xF4A0E])
        for number, kind, pos in patterns:
            fraud_payer[pos] = number
            home = int(rng.integers(0, len(DEVICES)))
            device[pos] = home
            if FRAUD_KINDS[kind] == "velocity":
                amount[pos] = rng.uniform(100.0, 1000.0, len(pos))
            elif FRAUD_KINDS[kind] == "amount-spike":
                history = rng.uniform(100.0, 1000.0, 3)
                amount[pos] = [*history, np.mean(np.round(history, 2)) * rng.uniform(20.0, 50.0)]
            else:
                amount[pos] = [*rng.uniform(1000.0, 10_000.0, 2), rng.uniform(50_001.0, 150_000.0)]
                device[pos[-1]] = (home + 1 + int(rng.integers(0, len(DEVICES) - 1))) % len(DEVICES)
        values["amount"] = np.round(amount, 2)
        values["device"] = device
        values["fraud_payer"] = fraud_payer
        return values

    def _columns(self, v: dict[str, np.ndarray], event_ms: np.ndarray) -> list[pa.Array]:
        import pyarrow.compute as pc

        columns = super()._columns(v, event_ms)
        mask = v["fraud_payer"] >= 0
        if mask.any():
            numbers = v["fraud_payer"][mask]
            columns[1] = pc.replace_with_mask(columns[1], pa.array(mask), pa.array(fraud_payer_ids(numbers)))
        return columns

    def injected(self, start: int = 0, end: int | None = None) -> list[InjectedFraud]:
        """The patterns whose completing payment is among offsets ``[start, end)`` (default:
        every event), in offset order."""
        stop = self.events if end is None else end
        if stop is None:
            raise JobDefinitionError("FraudPayments is unbounded (events=None): pass end=... to injected")
        if self.events is not None:
            stop = min(stop, self.events)
        found = []
        for c in range(start // CHUNK, (stop + CHUNK - 1) // CHUNK):
            for number, kind, pos in self._patterns(c):
                offsets = tuple(int(c * CHUNK + p) for p in pos)
                if start <= offsets[-1] < stop:
                    found.append(InjectedFraud(FRAUD_KINDS[kind], str(fraud_payer_ids(np.array([number]))[0]),
                                               offsets[-1], offsets))
        return found


def fraud_payer_ids(numbers: np.ndarray) -> np.ndarray:
    """The payer ids of injected patterns: ``f`` and a 9-digit number, apart from ``p...``."""
    return np.char.add("f", np.char.zfill(numbers.astype(str), 9))


@dataclass(frozen=True)
class UpiTransactions(UpiPayments):
    """UPI payments with a transaction id, some of them delivered again (seed 003's dedup input).

    A ``duplicates`` share of the events repeat an earlier transaction: its ``txn_id`` and
    payload (merchant, payer, amount, device), arriving up to ``duplicate_delay_ms`` of event
    time later (the event time is the arrival's). A transaction's id is the offset of its first
    delivery; a repeat always repeats a first delivery (an event drawn to repeat a repeat is
    a new transaction instead, and the draw's rate is raised so that the share stays
    ``duplicates``). Which events repeat which is drawn per chunk from its own RNG stream, so
    it is a pure function of ``(seed, offset)`` like everything else: a replay, and a restart,
    read the same duplicates.

    Example::

        >>> print(UpiTransactions(events=2_000_000, duplicates=0.05).describe())
        UPI transaction generator (2,000,000 events, 10,000 merchants, 5% duplicates, seed 7)
    """

    #: the share of events that repeat an earlier transaction (0 <= duplicates <= 0.25)
    duplicates: float = 0.0
    #: how much later (event time) a repeat may arrive: up to 5 minutes
    duplicate_delay_ms: int = 300_000

    arrow_schema = pa.schema([UPI_ARROW_SCHEMA.field(0), ("txn_id", pa.int64()), *list(UPI_ARROW_SCHEMA)[1:]])
    schema_ddl = (
        "event_time timestamp, txn_id bigint, merchant_id string, payer_id string, amount double, device string"
    )
    title = "UPI transaction generator"

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 <= self.duplicates <= 0.25:
            raise JobDefinitionError(
                f"duplicates is the share of events that repeat an earlier one: 0 <= duplicates <= 0.25, "
                f"got {self.duplicates}"
            )
        if self.duplicate_delay_ms < 0:
            raise JobDefinitionError(f"duplicate_delay_ms must be >= 0, got {self.duplicate_delay_ms}")

    def _shape(self) -> str:
        return super()._shape() + (f", {self.duplicates:.0%} duplicates" if self.duplicates else "")

    @property
    def _max_lag(self) -> int:
        """The most offsets a repeat comes after its original (its delay in events)."""
        return max(1, int(self.duplicate_delay_ms * self.events_per_second / 1000))

    def origins(self, idx: np.ndarray) -> np.ndarray:
        """The offset of the first delivery of each event in ``idx`` (itself unless a repeat)."""
        origin = np.array(idx, dtype=np.int64)
        if not self.duplicates:
            return origin
        drawn, lag = self._drawn(origin)
        target = origin - np.minimum(lag, origin)
        # an event drawn to repeat an event that was itself drawn to repeat is a new transaction
        repeat = drawn & ~self._drawn(target)[0]
        origin[repeat] = target[repeat]
        return origin

    @property
    def _draw_rate(self) -> float:
        """The rate p of drawing a repeat, such that p (1 - p) repeats (of first deliveries) are ``duplicates``."""
        return (1 - math.sqrt(1 - 4 * self.duplicates)) / 2

    def _drawn(self, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        repeat = np.zeros(len(at), dtype=bool)
        lag = np.zeros(len(at), dtype=np.int64)
        chunks = at // CHUNK
        for c in np.unique(chunks):
            mask = chunks == c
            u, lags = _repeat_draws(self.seed, int(c), self._max_lag)
            pos = at[mask] - c * CHUNK
            repeat[mask] = (u[pos] < self._draw_rate) & (at[mask] > 0)
            lag[mask] = lags[pos]
        return repeat, lag

    def _gather(self, at: np.ndarray, names: tuple[str, ...]) -> dict[str, np.ndarray]:
        """Drawn values ``names`` of the events at offsets ``at`` (any chunks)."""
        out: dict[str, np.ndarray] = {}
        chunks = at // CHUNK
        for c in np.unique(chunks):
            mask = chunks == c
            values = self._cached_chunk(int(c))
            pos = at[mask] - c * CHUNK
            for name in names:
                column = out.get(name)
                if column is None:
                    column = out[name] = np.empty(len(at), dtype=values[name].dtype)
                column[mask] = values[name][pos]
        return out

    @functools.lru_cache(maxsize=8)  # noqa: B019 - frozen, hashable; repeats look a few chunks back
    def _cached_chunk(self, c: int) -> dict[str, np.ndarray]:
        return self._chunk(c)

    def generate(self, start: int, end: int) -> pa.RecordBatch:
        stop = end if self.events is None else min(end, self.events)
        if stop <= start:
            return pa.RecordBatch.from_pylist([], schema=self.arrow_schema)
        idx = np.arange(start, stop, dtype=np.int64)
        origin = self.origins(idx)
        payload = self._gather(origin, ("merchant", "payer", "amount", "device"))
        lateness = self._gather(idx, ("lateness",))["lateness"]
        event_ms = self.start_ms + (idx * 1000 / self.events_per_second).astype(np.int64) - lateness
        arrays = [pa.array(event_ms * 1000, _TS), pa.array(origin, pa.int64()), *self._columns(payload, event_ms)]
        return pa.RecordBatch.from_arrays(arrays, schema=self.arrow_schema)


@functools.lru_cache(maxsize=16)
def _repeat_draws(seed: int, chunk: int, max_lag: int) -> tuple[np.ndarray, np.ndarray]:
    """Per offset of a chunk: a uniform draw (a repeat when below ``duplicates``) and a lag."""
    rng = np.random.default_rng([seed, chunk, 1])
    return rng.random(CHUNK), rng.integers(1, max_lag + 1, CHUNK)


@dataclass(frozen=True)
class TaxiRides(Generator):
    """NYC-style taxi rides (seed 000): pickup time, pickup and drop-off zone (1-265), fare.

    Zones are skewed as in the city (a few busy zones take most pickups); ``total_amount`` is
    the fare plus tip, tolls and surcharges. Ten rides per event-time second by default.

    Example::

        >>> print(TaxiRides(events=500_000, events_per_second=10).describe())
        taxi ride generator (500,000 events, 265 zones, seed 7)
    """

    events_per_second: float = 10.0
    max_out_of_orderness_ms: int = 30_000
    zone_skew: float = 2.0

    arrow_schema = pa.schema(
        [("pickup_time", _TS), ("pickup_zone", pa.int32()), ("dropoff_zone", pa.int32()),
         ("passengers", pa.int32()), ("trip_miles", pa.float64()), ("fare", pa.float64()),
         ("total_amount", pa.float64())]
    )
    schema_ddl = (
        "pickup_time timestamp, pickup_zone int, dropoff_zone int, passengers int, trip_miles double, "
        "fare double, total_amount double"
    )
    time_column = "pickup_time"
    title = "taxi ride generator"

    def _shape(self) -> str:
        return f", {TAXI_ZONES} zones"

    def _draw(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        pickup = _skewed(rng, TAXI_ZONES, self.zone_skew) + 1
        dropoff = _skewed(rng, TAXI_ZONES, self.zone_skew) + 1
        passengers = rng.choice(6, CHUNK, p=(0.70, 0.15, 0.06, 0.04, 0.03, 0.02)) + 1
        miles = np.round(np.clip(rng.lognormal(0.6, 0.8, CHUNK), 0.1, 60.0), 2)
        extras = np.round(rng.uniform(0.0, 0.25, CHUNK), 2)  # tip share
        return {"pickup": pickup, "dropoff": dropoff, "passengers": passengers, "miles": miles, "extras": extras}

    def _columns(self, v: dict[str, np.ndarray], event_ms: np.ndarray) -> list[pa.Array]:
        fare = np.round(3.0 + 2.5 * v["miles"], 2)
        total = np.round(fare * (1.0 + v["extras"]) + 3.5, 2)
        return [
            pa.array(v["pickup"], pa.int32()),
            pa.array(v["dropoff"], pa.int32()),
            pa.array(v["passengers"], pa.int32()),
            pa.array(v["miles"], pa.float64()),
            pa.array(fare, pa.float64()),
            pa.array(total, pa.float64()),
        ]


@dataclass(frozen=True)
class ClickEvents(Generator):
    """A shop's click stream (seed 003's sessions): user, item, category and event type.

    Users come and go: at any moment ``active_users`` of them are browsing, and the active set
    moves on by ``active_users / 4`` users every ``shift_minutes`` of event time, so each user
    has bursts of activity separated by long quiet spells (sessions). Items are skewed (some
    are hot); ``categories`` group them.

    Example::

        >>> print(ClickEvents(events=200_000, users=20_000, items=5_000).describe())
        click-stream generator (200,000 events, 20,000 users, 5,000 items, seed 7)
    """

    events_per_second: float = 50.0
    users: int = 20_000
    active_users: int = 1_000
    shift_minutes: float = 20.0
    items: int = 5_000
    categories: int = 20
    item_skew: float = 3.0

    arrow_schema = pa.schema(
        [("event_time", _TS), ("user_id", pa.string()), ("item_id", pa.string()), ("category", pa.string()),
         ("event_type", pa.string())]
    )
    schema_ddl = "event_time timestamp, user_id string, item_id string, category string, event_type string"
    time_column = "event_time"
    title = "click-stream generator"
    _positive = ("users", "active_users", "items", "categories")

    def _shape(self) -> str:
        return f", {self.users:,} users, {self.items:,} items"

    def _draw(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        return {
            "user_offset": rng.integers(0, min(self.active_users, self.users), CHUNK),
            "item": _skewed(rng, self.items, self.item_skew),
            "type": rng.choice(len(CLICK_TYPES), CHUNK, p=_CLICK_P),
        }

    def _columns(self, v: dict[str, np.ndarray], event_ms: np.ndarray) -> list[pa.Array]:
        period = int(self.shift_minutes * 60_000)
        step = max(1, self.active_users // 4)
        user = ((event_ms - self.start_ms) // period * step + v["user_offset"]) % self.users
        category = v["item"] % self.categories
        return [
            _ids("u", user, self.users),
            _ids("i", v["item"], self.items),
            _ids("c", category, self.categories),
            pa.array(np.array(CLICK_TYPES, dtype=object)[v["type"]], pa.string()),
        ]


#: every generator by class name (how a Spark data source and a checkpoint name them)
GENERATORS: dict[str, type[Generator]] = {
    g.__name__: g for g in (UpiPayments, UpiTransactions, TaxiRides, ClickEvents, FraudPayments)
}
