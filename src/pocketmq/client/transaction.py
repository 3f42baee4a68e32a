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
could not be opened, or was closed before the request was written (seed 004: transactional sends
are retried only transparently). A timeout or a connection lost after the request left raises
:class:`~pocketmq.errors.SendOutcomeUnknownError` and the local transaction does not run; if the
half message was stored after all, the broker checks back and the checker answers ``ROLLBACK``
(no local record). Ending a transaction *is* retried: the broker treats a repeated end as a
duplicate, so repeating it is safe.

The producer heartbeats its producer group to every broker it sends to (at start for the
``topics`` given, every heartbeat interval, and at once after a reconnect), so the broker can
reach it with checks. Sync checkers and local transactions run in a worker thread, async ones on
the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import inspect
import logging
import random
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec

from pocketmq import properties as props
from pocketmq.client.config import ClientConfig
from pocketmq.client.connection import ClientConnection
from pocketmq.client.convert import to_view, to_wire, validate_message
from pocketmq.client.message import Message, MessageView, SendResult, SendStatus
from pocketmq.client.producer import Producer, ProducerConfig, ProducerStatistics
from pocketmq.errors import (
    BrokerConnectionError,
    BrokerError,
    Code,
    FlushDiskTimeoutError,
    InvalidArgumentError,
    PocketMQError,
    ProtocolError,
    SendOutcomeUnknownError,
    TransactionStateError,
    error_from_code,
)
from pocketmq.protocol import RequestCode
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

T = TypeVar("T")
A = TypeVar("A")

_RECONNECT_CHECK = 1.0  # how often the heartbeat loop looks for new connections


class TransactionResolution(enum.Enum):
    """The outcome of a local transaction, as the producer reports it."""

    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"
    UNKNOWN = "UNKNOWN"


LocalTransaction = Callable[
    [SendResult], "TransactionResolution | Awaitable[TransactionResolution]"
]
"""Runs the local transaction for a stored half message and says how it ended."""

TransactionChecker = Callable[
    [MessageView], "TransactionResolution | Awaitable[TransactionResolution]"
]
"""Answers a broker's check: how did the local transaction of this message end?"""


@dataclass(frozen=True, kw_only=True, slots=True)
class TransactionResult:
    """How :meth:`TransactionProducer.send_in_transaction` ended.

    ``confirmed`` is True when the broker acknowledged the commit or rollback. It is False for
    ``UNKNOWN``, and when the end could not be delivered (the broker was unreachable): in both
    cases the broker checks back, and the checker decides.
    """

    send_result: SendResult
    resolution: TransactionResolution
    confirmed: bool

    @property
    def message_id(self) -> str:
        return self.send_result.message_id

    @property
    def transaction_id(self) -> str:
        return self.send_result.transaction_id or ""


@dataclass(frozen=True, kw_only=True, slots=True)
class TransactionStatistics(ProducerStatistics):
    """:class:`ProducerStatistics` plus the transactions: local outcomes reported (``unknown``
    counts UNKNOWN and raising local transactions), checks received from brokers, answered with
    COMMIT or ROLLBACK, refused as late answers, and dropped because too many were pending."""

    committed: int
    rolled_back: int
    unknown: int
    checks_received: int
    checks_answered: int
    late_answers: int
    checks_dropped: int


async def _call(function: Callable[[A], Any], argument: A) -> Any:
    """Await an async callable on the loop; run a sync one in a worker thread."""
    if inspect.iscoroutinefunction(function):
        return await function(argument)
    result = await asyncio.to_thread(function, argument)
    if inspect.isawaitable(result):
        return await result
    return result


