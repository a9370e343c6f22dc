"""The Nexmark benchmark's event stream: people, auctions and bids, as the Nexmark generator makes them.

The rules are those of the ``nexmark/nexmark`` repository's ``NexmarkGenerator``,
``GeneratorConfig`` and ``model/*Generator`` (and Beam's Nexmark before them), with the
configuration its Flink table source uses:

* event ``k`` of the stream (offset ``k``, from 0) has event number ``k + 1`` and id ``k + 2``
  (the table source's first event id and first event number are both 1);
* its type is ``id % 50``: 0 a person, 1-3 an auction, 4-49 a bid (1 : 3 : 46);
* its time is ``start_ms + floor((k + 1) * 1e6 / events_per_second) // 1000``: in order, as
  the reference's default ``outOfOrderGroupSize`` of 1 makes it (its DDL's watermark allows
  4 s all the same);
* person and auction ids start at 1000 and count the people and auctions so far; a seller or
  bidder is one of the last ``active_people`` people (plus 10 "leads" ahead of the last), an
  auction bid on is one of the last ``in_flight_auctions`` auctions (plus 10 leads);
* hot keys: with probability ``1 - 1/hot_auction_ratio`` a bid goes to the first of the last
  100 auctions (50% by default), with ``1 - 1/hot_bidders_ratio`` it comes from the second of
  the last 100 people (75%), and with ``1 - 1/hot_sellers_ratio`` an auction's seller is the
  first of the last 100 people (75%); half of the bids come from four hot channels;
* an auction expires ``1 + uniform(2 * horizon)`` ms after it starts, the horizon being the
  time until ``in_flight_auctions`` more auctions have been made;
* prices are ``round(10 ** uniform(0, 6) * 100)``; strings are random letters with a space
  (or ``_`` in URLs) 1 time in 13, trimmed; ``extra`` pads each record to about its average
  size (person 200, auction 500, bid 100 bytes), cut from one fixed random text.
* The reference adds ``FIRST_PERSON_ID`` (1000) to a bidder twice (``BidGenerator.nextBid``),
  so bidders are numbered from 2000: kept, so that the events are the reference's.

Deterministic where the reference is not (it draws from an unseeded ``SplittableRandom``):
every field of event ``k`` is a function of ``(seed, k)``. Values are drawn per chunk of
:data:`~sparkstate.connectors.generator.CHUNK` events and per type, each from its own RNG
stream, so a replay, a restart and each of the three views give the same events, and offsets
are event positions. The distributions are the reference's; the values are not its (its
random stream differs).

The three views are generators of their own, as the Nexmark SQL's views ``person``,
``auction`` and ``bid`` are views of one table: :class:`NexmarkPersons`,
:class:`NexmarkAuctions`, :class:`NexmarkBids`. Each reads the same offsets and keeps its own
events, so two views joined in a job (``Job.connect``) read the same stream in step.
:func:`write_json_lines` writes the whole stream as JSON lines in the shape of the
reference's ``ddl_gen.sql`` (``event_type`` and a nested ``person``, ``auction`` or ``bid``),
so that Flink SQL and Spark SQL read exactly the events sparkstate reads.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkstate.connectors.generator import _TS, CHUNK, GENERATORS, Generator
from sparkstate.errors import JobDefinitionError

PERSON, AUCTION, BID = 0, 1, 2
VIEWS = ("person", "auction", "bid")
#: the proportions of the three types in each run of 50 events
PERSON_PROPORTION, AUCTION_PROPORTION, BID_PROPORTION = 1, 3, 46
TOTAL_PROPORTION = PERSON_PROPORTION + AUCTION_PROPORTION + BID_PROPORTION
FIRST_PERSON_ID = 1000
FIRST_AUCTION_ID = 1000
FIRST_CATEGORY_ID = 10
NUM_CATEGORIES = 5
#: ids ahead of the last person / auction a draw may pick ("leads")
PERSON_ID_LEAD = 10
AUCTION_ID_LEAD = 10
#: hot sellers, auctions and bidders are one of each batch of this many
HOT_BATCH = 100
HOT_CHANNELS = ("Google", "Facebook", "Baidu", "Apple")
CHANNELS_NUMBER = 10_000
US_STATES = ("AZ", "CA", "ID", "OR", "WA", "WY")
US_CITIES = ("Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond", "Seattle", "Kent",
             "Cheyenne")
FIRST_NAMES = ("Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter")
LAST_NAMES = ("Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris")
_MIN_STRING_LENGTH = 3
#: the text every ``extra`` is cut from (the reference's REUSABLE_EXTRA_STRING), 1 MiB
_EXTRA_TEXT_BYTES = 1024 * 1024

PERSON_SCHEMA = pa.schema(
    [("id", pa.int64()), ("name", pa.string()), ("email_address", pa.string()), ("credit_card", pa.string()),
     ("city", pa.string()), ("state", pa.string()), ("date_time", _TS), ("extra", pa.string())]
)
AUCTION_SCHEMA = pa.schema(
    [("id", pa.int64()), ("item_name", pa.string()), ("description", pa.string()), ("initial_bid", pa.int64()),
     ("reserve", pa.int64()), ("date_time", _TS), ("expires", _TS), ("seller", pa.int64()),
     ("category", pa.int64()), ("extra", pa.string())]
)
BID_SCHEMA = pa.schema(
    [("auction", pa.int64()), ("bidder", pa.int64()), ("price", pa.int64()), ("channel", pa.string()),
     ("url", pa.string()), ("date_time", _TS), ("extra", pa.string())]
)


#: the views' Arrow types as SQL types (Spark's DDL)
_SQL_TYPES = {pa.int64(): "BIGINT", pa.string(): "STRING", _TS: "TIMESTAMP"}


def _ddl(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name} {_SQL_TYPES[f.type].lower()}" for f in schema)


# ------------------------------------------------------------------ the id rules (vectorised)


def event_ids(offsets: np.ndarray) -> np.ndarray:
    """The Nexmark event id of each offset (``offset + 2``; see the module docs)."""
    return np.asarray(offsets, dtype=np.int64) + 2


def event_types(ids: np.ndarray) -> np.ndarray:
    """0 (person), 1 (auction) or 2 (bid) for each event id: ``id % 50`` against 1 : 3 : 46."""
    rem = ids % TOTAL_PROPORTION
    return np.where(rem < PERSON_PROPORTION, PERSON, np.where(rem < PERSON_PROPORTION + AUCTION_PROPORTION, AUCTION, BID))


def last_base0_person_id(ids: np.ndarray) -> np.ndarray:
    """The reference's ``PersonGenerator.lastBase0PersonId``: the last person made at or before each event."""
    epoch, offset = ids // TOTAL_PROPORTION, ids % TOTAL_PROPORTION
    return epoch * PERSON_PROPORTION + np.minimum(offset, PERSON_PROPORTION - 1)


