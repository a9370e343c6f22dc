"""`sparkstate run --sink` into databases, as a user runs it."""

from __future__ import annotations

import sqlite3

from postgres_server import closed_port
from test_cli_runs import sparkstate


def squashed(text: str) -> str:
    return "".join(text.split())


def test_run_into_sqlite_then_fresh_starts_the_table_over(tmp_path):
    db = tmp_path / "out" / "sums.db"
    args = ["run", "running-sum", "--events", "6000", "--merchants", "100", "--max-batch", "2000", "--quiet",
            "--sink", f"sqlite://{db}?table=sums"]
    first = sparkstate(tmp_path, *args)
    assert first.returncode == 0, first.stderr
    out = squashed(first.stdout)  # rich wraps long lines anywhere, even inside a path
    assert squashed(f"sink: sqlite://{db} table=sums mode=append") in out  # the URL that names it: sqlite:///tmp/...
    assert squashed("output: 6,000 rows in table sums") in out
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*), count(DISTINCT merchant_id) FROM sums").fetchone() == (6000, 100)
        assert conn.execute("SELECT batch_id, rows FROM sparkstate_batches WHERE job = 'running-sum@sums'").fetchall() == [
            (0, 2000), (1, 2000), (2, 2000),
        ]

    # a fresh checkpoint starts batch ids at 0 again: --fresh drops the table and its markers too
    again = sparkstate(tmp_path, *args, "--fresh")
    assert again.returncode == 0, again.stderr
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM sums").fetchone() == (6000,)


def test_run_into_an_unreachable_postgresql_fails_with_the_fix(tmp_path):
    port = closed_port()
    done = sparkstate(tmp_path, "run", "running-sum", "--events", "1000", "--sink", f"postgresql://app@127.0.0.1:{port}/shop")
    assert done.returncode == 1
    message = " ".join(done.stderr.split())
    assert f"cannot connect to PostgreSQL at 127.0.0.1:{port} (database shop, user app)" in message
    assert "Start the server" in message and "Traceback" not in done.stderr


def test_run_with_a_bad_sink_url_says_what_is_wrong(tmp_path):
    done = sparkstate(tmp_path, "run", "running-sum", "--sink", "postgresql://app@localhost/shop?mode=upsert")
    assert done.returncode == 1
    assert "upsert needs the key columns" in " ".join(done.stderr.split())


def test_a_password_appears_nowhere_the_run_writes(tmp_path, postgres_db):
    """Every form of password a URL can carry, through a whole run: not in a line the CLI
    printed, not in the log file, not in any file of the checkpoint (or anything else the
    run left in its folder); and not in the error of a run that cannot connect. The first
    password holds "?" and "#", which libpq reads as the password's (no URL parser does)."""
    secrets = ["Us3r?1nf0#Pw1", "QueryPw2", "SslPw3"]
    host_url = postgres_db.replace("postgres@", f"postgres:{secrets[0]}@", 1)
    assert host_url != postgres_db
    sink = f"{host_url}?password={secrets[1]}&sslpassword={secrets[2]}&table=sums"
    done = sparkstate(tmp_path, "run", "running-sum", "--events", "3000", "--merchants", "50", "--max-batch", "1000",
                      "--checkpoint", str(tmp_path / "ckpt"), "--sink", sink)
    assert done.returncode == 0, done.stderr
    out = squashed(done.stdout)
    assert "sink:" in out and "output:3,000rowsintablesums" in out and "password=***" in out
    port = closed_port()
    refused = sparkstate(tmp_path, "run", "running-sum", "--events", "100", "--checkpoint", str(tmp_path / "other"),
                         "--sink", f"postgresql://app:{secrets[0]}@127.0.0.1:{port}/shop?password={secrets[1]}")
    assert refused.returncode == 1 and "cannot connect to PostgreSQL" in refused.stderr
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name == "spark.log" for p in files) and any(p.parent.name == "commits" for p in files)
    secrets += ["Us3r", "1nf0", "#Pw1"]  # no piece of the first either
    for secret in secrets:
        for text in (done.stdout, done.stderr, refused.stdout, refused.stderr):
            assert secret not in text
        leaked = [p for p in files if secret.encode() in p.read_bytes()]
        assert not leaked, f"{secret} written to {leaked}"
