"""Transactional messages: a message that is delivered if and only if a local transaction commits.

``send_in_transaction(message, local_transaction)`` sends a *half message* (stored, invisible to
consumers), runs the local transaction, and tells the broker the outcome:

- ``COMMIT`` ⇒ the broker delivers the message (exactly once, same message id);
- ``ROLLBACK`` ⇒ it never is;
- ``UNKNOWN`` (or the local transaction raised, or this process died) ⇒ nothing is sent and the
  broker *checks back* later: it asks a live producer of the same producer group — any one, this
  process need not be alive — through the ``checker`` callback, which looks at the local state
  (typically: does the row the local transaction wrote exist?) and answers.

The checker must be deterministic about committed work: it is the only authority once the
producer that ran the transaction is gone. It may run while the local transaction is still in
progress (when it outlives the broker's transaction timeout, 6 s by default): answer ``UNKNOWN``
for a transaction that may still commit, never ``ROLLBACK``.

**Retries.** A half message is sent again only when it certainly was not stored: the connection
could not be opened, or was closed before the request was written (transactional sends are
retried only transparently: docs/semantics.md, "Transactions"). A timeout or a connection lost
after the request left raises :class:`~pocketmq.errors.SendOutcomeUnknownError` and the local
transaction does not run; if the half message was stored after all, the broker checks back and
the checker answers ``ROLLBACK`` (no local record). Ending a transaction *is* retried: the broker
treats a repeated end as a duplicate, so repeating it is safe.

The transaction producer is built by composition: a plain :class:`Producer` (whose sender makes
every request, so retries are decided in one place), a :class:`~.heartbeat.GroupHeartbeat` so
brokers can reach it with checks, and a :class:`~.checks.CheckResponder` answering them. Sync
checkers and local transactions run in a worker thread, async ones on the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Iterable, Sequence

import msgspec

from pocketmq import properties as props
from pocketmq.client.base import AsyncResource
from pocketmq.client.config import ClientConfig
from pocketmq.client.convert import to_wire, validate_message
from pocketmq.client.message import Message, SendResult, SendStatus
from pocketmq.client.pool import ConnectionPool
from pocketmq.client.producer.checks import CheckResponder
from pocketmq.client.producer.config import ProducerConfig, SendCallback
from pocketmq.client.producer.handlers import EndTransaction, SendHalfMessage
from pocketmq.client.producer.heartbeat import GroupHeartbeat
from pocketmq.client.producer.outcomes import (
    LocalTransaction,
    TransactionChecker,
    TransactionResolution,
    TransactionResult,
    TransactionStatistics,
    call_user,
)
from pocketmq.client.producer.producer import Producer
from pocketmq.client.routes import RouteCache
from pocketmq.errors import (
    BrokerConnectionError,
    BrokerError,
    FlushDiskTimeoutError,
    InvalidArgumentError,
    PocketMQError,
    ProtocolError,
    ServiceUnavailableError,
    TransactionStateError,
)
from pocketmq.protocol import structs as w

__all__ = [
    "LocalTransaction",
    "TransactionChecker",
    "TransactionProducer",
    "TransactionResolution",
    "TransactionResult",
    "TransactionStatistics",
]

log = logging.getLogger("pocketmq.client")


class TransactionProducer(AsyncResource):
    """Sends transactional messages and answers the broker's checks for its producer group.

    ``config.group`` (the producer group) is required. ``topics`` are fetched and heartbeated at
    start, so a producer that only answers checks (a sibling of one that crashed) is reachable
    before it sends anything. It sends plain messages too (``send`` and friends, as
    :class:`Producer`).
    """

    _what = "producer"

    def __init__(
        self,
        checker: TransactionChecker,
        *,
        topics: Iterable[str] = (),
        servers: Sequence[str] | str | None = None,
        config: ProducerConfig | None = None,
        client: ClientConfig | None = None,
        rng: random.Random | None = None,
        check_concurrency: int = 4,
        max_pending_checks: int = 10_000,
    ) -> None:
        self._producer = Producer(servers=servers, config=config, client=client, rng=rng)
        self.config = self._producer.config
        if not self.config.group:
            raise InvalidArgumentError(
                "a TransactionProducer needs a producer group (ProducerConfig(group=...)): the "
                "broker checks unfinished transactions back with a producer of that group"
            )
        if check_concurrency < 1 or max_pending_checks < 1:
            raise InvalidArgumentError("check_concurrency and max_pending_checks must be >= 1")
        self._sender = self._producer.sender
        self._heartbeat = GroupHeartbeat(self._producer, self.config.group, topics)
        self._checks = CheckResponder(
            checker,
            group=self.config.group,
            sender=self._sender,
            check_concurrency=check_concurrency,
            max_pending_checks=max_pending_checks,
        )
        self._producer.listen(self._checks.on_push)
        self._committed = self._rolled_back = self._unknown_local = 0

    @property
    def client_config(self) -> ClientConfig:
        """The client settings (servers, timeouts) of the underlying producer."""
        return self._producer.client_config

    @property
    def pool(self) -> ConnectionPool:
        """The producer's connections (checks arrive on them)."""
        return self._producer.pool

    @property
    def routes(self) -> RouteCache:
        """The producer's topic routes."""
        return self._producer.routes

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the producer, fetch the topics' routes and heartbeat their brokers; a topic
        without a route fails the start (and closes the producer)."""
        self._check_not_closed()
        if self._started:
            return
        await self._producer.start()
        self._started = True
        try:
            await self._heartbeat.start()
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        """Stop answering checks, unregister the group, then close the producer."""
        if self._closed:
            return
        self._closed = True
        await self._checks.stop()
        await self._heartbeat.stop()
        await self._heartbeat.unregister()
        await self._producer.aclose()

    # -- plain sends ----------------------------------------------------------------------

    async def send(self, message: Message) -> SendResult:
        """A plain send (see :meth:`Producer.send`)."""
        return await self._producer.send(message)

    def send_async(
        self, message: Message, callback: SendCallback | None = None
    ) -> asyncio.Task[SendResult]:
        """A plain send in the background (see :meth:`Producer.send_async`)."""
        return self._producer.send_async(message, callback)

    async def send_oneway(self, message: Message) -> None:
        """A plain fire-and-forget send (see :meth:`Producer.send_oneway`)."""
        await self._producer.send_oneway(message)

    async def send_batch(self, messages: Sequence[Message]) -> list[SendResult]:
        """Plain messages of one topic in one request (see :meth:`Producer.send_batch`)."""
        return await self._producer.send_batch(messages)

    async def flush(self) -> None:
        """Wait for plain sends in progress (see :meth:`Producer.flush`)."""
        await self._producer.flush()

    # -- transactions ---------------------------------------------------------------------

    async def send_in_transaction(
        self, message: Message, local_transaction: LocalTransaction
    ) -> TransactionResult:
        """Send ``message`` as a half message, run ``local_transaction``, end the transaction.

        If the local transaction raises, nothing is ended (the broker checks back) and the
        exception propagates. A :class:`~pocketmq.errors.TransactionStateError` means the
        broker had already decided otherwise (e.g. a check answered ROLLBACK while the local
        transaction was still running): the local effects and the message disagree.
        """
        result = await self.send_half_message(message)
        try:
            resolution = await call_user(local_transaction, result)
        except BaseException:
            self._unknown_local += 1
            raise
        if resolution is None:
            resolution = TransactionResolution.UNKNOWN
        confirmed = await self.end_transaction(result, resolution)
        return TransactionResult(send_result=result, resolution=resolution, confirmed=confirmed)

    async def send_half_message(self, message: Message) -> SendResult:
        """Store ``message`` as a half message (invisible until committed).

        Returns the send result with its ``transaction_id``. Retried only while the request
        certainly did not reach the broker; otherwise raises (see the module docstring). A half
        message stored but not flushed in time (sync flush) is rolled back and raises
        :class:`~pocketmq.errors.FlushDiskTimeoutError`.
        """
        self._check_open()
        validate_message(message, self.config.max_message_size)
        if message.delivery_time is not None:
            raise InvalidArgumentError("a transactional message cannot also be a delayed message")
        wire = to_wire(message)
        properties = {
            **wire.properties,
            props.TRANSACTION_PREPARED: "true",
            props.PRODUCER_GROUP: self.config.group,
        }
        wire = msgspec.structs.replace(wire, properties=properties)
        self._heartbeat.topics.add(message.topic)
        request = SendHalfMessage(
            wire,
            producer_group=self.config.group,
            send_timeout=self.config.send_timeout,
            group=message.message_group,
            prepare=self._heartbeat.ensure,
        )
        result = await self._sender.run(request)
        if result.status is not SendStatus.OK:  # RocketMQ's rule: only SEND_OK runs the local one
            with contextlib.suppress(PocketMQError):
                await self._end(result, commit=False)
            if result.status is SendStatus.FLUSH_DISK_TIMEOUT:
                raise FlushDiskTimeoutError(
                    f"half message {result.message_id} was not flushed to disk in time; it was "
                    "rolled back (the local transaction did not run)"
                )
            raise ServiceUnavailableError(
                f"half message {result.message_id} was stored on the master only "
                f"({result.status.value}: docs/replication.md §3); it was rolled back (the local "
                "transaction did not run): try again"
            )
        return result

    async def end_transaction(
        self, result: SendResult | TransactionResult, resolution: TransactionResolution
    ) -> bool:
        """Commit or roll back the half message of ``result``. Returns whether the broker
        confirmed it (False for UNKNOWN, or when the broker could not be reached: it checks
        back). Raises :class:`~pocketmq.errors.TransactionStateError` when the transaction had
        already ended differently; ending it the same way again is answered as confirmed."""
        if isinstance(result, TransactionResult):
            result = result.send_result
        if not isinstance(resolution, TransactionResolution):
            raise InvalidArgumentError(
                f"a local transaction must return a TransactionResolution, got {resolution!r}; "
                "the broker will check the transaction back"
            )
        if resolution is TransactionResolution.UNKNOWN:
            self._unknown_local += 1
            return False
        commit = resolution is TransactionResolution.COMMIT
        try:
            await self._end(result, commit=commit)
        except TransactionStateError:
            raise
        except PocketMQError as exc:
            if isinstance(exc, (BrokerError, ProtocolError)) and not exc.retriable:
                raise
            log.warning(
                "could not end transaction %s (message %s): %s; the broker will check it back",
                result.transaction_id,
                result.message_id,
                exc,
            )
            return False
        if commit:
            self._committed += 1
        else:
            self._rolled_back += 1
        return True

    async def _end(self, result: SendResult, *, commit: bool) -> None:
        routes = self._producer.routes
        route = await routes.get(result.topic)
        address = route.addresses.get(result.broker_name)
        if address is None:
            route = await routes.get(result.topic, refresh=True)
            address = route.addresses.get(result.broker_name)
        if address is None:
            raise BrokerConnectionError(f"broker {result.broker_name!r} is not in the route")
        request = w.EndTransactionRequest(
            self.config.group,
            result.message_id,
            result.transaction_id or "",
            commit,
            False,
            -1,
            result.topic,
        )
        await self._sender.run(EndTransaction(address, request))

    def statistics(self) -> TransactionStatistics:
        """The producer's send statistics plus the transactions' outcomes and checks."""
        base = self._producer.statistics()
        checks = self._checks
        return TransactionStatistics(
            sent=base.sent,
            failed=base.failed,
            retries=base.retries,
            backoffs=base.backoffs,
            unknown_outcomes=base.unknown_outcomes,
            batches=base.batches,
            committed=self._committed,
            rolled_back=self._rolled_back,
            unknown=self._unknown_local,
            checks_received=checks.received,
            checks_answered=checks.answered,
            late_answers=checks.late_answers,
            checks_dropped=checks.dropped,
        )
