"""The gRPC adapter's broker, reached over the native protocol (docs/proxy.md).

:class:`RemotePort` is the :class:`~pocketmq.server.grpc.port.BrokerPort` of a ``pocketmq
proxy`` process: every call the adapter makes becomes one native request to the broker the proxy
fronts, on one connection that is re-opened when it drops. Sends and acks from many official
clients are merged (:mod:`pocketmq.batching`); transaction checks the broker pushes are
handed to the official producer the broker named.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
import time
from collections.abc import Sequence
from typing import Final, TypeVar

import msgspec

from pocketmq.batching import Batcher, BatchSizes
from pocketmq.client.connection import ClientConnection, close_quietly, connect
from pocketmq.errors import BrokerError, Code, error_from_code
from pocketmq.model import (
    ClientInfo,
    Delivered,
    GroupConfig,
    InboundMessage,
    PullOutcome,
    SendBatch,
    SendOutcome,
    TransactionCheck,
)
from pocketmq.protocol import structs as w
from pocketmq.protocol.codes import RequestCode
from pocketmq.protocol.convert import group_from_spec, send_result_from_wire
from pocketmq.server.grpc.merging import SendMerger
from pocketmq.server.grpc.port import BrokerLimits, CheckChannel, MayCheck
from pocketmq.server.grpc.sessions import ClientSession

__all__ = ["RemotePort"]

log = logging.getLogger("pocketmq.proxy")

T = TypeVar("T", bound=msgspec.Struct)

REQUEST_TIMEOUT: Final = 5.0
"""How long a request may go unanswered before the client hears an error (a long poll gets its
wait on top)."""

MAX_BATCH: Final = 256
"""At most this many acks, or messages of several sends, go in one native request."""
SEND_WAIT: Final = 15.0
"""Extra time a send may take to be answered: a sync flush (5 s) and a slave's copy (3 s) by
default, with room to spare, so a slow disk is reported as the broker's status, not a timeout."""


class _Producer(msgspec.Struct):
    client_id: str
    topics: list[str]
    check: CheckChannel
    client: ClientInfo
    seen: float  # monotonic time of its last heartbeat
    may_check: MayCheck | None = None  # its user may see a half message of this topic


TOPICS_TTL: Final = 1.0
"""How old the topic list behind the masterless-write rule may be."""

RECONNECT_PAUSE: Final = 0.5
"""After a failed connect, calls fail at once for this long instead of each trying again."""

PRODUCER_SILENCE: Final = 30.0
"""An official producer not heard of this long (three heartbeats) is gone: it is not registered
again after a reconnect, nor asked for checks, and it is forgotten after three times as long."""