class TransactionProducer(Producer):
    """Sends transactional messages and answers the broker's checks for its producer group.

    ``config.group`` (the producer group) is required. ``topics`` are fetched and heartbeated at
    start, so a producer that only answers checks (a sibling of one that crashed) is reachable
    before it sends anything. It is also a plain :class:`Producer` (``send`` and friends).
    """

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
        super().__init__(servers=servers, config=config, client=client, rng=rng)
        if not self.config.group:
            raise InvalidArgumentError(
                "a TransactionProducer needs a producer group (ProducerConfig(group=...)): the "
                "broker checks unfinished transactions back with a producer of that group"
            )
        if check_concurrency < 1 or max_pending_checks < 1:
            raise InvalidArgumentError("check_concurrency and max_pending_checks must be >= 1")
        self._checker = checker
        self._topics: set[str] = set(topics)
        self._heartbeated: dict[str, ClientConnection] = {}
        self._heartbeater: asyncio.Task[None] | None = None
        self._check_slots = asyncio.Semaphore(check_concurrency)
        self._max_pending_checks = max_pending_checks
        self._checking: set[str] = set()
        self._check_tasks: set[asyncio.Task[None]] = set()
        self._tx_closing = False
        self._committed = self._rolled_back = self._unknown_local = 0
        self._checks_received = self._checks_answered = self._late_answers = 0
        self._checks_dropped = 0

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        already = self._started
        await super().start()
        if already:
            return
        try:
            for topic in sorted(self._topics):
                await self.routes.get(topic)
            await self._heartbeat_all(force=True)
        except BaseException:
            await self.aclose()
            raise
        self._heartbeater = asyncio.create_task(self._heartbeat_forever())

    async def aclose(self) -> None:
        if self._tx_closing:
            return
        self._tx_closing = True
        if self._heartbeater is not None:
            self._heartbeater.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeater
        for task in list(self._check_tasks):
            task.cancel()
        if self._check_tasks:
            await asyncio.gather(*list(self._check_tasks), return_exceptions=True)
        request = w.UnregisterRequest(self.pool.client_id, [self.config.group])
        for connection in list(self._heartbeated.values()):
            if connection.is_open:
                with contextlib.suppress(PocketMQError):
                    await connection.request(RequestCode.UNREGISTER_CLIENT, request, w.Empty, 1.0)
        await super().aclose()

    # -- heartbeats -----------------------------------------------------------------------

    async def _addresses(self) -> set[str]:
        addresses: set[str] = set()
        for topic in sorted(self._topics):
            with contextlib.suppress(PocketMQError):
                addresses.update((await self.routes.get(topic)).addresses.values())
        return addresses

    async def _heartbeat_all(self, *, force: bool) -> None:
        for address in sorted(await self._addresses()):
            try:
                connection = await self.pool.get(address)
            except PocketMQError:
                continue  # down: the loop tries again in a second
            if force or self._heartbeated.get(address) is not connection:
                with contextlib.suppress(PocketMQError):
                    await self._heartbeat(address, connection)

    async def _heartbeat(self, address: str, connection: ClientConnection) -> None:
        request = w.HeartbeatRequest(self.pool.client_id, [self.config.group], [])
        await connection.request(
            RequestCode.HEARTBEAT, request, w.Empty, self.client_config.request_timeout
        )
        self._heartbeated[address] = connection

    async def _heartbeat_forever(self) -> None:
        loop = asyncio.get_running_loop()
        interval = self.client_config.heartbeat_interval
        last_full = loop.time()
        while True:
            await asyncio.sleep(min(interval, _RECONNECT_CHECK))
            full = loop.time() - last_full >= interval
            if full:
                last_full = loop.time()
            try:
                await self._heartbeat_all(force=full)
            except Exception:  # keep heartbeating whatever one round hit
                log.exception("transaction producer heartbeat failed")

    # -- sending --------------------------------------------------------------------------

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
            resolution = await _call(local_transaction, result)
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
        self._topics.add(message.topic)
        result = await self._send_half(message, wire)
        if result.status is not SendStatus.OK:
            with contextlib.suppress(PocketMQError):
                await self._end_transaction(result, commit=False)
            raise FlushDiskTimeoutError(
                f"half message {result.message_id} was not flushed to disk in time; it was "
                "rolled back (the local transaction did not run)"
            )
        return result

    async def _send_half(self, message: Message, wire: w.WireMessage) -> SendResult:
        config = self.config
        loop = asyncio.get_running_loop()
        deadline = loop.time() + config.send_timeout
        tried: set[str] = set()
        last_error: PocketMQError | None = None
        message_id = wire.properties[props.MESSAGE_ID]
        for attempt in range(config.retries + 1):
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            if attempt:
                self._retries += 1
            route = await self.routes.get(message.topic)
            queue = self._pick_queue(route, message.message_group, tried)
            try:
                connection = await self.pool.get(queue.address)
                if self._heartbeated.get(queue.address) is not connection:
                    await self._heartbeat(queue.address, connection)  # checks can reach us
                request = w.SendRequest(
                    [msgspec.structs.replace(wire, queue_id=queue.queue_id)], config.group
                )
                pending = connection.send_request(RequestCode.SEND, request, w.SendResponse)
            except BrokerConnectionError as exc:  # the half message was never written
                last_error = exc
                tried.add(queue.broker_name)
                continue
            try:
                response = await asyncio.wait_for(pending, max(0.0, deadline - loop.time()))
            except (TimeoutError, BrokerConnectionError) as exc:
                self._failed += 1
                self._unknown += 1
                why = str(exc) or "no answer in time"
                raise SendOutcomeUnknownError(
                    f"half message {message_id} may or may not have been stored ({why}); it is "
                    "not sent again (transactional sends are retried only when certainly not "
                    "stored). If it was stored, the broker checks it back.",
                    message_id=message_id,
                    cause=exc if isinstance(exc, PocketMQError) else None,
                ) from exc
            [item] = response.results
            if item.code not in (Code.SUCCESS, Code.FLUSH_DISK_TIMEOUT):
                self._failed += 1
                raise error_from_code(item.code, item.remark)
            self._sent += 1
            return SendResult(
                message_id=item.message_id or message_id,
                topic=message.topic,
                queue_id=item.queue_id,
                queue_offset=item.queue_offset,
                broker_name=response.broker_name or queue.broker_name,
                status=SendStatus.OK
                if item.code == Code.SUCCESS
                else SendStatus.FLUSH_DISK_TIMEOUT,
                transaction_id=item.transaction_id or None,
            )
        self._failed += 1
        if last_error is None:
            raise SendOutcomeUnknownError(
                f"half message {message_id} was not sent within {config.send_timeout:.1f}s",
                message_id=message_id,
            )
        raise last_error

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
            await self._end_transaction(result, commit=commit)
        except TransactionStateError:
            raise
        except PocketMQError as exc:
            if isinstance(exc, BrokerError) and not exc.retriable:
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

    def statistics(self) -> TransactionStatistics:
        base = super().statistics()
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
            checks_received=self._checks_received,
            checks_answered=self._checks_answered,
            late_answers=self._late_answers,
            checks_dropped=self._checks_dropped,
        )

    async def _end_transaction(self, result: SendResult, *, commit: bool) -> None:
        route = await self.routes.get(result.topic)
        address = route.addresses.get(result.broker_name)
        if address is None:
            route = await self.routes.get(result.topic, refresh=True)
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
        await self._request_with_retries(address, request)

    async def _request_with_retries(
        self, address: str, request: w.EndTransactionRequest
    ) -> w.EndTransactionResponse:
        """END_TRANSACTION is idempotent at the broker, so any retriable failure is retried."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.send_timeout
        last: PocketMQError | None = None
        for _ in range(self.config.retries + 1):
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            try:
                connection = await self.pool.get(address)
                return await connection.request(
                    RequestCode.END_TRANSACTION, request, w.EndTransactionResponse, remaining
                )
            except PocketMQError as exc:
                if not exc.retriable:
                    raise
                last = exc
        raise last or BrokerConnectionError(f"END_TRANSACTION to {address} timed out")

    # -- checks from the broker -----------------------------------------------------------

    def _on_push(self, connection: ClientConnection, code: int, body: bytes) -> None:
        if code != RequestCode.CHECK_TRANSACTION or self._tx_closing:
            return
        try:
            request = w.decode_body(body, w.CheckTransactionRequest)
        except ProtocolError as exc:
            log.error("malformed transaction check from %s: %s", connection.address, exc)
            return
        if request.producer_group != self.config.group:
            log.warning(
                "ignoring a check for producer group %r (this producer is %r)",
                request.producer_group,
                self.config.group,
            )
            return
        key = request.transaction_id
        if key in self._checking:
            return  # the same transaction is being checked already
        if len(self._checking) >= self._max_pending_checks:
            self._checks_dropped += 1
            log.warning(
                "%d transaction checks pending; dropping the check of %s (the broker asks again)",
                len(self._checking),
                key,
            )
            return
        self._checking.add(key)
        self._checks_received += 1
        task = asyncio.ensure_future(self._answer(connection.address, request))
        self._check_tasks.add(task)
        task.add_done_callback(self._check_tasks.discard)

    async def _answer(self, address: str, request: w.CheckTransactionRequest) -> None:
        view = to_view(request.message)
        try:
            async with self._check_slots:
                try:
                    resolution = await _call(self._checker, view)
                except Exception:
                    log.exception(
                        "transaction checker failed for message %s; answering nothing (the "
                        "broker asks again)",
                        view.message_id,
                    )
                    return
            if resolution is None or resolution is TransactionResolution.UNKNOWN:
                return
            if not isinstance(resolution, TransactionResolution):
                log.error(
                    "transaction checker returned %r for message %s, not a "
                    "TransactionResolution; answering nothing",
                    resolution,
                    view.message_id,
                )
                return
            end = w.EndTransactionRequest(
                request.producer_group,
                view.message_id,
                request.transaction_id,
                resolution is TransactionResolution.COMMIT,
                True,
                request.message.physical_offset,
                view.topic,
            )
            try:
                await self._request_with_retries(address, end)
                self._checks_answered += 1
            except TransactionStateError as exc:
                self._late_answers += 1
                log.info("late check answer ignored by the broker: %s", exc)
            except PocketMQError as exc:
                log.warning("answering the check of %s failed: %s", view.message_id, exc)
        finally:
            self._checking.discard(request.transaction_id)
