"""A brute-force model of an interval join, the reference the engine's join is tested against.

Written from the join's definition (Flink's ``IntervalJoinOperator`` docs: the pairs ``(l, r)``
of one key with ``l.ts + lower <= r.ts <= l.ts + upper``, an exclusive bound strict; an element
whose time is before the watermark is late and joins nothing), with no sparkstate code: lists,
loops over every pair. Buffers and timers do not appear; the model says which pairs exist and
which elements a correct cleanup may still hold.

The micro-batch mapping is sparkstate's: batch ``i`` sees the watermark derived from batches
``< i``; with two inputs it is the smaller of the inputs' watermarks (each input's: its largest
time so far - out_of_orderness - 1 ms), an input with no event yet holding it at MIN (as in
Flink, and Spark), and there is no watermark until that value is positive (Spark's starts at
the epoch).
"""

from __future__ import annotations

from dataclasses import dataclass

MIN_WATERMARK = -(2**63)


@dataclass(frozen=True)
class Element:
    """One element: its id (unique per side), key and event time."""

    id: int
    key: str
    ts: int


#: one micro-batch: the left (first input's) and the right (second input's) elements
Batch = tuple[list[Element], list[Element]]


def watermarks(batches: list[Batch], out_of_orderness: int) -> list[int]:
    """The watermark each batch sees (see the module docs)."""
    out, tops, wm = [], [None, None], MIN_WATERMARK
    for batch in batches:
        out.append(wm)
        for side, elements in enumerate(batch):
            if elements:
                top = max(e.ts for e in elements)
                tops[side] = top if tops[side] is None else max(tops[side], top)
        marks = [MIN_WATERMARK if t is None else t - out_of_orderness - 1 for t in tops]
        if min(marks) > 0:
            wm = max(wm, min(marks))
    return out


def in_bounds(l_ts: int, r_ts: int, lower: int, upper: int, inclusive: tuple[bool, bool]) -> bool:
    low_ok = r_ts >= l_ts + lower if inclusive[0] else r_ts > l_ts + lower
    high_ok = r_ts <= l_ts + upper if inclusive[1] else r_ts < l_ts + upper
    return low_ok and high_ok


def late(batches: list[Batch], out_of_orderness: int) -> tuple[set[int], set[int]]:
    """The ids of the late left and right elements: time before their batch's watermark."""
    left, right = set(), set()
    for wm, (ls, rs) in zip(watermarks(batches, out_of_orderness), batches):
        left |= {e.id for e in ls if wm != MIN_WATERMARK and e.ts < wm}
        right |= {e.id for e in rs if wm != MIN_WATERMARK and e.ts < wm}
    return left, right


def joined(
    batches: list[Batch], out_of_orderness: int, lower: int, upper: int, inclusive: tuple[bool, bool] = (True, True)
) -> list[tuple[int, int]]:
    """Every pair ``(left id, right id)`` of one key within the bounds, neither element late, sorted."""
    late_l, late_r = late(batches, out_of_orderness)
    lefts = [e for ls, _ in batches for e in ls if e.id not in late_l]
    rights = [e for _, rs in batches for e in rs if e.id not in late_r]
    return sorted(
        (a.id, b.id) for a in lefts for b in rights if a.key == b.key and in_bounds(a.ts, b.ts, lower, upper, inclusive)
    )


def still_needed(
    batches: list[Batch], out_of_orderness: int, lower: int, upper: int, inclusive: tuple[bool, bool], watermark: int
) -> tuple[set[int], set[int]]:
    """The ids of the elements that may still meet a partner once the watermark is ``watermark``:
    not late, and some time a later element may have (one not before ``watermark``) is within
    the bounds: the last such partner time is not before ``watermark``. As in Flink, an element
    is never dropped before the watermark passes its own time."""
    lo = lower if inclusive[0] else lower + 1
    hi = upper if inclusive[1] else upper - 1
    late_l, late_r = late(batches, out_of_orderness)
    left = {e.id for ls, _ in batches for e in ls if e.id not in late_l and max(e.ts + hi, e.ts) >= watermark}
    right = {e.id for _, rs in batches for e in rs if e.id not in late_r and max(e.ts - lo, e.ts) >= watermark}
    return left, right
