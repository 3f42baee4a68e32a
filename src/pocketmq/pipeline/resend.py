"""Sending the resend list again from Spark workers, with the reliability toolkit's own claim.

Why this module is small: a stub is resent by the pipeline exactly as the toolkit's relay and
resend scheduler send it — the same :class:`~pocketmq.reliability.MessageSender` seam, the same
:class:`~pocketmq.reliability.ResendPolicy`, the same claim, send and record
(:func:`pocketmq.reliability.dispatch.send_stubs`) on the same ``message_stub`` table through the
same backend. One protocol on one table means the batch job, a retried Spark task, a job started
twice and the toolkit's scheduler running beside them cannot send one selection of a stub twice:
the claim is a compare-and-set on the ``send_count`` and ``next_resend_at`` the resend list was
selected with, and only one claimer wins (docs/reliability.md "Producer: outbox and relay";
docs/pipeline.md "Resending").

What the pipeline adds is what Spark needs:

* a **sender factory** — any picklable zero-argument callable returning a ``MessageSender``.
  Spark ships the factory, not a connection, to every worker; each partition calls it once.
  :class:`BrokerSender` is the one for pocketmq brokers (``--resend-to``);
* one **event loop, sender and backend per partition** (:func:`resend_partition`), closed when
  the partition is done, and the outcome counts summed on the driver (:class:`ResendOutcome`).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

from pocketmq.client import Message, Producer, SendResult
from pocketmq.reliability.backend import ReliabilityBackend
from pocketmq.reliability.clock import SYSTEM_CLOCK, Clock, FakeClock, utc_naive
from pocketmq.reliability.database_url import parse_database_url
from pocketmq.reliability.dispatch import SendAttempt, send_stubs
from pocketmq.reliability.policy import NoBacklog, ResendPolicy
from pocketmq.reliability.sender import MessageSender
from pocketmq.reliability.stub import MessageStub

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "BrokerSender",
    "ProducerSender",
    "ResendOutcome",
    "SenderFactory",
    "open_stub_backend",
    "resend_partition",
    "resend_stubs",
    "run_resend",
]

#: Called once per Spark partition, on the worker. Must be picklable (module-level function,
#: class, or ``functools.partial`` of one).
SenderFactory = Callable[[], MessageSender]

#: At most this many error texts travel back to the driver per run (one per failed send).
MAX_ERRORS: Final = 20


class ProducerSender:
    """A :class:`~pocketmq.reliability.MessageSender` over pocketmq's
    :class:`~pocketmq.client.Producer`, started inside the partition's event loop.

    Why not hand the producer over directly: a producer belongs to the event loop it was started
    in and cannot be pickled, while Spark builds the sender on the worker before the loop runs.
    So the producer is created on the first send, in the partition's loop, and closed with
    :meth:`aclose` when the partition is done. Sends keep the stub's message id and use the
    producer's own retries and flow-control backoff; an answer lost in transit surfaces as
    :class:`~pocketmq.errors.SendOutcomeUnknownError`, which the stub records as UNKNOWN.
    """

    def __init__(self, servers: str) -> None:
        self._servers = servers
        self._producer: Producer | None = None

    async def send(self, message: Message) -> SendResult:
        """Send with the stub's id, starting the producer on the first send, in this partition's
        event loop.
        """
        if self._producer is None:
            producer = Producer(servers=self._servers)
            await producer.start()
            self._producer = producer
        return await self._producer.send(message)

    async def aclose(self) -> None:
        """Close the producer, if a send started one."""
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.aclose()


@dataclass(frozen=True, slots=True)
class BrokerSender:
    """The :data:`SenderFactory` that resends through pocketmq brokers at ``servers``.

    Why a dataclass holding a string: Spark pickles the factory to every worker, and an address
    pickles where a connection cannot. ``servers`` is what :class:`~pocketmq.client.Producer`
    takes (``host:port``, comma-separated for several); each partition gets its own
    :class:`ProducerSender`.
    """

    servers: str

    def __call__(self) -> ProducerSender:
        return ProducerSender(self.servers)


@dataclass(frozen=True, kw_only=True, slots=True)
class ResendOutcome:
    """Counts of one resend run, or one partition of it; partitions add up with ``+``.

    Why more than the toolkit's ``ResendReport``: a Spark run reports back to an operator at a
    terminal, so it carries the first few error texts too (at most :data:`MAX_ERRORS`).
    ``skipped`` counts stubs someone else claimed first or that changed since the selection.
    """

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
            errors=(self.errors + other.errors)[:MAX_ERRORS],
        )


class _ErrorRecorder:
    """Passes sends through, keeping the text of each failure for the outcome's ``errors``."""

    def __init__(self, sender: MessageSender) -> None:
        self._sender = sender
        self.errors: list[str] = []

    async def send(self, message: Message) -> SendResult:
        try:
            return await self._sender.send(message)
        except Exception as exc:
            if len(self.errors) < MAX_ERRORS:
                self.errors.append(f"{message.message_id}: {type(exc).__name__}: {exc}")
            raise