def last_base0_auction_id(ids: np.ndarray) -> np.ndarray:
    """The reference's ``AuctionGenerator.lastBase0AuctionId``: the last auction made at or before each event."""
    epoch, offset = ids // TOTAL_PROPORTION, ids % TOTAL_PROPORTION
    person = offset < PERSON_PROPORTION
    bid = offset >= PERSON_PROPORTION + AUCTION_PROPORTION
    epoch = np.where(person, epoch - 1, epoch)
    offset = np.where(person | bid, AUCTION_PROPORTION - 1, offset - PERSON_PROPORTION)
    return epoch * AUCTION_PROPORTION + offset


def count_of_type(kind: int, start: int, end: int) -> int:
    """How many of offsets ``[start, end)`` are events of type ``kind``."""
    if end <= start:
        return 0
    low = {PERSON: 0, AUCTION: PERSON_PROPORTION, BID: PERSON_PROPORTION + AUCTION_PROPORTION}[kind]
    high = {PERSON: PERSON_PROPORTION, AUCTION: PERSON_PROPORTION + AUCTION_PROPORTION, BID: TOTAL_PROPORTION}[kind]

    def upto(i: int) -> int:  # events of the type among ids [0, i)
        full, rest = divmod(i, TOTAL_PROPORTION)
        return full * (high - low) + min(max(rest - low, 0), high - low)

    return upto(end + 2) - upto(start + 2)