class RemotePort:
    """A :class:`~pocketmq.server.grpc.port.BrokerPort` over one native connection to the broker
    at ``address`` (module doc). Call :meth:`start` before serving."""

    def __init__(
        self,
        address: str,
        *,
        timeout: float = REQUEST_TIMEOUT,
        tls: ssl.SSLContext | None = None,
        credentials: tuple[str, str] = ("", ""),
    ) -> None:
        self.address = address
        self._timeout = timeout
        self._tls = tls
        self._credentials = credentials
        self._client_id = f"proxy@{socket.gethostname()}@{os.getpid()}"
        self._connection: ClientConnection | None = None
        self._connecting = asyncio.Lock()
        self._last_failure: tuple[float, Exception] | None = None
        self._topics: tuple[float, dict[str, int]] | None = None  # (when, name -> permission)
        # (user, client id) -> producer: another user naming the same id replaces nothing
        self._producers: dict[tuple[str, str], _Producer] = {}
        self._acks: dict[str, Batcher[tuple[str, str], Exception | None]] = {}
        self.name = ""
        self.limits = BrokerLimits(0, 0, (1.0,), 0.0)
        self.auto_renew_invisible = 0.0
        self.advertised = ""  # the proxy's own gRPC address, set once it listens
        self.batch_sizes = BatchSizes()  # merged requests' sizes, for the proxy's /metrics
        # every client's sends, merged into one append (server/grpc/merging.py)
        self._sends = SendMerger(self.send_many, observe=self._observe_sends)

    def _observe_sends(self, messages: int) -> None:
        self.batch_sizes.observe("send", messages)

    async def start(self) -> None:
        """Connect and learn the broker's name and limits (GATEWAY_INFO)."""
        info = await self._call(RequestCode.GATEWAY_INFO, w.Empty(), w.GatewayInfoResponse)
        self.name = info.broker_name
        self.limits = BrokerLimits(
            info.max_message_size,
            info.max_properties_size,
            tuple(info.delay_levels),
            info.max_long_poll_ms / 1000,
        )
        self.auto_renew_invisible = info.auto_renew_invisible_ms / 1000

    async def close(self) -> None:
        """Close the connection to the broker."""
        if self._connection is not None:
            await close_quietly(self._connection)
            self._connection = None

    # -- the connection -------------------------------------------------------------------

    async def _open(self) -> ClientConnection:
        connection = self._connection
        if connection is not None and connection.is_open:
            return connection
        async with self._connecting:
            connection = self._connection
            if connection is not None and connection.is_open:
                return connection
            failed = self._last_failure
            if failed is not None and time.monotonic() - failed[0] < RECONNECT_PAUSE:
                raise failed[1]  # the callers queued behind a failed attempt fail at once
            try:
                connection = await self._connect()
            except Exception as exc:
                self._last_failure = (time.monotonic(), exc)
                raise
            self._last_failure = None
            self._connection = connection
            # the broker forgot this connection's producers when the last one closed
            for producer in self._live_producers():
                self._heartbeat_producer(connection, producer)
            return connection

    async def _connect(self) -> ClientConnection:
        return await connect(
            self.address,
            self._client_id,
            timeout=self._timeout,
            on_push=self._on_push,
            tls=self._tls,
            credentials=self._credentials,
        )

    async def _call(
        self, code: RequestCode, body: msgspec.Struct, reply: type[T], wait: float = 0.0
    ) -> T:
        connection = await self._open()
        return await connection.request(code, body, reply, self._timeout + wait)

    def _on_push(self, connection: ClientConnection, code: int, body: bytes) -> None:
        if code != RequestCode.CHECK_TRANSACTION:
            return  # rebalance notices: official consumers do not rebalance
        request = w.decode_body(body, w.CheckTransactionRequest)
        check = TransactionCheck(request.producer_group, request.transaction_id, 0, request.message)
        live = self._live_producers()
        candidates = [p for p in live if p.client_id == request.client_id]
        candidates += [p for p in live if request.producer_group in p.topics]
        topic = check.message.topic
        for candidate in candidates:  # as broker/producers.py: only those that may see it
            if candidate.may_check is not None and not candidate.may_check(topic):
                continue
            if candidate.check(check):
                return
        log.info(
            "no official producer of %r here for transaction %s: the broker asks again later",
            request.producer_group,
            request.transaction_id,
        )

    def _live_producers(self) -> list[_Producer]:
        now = time.monotonic()
        return [p for p in self._producers.values() if now - p.seen <= PRODUCER_SILENCE]

    def _heartbeat_producer(self, connection: ClientConnection, producer: _Producer) -> None:
        heartbeat = _relayed_heartbeat(
            producer.client_id, producer.client, producers=producer.topics
        )
        connection.send_request(RequestCode.HEARTBEAT, heartbeat, None).add_done_callback(_quiet)

    # -- membership -----------------------------------------------------------------------

    async def route(self, topic: str) -> w.RouteResponse:
        """The broker's route, with this proxy as its broker's gRPC endpoint: clients that
        found the topic through the proxy keep coming through it (other brokers' endpoints are
        theirs, or their own proxies')."""
        route = await self._call(RequestCode.GET_ROUTE, w.GetRouteRequest(topic), w.RouteResponse)
        if not self.advertised:
            return route
        brokers = [
            msgspec.structs.replace(b, grpc_address=self.advertised)
            if b.address == self.address
            else b
            for b in route.brokers
        ]
        return msgspec.structs.replace(route, brokers=brokers)

    async def topic_perm(self, topic: str) -> int | None:
        """As a native request (``BrokerPort.topic_perm``), from a topic list at most
        :data:`TOPICS_TTL` old (every client's QueryRoute asks; the list can be long)."""
        now = time.monotonic()
        if self._topics is None or now - self._topics[0] > TOPICS_TTL:
            listed = await self._call(RequestCode.LIST_TOPICS, w.Empty(), w.ListTopicsResponse)
            self._topics = (now, {spec.name: spec.perm for spec in listed.topics})
        return self._topics[1].get(topic)

    async def group(self, name: str) -> GroupConfig:
        """As a native request (``BrokerPort.group``)."""
        spec = await self._call(RequestCode.GATEWAY_GROUP, w.NameRequest(name), w.GroupSpec)
        return group_from_spec(spec)

    async def heartbeat_consumer(
        self, client_id: str, group: str, subscriptions: dict[str, str], client: ClientInfo
    ) -> None:
        """As a native request (``BrokerPort.heartbeat_consumer``)."""
        registration = w.ConsumerRegistration(group, "clustering", subscriptions)
        heartbeat = _relayed_heartbeat(client_id, client, consumers=[registration])
        await self._call(RequestCode.HEARTBEAT, heartbeat, w.Empty)

    async def register_producer(
        self,
        client_id: str,
        topics: Sequence[str],
        check: CheckChannel,
        owner: object,
        client: ClientInfo,
        *,
        user: str = "",
        may_check: MayCheck | None = None,
    ) -> None:
        """As a native request (``BrokerPort.register_producer``); the broker sees this
        proxy's identity, so the proxy keeps each producer's user and ``may_check`` itself."""
        now = time.monotonic()
        producer = _Producer(client_id, list(topics), check, client, now, may_check)
        self._producers[(user, client_id)] = producer
        if len(self._producers) % 64 == 0:  # forget the producers long gone
            for gone in [
                k for k, p in self._producers.items() if now - p.seen > 3 * PRODUCER_SILENCE
            ]:
                del self._producers[gone]
        self._heartbeat_producer(await self._open(), producer)

    async def unregister(self, client_id: str, group: str, owner: object) -> None:
        """As a native request (``BrokerPort.unregister``): only ``owner``'s producer (a
        session: one user's), and the consumer group only when one is named."""
        user = owner.user if isinstance(owner, ClientSession) else ""
        self._producers.pop((user, client_id), None)
        await self._call(
            RequestCode.UNREGISTER_CLIENT,
            w.UnregisterRequest(client_id, [group] if group else []),
            w.Empty,
        )

    # -- producing ------------------------------------------------------------------------

    async def send(
        self, messages: list[InboundMessage], producer_group: str, born_host: str
    ) -> list[SendOutcome]:
        """As a native request (``BrokerPort.send``), merged with the other clients' sends."""
        return await self._sends.send(messages, producer_group, born_host)

    async def send_many(self, batches: list[SendBatch]) -> list[list[SendOutcome] | Exception]:
        """As native requests (``BrokerPort.send_many``): the batches of one producer group and
        born host in one ``SEND`` (up to :data:`MAX_BATCH` messages), all written together so the
        broker reads them at once and stores them in one append (its ``Joined`` sends)."""
        connection = await self._open()
        timeout = self._timeout + SEND_WAIT
        requests = _requests(batches)
        calls = [
            connection.request(RequestCode.SEND, request, w.SendResponse, timeout)
            for request, _ in requests
        ]
        if len(calls) == 1:
            answers: list[w.SendResponse | BaseException] = [await calls[0]]
        else:
            answers = await asyncio.gather(*calls, return_exceptions=True)
        results: list[list[SendOutcome] | Exception] = [[] for _ in batches]
        for (request, owners), answer in zip(requests, answers, strict=True):
            if isinstance(answer, BaseException) and not isinstance(answer, Exception):
                raise answer  # cancelled
            if isinstance(answer, Exception):
                for owner in owners:
                    results[owner] = answer
                continue
            outcomes = [
                send_result_from_wire(item, m.topic)
                for item, m in zip(answer.results, request.messages, strict=True)
            ]
            start = 0
            for owner in owners:
                count = len(batches[owner].messages)
                results[owner] = outcomes[start : start + count]
                start += count
        return results

    async def recall(self, topic: str, recall_handle: str) -> str:
        """As a native request (``BrokerPort.recall``)."""
        answer = await self._call(
            RequestCode.RECALL, w.RecallRequest(topic, recall_handle), w.RecallResponse
        )
        return answer.message_id

    async def end_transaction(
        self,
        producer_group: str,
        topic: str,
        message_id: str,
        transaction_id: str,
        *,
        commit: bool,
        from_check: bool,
        by: str = "",
    ) -> None:
        """As a native request (``BrokerPort.end_transaction``), naming the client's user."""
        await self._call(
            RequestCode.END_TRANSACTION,
            w.EndTransactionRequest(
                producer_group, message_id, transaction_id, commit, from_check, -1, topic, by
            ),
            w.EndTransactionResponse,
            wait=SEND_WAIT,
        )

    # -- consuming ------------------------------------------------------------------------

    async def pop(
        self,
        group: str,
        topic: str,
        *,
        max_count: int,
        invisible: float,
        max_wait: float,
        expression: str,
        consumer: str,
        queue_hint: int,
        attempt_id: str,
    ) -> list[Delivered]:
        """As a native request (``BrokerPort.pop``)."""
        request = w.PopRequest(
            group,
            topic,
            max_count,
            round(invisible * 1000),
            round(max_wait * 1000),
            expression,
            queue_hint,
            consumer,
            attempt_id,
        )
        answer = await self._call(RequestCode.POP, request, w.PopResponse, wait=max_wait)
        return answer.messages

    async def ack(self, group: str, entries: Sequence[tuple[str, str]]) -> list[Exception | None]:
        """As a native request (``BrokerPort.ack``)."""
        batcher = self._acks.get(group)
        if batcher is None:

            async def ack_batch(batch: list[tuple[str, str]]) -> list[Exception | None]:
                return await self._ack_now(group, batch)

            batcher = self._acks[group] = Batcher(
                ack_batch, MAX_BATCH, observe=lambda n: self.batch_sizes.observe("ack", n)
            )
        return await batcher.submit(list(entries))

    async def _ack_now(self, group: str, entries: list[tuple[str, str]]) -> list[Exception | None]:
        request = w.AckRequest(group, [w.AckEntry(topic, handle) for topic, handle in entries])
        answer = await self._call(RequestCode.ACK, request, w.AckResponse)
        remarks = answer.remarks or [""] * len(answer.codes)
        return [
            None if code == Code.SUCCESS else error_from_code(code, remark)
            for code, remark in zip(answer.codes, remarks, strict=True)
        ]

    async def change_invisible(
        self, group: str, topic: str, receipt_handle: str, invisible: float
    ) -> str:
        """As a native request (``BrokerPort.change_invisible``)."""
        request = w.ChangeInvisibleRequest(group, topic, receipt_handle, round(invisible * 1000))
        answer = await self._call(RequestCode.CHANGE_INVISIBLE, request, w.ChangeInvisibleResponse)
        return answer.receipt_handle

    async def forward_to_dead_letter(
        self, group: str, topic: str, receipt_handle: str, reason: str
    ) -> None:
        """As a native request (``BrokerPort.forward_to_dead_letter``)."""
        request = w.ForwardToDeadLetterRequest(group, topic, receipt_handle, reason)
        await self._call(RequestCode.FORWARD_TO_DEAD_LETTER, request, w.Empty)

    async def pull(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        *,
        max_count: int,
        expression: str,
        max_wait: float,
    ) -> PullOutcome:
        """As a native request (``BrokerPort.pull``)."""
        request = w.PullRequest(
            group, topic, queue_id, offset, max_count, expression, round(max_wait * 1000)
        )
        answer = await self._call(RequestCode.PULL, request, w.PullResponse, wait=max_wait)
        return PullOutcome(
            answer.status,
            answer.next_offset,
            answer.min_offset,
            answer.max_offset,
            answer.messages,
        )

    async def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """As a native request (``BrokerPort.commit_offset``)."""
        request = w.CommitOffsetRequest(group, [w.OffsetEntry(topic, queue_id, offset)])
        await self._call(RequestCode.COMMIT_OFFSET, request, w.Empty)

    async def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """As a native request (``BrokerPort.query_offset``)."""
        request = w.QueryOffsetRequest(group, topic, queue_id)
        answer = await self._call(RequestCode.QUERY_OFFSET, request, w.QueryOffsetResponse)
        return answer.offset

    async def queue_range(self, topic: str, queue_id: int) -> tuple[int, int] | None:
        """As a native request (``BrokerPort.queue_range``)."""
        answer = await self._call(
            RequestCode.QUEUE_STATUS, w.QueueStatusRequest(topic), w.QueueStatusResponse
        )
        for queue in answer.queues:
            if queue.queue_id == queue_id:
                return queue.min_offset, queue.max_offset
        return None


