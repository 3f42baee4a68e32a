"""Database URLs, read in one place for the toolkit, its command line and the Spark pipeline.

Why one module: the same URL names the outbox database everywhere — ``SqlBackend.from_url``,
``pocketmq outbox --url``, ``pocketmq pipeline reconcile --stubs/--log`` — and each of those
needs something different from it: the toolkit an *async* SQLAlchemy driver, Spark a JDBC URL
with the credentials taken out, the command line only "is this a database or a Parquet path?".
Reading the scheme, the driver and the SQLite file name once keeps the three from disagreeing
about what a URL means (docs/reliability.md "Databases and drivers", docs/pipeline.md "Inputs").

Only the standard library is used: the pipeline reads databases through Spark and must not need
SQLAlchemy installed just to parse a URL.

A URL is written the SQLAlchemy way, ``family[+driver]://[user[:password]@]host[:port]/database``
(SQLite: ``sqlite:///relative.db``, ``sqlite:////absolute.db``); the families are PostgreSQL
(``postgresql``, ``postgres``), MariaDB/MySQL (``mysql``, ``mariadb``) and SQLite. ``jdbc:`` URLs
name databases too, but only Spark can open them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final
from urllib.parse import parse_qsl, unquote, urlsplit

from pocketmq.errors import InvalidArgumentError

__all__ = [
    "DATABASE_FAMILIES",
    "DEFAULT_DATABASE_URL",
    "DatabaseUrl",
    "async_url",
    "database_family",
    "is_database_url",
    "is_memory_url",
    "parse_database_url",
]

#: The embedded default: a SQLite file under ./data (docs/reliability.md "Defaults").
DEFAULT_DATABASE_URL: Final = "sqlite:///./data/reliability.db"
#: The database families pocketmq supports: PostgreSQL, MariaDB/MySQL and SQLite.
DATABASE_FAMILIES: Final = ("postgresql", "mysql", "sqlite")

#: URL scheme (without driver) -> family.
_FAMILY_OF_SCHEME: Final = {
    "postgresql": "postgresql",
    "postgres": "postgresql",
    "mysql": "mysql",
    "mariadb": "mysql",
    "sqlite": "sqlite",
}
#: Database schemes recognised but not supported, so the error says so (instead of Spark trying
#: to open such a URL as a file system path).
_OTHER_DATABASES: Final = frozenset(
    {"oracle", "mssql", "sqlserver", "db2", "snowflake", "redshift", "clickhouse", "duckdb"}
)
#: The async driver the toolkit uses per family (the ``sql`` extra installs them).
_ASYNC_DRIVER: Final = {
    "postgresql": "postgresql+psycopg",
    "mysql": "mysql+asyncmy",
    "sqlite": "sqlite+aiosqlite",
}
#: Drivers that are replaced by the family's async driver: the synchronous ones people write
#: (psycopg 2 and 3, PyMySQL, the standard sqlite3 module). Any other driver is kept as written.
_SYNC_DRIVERS: Final = frozenset({"psycopg2", "psycopg", "pymysql", "pysqlite"})
_DEFAULT_PORT: Final = {"postgresql": 5432, "mysql": 3306}


def _scheme_parts(url: str) -> tuple[str, str | None, str] | None:
    """``(scheme, driver, rest)`` of a ``scheme[+driver]://rest`` URL, or None for other text."""
    scheme, sep, rest = url.partition("://")
    if not sep or not scheme or "/" in scheme:
        return None
    name, plus, driver = scheme.lower().partition("+")
    return name, (driver if plus else None), rest


def database_family(url: str) -> str | None:
    """``postgresql``, ``mysql`` or ``sqlite`` for a URL of a supported database, else None.

    ``jdbc:`` URLs are recognised by their vendor (``jdbc:postgresql:``, ``jdbc:mysql:``,
    ``jdbc:mariadb:``, ``jdbc:sqlite:``); paths and other URLs (``s3a://``) give None.
    """
    if url.startswith("jdbc:"):
        vendor = url[len("jdbc:") :].split(":", 1)[0].lower()
        return _FAMILY_OF_SCHEME.get(vendor)
    parts = _scheme_parts(url)
    return None if parts is None else _FAMILY_OF_SCHEME.get(parts[0])


