"""Credentials in source and sink URLs: a password of any printable character, raw or
percent-encoded, shows nowhere: not in a description (the ``sink:`` line, the dashboard's
``/jobs/<id>``), a repr, an error, nor the checkpoint's and savepoint's metadata."""

from __future__ import annotations

import json
import string
from urllib.parse import quote

import pytest

from sparkstate import Job
from sparkstate.connectors.sinks import parse_sink
from sparkstate.errors import JobDefinitionError
from sparkstate.jobs import get_job

#: every printable character but the whitespace controls (a password is typed on one line)
CHARACTERS = string.printable.replace("\t", "").replace("\n", "").replace("\r", "").replace("\x0b", "").replace("\x0c", "")
#: the two halves of each test password, which must show nowhere
HEAD, TAIL = "S3cr", "et9Z"

#: every place a password may sit in a URL the command line takes
SINK_SHAPES = [
    "postgresql://app:{pw}@db/prod?table=t",  # user and password
    "postgresql://:{pw}@db/prod",  # a password alone
    "postgresql://app@db:5432/prod?password={pw}&sslmode=require",  # libpq's query parameters
    "postgresql://app@db/prod?sslpassword={pw}",
    "postgresql://app:{pw}@db/prod?bogus=1",  # an option libpq refuses: an error
    "postgresql://app:{pw}@db/",  # no database: an error
    "kafka://app:{pw}@broker:9093/totals",
    "kafka://broker:9093/totals?sasl.password={pw}&create=true",
    "kafka://app:{pw}@broker:9093/totals?bogus=1",  # an unknown option: an error
    "kafka:/app:{pw}@broker:9093/totals",  # a mistyped scheme: an unknown sink
    "mqtt://app:{pw}@broker/totals",
]
SOURCE_SHAPES = [
    "kafka://app:{pw}@broker:9093/payments",
    "kafka://broker:9093/payments?sasl.password={pw}",
    "kafka://app:{pw}@broker:9093/payments?max_records=x",
    "kafka//app:{pw}@broker:9093/payments",
    "socket://app:{pw}@localhost:9000",
]


def passwords(c: str) -> list[str]:
    """Passwords holding ``c``: as typed, and percent-encoded as a URL should have it."""
    return [f"{HEAD}{c}{TAIL}", f"{HEAD}{quote(c, safe='')}{TAIL}"]


def assert_hidden(*texts: str) -> None:
    for text in texts:
        assert HEAD not in text and TAIL not in text, text


def shown_by_sink(url: str) -> list[str]:
    """What a run shows or stores of ``--sink url``, or the error that refuses it."""
    from sparkstate.connectors.database import bind_job_sinks
    from sparkstate.runtime.io.sinks import database_writers

    try:
        sink = parse_sink(url)
    except JobDefinitionError as exc:
        return [str(exc)]
    job = Job("j").sink(sink)
    bound = bind_job_sinks(job)
    return [
        sink.describe(),  # the `sink:` line
        repr(sink),
        json.dumps(job._shown_settings()),  # the dashboard's /jobs/<id>
        json.dumps(database_writers(bound)),  # sparkstate.json's and _savepoint.json's "sinks"
    ]


@pytest.mark.parametrize("c", CHARACTERS)
def test_no_password_of_any_printable_character_shows_from_a_sink_url(c):
    for shape in SINK_SHAPES:
        for pw in passwords(c):
            assert_hidden(*shown_by_sink(shape.format(pw=pw)))


@pytest.mark.parametrize("c", CHARACTERS)
def test_no_password_of_any_printable_character_shows_from_a_source_url(c):
    job = get_job("running-sum")
    for shape in SOURCE_SHAPES:
        for pw in passwords(c):
            try:
                source = job.text_source(shape.format(pw=pw))
            except JobDefinitionError as exc:
                assert_hidden(str(exc))
            else:
                assert_hidden(source.describe(), repr(source))


