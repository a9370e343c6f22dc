"""Built-in window aggregates: ``count``, ``sum``, ``min``, ``max``, ``avg``.

A window job that only uses these can run as Spark SQL on the JVM (the planner's native
path); on the Python path they run as one generated :class:`AggregateFunction`. Both give the
same rows: ``count`` counts elements, the others skip nulls and give null over no values, and
``sum`` of integers stays an integer (Spark's semantics).

Example::

    from sparkstate import agg
    job.window(TumblingEventTimeWindows.of(timedelta(minutes=1))).aggregate(
        agg.count("payments"), agg.sum("amount", "total"), agg.avg("amount", "avg_amount"))
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sparkstate.api.state import AggregateFunction
from sparkstate.errors import JobDefinitionError

FUNCTIONS = ("count", "sum", "min", "max", "avg")


@dataclass(frozen=True)
class Agg:
    """One built-in aggregate: ``function`` over ``column``, output as ``name``."""

    function: str
    column: str | None
    name: str

    def __post_init__(self) -> None:
        if self.function not in FUNCTIONS:
            raise JobDefinitionError(f"unknown aggregate {self.function!r}; use one of {FUNCTIONS}")
        if self.function != "count" and not self.column:
            raise JobDefinitionError(f"agg.{self.function} needs a column name")
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise JobDefinitionError(f"aggregate output name must be an identifier, got {self.name!r}")

    def output_type(self, input_type: str | None) -> str:
        """The output column's SQL type, from the input column's (Spark's rules)."""
        if self.function == "count":
            return "bigint"
        if self.function == "avg":
            return "double"
        t = (input_type or "double").lower()
        if self.function == "sum":
            return "bigint" if t in ("tinyint", "smallint", "int", "integer", "bigint", "long") else "double"
        return t


def count(name: str = "count") -> Agg:
    """Elements in the window."""
    return Agg("count", None, name)


def sum(column: str, name: str | None = None) -> Agg:  # noqa: A001 - read as agg.sum
    """Sum of ``column`` (nulls skipped)."""
    return Agg("sum", column, name or f"sum_{column}")


def min(column: str, name: str | None = None) -> Agg:  # noqa: A001
    """Smallest value of ``column``."""
    return Agg("min", column, name or f"min_{column}")


def max(column: str, name: str | None = None) -> Agg:  # noqa: A001
    """Largest value of ``column``."""
    return Agg("max", column, name or f"max_{column}")


def avg(column: str, name: str | None = None) -> Agg:
    """Mean of ``column`` (nulls skipped)."""
    return Agg("avg", column, name or f"avg_{column}")


#: ``add`` over a tuple of the input columns' values: ``(values, acc) -> acc``
TupleAdd = Callable[[tuple[Any, ...], list[Any]], list[Any]]
#: a window's output row: ``(key, start, end, acc) -> row``
WindowRow = Callable[[Any, int, int, list[Any]], Any]


class BuiltinAggregates(AggregateFunction[dict[str, Any], list[Any], dict[str, Any]]):
    """Several built-in aggregates as one AggregateFunction over a flat list accumulator.

    ``add`` is generated code (one straight-line function per combination of aggregates): it
    runs for every element, and a loop over the aggregates would cost about twice as much.
    """

    def __init__(self, aggs: tuple[Agg, ...]) -> None:
        if not aggs:
            raise JobDefinitionError("aggregate needs at least one aggregate (agg.count(), agg.sum('x')...)")
        names = [a.name for a in aggs]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise JobDefinitionError(f"aggregate output names repeat: {sorted(dup)}")
        self.aggs = tuple(aggs)
        self._build()

    def __getstate__(self) -> dict[str, Any]:
        return {"aggs": self.aggs}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.aggs = state["aggs"]
        self._build()

    def _build(self) -> None:
        #: the distinct input columns, in order: what ``tuple_add`` gets, one value each
        self.input_columns = tuple(dict.fromkeys(a.column for a in self.aggs if a.column))
        position: dict[str | None, int] = {c: j for j, c in enumerate(self.input_columns)}
        init, result, body = self._plan()
        source = "\n".join([
            "def add(ev, acc):", *[line.format(v=f"ev[{c!r}]") for line, c in body], "    return acc",
            # the same body over a tuple of the input columns' values (columnar events)
            "def tuple_add(ev, acc):", *[line.format(v=f"ev[{position.get(c)}]") for line, c in body], "    return acc",
            "def get_result(acc):", "    return {" + ", ".join(f"{n!r}: {x}" for n, x in result) + "}",
        ])
        namespace: dict[str, Any] = {}
        exec(source, namespace)  # noqa: S102 - built from validated names only
        # the generated functions shadow the methods on the instance (mypy forbids that by default)
        self.add = namespace["add"]  # type: ignore[method-assign]
        self.get_result = namespace["get_result"]  # type: ignore[method-assign]
        self._tuple_add: TupleAdd = namespace["tuple_add"]
        self._init = init
        self._results = result

    def _plan(self) -> tuple[list[Any], list[tuple[str, str]], list[tuple[str, str | None]]]:
        """The accumulator's initial values, each result's name and expression, and ``add``'s
        body as lines (``{v}`` reads the line's input column)."""
        init: list[Any] = []
        result: list[tuple[str, str]] = []
        body: list[tuple[str, str | None]] = []
        for a in self.aggs:
            i = len(init)
            if a.function == "count":
                init.append(0)
                body.append((f"    acc[{i}] += 1", None))
                result.append((a.name, f"acc[{i}]"))
                continue
            lines = ["    v = {v}", "    if v is not None:"]
            if a.function == "sum":
                init.append(None)
                lines.append(f"        a = acc[{i}]; acc[{i}] = v if a is None else a + v")
                result.append((a.name, f"acc[{i}]"))
            elif a.function in ("min", "max"):
                init.append(None)
                op = "<" if a.function == "min" else ">"
                lines += [f"        a = acc[{i}]", f"        if a is None or v {op} a: acc[{i}] = v"]
                result.append((a.name, f"acc[{i}]"))
            else:  # avg: sum and count
                init.extend([0.0, 0])
                lines.append(f"        acc[{i}] += v; acc[{i + 1}] += 1")
                result.append((a.name, f"(acc[{i}] / acc[{i + 1}] if acc[{i + 1}] else None)"))
            body += [(line, a.column) for line in lines]
        return init, result, body

    def tuple_add(self) -> TupleAdd:
        """``add`` over a tuple of the values of :attr:`input_columns` instead of an event dict."""
        return self._tuple_add

    def window_row(self, key_columns: tuple[str, ...], start: str, end: str, order: tuple[str, ...] = ()) -> WindowRow:
        """A generated ``row(key, start, end, acc)``: a window's whole output row (key columns,
        results, window bounds) in one display, the per-firing cost of a window job.

        With ``order`` (the output schema's column names, when they are exactly these columns)
        the row is a tuple in that order, which is cheaper to make and to turn into columns
        than a dict; otherwise a dict.
        """
        if len(key_columns) == 1:
            exprs = {key_columns[0]: "key"}
        else:
            exprs = {c: f"key[{i}]" for i, c in enumerate(key_columns)}
        exprs.update(self._results)
        exprs.update({start: "s", end: "e"})
        if order and sorted(order) == sorted(exprs):
            body = "(" + ", ".join(exprs[n] for n in order) + ",)"
        else:
            body = "{" + ", ".join(f"{n!r}: {x}" for n, x in exprs.items()) + "}"
        namespace: dict[str, Any] = {}
        exec(f"def row(key, s, e, acc):\n    return {body}", namespace)  # noqa: S102
        row: WindowRow = namespace["row"]
        return row

    def create_accumulator(self) -> list[Any]:
        return list(self._init)

    def merge(self, a: list[Any], b: list[Any]) -> list[Any]:
        out = list(a)
        i = 0
        for agg in self.aggs:
            if agg.function == "count":
                out[i] = a[i] + b[i]
            elif agg.function == "avg":
                out[i], out[i + 1] = a[i] + b[i], a[i + 1] + b[i + 1]
                i += 1
            elif a[i] is None or b[i] is None:
                out[i] = b[i] if a[i] is None else a[i]
            elif agg.function == "sum":
                out[i] = a[i] + b[i]
            else:
                out[i] = builtins.min(a[i], b[i]) if agg.function == "min" else builtins.max(a[i], b[i])
            i += 1
        return out