# ------------------------------------------------------------------ strings (vectorised)


def _strings(lengths: np.ndarray, data: np.ndarray) -> pa.Array:
    """An Arrow string array of the rows of ``data`` (uint8, one row per string) cut to ``lengths``."""
    lengths = np.asarray(lengths, dtype=np.int64)
    mask = np.arange(data.shape[1])[None, :] < lengths[:, None]
    buf = np.ascontiguousarray(data[mask])
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    return pa.StringArray.from_buffers(len(lengths), pa.py_buffer(offsets), pa.py_buffer(buf))


def next_strings(rng: np.random.Generator, n: int, max_length: int, special: str = " ") -> pa.Array:
    """The reference's ``StringsGenerator.nextString``: ``3 + uniform(max_length - 3)`` characters,
    each ``special`` 1 time in 13 and a random lowercase letter otherwise; trimmed of spaces."""
    lengths = _MIN_STRING_LENGTH + rng.integers(0, max_length - _MIN_STRING_LENGTH, n)
    width = max_length - 1
    letters = (rng.integers(0, 26, (n, width)) + ord("a")).astype(np.uint8)
    letters[rng.integers(0, 13, (n, width)) == 0] = ord(special)
    out = _strings(lengths, letters)
    return pc.utf8_trim_whitespace(out) if special == " " else out


@functools.lru_cache(maxsize=1)
def _extra_text() -> np.ndarray:
    return (np.random.default_rng(0x4E58).integers(0, 26, _EXTRA_TEXT_BYTES) + ord("a")).astype(np.uint8)


def next_extras(rng: np.random.Generator, current_size: np.ndarray, average_size: int) -> pa.Array:
    """The reference's ``StringsGenerator.nextExtra``: padding that brings a record of
    ``current_size`` bytes to ``average_size`` on average (+-20%), cut from one fixed text."""
    current_size = np.asarray(current_size, dtype=np.int64)
    desired = average_size - current_size
    delta = np.floor(desired * 0.2 + 0.5).astype(np.int64)  # Java's Math.round
    span = np.maximum(2 * delta, 1)
    size = desired - delta + np.where(delta > 0, rng.integers(0, 2**62, len(desired)) % span, 0)
    size = np.where(current_size > average_size, 0, np.maximum(size, 0))
    text = _extra_text()
    start = rng.integers(0, 2**62, len(size)) % (len(text) - size)
    total = int(size.sum())
    begins = np.cumsum(size) - size
    idx = np.arange(total, dtype=np.int64) - np.repeat(begins, size) + np.repeat(start, size)
    offsets = np.concatenate([[0], np.cumsum(size)]).astype(np.int32)
    return pa.StringArray.from_buffers(len(size), pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(text[idx])))


def next_prices(rng: np.random.Generator, n: int) -> np.ndarray:
    """The reference's ``PriceGenerator.nextPrice``: ``round(10 ** uniform(0, 6) * 100)``."""
    return np.floor(10.0 ** (rng.random(n) * 6.0) * 100.0 + 0.5).astype(np.int64)


def _java_abs_reverse(i: int) -> int:
    """Java's ``Math.abs(Integer.reverse(i))`` (the bits of a 32-bit int reversed, as a signed int)."""
    r = int(f"{i:032b}"[::-1], 2)
    r = r - (1 << 32) if r >= 1 << 31 else r
    return r if r == -(1 << 31) else abs(r)