async def resend_stubs(
    stubs: Iterable[MessageStub],
    sender: MessageSender,
    backend: ReliabilityBackend[Any],
    *,
    policy: ResendPolicy | None = None,
    clock: Clock | None = None,
) -> ResendOutcome:
    """Claim, send and record each stub of a resend list, one after the other.

    ``stubs`` hold what the resend list was selected with: a stub whose ``send_count`` or
    ``next_resend_at`` has moved since (resent meanwhile by anyone) is skipped. One at a time
    keeps the claim-send-record order of each stub simple; a large list is spread over the
    partitions instead.
    """
    recorder = _ErrorRecorder(sender)
    counts = await send_stubs(
        backend,
        recorder,
        stubs,
        policy=policy if policy is not None else ResendPolicy(),
        estimator=NoBacklog(),
        clock=clock if clock is not None else backend.clock,
    )
    return ResendOutcome(
        sent=counts[SendAttempt.SENT],
        skipped=counts[SendAttempt.SKIPPED],
        failed=counts[SendAttempt.FAILED],
        unknown=counts[SendAttempt.UNKNOWN],
        errors=tuple(recorder.errors),
    )


def open_stub_backend(url: str, table: str, clock: Clock) -> ReliabilityBackend[Any]:
    """The toolkit's SQL backend on the stub table ``table`` (``schema.table`` allowed).

    A function of plain values, so that ``functools.partial`` of it pickles to the workers.
    """
    from pocketmq.reliability.backends.sql import SqlBackend

    schema, _, name = table.rpartition(".")
    return SqlBackend.from_url(url, stub_table=name, schema=schema or None, clock=clock)


async def _close(resource: object) -> None:
    """Call ``resource.aclose()`` when it has one (senders need not)."""
    close = getattr(resource, "aclose", None)
    if close is not None:
        result = close()
        if inspect.isawaitable(result):
            await result


def resend_partition(
    rows: Iterator[Any],
    *,
    sender_factory: SenderFactory,
    backend_factory: Callable[[Clock], ReliabilityBackend[Any]],
    now: datetime | None,
    policy: ResendPolicy,
) -> Iterator[ResendOutcome]:
    """The body of one Spark task: one event loop, sender and backend for the whole partition.

    ``now`` fixes the clock of the stub updates (tests); None uses the wall clock.
    """
    clock: Clock = FakeClock(now) if now is not None else SYSTEM_CLOCK
    stubs = (MessageStub.from_row(r.asDict() if hasattr(r, "asDict") else r) for r in rows)

    async def go() -> ResendOutcome:
        sender = sender_factory()
        backend = backend_factory(clock)
        try:
            return await resend_stubs(stubs, sender, backend, policy=policy, clock=clock)
        finally:
            try:
                await _close(sender)
            finally:
                await backend.aclose()

    yield asyncio.run(go())


def run_resend(
    candidates: DataFrame,
    *,
    sender_factory: SenderFactory,
    stub_db: str,
    table: str = "message_stub",
    now: datetime | None = None,
    policy: ResendPolicy | None = None,
) -> ResendOutcome:
    """Resend every row of ``candidates`` (the resend list) from the Spark workers.

    ``stub_db`` is the database URL of the stub table, written the SQLAlchemy way (the workers
    claim and update the stubs there through the toolkit's backend; they need the
    ``pocketmq[sql]`` drivers). A ``jdbc:`` URL is refused before any work starts. ``now``
    (naive = UTC) fixes the time the stub updates are stamped with; the default is the wall
    clock. Returns the summed outcome of all partitions.
    """
    from pocketmq.pipeline.schemas import MESSAGE_STUB_SCHEMA

    parse_database_url(stub_db)  # a clear error on the driver, not one per Spark task
    moment = utc_naive(now) if now is not None else None
    body = functools.partial(
        resend_partition,
        sender_factory=sender_factory,
        backend_factory=functools.partial(open_stub_backend, stub_db, table),
        now=moment,
        policy=policy if policy is not None else ResendPolicy(),
    )
    outcomes = candidates.select(*MESSAGE_STUB_SCHEMA.names).rdd.mapPartitions(body).collect()
    return sum(outcomes, ResendOutcome())
