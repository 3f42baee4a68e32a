"""The two tables, as SQLAlchemy Core metadata (the column names are a contract).

The Spark reconciliation pipeline reads ``message_stub`` and ``message_log`` directly, so the
column names and meanings below are fixed; ``docs/reliability.md`` lists them. Types are chosen so
that the same definitions work on SQLite, PostgreSQL and MariaDB/MySQL:

* ``content`` is ``BYTEA`` on PostgreSQL, ``BLOB`` on SQLite and ``LONGBLOB`` on MySQL/MariaDB
  (a plain MySQL ``BLOB`` stops at 64 KiB, far below the broker's 4 MiB message limit);
* timestamps are ``TIMESTAMP WITHOUT TIME ZONE`` holding UTC; on MySQL/MariaDB that is
  ``DATETIME(6)`` (``TIMESTAMP`` there converts time zones and ends in 2038, and plain
  ``DATETIME`` drops the microseconds the claim compare-and-set relies on);
* ``message_log``'s ``UNIQUE (consumer_group, message_id)`` is its primary key;
* message ids and group names compare exactly: on MySQL/MariaDB they use the ``utf8mb4_bin``
  collation (the default collations ignore case, so ``order-1`` and ``ORDER-1`` would collide).

``table_prefix`` lets several independent sets of tables share one database (tests use a unique
prefix per test; applications normally leave it empty); ``stub_table`` and ``log_table`` name the
tables outright, for a database whose tables were named by someone else (the Spark pipeline's
``--stubs-table``). Schema creation is
``metadata.create_all`` (``SqlBackend.create_schema()`` or ``pocketmq outbox init-db``); it creates
missing tables and leaves existing ones alone, so it is safe to run at every start.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    text,
)
from sqlalchemy.dialects import mysql
from sqlalchemy.types import TypeEngine

from pocketmq.errors import InvalidArgumentError

__all__ = ["LOG_COLUMNS", "STUB_COLUMNS", "ReliabilityTables", "reliability_tables"]

STUB_COLUMNS = (
    "message_id",
    "topic",
    "tag",
    "keys",
    "content",
    "status",
    "send_count",
    "broker_name",
    "queue_id",
    "queue_offset",
    "next_resend_at",
    "created_at",
    "updated_at",
    "last_error",
)
LOG_COLUMNS = (
    "consumer_group",
    "message_id",
    "topic",
    "broker_name",
    "queue_id",
    "queue_offset",
    "status",
    "receive_count",
    "created_at",
    "consumed_at",
)

_PREFIX = re.compile(r"^[A-Za-z0-9_]{0,40}$")


def _timestamp() -> TypeEngine[Any]:
    return DateTime(timezone=False).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def _identifier(length: int) -> TypeEngine[Any]:
    # MySQL/MariaDB compare strings case-insensitively under their default collations; message
    # ids and group names are case-sensitive everywhere else (the broker, SQLite, PostgreSQL).
    return String(length).with_variant(
        mysql.VARCHAR(length, charset="utf8mb4", collation="utf8mb4_bin"), "mysql", "mariadb"
    )


def _blob() -> TypeEngine[Any]:
    return LargeBinary().with_variant(mysql.LONGBLOB(), "mysql", "mariadb")


@dataclass(frozen=True, slots=True)
class ReliabilityTables:
    """The stub and log tables bound to one :class:`~sqlalchemy.MetaData`, so that they are
    created and dropped together."""

    metadata: MetaData
    stub: Table
    log: Table


def reliability_tables(
    metadata: MetaData | None = None,
    *,
    table_prefix: str = "",
    schema: str | None = None,
    stub_table: str | None = None,
    log_table: str | None = None,
) -> ReliabilityTables:
    """Define ``<prefix>message_stub`` and ``<prefix>message_log`` on ``metadata``.

    ``stub_table`` / ``log_table`` replace the prefixed default names as they are (SQLAlchemy
    quotes them where the database needs it).
    """
    if not _PREFIX.match(table_prefix):
        raise InvalidArgumentError("table_prefix may hold only letters, digits and '_' (≤ 40)")
    if stub_table == "" or log_table == "":
        raise InvalidArgumentError("a table name must not be empty")
    metadata = metadata if metadata is not None else MetaData()
    stub_name = stub_table or f"{table_prefix}message_stub"
    log_name = log_table or f"{table_prefix}message_log"
    stub = Table(
        stub_name,
        metadata,
        Column("message_id", _identifier(64), primary_key=True),
        Column("topic", String(255), nullable=False),
        Column("tag", String(255), nullable=True),
        Column("keys", String(1024), nullable=True),
        Column("content", _blob(), nullable=False),
        Column("status", String(16), nullable=False),
        Column("send_count", Integer, nullable=False, server_default=text("0")),
        Column("broker_name", String(255), nullable=True),
        Column("queue_id", Integer, nullable=True),
        Column("queue_offset", BigInteger, nullable=True),
        Column("next_resend_at", _timestamp(), nullable=False),
        Column("created_at", _timestamp(), nullable=False),
        Column("updated_at", _timestamp(), nullable=False),
        Column("last_error", Text, nullable=True),
        Index(f"ix_{stub_name}_status_next", "status", "next_resend_at"),
        schema=schema,
    )
    log = Table(
        log_name,
        metadata,
        Column("consumer_group", _identifier(255), nullable=False),
        Column("message_id", _identifier(64), nullable=False),
        Column("topic", String(255), nullable=False),
        Column("broker_name", String(255), nullable=False),
        Column("queue_id", Integer, nullable=False),
        Column("queue_offset", BigInteger, nullable=False),
        Column("status", String(16), nullable=False),
        Column("receive_count", Integer, nullable=False, server_default=text("1")),
        Column("created_at", _timestamp(), nullable=False),
        Column("consumed_at", _timestamp(), nullable=True),
        PrimaryKeyConstraint("consumer_group", "message_id"),
        # the resend rule's "max logged offset on this queue" and the audit both scan by queue
        Index(f"ix_{log_name}_queue", "topic", "broker_name", "queue_id", "queue_offset"),
        Index(f"ix_{log_name}_message", "message_id"),
        schema=schema,
    )
    return ReliabilityTables(metadata=metadata, stub=stub, log=log)
