"""Tiny TTL'd state handles for tests, until the real ones (``api/state_ttl.py``) exist: they
write the stored representation fixed in ``api/ttl.py`` (``(value, last_access_ms)``, lists of
such pairs, dicts of them) at the batch's processing time (event time: the element's time, or
the watermark), refreshed on write only (``OnCreateAndWrite``). Reads leave expired entries
out, as ``NeverReturnExpired`` does."""

from __future__ import annotations

from typing import Any

from sparkstate.api.state import StateDescriptor


def has_ttl_handles() -> bool:
    """Whether sparkstate's own TTL handles exist (then jobs use them, not these stubs)."""
    import importlib.util

    return importlib.util.find_spec("sparkstate.api.state_ttl") is not None


class _Stub:
    def __init__(self, ctx: Any, desc: StateDescriptor) -> None:
        self.scope = ctx._scope
        self.name = desc.name
        self.ttl = desc.ttl_config.ttl_ms  # type: ignore[union-attr]
        self.event_time = desc.ttl_config.event_time  # type: ignore[union-attr]

    def _now(self) -> int:
        """The time a write stamps."""
        scope = self.scope
        if self.event_time:
            return scope.timestamp if scope.timestamp is not None else scope.watermark
        return scope.processing_time

    def _live(self, ts: int) -> bool:
        now = self.scope.watermark if self.event_time else self.scope.processing_time
        return ts + self.ttl > now


class TtlValue(_Stub):
    def value(self) -> Any:
        v = self.scope.rec.get(self.name)
        return v[0] if v is not None and self._live(v[1]) else None

    def update(self, value: Any) -> None:
        self.scope.rec[self.name] = (value, self._now())

    def clear(self) -> None:
        self.scope.rec.pop(self.name, None)


class TtlList(_Stub):
    def get(self) -> list:
        return [e for e, ts in self.scope.rec.get(self.name, []) if self._live(ts)]

    def add(self, value: Any) -> None:
        self.scope.rec.setdefault(self.name, []).append((value, self._now()))


class TtlMap(_Stub):
    def put(self, key: Any, value: Any) -> None:
        self.scope.rec.setdefault(self.name, {})[key] = (value, self._now())

    def get(self, key: Any) -> Any:
        v = self.scope.rec.get(self.name, {}).get(key)
        return v[0] if v is not None and self._live(v[1]) else None


def stub_for(ctx: Any, desc: StateDescriptor) -> Any:
    """Register ``desc`` with ``ctx`` (so the engines see its TTL) and return a stub handle."""
    from sparkstate.api.state import ListStateDescriptor, MapStateDescriptor

    if isinstance(desc, ListStateDescriptor):
        ctx.get_list_state(desc)
        return TtlList(ctx, desc)
    if isinstance(desc, MapStateDescriptor):
        ctx.get_map_state(desc)
        return TtlMap(ctx, desc)
    ctx.get_state(desc)
    return TtlValue(ctx, desc)