def _relayed_heartbeat(
    client_id: str,
    client: ClientInfo,
    *,
    producers: list[str] | None = None,
    consumers: list[w.ConsumerRegistration] | None = None,
) -> w.HeartbeatRequest:
    """A relayed client's heartbeat, describing it (docs/protocol.md, "Gateways")."""
    return w.HeartbeatRequest(
        client_id,
        producers or [],
        consumers or [],
        client.protocol,
        client.language,
        client.version,
        client.address,
    )


def _requests(batches: list[SendBatch]) -> list[tuple[w.SendRequest, list[int]]]:
    """The ``SEND`` requests that carry ``batches``: those of one producer group and born host
    share one, up to :data:`MAX_BATCH` messages (one batch always whole), each with the indexes
    of the batches it carries, in order."""
    open_requests: dict[tuple[str, str], int] = {}  # (group, host) -> its request being filled
    requests: list[tuple[w.SendRequest, list[int]]] = []
    for number, batch in enumerate(batches):
        key = (batch.producer_group, batch.born_host)
        at = open_requests.get(key)
        if at is not None and len(requests[at][0].messages) + len(batch.messages) <= MAX_BATCH:
            requests[at][0].messages.extend(batch.messages)
            requests[at][1].append(number)
            continue
        request = w.SendRequest(list(batch.messages), batch.producer_group, batch.born_host)
        open_requests[key] = len(requests)
        requests.append((request, [number]))
    return requests


def _quiet(future: asyncio.Future[object]) -> None:
    """Producer heartbeats are fire-and-forget: the next one repeats a lost one."""
    if not future.cancelled() and future.exception() is not None:
        error = future.exception()
        level = logging.DEBUG if isinstance(error, BrokerError) else logging.WARNING
        log.log(level, "a producer heartbeat failed: %s", error)
