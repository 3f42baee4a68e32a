"""Reading the jobs' inputs from Parquet or a database, and writing their outputs.

An input is named by one string: a Parquet path (file or directory, local or any Hadoop file
system URL such as ``s3a://``/``hdfs://``), or a database URL. Database URLs may be written the
way SQLAlchemy (and so the reliability toolkit's configuration) writes them —
``postgresql+psycopg://user:pw@host/db``, ``mysql+pymysql://...``, ``mariadb://...``,
``sqlite:///relative.db``, ``sqlite:////absolute.db`` — or directly as ``jdbc:...`` URLs.
:func:`jdbc_source` turns them into what Spark's JDBC reader needs.

JDBC facts this module encodes (measured; docs/pipeline.md "Inputs"): the ``driver`` option is
always set, because a jar on ``spark.jars`` alone gives "No suitable driver"; the fetch size is at
least 10 000 (drivers default to 0/10 rows per round trip); a large table is read in parallel
ranges of an integer column when one is named; aggregate push-down is enabled so ``MAX()`` by
queue can run in the database. SQLite has no Spark dialect and reports ``DATETIME`` columns as
dates, so its timestamp columns are read as text and parsed in Spark.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

import pyarrow as pa

from pocketmq.errors import InvalidArgumentError
from pocketmq.reliability.database_url import (
    database_family,
    is_database_url,
    parse_database_url,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "DEFAULT_FETCH_SIZE",
    "JdbcSource",
    "is_database_url",
    "jdbc_source",
    "normalise_timestamps",
    "read_export",
    "read_table",
    "write_parquet",
]

DEFAULT_FETCH_SIZE: Final = 10_000

#: Database family (``pocketmq.reliability.database_url``) -> Spark's JDBC dialect and driver.
_JDBC: Final = {
    "postgresql": ("postgresql", "org.postgresql.Driver"),
    "mysql": ("mariadb", "org.mariadb.jdbc.Driver"),
    "sqlite": ("sqlite", "org.sqlite.JDBC"),
}
#: Query parameters meaningful to Python drivers only (the JDBC drivers refuse them).
_PYTHON_ONLY_PARAMETERS: Final = frozenset({"charset"})


@dataclass(frozen=True, kw_only=True, slots=True)
class JdbcSource:
    """A database as Spark's JDBC reader sees it, translated once from the URL the toolkit uses.

    ``url`` is the JDBC URL without credentials; ``user``/``password`` travel as options so they
    do not end up in logs that print the URL. ``dialect`` is ``postgresql``, ``mariadb`` or
    ``sqlite``.
    """

    url: str
    driver: str
    dialect: str
    user: str | None = None
    password: str | None = field(default=None, repr=False)

    def options(self) -> dict[str, str]:
        """Connection options for ``spark.read.format("jdbc")``."""
        opts = {"url": self.url, "driver": self.driver}
        if self.user is not None:
            opts["user"] = self.user
        if self.password is not None:
            opts["password"] = self.password
        return opts


def jdbc_source(url: str) -> JdbcSource:
    """Translate a SQLAlchemy-style database URL (or a JDBC URL) into a :class:`JdbcSource`.

    >>> jdbc_source("postgresql+psycopg://app:s3cret@db.example:6432/orders").url
    'jdbc:postgresql://db.example:6432/orders'
    >>> jdbc_source("sqlite:////var/lib/app/outbox.db").url
    'jdbc:sqlite:/var/lib/app/outbox.db'
    """
    if url.startswith("jdbc:"):
        family = database_family(url)
        if family is None:
            raise InvalidArgumentError(
                f"unsupported JDBC URL {url!r} (postgresql, mysql/mariadb, sqlite)"
            )
        dialect, driver = _JDBC[family]
        return JdbcSource(url=url, driver=driver, dialect=dialect)

    parsed = parse_database_url(url)
    dialect, driver = _JDBC[parsed.family]
    if parsed.family == "sqlite":
        return JdbcSource(url=f"jdbc:sqlite:{parsed.database}", driver=driver, dialect=dialect)
    # MariaDB's driver accepts jdbc:mysql: URLs, and only that prefix selects Spark's MySQL dialect
    # (backtick quoting); under jdbc:mariadb: Spark would quote names with double quotes.
    vendor = "mysql" if parsed.family == "mysql" else parsed.family
    jdbc = f"jdbc:{vendor}://{parsed.address}/{parsed.database}"
    query = [(k, v) for k, v in parsed.query if k not in _PYTHON_ONLY_PARAMETERS]
    if query:
        jdbc += "?" + "&".join(f"{k}={v}" for k, v in query)
    return JdbcSource(
        url=jdbc, driver=driver, dialect=dialect, user=parsed.user, password=parsed.password
    )


def _quote(dialect: str, name: str) -> str:
    return f"`{name}`" if dialect == "mariadb" else f'"{name}"'


def read_table(
    spark: SparkSession,
    source: str,
    *,
    table: str,
    schema: pa.Schema | None = None,
    columns: Sequence[str] | None = None,
    partition_column: str | None = None,
    num_partitions: int | None = None,
    fetch_size: int = DEFAULT_FETCH_SIZE,
) -> DataFrame:
    """Read ``table`` from a database URL, or the Parquet data at ``source``.

    With ``schema`` (one of :mod:`pocketmq.pipeline.schemas`) the result is conformed to it:
    ``columns`` (default: all of the schema's) are selected in order, integer and text columns
    are cast where the source's types differ (SQLite reports BIGINT as DECIMAL), and zone-less
    timestamps become ``TIMESTAMP_NTZ`` holding UTC wall-clock time. For a database,
    ``partition_column`` (an integer column) and ``num_partitions`` split the read into ranges
    read in parallel; the bounds are looked up first with one ``MIN``/``MAX`` query. ``table``
    is ignored for Parquet.
    """
    wanted = (
        list(columns) if columns is not None else (schema.names if schema is not None else None)
    )
    ts_cols: list[str] = []
    if schema is not None:
        ts_cols = [
            f.name
            for f in schema
            if pa.types.is_timestamp(f.type)
            and f.type.tz is None
            and (wanted is None or f.name in wanted)
        ]
    if is_database_url(source):
        db = jdbc_source(source)
        df = _read_jdbc(
            spark,
            db,
            table=table,
            timestamp_columns=ts_cols,
            partition_column=partition_column,
            num_partitions=num_partitions,
            fetch_size=fetch_size,
        )
    else:
        df = spark.read.parquet(source)
    if wanted is not None:
        missing = [c for c in wanted if c not in df.columns]
        if missing:
            raise InvalidArgumentError(f"{source}: missing columns {missing} (has {df.columns})")
        df = df.select(*wanted)
    if schema is not None:
        df = _conform(df, schema)
    return normalise_timestamps(df, ts_cols)


_SPARK_TYPES: Final = {
    pa.int32(): "int",
    pa.int64(): "bigint",
    pa.string(): "string",
    pa.binary(): "binary",
}


def _conform(df: DataFrame, schema: pa.Schema) -> DataFrame:
    from pyspark.sql import functions as F

    current = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    casts = {}
    for f in schema:
        target = _SPARK_TYPES.get(f.type)
        if target is not None and f.name in current and current[f.name] != target:
            casts[f.name] = F.col(f.name).cast(target)
    return df.withColumns(casts) if casts else df


def _read_jdbc(
    spark: SparkSession,
    db: JdbcSource,
    *,
    table: str,
    timestamp_columns: Sequence[str],
    partition_column: str | None,
    num_partitions: int | None,
    fetch_size: int,
) -> DataFrame:
    options = db.options()
    options.update(
        {
            "dbtable": table,
            "fetchsize": str(max(fetch_size, 1)),
            "pushDownAggregate": "true",
            "pushDownPredicate": "true",
            "preferTimestampNTZ": "true",
        }
    )
    if db.dialect == "sqlite" and timestamp_columns:
        # No SQLite dialect in Spark: DATETIME would come back as DATE. Read the text instead.
        options["customSchema"] = ", ".join(f"{c} STRING" for c in timestamp_columns)

    parts = num_partitions or spark.sparkContext.defaultParallelism
    if partition_column and parts > 1:
        col = _quote(db.dialect, partition_column)
        # Never NULL: Spark cannot read back a NULL MIN()/MAX() from SQLite (an empty table, or
        # a column with only NULLs: "column -1 out of bounds"). 0..0 reads the table unsplit.
        bounds_query = (
            f"SELECT COALESCE(MIN({col}), 0) AS lo, COALESCE(MAX({col}), 0) AS hi FROM {table}"
        )
        bounds_opts = {k: v for k, v in options.items() if k not in {"dbtable", "customSchema"}}
        bounds = spark.read.format("jdbc").options(**bounds_opts).option("query", bounds_query)
        row = bounds.load().first()
        lo, hi = (row[0], row[1]) if row is not None else (None, None)
        if lo is not None and hi is not None and hi > lo:
            options.update(
                {
                    "partitionColumn": partition_column,
                    "lowerBound": str(int(lo)),
                    "upperBound": str(int(hi) + 1),
                    "numPartitions": str(parts),
                }
            )
    return spark.read.format("jdbc").options(**options).load()


def normalise_timestamps(df: DataFrame, columns: Iterable[str]) -> DataFrame:
    """Make ``columns`` ``TIMESTAMP_NTZ`` (UTC wall clock), whatever the source gave.

    Text (SQLite) is parsed; zone-aware ``TIMESTAMP`` values are converted in the session time
    zone, which :func:`pocketmq.pipeline.spark_session` pins to UTC.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, TimestampNTZType, TimestampType

    types = dict((f.name, f.dataType) for f in df.schema.fields)
    for name in columns:
        dtype = types.get(name)
        if isinstance(dtype, TimestampNTZType):
            continue
        if isinstance(dtype, StringType):
            df = df.withColumn(name, F.to_timestamp_ntz(F.col(name)))
        elif isinstance(dtype, TimestampType):
            df = df.withColumn(name, F.col(name).cast("timestamp_ntz"))
        else:
            raise InvalidArgumentError(f"column {name} has type {dtype}, expected a timestamp")
    return df


def write_parquet(df: DataFrame, path: str, *, mode: str = "overwrite") -> None:
    """Write ``df`` as Parquet under ``path``, replacing what is there by default: a re-run of a
    job must leave its latest result, not a mix."""
    df.write.mode(mode).parquet(path)


def read_export(spark: SparkSession, path: str, schema: pa.Schema) -> DataFrame:
    """Read a broker export (Parquet, partitioned by topic/date) with its declared schema.

    Point ``path`` at the export's root: the ``topic`` and ``date`` columns come from the
    directory names (``topic=%25DLQ%25billing`` is decoded to ``%DLQ%billing``).
    """
    from pocketmq.pipeline.schemas import spark_ddl

    return spark.read.schema(spark_ddl(schema)).parquet(path)
