"""Nexmark q3, local item suggestion: who sells in Oregon, Idaho or California in category
10, and which auctions.

The SQL (``queries/q3.sql``)::

    SELECT P.name, P.city, P.state, A.id
    FROM auction AS A INNER JOIN person AS P ON A.seller = P.id
    WHERE A.category = 10 AND (P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA')

A regular (unbounded) inner join, as a ``KeyedCoProcessFunction``: the auctions (input 1,
keyed by ``seller``) meet the people (input 2, keyed by ``id``) in one key space, a person's
id. The filters run before anything is stored: an auction of another category and a person
of another state never join, so neither is kept as such. Per key (a person's id):

* ``seller``: the person's ``(name, city, state)`` once they arrived from OR, ID or CA, or
  ``()`` once they arrived from elsewhere. Every later category-10 auction of theirs is
  emitted at once with their columns, or dropped (``()``): it can never join.
* ``waiting``: the ids of the category-10 auctions that arrived before their seller (a
  seller is drawn up to 10 people ahead of the last one made, so an auction may come first).
  The person's arrival emits them (a local person) or drops them (another state).

A person's id is unique in the stream (ids count the people), so a person arrives once per
key and an auction, once joined, has nothing left to meet: auctions are never stored after
they are emitted, and waiting ones wait only until their seller arrives. What grows is one
small entry per person (their three columns, or the ``()`` that lets their auctions be
dropped instead of waiting for ever): unbounded, as the SQL's join state is (Flink keeps
both filtered sides for ever), but by the number of people, not of auctions. One exception
waits for ever: person 1000 is never made (the first event is id 2, so the first person is
1001), yet is the hot seller of the first 100 people, so their category-10 auctions wait
under key 1000 (a few dozen ids, made in the first 5,000 events only).

Order inside a micro-batch: a key's people before its auctions (``sparkstate.api.connected``),
so an auction whose seller arrives in the same batch does not wait.
"""

from __future__ import annotations

from collections.abc import Iterator

from sparkstate.api.connected import KeyedCoProcessFunction
from sparkstate.api.functions import Context, RuntimeContext
from sparkstate.api.state import ListState, ListStateDescriptor, ValueState, ValueStateDescriptor
from sparkstate.connectors.nexmark import NexmarkAuctions, NexmarkPersons, view
from sparkstate.connectors.sinks import NoopSink
from sparkstate.job import Job
from sparkstate.jobs.nexmark.common import WATERMARK, nexmark_seed_job, on

OUTPUT = "name string, city string, state string, id bigint"
#: the SQL's ``A.category = 10``
CATEGORY = 10
#: the SQL's ``P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA'``
STATES = frozenset({"OR", "ID", "CA"})
#: ``seller``'s value for a person of another state: their auctions never join
ELSEWHERE: tuple = ()


class LocalItemSuggestion(KeyedCoProcessFunction):
    """Category-10 auctions (input 1) joined with their seller (input 2) from OR, ID or CA."""

    def open(self, ctx: RuntimeContext) -> None:
        self.seller: ValueState[tuple] = ctx.get_state(ValueStateDescriptor("seller", tuple))
        self.waiting: ListState[int] = ctx.get_list_state(ListStateDescriptor("waiting", int))

    def process_element1(self, auction: dict, ctx: Context) -> Iterator[tuple]:
        if auction["category"] != CATEGORY:
            return
        seller = self.seller.value()
        if seller is None:
            self.waiting.add(auction["id"])
        elif seller:  # not ELSEWHERE
            yield (*seller, auction["id"])

    def process_element2(self, person: dict, ctx: Context) -> Iterator[tuple]:
        waiting = self.waiting.get()
        if waiting:
            self.waiting.clear()
        if person["state"] not in STATES:
            self.seller.update(ELSEWHERE)
            return
        seller = (person["name"], person["city"], person["state"])
        self.seller.update(seller)
        for auction_id in waiting:
            yield (*seller, auction_id)


def build(source: NexmarkAuctions) -> Job:
    return (
        on("nexmark-q3", source).key_by("seller")
        .connect(view(source, "person"), key_by="id", watermark=WATERMARK)
        .process(LocalItemSuggestion(), output_schema=OUTPUT)
        .sink(NoopSink())
    )


SEED_JOB = nexmark_seed_job(
    3, "local item suggestion: category-10 auctions joined with their seller from OR, ID or CA", build,
    generator=NexmarkAuctions, second=NexmarkPersons,
)