def _base_urls(rng: np.random.Generator, n: int) -> list[str]:
    parts = [next_strings(rng, n, 5, "_").to_pylist() for _ in range(3)]
    return [f"https://www.nexmark.com/{a}/{b}/{c}/item.htm?query=1" for a, b, c in zip(*parts)]


@functools.lru_cache(maxsize=1)
def _channels() -> tuple[pa.Array, pa.Array]:
    """The 4 hot channels then the 10,000 others (``channel-N``), and their URLs: fixed for
    every seed, as the reference's static cache is for every run of one JVM."""
    rng = np.random.default_rng(0x4E59)
    hot_urls = _base_urls(rng, len(HOT_CHANNELS))
    urls = _base_urls(rng, CHANNELS_NUMBER)
    with_id = rng.integers(0, 10, CHANNELS_NUMBER) > 0
    urls = [u + f"&channel_id={_java_abs_reverse(i)}" if w else u for i, (u, w) in enumerate(zip(urls, with_id))]
    names = [*HOT_CHANNELS, *(f"channel-{i}" for i in range(CHANNELS_NUMBER))]
    return pa.array(names, pa.string()), pa.array([*hot_urls, *urls], pa.string())


# ------------------------------------------------------------------ the generators


@dataclass(frozen=True)
class NexmarkGenerator(Generator):
    """What the three views share: the Nexmark configuration and the id and time rules.

    The settings are the reference's, snake_cased: ``events_per_second`` is its
    ``first-event.rate`` (the rate of event time, 10,000 by default), ``hot_auction_ratio`` its
    ``bid.hot-ratio.auctions`` and so on. ``max_out_of_orderness_ms`` is 0: the events are in
    event-time order (the jobs' watermarks allow 4 s, as the reference's DDL does).
    """

    events_per_second: float = 10_000.0
    max_out_of_orderness_ms: int = 0
    active_people: int = 1000
    in_flight_auctions: int = 100
    hot_auction_ratio: int = 2
    hot_bidders_ratio: int = 4
    hot_sellers_ratio: int = 4
    person_bytes: int = 200
    auction_bytes: int = 500
    bid_bytes: int = 100

    time_column = "date_time"
    kind: ClassVar[int]
    _positive = ("active_people", "in_flight_auctions", "hot_auction_ratio", "hot_bidders_ratio", "hot_sellers_ratio")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_out_of_orderness_ms:
            raise JobDefinitionError(
                f"{type(self).__name__}: Nexmark's events are in event-time order; max_out_of_orderness_ms must be 0, "
                f"got {self.max_out_of_orderness_ms}"
            )

    def _shape(self) -> str:
        return f", {self.events_per_second:,.0f} events/s of event time"

    def events_between(self, start: int, end: int) -> int:
        stop = end if self.events is None else min(end, self.events)
        return count_of_type(self.kind, start, stop)

    def timestamps(self, offsets: np.ndarray) -> np.ndarray:
        """Event time (epoch ms) of each offset: the reference's ``timestampForEvent(k + 1)``."""
        delay_us = 1e6 / self.events_per_second
        return self.start_ms + np.floor((np.asarray(offsets, dtype=np.int64) + 1) * delay_us).astype(np.int64) // 1000

    def _next_base0_person_id(self, rng: np.random.Generator, ids: np.ndarray) -> np.ndarray:
        """The reference's ``nextBase0PersonId``: one of the last ``active_people`` people or a lead."""
        people = last_base0_person_id(ids) + 1
        active = np.minimum(people, self.active_people)
        return people - active + rng.integers(0, 2**62, len(ids)) % (active + PERSON_ID_LEAD)

    def _next_base0_auction_id(self, rng: np.random.Generator, ids: np.ndarray) -> np.ndarray:
        """The reference's ``nextBase0AuctionId``: one of the last ``in_flight_auctions`` auctions or a lead."""
        last = last_base0_auction_id(ids)
        low = np.maximum(last - self.in_flight_auctions, 0)
        return low + rng.integers(0, 2**62, len(ids)) % (last - low + 1 + AUCTION_ID_LEAD)

    def _draw_kind(self, kind: int, c: int) -> tuple[np.ndarray, list[pa.Array]]:
        """Chunk ``c``'s events of type ``kind``: their offsets and their columns."""
        offsets = np.arange(c * CHUNK, (c + 1) * CHUNK, dtype=np.int64)
        ids = event_ids(offsets)
        keep = event_types(ids) == kind
        offsets, ids = offsets[keep], ids[keep]
        rng = np.random.default_rng([self.seed, c, 0x4E4D, kind])
        ts = self.timestamps(offsets)
        return offsets, {PERSON: self._persons, AUCTION: self._auctions, BID: self._bids}[kind](rng, ids, offsets, ts)

    def _persons(self, rng: np.random.Generator, ids: np.ndarray, offsets: np.ndarray, ts: np.ndarray) -> list[pa.Array]:
        n = len(ids)
        first = pa.array(FIRST_NAMES).take(pa.array(rng.integers(0, len(FIRST_NAMES), n)))
        last = pa.array(LAST_NAMES).take(pa.array(rng.integers(0, len(LAST_NAMES), n)))
        name = pc.binary_join_element_wise(first, last, " ")
        email = pc.binary_join_element_wise(next_strings(rng, n, 7), next_strings(rng, n, 5), "@")
        email = pc.binary_join_element_wise(email, pa.scalar(".com"), "")
        digits = rng.integers(0, 10_000, (n, 4))
        groups = [pc.utf8_lpad(pa.array(digits[:, i]).cast(pa.string()), 4, "0") for i in range(4)]
        card = pc.binary_join_element_wise(*groups, " ")
        city = pa.array(US_CITIES).take(pa.array(rng.integers(0, len(US_CITIES), n)))
        state = pa.array(US_STATES).take(pa.array(rng.integers(0, len(US_STATES), n)))
        size = 8 + sum(pc.utf8_length(a).to_numpy(zero_copy_only=False) for a in (name, email, card, city, state))
        extra = next_extras(rng, size, self.person_bytes)
        pid = last_base0_person_id(ids) + FIRST_PERSON_ID
        return [pa.array(pid), name, email, card, city, state, pa.array(ts * 1000, _TS), extra]

    def _auctions(self, rng: np.random.Generator, ids: np.ndarray, offsets: np.ndarray, ts: np.ndarray) -> list[pa.Array]:
        n = len(ids)
        hot = rng.integers(0, self.hot_sellers_ratio, n) > 0
        hot_seller = (last_base0_person_id(ids) // HOT_BATCH) * HOT_BATCH
        seller = np.where(hot, hot_seller, self._next_base0_person_id(rng, ids)) + FIRST_PERSON_ID
        category = FIRST_CATEGORY_ID + rng.integers(0, NUM_CATEGORIES, n)
        initial = next_prices(rng, n)
        # the horizon: when the auction ``in_flight_auctions`` ahead of this one will be made
        ahead = (self.in_flight_auctions * TOTAL_PROPORTION) // AUCTION_PROPORTION
        horizon = self.timestamps(offsets + ahead) - ts
        expires = ts + 1 + rng.integers(0, 2**62, n) % np.maximum(horizon * 2, 1)
        item = next_strings(rng, n, 20)
        description = next_strings(rng, n, 100)
        reserve = initial + next_prices(rng, n)
        size = 8 + pc.utf8_length(item).to_numpy(zero_copy_only=False) + pc.utf8_length(description).to_numpy(
            zero_copy_only=False) + 40
        extra = next_extras(rng, size, self.auction_bytes)
        aid = last_base0_auction_id(ids) + FIRST_AUCTION_ID
        return [pa.array(aid), item, description, pa.array(initial), pa.array(reserve), pa.array(ts * 1000, _TS),
                pa.array(expires * 1000, _TS), pa.array(seller), pa.array(category), extra]

    def _bids(self, rng: np.random.Generator, ids: np.ndarray, offsets: np.ndarray, ts: np.ndarray) -> list[pa.Array]:
        n = len(ids)
        hot_auction = rng.integers(0, self.hot_auction_ratio, n) > 0
        auction = np.where(hot_auction, (last_base0_auction_id(ids) // HOT_BATCH) * HOT_BATCH,
                           self._next_base0_auction_id(rng, ids)) + FIRST_AUCTION_ID
        hot_bidder = rng.integers(0, self.hot_bidders_ratio, n) > 0
        bidder = np.where(hot_bidder, (last_base0_person_id(ids) // HOT_BATCH) * HOT_BATCH + 1,
                          self._next_base0_person_id(rng, ids))
        bidder = bidder + 2 * FIRST_PERSON_ID  # the reference adds it twice (module docs)
        price = next_prices(rng, n)
        hot_channel = rng.integers(0, 2, n) > 0
        channel_no = np.where(hot_channel, rng.integers(0, len(HOT_CHANNELS), n),
                              len(HOT_CHANNELS) + rng.integers(0, CHANNELS_NUMBER, n))
        names, urls = _channels()
        pick = pa.array(channel_no)
        extra = next_extras(rng, np.full(n, 32), self.bid_bytes)
        return [pa.array(auction), pa.array(bidder), pa.array(price), names.take(pick), urls.take(pick),
                pa.array(ts * 1000, _TS), extra]

    @functools.lru_cache(maxsize=4)  # noqa: B019 - frozen, hashable; a batch's partitions share chunks
    def _chunk_of(self, c: int) -> tuple[np.ndarray, pa.RecordBatch]:
        offsets, columns = self._draw_kind(self.kind, c)
        return offsets, pa.RecordBatch.from_arrays(columns, schema=self.arrow_schema)

    def generate_with_offsets(self, start: int, end: int) -> tuple[np.ndarray, pa.RecordBatch]:
        """This view's events among offsets ``[start, end)``, and their offsets."""
        stop = end if self.events is None else min(end, self.events)
        if stop <= start:
            return np.empty(0, np.int64), pa.RecordBatch.from_pylist([], schema=self.arrow_schema)
        parts, where = [], []
        for c in range(start // CHUNK, (stop - 1) // CHUNK + 1):
            offsets, batch = self._chunk_of(c)
            lo, hi = np.searchsorted(offsets, [start, stop])
            parts.append(batch.slice(lo, hi - lo))
            where.append(offsets[lo:hi])
        table = pa.Table.from_batches(parts, schema=self.arrow_schema).combine_chunks()
        batches = table.to_batches()
        batch = batches[0] if batches else pa.RecordBatch.from_pylist([], schema=self.arrow_schema)
        return np.concatenate(where), batch

    def generate(self, start: int, end: int) -> pa.RecordBatch:
        return self.generate_with_offsets(start, end)[1]


@dataclass(frozen=True)
class NexmarkPersons(NexmarkGenerator):
    """The ``person`` view of the Nexmark stream: new people (id, name, email_address,
    credit_card, city, state, date_time, extra), 1 event in 50.

    Example::

        >>> NexmarkPersons(events=1000).generate(0, 1000).num_rows
        20
    """

    kind = PERSON
    arrow_schema = PERSON_SCHEMA
    schema_ddl = _ddl(PERSON_SCHEMA)
    title = "Nexmark people"


@dataclass(frozen=True)
class NexmarkAuctions(NexmarkGenerator):
    """The ``auction`` view of the Nexmark stream: new auctions (id, item_name, description,
    initial_bid, reserve, date_time, expires, seller, category, extra), 3 events in 50."""

    kind = AUCTION
    arrow_schema = AUCTION_SCHEMA
    schema_ddl = _ddl(AUCTION_SCHEMA)
    title = "Nexmark auctions"


@dataclass(frozen=True)
class NexmarkBids(NexmarkGenerator):
    """The ``bid`` view of the Nexmark stream: bids (auction, bidder, price, channel, url,
    date_time, extra), 46 events in 50.

    Example::

        >>> print(NexmarkBids(events=10_000_000).describe())
        Nexmark bids (10,000,000 events, 10,000 events/s of event time, seed 7)
    """

    kind = BID
    arrow_schema = BID_SCHEMA
    schema_ddl = _ddl(BID_SCHEMA)
    title = "Nexmark bids"


VIEW_GENERATORS: dict[str, type[NexmarkGenerator]] = {"person": NexmarkPersons, "auction": NexmarkAuctions,
                                                      "bid": NexmarkBids}
GENERATORS.update({g.__name__: g for g in VIEW_GENERATORS.values()})


def view(generator: NexmarkGenerator, name: str) -> NexmarkGenerator:
    """The view ``name`` (person, auction, bid) of the stream ``generator`` reads: the same
    settings, so the same events."""
    if name not in VIEW_GENERATORS:
        raise JobDefinitionError(f"Nexmark has no view {name!r}; its views: {', '.join(VIEWS)}")
    return VIEW_GENERATORS[name](**generator.__dict__)


# ------------------------------------------------------------------ JSON lines for other systems

#: the reference's field names (``ddl_gen.sql``) for each view's columns
JSON_FIELDS = {
    "person": {"id": "id", "name": "name", "email_address": "emailAddress", "credit_card": "creditCard",
               "city": "city", "state": "state", "date_time": "dateTime", "extra": "extra"},
    "auction": {"id": "id", "item_name": "itemName", "description": "description", "initial_bid": "initialBid",
                "reserve": "reserve", "date_time": "dateTime", "expires": "expires", "seller": "seller",
                "category": "category", "extra": "extra"},
    "bid": {"auction": "auction", "bidder": "bidder", "price": "price", "channel": "channel", "url": "url",
            "date_time": "dateTime", "extra": "extra"},
}


#: the JSON lines' schema, as Spark's DDL (the reference's ``ddl_gen.sql``)
NESTED_DDL = "event_type INT, " + ", ".join(
    f"{name} STRUCT<" + ", ".join(
        f"{field}: {_SQL_TYPES[schema.field(column).type]}" for column, field in JSON_FIELDS[name].items()) + ">"
    for name, schema in (("person", PERSON_SCHEMA), ("auction", AUCTION_SCHEMA), ("bid", BID_SCHEMA))
)
#: how the JSON lines write a timestamp (UTC), as Spark's ``timestampFormat`` reads it
JSON_TIMESTAMP_FORMAT = "yyyy-MM-dd HH:mm:ss.SSS"


def nexmark_files(directory: str | os.PathLike[str], name: str, files_per_batch: int = 1) -> Any:
    """View ``name`` (person, auction, bid) of the JSON lines :func:`write_json_lines` wrote, as
    a source: Spark's file source parses them (with the nested schema, as Flink SQL and Spark
    SQL read them) and the view's columns are those of its generator. ``files_per_batch``
    files make a micro-batch. Unbounded, as a folder is: a run ends by ``until`` or ``timeout``."""
    from sparkstate.connectors.sources import DataFrameSource

    if name not in JSON_FIELDS:
        raise JobDefinitionError(f"Nexmark has no view {name!r}; its views: {', '.join(VIEWS)}")
    path = os.path.abspath(directory)
    columns = [f"{name}.{field} AS {column}" for column, field in JSON_FIELDS[name].items()]

    def read(spark: Any) -> Any:
        stream = (spark.readStream.schema(NESTED_DDL).option("timestampFormat", JSON_TIMESTAMP_FORMAT)
                  .option("maxFilesPerTrigger", files_per_batch).option("pathGlobFilter", "part-*.json").json(path))
        return stream.where(f"event_type = {VIEWS.index(name)}").selectExpr(*columns)

    return DataFrameSource(read, time_column="date_time", name=f"nexmark-{name}-files")


def _json_lines(name: str, batch: pa.RecordBatch) -> pa.Array:
    """Each row of view ``name`` as a JSON line in the reference's nested shape. Every generated
    string is letters, digits, spaces and ``@._/:?=&-``: nothing to escape, so the lines are
    joined column by column in Arrow, not row by row in Python."""
    kind = VIEWS.index(name)
    parts: list[Any] = []
    for column, field in JSON_FIELDS[name].items():
        values = batch.column(column)
        if pa.types.is_timestamp(values.type):
            # Arrow's %S has the unit's fraction: milliseconds, as Flink's TIMESTAMP(3) reads them
            text = pc.strftime(values.cast(pa.timestamp("ms", tz="UTC")), format="%Y-%m-%d %H:%M:%S")
            value = pc.binary_join_element_wise('"', text, '"', "")
        elif pa.types.is_string(values.type):
            value = pc.binary_join_element_wise('"', values, '"', "")
        else:
            value = pc.cast(values, pa.string())
        parts.append(pc.binary_join_element_wise(f'"{field}":', value, ""))
    inner = pc.binary_join_element_wise(*parts, ",")
    others = ",".join(f'"{v}":null' for v in VIEWS if v != name)
    return pc.binary_join_element_wise(f'{{"event_type":{kind},{others},"{name}":{{', inner, "}}", "")


def json_lines(generator: NexmarkGenerator, start: int, end: int) -> pa.Array:
    """Events ``[start, end)`` of the stream, every type, in offset order, as JSON lines."""
    lines, offsets = [], []
    for name in VIEWS:
        at, batch = view(generator, name).generate_with_offsets(start, end)
        if batch.num_rows:
            lines.append(_json_lines(name, batch))
            offsets.append(at)
    if not lines:
        return pa.array([], pa.string())
    order = np.argsort(np.concatenate(offsets), kind="stable")
    return pa.concat_arrays(lines).take(pa.array(order))


def _concatenated(strings: pa.Array) -> memoryview:
    """The bytes of a string array's values, one after the other (its data buffer's used part)."""
    offsets = np.frombuffer(strings.buffers()[1], dtype=np.int32)[strings.offset: strings.offset + len(strings) + 1]
    return memoryview(strings.buffers()[2])[offsets[0]: offsets[-1]]


def write_json_lines(generator: NexmarkGenerator, directory: str | os.PathLike[str], *, files: int = 1,
                     block: int = 1 << 20) -> Iterator[int]:
    """Write the stream's events as JSON lines into ``files`` files ``part-00000.json``... in
    ``directory`` (made if missing), consecutive ranges of offsets each, so that reading them
    in name order reads the stream in order. Yields the events written so far after each block;
    a ``_nexmark.json`` beside them records the generator's settings."""
    if generator.events is None:
        raise JobDefinitionError("the Nexmark stream to write is unbounded (events=None): give it a number of events")
    os.makedirs(directory, exist_ok=True)
    total, done = generator.events, 0
    per_file = -(-total // max(files, 1)) if total else 0
    for f in range(max(files, 1)):
        lo, hi = f * per_file, min((f + 1) * per_file, total)
        with open(os.path.join(directory, f"part-{f:05d}.json"), "wb") as out:
            for start in range(lo, hi, block):
                lines = json_lines(generator, start, min(start + block, hi))
                if len(lines):
                    out.write(_concatenated(pc.binary_join_element_wise(lines, "\n", "")))
                done += min(start + block, hi) - start
                yield done
    settings = {"generator": "Nexmark", **{k: v for k, v in generator.identity().items() if k != "type"}}
    with open(os.path.join(directory, "_nexmark.json"), "w") as meta:
        json.dump(settings, meta, indent=1)
