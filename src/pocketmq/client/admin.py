"""Administration: topics, groups, offsets, message lookup, dead letters and broker status.

Every answer is a typed value of :mod:`pocketmq.client.admin_types`; the raw request is private
(``_call``), so nothing outside the SDK depends on the wire format.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import msgspec

from pocketmq import properties as props
from pocketmq.client.admin_types import (
    BrokerInfo,
    BrokerStatus,
    DeadLetter,
    DeliveryAttempt,
    GroupInfo,
    OffsetMove,
    Promotion,
    QueueInfo,
    RedriveItem,
    RedriveReport,
    StoredMessage,
    TopicChange,
    TopicInfo,
    TransactionInfo,
    attempt_from_wire,
    stored_from_wire,
)
from pocketmq.client.base import ClientBase, resolve_config
from pocketmq.client.config import ClientConfig
from pocketmq.client.convert import to_view
from pocketmq.client.message import MessageView
from pocketmq.errors import (
    InvalidArgumentError,
    MessageNotFoundError,
    PocketMQError,
    PreconditionFailedError,
    TopicNotFoundError,
)
from pocketmq.names import validate_group_name, validate_topic_name
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w
from pocketmq.protocol.checks import retry_policy_problem

__all__ = ["Admin"]

TOPIC_TYPES = ("normal", "fifo", "delay", "transaction")


# delays travel as int64 milliseconds; no retry delay is anywhere near this (about 292 years)
_MAX_DELAY_SECONDS = 2**63 // 1000 // 1000


def _milliseconds(seconds: float, what: str) -> int:
    """``seconds`` as the wire's milliseconds; nan, infinities and negatives are refused."""
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not 0 <= seconds <= _MAX_DELAY_SECONDS  # also refuses nan
    ):
        raise InvalidArgumentError(f"{what} must be a number of seconds >= 0, got {seconds!r}")
    return round(seconds * 1000)


