"""The database-sink guide's example runs on Spark as written: the running-sum job into SQLite
and into PostgreSQL (the test server's URL in place of the page's)."""

from __future__ import annotations

import sqlite3

import psycopg
from docs_examples import DOCS, python_blocks, run_blocks

PAGE = DOCS / "guides" / "sinks.md"
PAGE_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


def test_the_database_sinks_guide_runs_on_spark(spark, postgres_db, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the examples name relative output and checkpoint paths
    namespace = run_blocks(python_blocks(PAGE), substitute={PAGE_URL: postgres_db})

    events = namespace["job"].source_spec.events
    with sqlite3.connect(tmp_path / "out" / "running-sum.db") as conn:
        rows, counted = conn.execute('SELECT count(*), max("count") FROM running_sum').fetchone()
    assert rows == events and counted > 1
    with psycopg.connect(postgres_db) as conn:
        merchants, total = conn.execute('SELECT count(*), sum("count") FROM merchant_totals').fetchone()
    assert total == events  # the latest row per merchant counts all its payments
    assert merchants <= namespace["job"].source_spec.merchants