def is_database_url(source: str) -> bool:
    """Whether ``source`` names a database (SQLAlchemy-style or ``jdbc:``) rather than a path.

    Databases pocketmq cannot read (``oracle://``, ``mssql://`` ...) count as databases too, so
    that using one fails with "unsupported database" rather than "file not found".
    """
    if source.startswith("jdbc:"):
        return True
    parts = _scheme_parts(source)
    return parts is not None and (parts[0] in _FAMILY_OF_SCHEME or parts[0] in _OTHER_DATABASES)


def is_memory_url(url: str) -> bool:
    """Whether ``url`` asks for the in-memory backend (``memory://``)."""
    return url.startswith("memory:")


@dataclass(frozen=True, kw_only=True, slots=True)
class DatabaseUrl:
    """A SQLAlchemy-style database URL of a supported family, taken apart.

    ``password`` is left out of ``repr`` so that logging a parsed URL does not leak it.
    """

    url: str
    family: str
    driver: str | None
    host: str | None
    port: int | None
    user: str | None
    password: str | None = field(repr=False)
    database: str
    query: tuple[tuple[str, str], ...]

    @property
    def address(self) -> str:
        """``host:port`` with the family's default port (IPv6 literals in brackets)."""
        host = self.host or "localhost"
        if ":" in host:
            host = f"[{host}]"
        return f"{host}:{self.port or _DEFAULT_PORT.get(self.family, 0)}"


def parse_database_url(url: str) -> DatabaseUrl:
    """Take a SQLAlchemy-style URL apart; a clear error for anything pocketmq cannot open.

    For SQLite, ``database`` is the file name as SQLAlchemy reads it (``sqlite:///x.db`` ->
    ``x.db``, ``sqlite:////var/x.db`` -> ``/var/x.db``); a URL without a file
    (``sqlite://``) is refused, because every reader of the outbox must see the same file.
    """
    if url.startswith("jdbc:"):
        raise InvalidArgumentError(
            f"{url!r} is a JDBC URL, which only Spark can read: write the database the "
            "SQLAlchemy way (postgresql://, mysql://, mariadb:// or sqlite:///)"
        )
    parts = _scheme_parts(url)
    if parts is None:
        raise InvalidArgumentError(f"not a database URL: {url!r}")
    scheme, driver, rest = parts
    family = _FAMILY_OF_SCHEME.get(scheme)
    if family is None:
        raise InvalidArgumentError(
            f"unsupported database URL scheme {scheme!r} in {url!r} "
            "(use postgresql://, mysql://, mariadb:// or sqlite:///)"
        )
    if family == "sqlite":
        path = rest.split("?", 1)[0]
        if not path.startswith("/") or path == "/":
            raise InvalidArgumentError(
                "SQLite URL needs a file: sqlite:///relative.db or sqlite:////absolute.db, "
                f"got {url!r}"
            )
        return DatabaseUrl(
            url=url,
            family=family,
            driver=driver,
            host=None,
            port=None,
            user=None,
            password=None,
            database=path[1:],
            query=tuple(parse_qsl(rest.partition("?")[2])),
        )
    split = urlsplit(f"{scheme}://{rest}")
    return DatabaseUrl(
        url=url,
        family=family,
        driver=driver,
        host=split.hostname,
        port=split.port,
        user=unquote(split.username) if split.username is not None else None,
        password=unquote(split.password) if split.password is not None else None,
        database=split.path.lstrip("/"),
        query=tuple(parse_qsl(split.query)),
    )


def async_url(url: str) -> str:
    """``url`` with the async driver the toolkit uses for its family.

    A URL without a driver, or with a synchronous one (``postgresql+psycopg2``,
    ``mysql+pymysql``, ``sqlite+pysqlite``), gets psycopg 3, asyncmy or aiosqlite; a URL naming
    another driver (``postgresql+asyncpg``) and URLs of other databases are returned unchanged,
    so the same URL serves the toolkit, the command line and the Spark pipeline. Only the scheme
    is rewritten: the rest of the URL (password escapes included) stays exactly as written.
    """
    parts = _scheme_parts(url)
    if parts is None:
        return url
    scheme, driver, rest = parts
    family = _FAMILY_OF_SCHEME.get(scheme)
    if family is None or (driver is not None and driver not in _SYNC_DRIVERS):
        return url
    return f"{_ASYNC_DRIVER[family]}://{rest}"
