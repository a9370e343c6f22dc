"""README.md's database-sink example runs on Spark as written: the running-sum job of "A job"
into SQLite and into PostgreSQL (the test server's URL in place of the README's)."""

from __future__ import annotations

import sqlite3

import psycopg
from readme_examples import python_blocks, run_blocks

README_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


def test_readme_database_sinks_example(spark, postgres_db, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the examples name relative output and checkpoint paths
    blocks = python_blocks()
    last = max(i for i, b in enumerate(blocks) if b.section == "Database sinks")
    namespace = run_blocks(blocks[: last + 1], substitute={README_URL: postgres_db})

    events = namespace["job"].source_spec.events
    with sqlite3.connect(tmp_path / "out" / "running-sum.db") as conn:
        rows, counted = conn.execute('SELECT count(*), max("count") FROM running_sum').fetchone()
    assert rows == events and counted > 1
    with psycopg.connect(postgres_db) as conn:
        merchants, total = conn.execute('SELECT count(*), sum("count") FROM merchant_totals').fetchone()
    assert total == events  # the latest row per merchant counts all its payments
    assert merchants <= namespace["job"].source_spec.merchants
