"""A small, plain model of Flink's state TTL, the reference the TTL handles are tested against.

Written from Flink's documented rule (``StateTtlConfig``; "State Time-To-Live" in Flink's
docs) and the behaviour of its TTL decorators, with no sparkstate code, so a test comparing
it with the harness checks sparkstate against Flink's rule rather than against itself:

* every value has the time of its last access; it has **expired** once
  ``last_access + ttl <= now`` (the boundary itself is expired);
* a **write** stores the value with the current time as its last access;
* a **read** of an expired value removes it, and returns it only with the visibility
  ``ReturnExpiredIfNotCleanedUp`` (``NeverReturnExpired``: as if absent); with the update type
  ``OnReadAndWrite`` a read also gives every *unexpired* value it returns a new time;
* List and Map state apply the rule to each element / entry on its own; a read of the whole
  collection reads every element or entry; Map's ``is_empty`` reads entries in order until it
  finds one it would return (Flink: ``!iterator().hasNext()``);
* ``len`` of a List or Map counts what a read would return, and changes nothing (it is not
  a read: Python's ``list(state)`` asks for the length besides iterating);
* ``add`` on Reducing / Aggregating state folds into the current value when a read would
  return it (so an expired one with ``ReturnExpiredIfNotCleanedUp``), else starts afresh; the
  result is written with a new time.

Times come from outside: ``now`` is the clock expiry is judged on (processing time, or the
watermark for event-time TTL) and ``stamp`` the time a write or refresh gives (processing
time, or the element's event time). The model keeps one dict per key: the ``stored`` view
(``(value, ts)``, lists of them, dicts of them) can be compared with what the engine stores.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ABSENT = object()


@dataclass
class Rule:
    ttl: int
    refresh_on_read: bool
    return_expired: bool

    def expired(self, ts: int, now: int) -> bool:
        return ts + self.ttl <= now


@dataclass
class SingleModel:
    """Value, Reducing or Aggregating state: one ``(value, ts)`` per key."""

    rule: Rule
    stored: dict[Any, tuple[Any, int]] = field(default_factory=dict)

    def read(self, key: Any, now: int, stamp: int) -> Any:
        if key not in self.stored:
            return ABSENT
        value, ts = self.stored[key]
        if self.rule.expired(ts, now):
            del self.stored[key]
            return value if self.rule.return_expired else ABSENT
        if self.rule.refresh_on_read:
            self.stored[key] = (value, stamp)
        return value

    def write(self, key: Any, value: Any, stamp: int) -> None:
        self.stored[key] = (value, stamp)

    def clear(self, key: Any) -> None:
        self.stored.pop(key, None)

    def fold_base(self, key: Any, now: int) -> Any:
        """What an ``add`` folds into: the value a read would return (not refreshing it)."""
        if key not in self.stored:
            return ABSENT
        value, ts = self.stored[key]
        if self.rule.expired(ts, now) and not self.rule.return_expired:
            return ABSENT
        return value


@dataclass
class ListModel:
    rule: Rule
    stored: dict[Any, list[tuple[Any, int]]] = field(default_factory=dict)

    def read(self, key: Any, now: int, stamp: int) -> list[Any]:
        returned, left = [], []
        for value, ts in self.stored.get(key, []):
            if self.rule.expired(ts, now):
                if self.rule.return_expired:
                    returned.append(value)
            else:
                returned.append(value)
                left.append((value, stamp if self.rule.refresh_on_read else ts))
        if left:
            self.stored[key] = left
        else:
            self.stored.pop(key, None)
        return returned

    def count(self, key: Any, now: int) -> int:
        return sum(1 for _, ts in self.stored.get(key, []) if self.rule.return_expired or not self.rule.expired(ts, now))

    def add(self, key: Any, values: list[Any], stamp: int) -> None:
        if values:
            self.stored.setdefault(key, []).extend((v, stamp) for v in values)

    def replace(self, key: Any, values: list[Any], stamp: int) -> None:
        self.stored.pop(key, None)
        self.add(key, values, stamp)

    def clear(self, key: Any) -> None:
        self.stored.pop(key, None)


@dataclass
class MapModel:
    rule: Rule
    stored: dict[Any, dict[Any, tuple[Any, int]]] = field(default_factory=dict)

    def _visit(self, key: Any, user_key: Any, now: int, stamp: int) -> Any:
        entries = self.stored.get(key, {})
        if user_key not in entries:
            return ABSENT
        value, ts = entries[user_key]
        if self.rule.expired(ts, now):
            del entries[user_key]
            result = value if self.rule.return_expired else ABSENT
        else:
            if self.rule.refresh_on_read:
                entries[user_key] = (value, stamp)
            result = value
        if not entries:
            self.stored.pop(key, None)
        return result

    def read(self, key: Any, user_key: Any, now: int, stamp: int) -> Any:
        return self._visit(key, user_key, now, stamp)

    def read_all(self, key: Any, now: int, stamp: int, first_only: bool = False) -> list[tuple[Any, Any]]:
        out = []
        for user_key in list(self.stored.get(key, {})):
            value = self._visit(key, user_key, now, stamp)
            if value is not ABSENT:
                out.append((user_key, value))
                if first_only:
                    break
        return out

    def count(self, key: Any, now: int) -> int:
        entries = self.stored.get(key, {}).values()
        return sum(1 for _, ts in entries if self.rule.return_expired or not self.rule.expired(ts, now))

    def put(self, key: Any, user_key: Any, value: Any, stamp: int) -> None:
        self.stored.setdefault(key, {})[user_key] = (value, stamp)

    def remove(self, key: Any, user_key: Any) -> None:
        entries = self.stored.get(key, {})
        entries.pop(user_key, None)
        if not entries:
            self.stored.pop(key, None)

    def clear(self, key: Any) -> None:
        self.stored.pop(key, None)