def test_a_password_of_every_printable_character_at_once_is_masked():
    from sparkstate.connectors.credentials import mask

    pw = HEAD + CHARACTERS + TAIL
    for shape in [*SINK_SHAPES, *SOURCE_SHAPES]:
        for url in (shape.format(pw=pw), shape.format(pw=quote(pw, safe=""))):
            assert_hidden(mask(url), *shown_by_sink(url))


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        # the repro of issue 32: the password holds "/", which no URL parser takes for a password
        ("postgresql://app:S3cr/et9Z@db/prod", "postgresql://***@db/prod"),
        ("postgresql://app:S3cr#et9Z@db/prod", "postgresql://***@db/prod"),
        ("postgresql://app:S3cr?et9Z@db/prod", "postgresql://***@db/prod"),
        ("postgresql://app:S3cr et9Z@db/prod", "postgresql://***@db/prod"),
        # a plain user:password keeps the user; a user alone is no secret
        ("postgresql://app:S3cr@et9Z@db/prod", "postgresql://app:***@db/prod"),
        ("postgresql://app:S3cr%2Fet9Z@db/prod", "postgresql://app:***@db/prod"),
        ("postgresql://:S3cret9Z@db/prod", "postgresql://:***@db/prod"),
        ("postgresql://app@db/prod", "postgresql://app@db/prod"),
        ("postgresql://app@db/prod?password=S3cr&et9Z&sslmode=require", "postgresql://app@db/prod?password=***&sslmode=require"),
        ("postgresql://app@db/prod?pass%77ord=S3cret9Z", "postgresql://app@db/prod?pass%77ord=***"),
        ("host=db user=app password='S3cr \\' et9Z' dbname=prod", "host=db user=app password=*** dbname=prod"),
        # a password in the query holding "@": both readings are masked
        ("kafka://broker:9093/t?sasl.password=S3cr@et9Z&create=true", "kafka://***&create=true"),
        ("kafka:/app:S3cret9Z@broker:9093/t", "kafka:/app:***@broker:9093/t"),
        ("app:S3cret9Z@broker:9093", "app:***@broker:9093"),
        ("{'sasl.password': 'S3cr et9Z'}", "{'sasl.password': ***}"),
        # no credentials: as given
        ("kafka://broker:9093/t", "kafka://broker:9093/t"),
        ("Local: Broker transport failure", "Local: Broker transport failure"),
    ],
)
def test_mask_hides_what_may_be_a_credential_whatever_the_shape(url, shown):
    from sparkstate.connectors.credentials import mask

    assert mask(url) == shown
    assert mask(shown) == shown  # masking twice changes nothing


def test_a_password_postgresql_would_read_as_a_host_or_port_is_refused_without_showing_it():
    """libpq ends the user's part at the first "@" before a "/": a raw "/" or a second "@"
    in a password makes it a host, a port or a database name, which errors would show."""
    for url in ("postgresql://app:S3cr/et9Z@db/prod", "postgresql://app:S3cr@et9Z@db/prod"):
        with pytest.raises(JobDefinitionError) as failure:
            parse_sink(url)
        assert "percent-encode" in str(failure.value)
        assert_hidden(str(failure.value))


def test_a_password_holding_a_question_mark_or_hash_reaches_postgresql_whole():
    """libpq reads ``?`` and ``#`` in the user's part as the password's; the sink's options
    are read after the host, so the URL it hands libpq is the one given, options aside."""
    from psycopg.conninfo import conninfo_to_dict

    sink = parse_sink("postgresql://app:S3cr?et#9Z@db/prod?table=totals&sslmode=require")
    assert sink.table == "totals"
    assert conninfo_to_dict(sink.url) == {
        "user": "app", "password": "S3cr?et#9Z", "host": "db", "dbname": "prod", "sslmode": "require"}
    assert_hidden(sink.describe(), repr(sink))


def test_a_savepoint_of_an_old_checkpoint_does_not_copy_its_password(tmp_path):
    """A checkpoint written before passwords were masked this way may hold one in its
    metadata: the savepoint of it records the masked form."""
    from sparkstate.runtime.checkpoint.metadata import CheckpointDir
    from sparkstate.runtime.savepoints.requests import recorded_sinks

    checkpoint = CheckpointDir.open(tmp_path)
    old = {"table": "t", "writer": "j@t", "database": "postgresql://app:S3cr/et9Z@db/prod table=t mode=append"}
    checkpoint.write_metadata({"job": "j", "sinks": [old]})
    recorded = recorded_sinks(checkpoint)
    assert recorded["sinks"][0]["writer"] == "j@t" and recorded["sinks"][0]["database"].startswith("postgresql://***@db")
    assert_hidden(json.dumps(recorded))
