"""The Nexmark queries as seed jobs (``nexmark-q0`` ...), written with the public API.

Each module ``qN`` holds one query: its semantics are those of the ``nexmark/nexmark``
repository's ``queries/qN.sql`` (its docstring quotes what the SQL computes), it reads the
views of :mod:`sparkstate.connectors.nexmark` it needs, and its tests compare its rows with
pandas' computation of the same SQL on a generated input (``tests/unit/jobs/nexmark``).

How a SQL result that changes over time becomes rows: a windowed or joined result that is
final when it is emitted (a window's aggregate, an inner join's pair) is one row; a
non-windowed aggregate or a ranking (``GROUP BY`` without a window, ``ROW_NUMBER``), which
Flink SQL emits as a changelog of updates, is an *upsert stream*: a row whenever a key's
result changes, keyed by the query's group key, so the last row of each key is the SQL's
final result.
"""
