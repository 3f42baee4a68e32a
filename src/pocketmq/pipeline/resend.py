"""Sending the resend list again, from Spark workers, without ever sending a stub twice per turn.

The seam: workers create their producer through a :data:`SenderFactory` — any picklable
zero-argument callable returning a :class:`MessageSender` (``async send(Message) -> SendResult``).
:class:`BrokerSender` is the one for pocketmq brokers (``BrokerSender(servers="host:port")``, or
``--resend-to`` on the command line); tests without a broker use :class:`InMemorySender`. Each
Spark partition creates one sender and one stub store, runs its rows through
:func:`resend_rows` in an event loop, and reports counts back to the driver.

Why a re-run cannot double-send: before sending, a worker *claims* the stub with one
conditional update::

    UPDATE message_stub SET send_count = send_count + 1, next_resend_at = ..., updated_at = ...
     WHERE message_id = ? AND send_count = <send_count read at selection time>
       AND next_resend_at = <next_resend_at read at selection time>
       AND status IN ('UNCONFIRMED', 'UNKNOWN')

Only one claim per (message, selection) can succeed: a second run over the same list — a
retried Spark task, a job started twice, an operator re-running yesterday's output — finds the
count already moved and skips the row. The resend time is compared too, because the toolkit's
own relay and resend scheduler claim a stub by moving only ``next_resend_at`` forward (its count
changes when the send is recorded): a stub they are sending right now is skipped here, and so is
one rescheduled by an operator since the list was made. The claim is committed before the
send, so a crash between the two loses at most that one send; the stub stays due again at
``next_resend_at`` and the next selection picks it up (the message id is unchanged, so
consumers deduplicate). After the send, the stub gets the new queue, offset and broker (seed 003
§5.2), again only if its count is still the one this worker set.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, Protocol, runtime_checkable

from pocketmq.client import Message, Producer, SendResult
from pocketmq.errors import InvalidArgumentError, SendOutcomeUnknownError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "BrokerSender",
    "InMemorySender",
    "InMemoryStubStore",
    "MessageSender",
    "ProducerSender",
    "ResendOutcome",
    "ResendPolicy",
    "SenderFactory",
    "SqlStubStore",
    "StubStore",
    "message_from_stub",
    "resend_partition",
    "resend_rows",
    "run_resend",
    "sync_url",
]

_PENDING: Final = ("UNCONFIRMED", "UNKNOWN")
#: The stub columns a worker needs to rebuild and resend a message.
RESEND_COLUMNS: Final = (
    "message_id",
    "topic",
    "tag",
    "keys",
    "content",
    "send_count",
    "next_resend_at",
)


@runtime_checkable
class MessageSender(Protocol):
    """What the resend job needs from a producer."""

    async def send(self, message: Message) -> SendResult: ...


#: Called once per Spark partition, on the worker. Must be picklable (module-level function,
#: class, or ``functools.partial`` of one).
SenderFactory = Callable[[], MessageSender]


class ProducerSender:
    """A :class:`MessageSender` over pocketmq's :class:`~pocketmq.client.Producer`.

    The producer is created and started on the first send, so it belongs to the event loop the
    partition runs in (a producer cannot move between loops); :func:`resend_partition` closes it
    with ``aclose()`` when the partition is done. Sends keep the stub's message id and use the
    producer's own retries and flow-control backoff; an answer lost in transit surfaces as
    :class:`~pocketmq.errors.SendOutcomeUnknownError`, which the resend records as unknown.
    """

    def __init__(self, servers: str) -> None:
        self._servers = servers
        self._producer: Producer | None = None

    async def send(self, message: Message) -> SendResult:
        if self._producer is None:
            producer = Producer(servers=self._servers)
            await producer.start()
            self._producer = producer
        return await self._producer.send(message)

    async def aclose(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.aclose()


@dataclass(frozen=True, slots=True)
class BrokerSender:
    """The :data:`SenderFactory` that resends through pocketmq brokers at ``servers``.

    ``servers`` is what :class:`~pocketmq.client.Producer` takes (``host:port``, comma-separated
    for several). The factory holds only that string, so Spark can ship it to every worker;
    each partition calls it once and gets its own :class:`ProducerSender`.
    """

    servers: str

    def __call__(self) -> ProducerSender:
        return ProducerSender(self.servers)


class StubStore(Protocol):
    """The stub-table updates the resend makes; each call is its own transaction."""

    def claim(
        self,
        message_id: str,
        seen_send_count: int,
        seen_next_resend_at: datetime,
        *,
        now: datetime,
        next_resend_at: datetime,
    ) -> bool: ...

    def record_sent(
        self, message_id: str, send_count: int, result: SendResult, *, now: datetime
    ) -> None: ...

    def record_failed(
        self, message_id: str, send_count: int, error: str, *, unknown: bool, now: datetime
    ) -> None: ...


@dataclass(frozen=True, kw_only=True, slots=True)
class ResendPolicy:
    """When a resent stub is due again: ``base_delay * 2**(send_count - 1)``, capped."""

    base_delay: float = 60.0
    max_delay: float = 3600.0

    def next_resend_at(self, now: datetime, send_count: int) -> datetime:
        delay = min(self.max_delay, self.base_delay * 2.0 ** max(0, send_count - 1))
        return now + timedelta(seconds=delay)


@dataclass(frozen=True, kw_only=True, slots=True)
class ResendOutcome:
    """Counts of one resend run (or one partition of it)."""

    sent: int = 0
    skipped: int = 0
    failed: int = 0
    unknown: int = 0
    errors: tuple[str, ...] = ()

    def __add__(self, other: ResendOutcome) -> ResendOutcome:
        return ResendOutcome(
            sent=self.sent + other.sent,
            skipped=self.skipped + other.skipped,
            failed=self.failed + other.failed,
            unknown=self.unknown + other.unknown,
            errors=(self.errors + other.errors)[:20],
        )


def message_from_stub(row: Mapping[str, Any]) -> Message:
    """The message a stub row describes, keeping its id so consumers can deduplicate."""
    keys = tuple(str(row.get("keys") or "").split())
    content = row["content"]
    return Message(
        topic=str(row["topic"]),
        body=bytes(content) if content is not None else b"",
        tag=row.get("tag"),
        keys=keys,
        message_id=str(row["message_id"]),
    )


async def resend_rows(
    rows: Iterable[Mapping[str, Any]],
    sender: MessageSender,
    store: StubStore,
    *,
    now: datetime,
    policy: ResendPolicy = ResendPolicy(),
) -> ResendOutcome:
    """Claim, send and record each row in turn (see the module docstring for the protocol)."""
    sent = skipped = failed = unknown = 0
    errors: list[str] = []
    for row in rows:
        message_id = str(row["message_id"])
        seen = int(row["send_count"])
        claimed = store.claim(
            message_id,
            seen,
            row["next_resend_at"],
            now=now,
            next_resend_at=policy.next_resend_at(now, seen + 1),
        )
        if not claimed:
            skipped += 1
            continue
        try:
            result = await sender.send(message_from_stub(row))
        except SendOutcomeUnknownError as exc:
            store.record_failed(message_id, seen + 1, str(exc), unknown=True, now=now)
            unknown += 1
            errors.append(f"{message_id}: {exc}")
        except Exception as exc:
            store.record_failed(
                message_id, seen + 1, f"{type(exc).__name__}: {exc}", unknown=False, now=now
            )
            failed += 1
            errors.append(f"{message_id}: {type(exc).__name__}: {exc}")
        else:
            store.record_sent(message_id, seen + 1, result, now=now)
            sent += 1
    return ResendOutcome(
        sent=sent, skipped=skipped, failed=failed, unknown=unknown, errors=tuple(errors[:20])
    )


def resend_partition(
    rows: Iterator[Any],
    *,
    sender_factory: SenderFactory,
    store_factory: Callable[[], StubStore],
    now: datetime,
    policy: ResendPolicy,
) -> Iterator[ResendOutcome]:
    """The body of one Spark task: one sender and one store for the whole partition."""
    sender = sender_factory()
    store = store_factory()
    dicts = (r.asDict() if hasattr(r, "asDict") else dict(r) for r in rows)

    async def go() -> ResendOutcome:
        try:
            return await resend_rows(dicts, sender, store, now=now, policy=policy)
        finally:
            close = getattr(sender, "aclose", None)
            if close is not None:
                result = close()
                if inspect.isawaitable(result):
                    await result

    try:
        yield asyncio.run(go())
    finally:
        dispose = getattr(store, "close", None)
        if dispose is not None:
            dispose()


def run_resend(
    candidates: DataFrame,
    *,
    sender_factory: SenderFactory,
    stub_db: str,
    table: str = "message_stub",
    now: datetime | None = None,
    policy: ResendPolicy = ResendPolicy(),
) -> ResendOutcome:
    """Resend every row of ``candidates`` (the resend list) from the Spark workers.

    ``stub_db`` is the SQLAlchemy URL of the stub table's database (the workers update it; they
    need the ``pocketmq[sql]`` drivers). Returns the summed outcome of all partitions.
    """
    moment = now.astimezone(UTC).replace(tzinfo=None) if now and now.tzinfo else now
    moment = moment or datetime.now(UTC).replace(tzinfo=None)
    body = functools.partial(
        resend_partition,
        sender_factory=sender_factory,
        store_factory=functools.partial(SqlStubStore, stub_db, table),
        now=moment,
        policy=policy,
    )
    outcomes = candidates.select(*RESEND_COLUMNS).rdd.mapPartitions(body).collect()
    return sum(outcomes, ResendOutcome())


#: Database URL schemes without a driver -> the synchronous drivers ``pocketmq[sql]`` installs.
_SYNC_DRIVERS: Final = {
    "postgresql": "postgresql+psycopg",
    "postgres": "postgresql+psycopg",
    "mysql": "mysql+pymysql",
    "mariadb": "mysql+pymysql",
}


def sync_url(url: str) -> str:
    """The SQLAlchemy URL the workers open for ``url``, with one of pocketmq's own drivers.

    ``postgresql://``, ``postgres://``, ``mysql://`` and ``mariadb://`` get psycopg 3 or
    PyMySQL (SQLAlchemy's defaults, psycopg2 and mysqlclient, are not installed); a URL that
    names its driver is kept. ``jdbc:`` URLs are for Spark's reads only.
    """
    if url.startswith("jdbc:"):
        raise InvalidArgumentError(
            f"the resend updates the stub table through SQLAlchemy: give --stubs as "
            f"postgresql://, mysql://, mariadb:// or sqlite:/// instead of {url!r}"
        )
    scheme, sep, rest = url.partition("://")
    driver = _SYNC_DRIVERS.get(scheme.lower())
    return f"{driver}{sep}{rest}" if sep and driver else url


class SqlStubStore:
    """:class:`StubStore` over the reliability toolkit's ``message_stub`` table (SQLAlchemy)."""

    def __init__(self, url: str, table: str = "message_stub") -> None:
        import sqlalchemy as sa

        schema, _, name = table.rpartition(".")
        self._t = sa.table(
            name,
            sa.column("message_id"),
            sa.column("status"),
            sa.column("send_count"),
            sa.column("broker_name"),
            sa.column("queue_id"),
            sa.column("queue_offset"),
            # Typed, so that SQLite compares and stores them in SQLAlchemy's format, as the
            # reliability toolkit wrote them.
            sa.column("next_resend_at", sa.DateTime()),
            sa.column("updated_at", sa.DateTime()),
            sa.column("last_error"),
            schema=schema or None,
        )
        url = sync_url(url)
        self._engine = (
            sa.create_engine(url, pool_size=1, max_overflow=0)
            if not url.startswith("sqlite")
            else sa.create_engine(url)
        )

    def _same_instant(self, column: Any, moment: datetime) -> Any:
        import sqlalchemy as sa

        if self._engine.dialect.name == "sqlite":
            # SQLite keeps timestamps as text, written as '... 12:00:00' by some writers and
            # '... 12:00:00.000000' by SQLAlchemy: compare the instants, not the strings.
            literal = sa.literal(moment, sa.DateTime())
            return sa.func.julianday(column) == sa.func.julianday(literal)
        return column == moment

    def claim(
        self,
        message_id: str,
        seen_send_count: int,
        seen_next_resend_at: datetime,
        *,
        now: datetime,
        next_resend_at: datetime,
    ) -> bool:
        import sqlalchemy as sa

        t = self._t
        stmt = (
            sa.update(t)
            .where(
                t.c.message_id == message_id,
                t.c.send_count == seen_send_count,
                self._same_instant(t.c.next_resend_at, seen_next_resend_at),
                t.c.status.in_(_PENDING),
            )
            .values(send_count=t.c.send_count + 1, next_resend_at=next_resend_at, updated_at=now)
        )
        with self._engine.begin() as conn:
            return conn.execute(stmt).rowcount == 1

    def record_sent(
        self, message_id: str, send_count: int, result: SendResult, *, now: datetime
    ) -> None:
        import sqlalchemy as sa

        t = self._t
        stmt = (
            sa.update(t)
            .where(
                t.c.message_id == message_id,
                t.c.send_count == send_count,
                t.c.status.in_(_PENDING),
            )
            .values(
                status="UNCONFIRMED",
                broker_name=result.broker_name,
                queue_id=result.queue_id,
                queue_offset=result.queue_offset,
                last_error=None,
                updated_at=now,
            )
        )
        with self._engine.begin() as conn:
            conn.execute(stmt)

    def record_failed(
        self, message_id: str, send_count: int, error: str, *, unknown: bool, now: datetime
    ) -> None:
        import sqlalchemy as sa

        t = self._t
        values: dict[str, Any] = {"last_error": error[:2000], "updated_at": now}
        if unknown:
            values["status"] = "UNKNOWN"
        stmt = (
            sa.update(t)
            .where(
                t.c.message_id == message_id,
                t.c.send_count == send_count,
                t.c.status.in_(_PENDING),
            )
            .values(**values)
        )
        with self._engine.begin() as conn:
            conn.execute(stmt)

    def close(self) -> None:
        self._engine.dispose()


@dataclass
class InMemoryStubStore:
    """:class:`StubStore` over a dict of stub rows (tests, dry runs); one process only."""

    stubs: dict[str, dict[str, Any]] = field(default_factory=dict)

    def claim(
        self,
        message_id: str,
        seen_send_count: int,
        seen_next_resend_at: datetime,
        *,
        now: datetime,
        next_resend_at: datetime,
    ) -> bool:
        stub = self.stubs.get(message_id)
        if (
            stub is None
            or stub["send_count"] != seen_send_count
            or stub["next_resend_at"] != seen_next_resend_at
            or stub["status"] not in _PENDING
        ):
            return False
        stub.update(send_count=seen_send_count + 1, next_resend_at=next_resend_at, updated_at=now)
        return True

    def record_sent(
        self, message_id: str, send_count: int, result: SendResult, *, now: datetime
    ) -> None:
        stub = self.stubs.get(message_id)
        if stub is None or stub["send_count"] != send_count or stub["status"] not in _PENDING:
            return
        stub.update(
            status="UNCONFIRMED",
            broker_name=result.broker_name,
            queue_id=result.queue_id,
            queue_offset=result.queue_offset,
            last_error=None,
            updated_at=now,
        )

    def record_failed(
        self, message_id: str, send_count: int, error: str, *, unknown: bool, now: datetime
    ) -> None:
        stub = self.stubs.get(message_id)
        if stub is None or stub["send_count"] != send_count or stub["status"] not in _PENDING:
            return
        stub.update(last_error=error, updated_at=now)
        if unknown:
            stub["status"] = "UNKNOWN"


@dataclass
class InMemorySender:
    """A :class:`MessageSender` that stores messages in a list and acknowledges them.

    Offsets count up per (topic, queue); ``fail`` maps a message id to the exception its send
    raises. Lives in one process: inside Spark workers, each partition gets its own instance.
    """

    broker_name: str = "broker-mem"
    queues: int = 4
    sent: list[Message] = field(default_factory=list)
    fail: dict[str, BaseException] = field(default_factory=dict)
    _offsets: dict[tuple[str, int], int] = field(default_factory=dict)

    async def send(self, message: Message) -> SendResult:
        error = self.fail.get(message.message_id or "")
        if error is not None:
            raise error
        queue_id = len(self.sent) % self.queues
        offset = self._offsets.get((message.topic, queue_id), 0)
        self._offsets[(message.topic, queue_id)] = offset + 1
        self.sent.append(message)
        return SendResult(
            message_id=message.message_id or f"mem-{len(self.sent)}",
            topic=message.topic,
            queue_id=queue_id,
            queue_offset=offset,
            broker_name=self.broker_name,
        )