class Admin(ClientBase):
    """Administrative calls. Topic and group changes go to every broker of the cluster."""

    def __init__(
        self, *, servers: Sequence[str] | str | None = None, client: ClientConfig | None = None
    ) -> None:
        super().__init__(resolve_config(servers, client))

    async def aclose(self) -> None:
        """Close the connections."""
        await self.close_base()

    async def brokers(self) -> list[BrokerInfo]:
        """Every live broker of the cluster (a lone broker answers with itself)."""
        reply = await self._call_any(RequestCode.LIST_BROKERS, w.Empty(), w.ListBrokersResponse)
        return [
            BrokerInfo(b.name, b.address, b.grpc_address, b.broker_id, b.role, b.epoch)
            for b in reply.brokers
        ]

    async def _brokers(self) -> list[str]:
        """The addresses to make cluster-wide changes on: every live master (slaves copy their
        master's topics and groups), or the configured servers when none answers with a list."""
        masters = [b.address for b in await self.brokers() if b.role == "master"]
        return masters or list(self.client_config.servers)

    async def _on_every_broker(self, code: RequestCode, body: msgspec.Struct) -> None:
        """Make a change on every broker: topics and groups exist per broker."""
        for address in await self._brokers():
            await self._call(address, code, body, w.Empty)

    async def create_topic(
        self, name: str, *, queues: int = 8, topic_type: str = "normal", perm: int = 6
    ) -> bool:
        """Create topic ``name`` with ``queues`` queues on every broker (``topic_type``:
        normal, fifo, delay or transaction; ``perm``: 4 read + 2 write). True when some broker
        created it, False when it existed everywhere with these settings; a topic that exists
        with other settings is refused (:class:`~pocketmq.errors.PreconditionFailedError`
        naming the difference): :meth:`update_topic` changes it."""
        validate_topic_name(name)
        if topic_type not in TOPIC_TYPES:
            raise InvalidArgumentError(f"topic type must be one of {', '.join(TOPIC_TYPES)}")
        spec = w.TopicSpec(name, queues, topic_type, perm)
        created = False
        for address in await self._brokers():
            reply = await self._call(address, RequestCode.CREATE_TOPIC, spec, w.CreateTopicResponse)
            created = created or reply.created
        self.routes.invalidate(name)
        return created

    async def update_topic(
        self,
        name: str,
        *,
        queues: int | None = None,
        topic_type: str | None = None,
        perm: int | None = None,
        force: bool = False,
    ) -> list[TopicChange]:
        """Change topic ``name`` on every broker: its queue count, type or permission (None:
        unchanged). Every broker is asked first what the change would cost; dropping queues
        that hold messages a group has not consumed (or, when no group consumed the topic, any
        message) is refused on all of them, with the counts, unless ``force`` — the messages of
        dropped queues stay in the store, hidden, and come back if the topic grows again
        (docs/cli.md, "topic update")."""
        validate_topic_name(name)
        if topic_type is not None and topic_type not in TOPIC_TYPES:
            raise InvalidArgumentError(f"topic type must be one of {', '.join(TOPIC_TYPES)}")
        if queues is not None and not 1 <= queues <= 1024:
            raise InvalidArgumentError("queue count must be between 1 and 1024")
        request = w.UpdateTopicRequest(
            name,
            queues or 0,
            topic_type or "",
            -1 if perm is None else perm,
            force,
        )
        addresses = await self._brokers()
        refusals = []
        for address in addresses:  # a dry run everywhere first: all of it, or nothing
            reply = await self._call(
                address,
                RequestCode.UPDATE_TOPIC,
                msgspec.structs.replace(request, dry_run=True),
                w.UpdateTopicResponse,
            )
            if reply.refusal:
                refusals.append(f"{reply.broker_name}: {reply.refusal}")
        if refusals:
            raise PreconditionFailedError("; ".join(refusals))
        changes = [
            TopicChange.from_wire(
                await self._call(address, RequestCode.UPDATE_TOPIC, request, w.UpdateTopicResponse)
            )
            for address in addresses
        ]
        self.routes.invalidate(name)
        return changes

    async def delete_topic(self, name: str) -> None:
        """Delete topic ``name`` on every broker."""
        await self._on_every_broker(RequestCode.DELETE_TOPIC, w.NameRequest(name))
        self.routes.invalidate(name)

    async def list_topics(self) -> list[TopicInfo]:
        """The topics the first answering server knows."""
        reply = await self._call_any(RequestCode.LIST_TOPICS, w.Empty(), w.ListTopicsResponse)
        return [TopicInfo(t.name, t.queues, t.topic_type, t.perm) for t in reply.topics]

    async def create_group(
        self,
        name: str,
        *,
        fifo: bool = False,
        max_retries: int = 16,
        retry_delays: Sequence[float] = (),
        broadcast: bool = False,
        consume_from: str = "first",
        retry_initial: float = 0.0,
        retry_multiplier: float = 2.0,
        retry_max: float = 0.0,
    ) -> None:
        """Create consumer group ``name`` on every broker, with its retry policy: the default
        delay levels, customized ``retry_delays`` (seconds), or exponential (``retry_initial``
        > 0, ``retry_multiplier``, ``retry_max``). An unworkable policy is refused here, before
        anything is sent (docs/semantics.md, "retry policy bounds")."""
        validate_group_name(name)
        if isinstance(retry_multiplier, bool) or not isinstance(retry_multiplier, int | float):
            raise InvalidArgumentError("retry_multiplier must be a number")
        spec = w.GroupSpec(
            name,
            fifo,
            max_retries,
            [_milliseconds(d, "retry delay") for d in retry_delays],
            broadcast,
            consume_from,
            _milliseconds(retry_initial, "retry_initial"),
            float(retry_multiplier),
            _milliseconds(retry_max, "retry_max"),
        )
        problem = retry_policy_problem(spec)
        if problem is not None:
            raise InvalidArgumentError(problem)
        await self._on_every_broker(RequestCode.CREATE_GROUP, spec)

    async def delete_group(self, name: str) -> None:
        """Delete consumer group ``name`` on every broker."""
        await self._on_every_broker(RequestCode.DELETE_GROUP, w.NameRequest(name))

    async def consumers(self, group: str) -> list[str]:
        """The client ids of ``group``'s live native consumers, across every broker."""
        found: set[str] = set()
        for address in await self._brokers():
            reply = await self._call(
                address,
                RequestCode.GET_CONSUMERS,
                w.GetConsumersRequest(group),
                w.GetConsumersResponse,
            )
            found.update(reply.client_ids)
        return sorted(found)

    async def list_groups(self) -> list[GroupInfo]:
        """The consumer groups the first answering server knows."""
        reply = await self._call_any(RequestCode.LIST_GROUPS, w.Empty(), w.ListGroupsResponse)
        return [
            GroupInfo(
                g.name,
                g.fifo,
                g.broadcast,
                g.max_retries,
                tuple(d / 1000 for d in g.retry_delays_ms),
                g.consume_from,
            )
            for g in reply.groups
        ]

    async def queues(self, topic: str, group: str = "") -> list[QueueInfo]:
        """Every queue of ``topic`` across brokers with its offsets (and ``group``'s progress)."""
        route = await self.routes.get(topic, refresh=True)
        out: list[QueueInfo] = []
        for broker, address in sorted(route.addresses.items()):
            reply = await self._call(
                address,
                RequestCode.QUEUE_STATUS,
                w.QueueStatusRequest(topic, group),
                w.QueueStatusResponse,
            )
            out.extend(
                QueueInfo(
                    broker, q.queue_id, q.min_offset, q.max_offset, q.committed_offset, address
                )
                for q in reply.queues
            )
        return out

    async def query_message(self, message_id: str) -> list[MessageView]:
        """Every stored copy of the message (original, retries, dead letter) on every broker."""
        found: list[MessageView] = []
        for address in await self._brokers():
            found += await self._query_pages(address, w.QueryMessageRequest(message_id=message_id))
        return found

    async def query_by_key(self, topic: str, key: str, max_count: int = 32) -> list[MessageView]:
        """Messages of ``topic`` with business key ``key``, up to ``max_count`` per broker."""
        found: list[MessageView] = []
        for address in await self._brokers():
            request = w.QueryMessageRequest(topic=topic, key=key, max_count=max_count)
            found += await self._query_pages(address, request)
        return found

    async def _query_pages(self, address: str, request: w.QueryMessageRequest) -> list[MessageView]:
        """Every page of one broker's answer: a page is cut to fit in a frame (``more``)."""
        found: list[MessageView] = []
        while True:
            reply = await self._call(
                address, RequestCode.QUERY_MESSAGE, request, w.QueryMessageResponse
            )
            found.extend(to_view(m) for m in reply.messages)
            wanted = request.max_count - len(reply.messages)
            if not reply.more or not reply.messages or wanted <= 0:
                return found
            request = msgspec.structs.replace(
                request, max_count=wanted, skip=request.skip + len(reply.messages)
            )

    async def message_history(self, message_id: str) -> list[DeliveryAttempt]:
        """Every recorded delivery attempt of the message, across brokers, oldest first."""
        found: list[DeliveryAttempt] = []
        for address in await self._brokers():
            reply = await self._call(
                address,
                RequestCode.MESSAGE_HISTORY,
                w.MessageHistoryRequest(message_id),
                w.MessageHistoryResponse,
            )
            found.extend(attempt_from_wire(a) for a in reply.attempts)
        return sorted(found, key=lambda a: (a.delivered_at, a.attempt, a.finished_at))

    async def transaction_state(self, message_id: str) -> TransactionInfo | None:
        """The transaction of a transactional message, from the broker that holds it."""
        for address in await self._brokers():
            try:
                reply = await self._call(
                    address,
                    RequestCode.QUERY_TRANSACTION,
                    w.TransactionStateRequest(message_id),
                    w.TransactionStateResponse,
                )
            except MessageNotFoundError:
                continue
            return TransactionInfo(
                address=address,
                message_id=reply.message_id,
                transaction_id=reply.transaction_id,
                producer_group=reply.producer_group,
                topic=reply.topic,
                queue_id=reply.queue_id,
                state=reply.state,
                checks=reply.checks,
                prepared_at=reply.prepared_at_ms / 1000,
                updated_at=reply.updated_at_ms / 1000,
                source=reply.source,
                detail=reply.detail,
            )
        return None

    async def queue_status(self, topic: str, group: str = "") -> list[QueueInfo]:
        """Every queue of ``topic`` on every broker, with its offsets (and ``group``'s progress),
        sorted by broker and queue.

        Unlike :meth:`queues`, each broker is asked directly rather than through the topic's
        route, so topics without a route work too: dead-letter topics and the broker's ledgers
        ``%SYS%HISTORY`` and ``%SYS%REDRIVE``. Brokers without the topic are skipped; if none
        has it, :class:`~pocketmq.errors.TopicNotFoundError`.
        """
        found: list[QueueInfo] = []
        for address in await self._brokers():
            try:
                reply = await self._call(
                    address,
                    RequestCode.QUEUE_STATUS,
                    w.QueueStatusRequest(topic, group),
                    w.QueueStatusResponse,
                )
            except TopicNotFoundError:
                continue
            found.extend(
                QueueInfo(
                    reply.broker_name,
                    q.queue_id,
                    q.min_offset,
                    q.max_offset,
                    q.committed_offset,
                    address,
                )
                for q in reply.queues
            )
        if not found:
            raise TopicNotFoundError(f"topic {topic!r} does not exist on any broker")
        return sorted(found, key=lambda q: (q.broker_name, q.queue_id))

    async def reset_offset(
        self, group: str, topic: str, *, to: str = "time", at_ms: int = 0
    ) -> list[OffsetMove]:
        """Move ``group``'s offsets on ``topic`` on every broker to ``to``: ``time`` (the first
        message stored at or after ``at_ms``, milliseconds since the epoch), ``earliest`` or
        ``latest``. Consumers may stay online: pop consumers continue from the new offsets at
        their next receive, push consumers are moved at their next pull (docs/operations.md,
        "Resetting a group's offsets"). Brokers without the topic are skipped; if none has it,
        :class:`~pocketmq.errors.TopicNotFoundError`."""
        if to not in ("time", "earliest", "latest"):
            raise InvalidArgumentError("to must be one of time, earliest, latest")
        moves: list[OffsetMove] = []
        found = False
        for address in await self._brokers():
            try:
                reply = await self._call(
                    address,
                    RequestCode.RESET_OFFSET,
                    w.ResetOffsetRequest(group, topic, to, at_ms),
                    w.ResetOffsetResponse,
                )
            except TopicNotFoundError:
                continue
            found = True
            moves.extend(
                OffsetMove(reply.broker_name, q.queue_id, q.before, q.after) for q in reply.queues
            )
        if not found:
            raise TopicNotFoundError(f"topic {topic!r} does not exist on any broker")
        return sorted(moves, key=lambda m: (m.broker_name, m.queue_id))

    async def browse(
        self, topic: str, *, address: str, queue_id: int = 0, offset: int = 0, max_count: int = 32
    ) -> list[StoredMessage]:
        """Up to ``max_count`` messages of one queue from ``offset`` on, as the broker at
        ``address`` stores them, without consuming: no group's offset moves, nothing becomes
        invisible. Any topic can be read, dead-letter topics and the ledgers ``%SYS%HISTORY``
        (records: :meth:`DeliveryAttempt.from_ledger`) and ``%SYS%REDRIVE`` included.

        Offsets below the queue's minimum (removed by retention) are skipped: the page starts at
        the first message still stored. A page holds at most 1024 messages and fits in a frame;
        read on from the last message's ``queue_offset + 1``. An empty page is the queue's end.
        """
        messages = await self._browse(address, topic, queue_id, offset, max_count)
        return [stored_from_wire(m) for m in messages]

    async def _browse(
        self, address: str, topic: str, queue_id: int, offset: int, max_count: int
    ) -> list[w.Delivered]:
        reply = await self._call(
            address,
            RequestCode.BROWSE,
            w.BrowseRequest(topic, queue_id, offset, max_count),
            w.QueryMessageResponse,
        )
        return reply.messages

    async def dead_letters(self, group: str, max_count: int = 10_000) -> list[DeadLetter]:
        """Every message in ``%DLQ%<group>`` on every broker, oldest first per broker."""
        out: list[DeadLetter] = []
        for address in await self._brokers():
            offset = 0
            while len(out) < max_count:
                try:
                    messages = await self._browse(address, "%DLQ%" + group, 0, offset, 256)
                except TopicNotFoundError:
                    break
                if not messages:
                    break
                out.extend(
                    DeadLetter(
                        address=address,
                        dlq_offset=m.queue_offset,
                        origin_topic=m.properties.get(props.RETRY_TOPIC, ""),
                        reason=m.properties.get(props.DLQ_REASON, ""),
                        message=to_view(m),
                    )
                    for m in messages
                )
                offset = messages[-1].queue_offset + 1
        return out[:max_count]

    async def redrive(
        self, address: str, group: str, offsets: Sequence[int], *, target: str = "origin"
    ) -> RedriveReport:
        """Re-send the dead letters of ``group`` at ``offsets`` of the DLQ on the broker at
        ``address`` (see :meth:`dead_letters`), each once, with their original message ids:
        to their original topic (``target="origin"``) or to the group's retry topic only
        (``"retry"``). Dead letters resent before are reported ``already``
        (docs/semantics.md, "DLQ redrive")."""
        reply = await self._call(
            address,
            RequestCode.REDRIVE,
            w.RedriveRequest(group, list(offsets), target, self.client_config.client_id),
            w.RedriveResponse,
        )
        return RedriveReport(
            items=tuple(
                RedriveItem(
                    i.dlq_offset, i.message_id, i.status, i.topic, i.queue_id, i.queue_offset
                )
                for i in reply.items
            ),
            already_redriven=tuple(reply.already_redriven),
        )

    async def promote(self, address: str | None = None, *, force: bool = False) -> Promotion:
        """Make the slave at ``address`` (default: the first configured server) the master of
        its group. Refused when the slave is not known to be in sync with its master, unless
        ``force`` (then what it does not have is lost: docs/replication.md §6)."""
        target = address or self.client_config.servers[0]
        reply = await self._call(  # the new master loads its state first: allow for it
            target, RequestCode.PROMOTE, w.PromoteRequest(force), w.PromoteResponse, 30.0
        )
        return Promotion(target, reply.epoch, reply.log_end)

    async def broker_status(self) -> list[BrokerStatus]:
        """Each broker's counters and store state, slaves included. Brokers are asked at once;
        one that does not answer (down, or frozen during a failover) is listed with ``error``
        saying so and its role as the name server lists it, instead of failing the whole
        answer (docs/replication.md §8)."""
        listed = await self.brokers()
        if not listed:  # a lone broker, no name server: it answers or the call fails
            return [await self._status_of(a) for a in self.client_config.servers]
        found = await asyncio.gather(
            *(self._status_of(b.address) for b in listed), return_exceptions=True
        )
        statuses: list[BrokerStatus] = []
        for broker, answer in zip(listed, found, strict=True):
            if isinstance(answer, BrokerStatus):
                statuses.append(answer)
            elif isinstance(answer, PocketMQError):
                replication = {"broker_id": broker.broker_id, "role": broker.role}
                replication["epoch"] = broker.epoch
                statuses.append(
                    BrokerStatus(
                        broker.address,
                        broker.name,
                        "",
                        {},
                        {},
                        replication,
                        error=f"unreachable: {answer}",
                    )
                )
            else:
                raise answer
        return statuses

    async def _status_of(self, address: str) -> BrokerStatus:
        reply = await self._call(
            address, RequestCode.BROKER_STATUS, w.Empty(), w.BrokerStatusResponse
        )
        return BrokerStatus(
            address,
            reply.broker_name,
            reply.version,
            reply.counters,
            reply.store,
            reply.replication,
            reply.uptime_seconds,
        )
