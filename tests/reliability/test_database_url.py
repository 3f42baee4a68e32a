"""One reading of database URLs for the toolkit, the command line and the Spark pipeline."""

from __future__ import annotations

import pytest

from pocketmq.errors import InvalidArgumentError
from pocketmq.reliability.database_url import (
    async_url,
    database_family,
    is_database_url,
    is_memory_url,
    parse_database_url,
)


def test_async_url_mapping() -> None:
    assert async_url("sqlite:///./data/x.db") == "sqlite+aiosqlite:///./data/x.db"
    assert async_url("sqlite+pysqlite:///x.db") == "sqlite+aiosqlite:///x.db"
    assert async_url("postgresql://u:p@h/db") == "postgresql+psycopg://u:p@h/db"
    assert async_url("postgres://u@h/db") == "postgresql+psycopg://u@h/db"
    assert async_url("postgresql+psycopg2://u@h/db") == "postgresql+psycopg://u@h/db"
    assert async_url("mysql+pymysql://root@h:3306/test") == "mysql+asyncmy://root@h:3306/test"
    assert async_url("mariadb://root@h/test") == "mysql+asyncmy://root@h/test"
    assert async_url("sqlite+aiosqlite:///x") == "sqlite+aiosqlite:///x"


def test_async_url_keeps_other_drivers_and_the_rest_of_the_url() -> None:
    assert async_url("postgresql+asyncpg://u@h/db") == "postgresql+asyncpg://u@h/db"
    assert async_url("oracle://h/db") == "oracle://h/db"
    # an escaped password must reach the driver exactly as written
    assert async_url("postgresql://u:p%40ss%2F@h/db?sslmode=require") == (
        "postgresql+psycopg://u:p%40ss%2F@h/db?sslmode=require"
    )


@pytest.mark.parametrize(
    ("url", "family"),
    [
        ("postgresql+psycopg://h/db", "postgresql"),
        ("postgres://h/db", "postgresql"),
        ("mysql+pymysql://h/db", "mysql"),
        ("mariadb://h/db", "mysql"),
        ("sqlite:///x.db", "sqlite"),
        ("jdbc:postgresql://h/db", "postgresql"),
        ("jdbc:mariadb://h/db", "mysql"),
        ("jdbc:sqlite:x.db", "sqlite"),
        ("jdbc:oracle:thin:@h:1521:x", None),
        ("oracle://h/db", None),
        ("/data/stubs", None),
        ("s3a://bucket/stubs", None),
    ],
)
def test_database_family(url: str, family: str | None) -> None:
    assert database_family(url) == family


def test_databases_and_paths_are_told_apart() -> None:
    assert is_database_url("postgresql://h/db")
    assert is_database_url("jdbc:oracle:thin:@h:1521:x")
    assert is_database_url("oracle://h/db")  # unsupported, but a database: not a path
    assert not is_database_url("/data/stubs")
    assert not is_database_url("s3a://bucket/stubs")
    assert not is_database_url("stubs.parquet")
    assert is_memory_url("memory://")
    assert not is_memory_url("sqlite:///memory.db")


def test_parse_takes_a_server_url_apart() -> None:
    url = parse_database_url("postgresql+psycopg://app:s%3Acret@[::1]:6432/orders?sslmode=x")
    assert (url.family, url.driver, url.user, url.password) == (
        "postgresql",
        "psycopg",
        "app",
        "s:cret",
    )
    assert (url.host, url.port, url.database, url.query) == (
        "::1",
        6432,
        "orders",
        (("sslmode", "x"),),
    )
    assert url.address == "[::1]:6432"
    assert "s:cret" not in repr(url)
    assert parse_database_url("mariadb://root@db/shop").address == "db:3306"


def test_parse_reads_sqlite_file_names_as_sqlalchemy_does() -> None:
    assert parse_database_url("sqlite:///relative/outbox.db").database == "relative/outbox.db"
    assert (
        parse_database_url("sqlite:////var/lib/outbox.db?mode=ro").database == "/var/lib/outbox.db"
    )


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("jdbc:postgresql://h/db", "SQLAlchemy"),
        ("sqlite://", "needs a file"),
        ("oracle://h/db", "unsupported"),
        ("/data/stubs", "not a database URL"),
        ("memory://", "unsupported"),
    ],
)
def test_parse_refuses_what_pocketmq_cannot_open(url: str, words: str) -> None:
    with pytest.raises(InvalidArgumentError, match=words):
        parse_database_url(url)
