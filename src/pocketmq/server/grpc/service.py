"""``apache.rocketmq.v2.MessagingService`` over the broker core.

Every RPC answers with a v2 status instead of failing the gRPC call: the official clients read
``status.code`` and treat a gRPC-level error as a transport failure (docs/grpc.md, "Status
codes"). Choices the official clients force or allow (see docs/grpc.md, "Choices"):

- **The queue in a ReceiveMessage is a hint.** The clients name a random queue on every receive;
  serving only that queue would long-poll empty queues while others hold a backlog, so the broker
  pops from any queue of the topic, starting at the named one. QueryAssignment therefore hands a
  consumer one assignment per broker (queue id -1) rather than individual queues.
- **auto_renew without an invisible duration** (push consumers) gets a fixed invisible time,
  long enough for the client's local cache to drain; a push consumer never extends it.
- **ChangeInvisibleDuration answers with a receipt handle even when it fails** (the original
  one): the clients overwrite their handle with the reply's before they look at the status.
- **A receive retried with the same attempt_id** gets the same messages again (the broker's
  pop keeps the last receive per consumer: broker/attempts.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Final

import grpc

from pocketmq.errors import Code
from pocketmq.model import ClientInfo, PullStatus, SendOutcome, TransactionCheck
from pocketmq.server.auth.acl import Action
from pocketmq.server.auth.authorizer import Authorizer
from pocketmq.server.auth.users import UserStore
from pocketmq.server.grpc.convert import (
    ACCEPTED_TYPES,
    delivered_message,
    endpoints,
    host_port,
    inbound_message,
    seconds,
    timestamp,
)
from pocketmq.server.grpc.guard import ClientGuard, caller_id, client_info
from pocketmq.server.grpc.handlers import Malformed
from pocketmq.server.grpc.pb import (
    ClientType,
    FilterType,
    MessageType,
    QueryOffsetPolicy,
    TransactionResolution,
    TransactionSource,
    d,
    rpc,
    s,
)
from pocketmq.server.grpc.pb import Code as V2Code
from pocketmq.server.grpc.port import BrokerPort, official_producer_group
from pocketmq.server.grpc.routing import (
    PERMISSION,
    grpc_addresses,
    masterless_write,
    message_queues,
)
from pocketmq.server.grpc.sessions import ClientSession, Sessions, transaction_check_command
from pocketmq.server.grpc.settings import (
    CONSUMER_TYPES,
    LONG_POLLING_TIMEOUT,
    RECEIVE_BATCH_SIZE,
    consumer_settings,
    producer_settings,
)
from pocketmq.server.grpc.status import OK, V2Error, error_status, overall, status, v2_code

__all__ = ["MessagingService"]

log = logging.getLogger("pocketmq.server.grpc")

C = V2Code
MT = MessageType

_NO_MESSAGE: Final = status(C.MESSAGE_NOT_FOUND, "no new message")
_DEADLINE_MARGIN: Final = 0.5  # answer a long poll this long before the client's deadline
_REVOKED: Final = object()  # in a Telemetry outbox: its user went, end the stream


class MessagingService(rpc.MessagingServiceServicer):  # type: ignore[misc]
    """``apache.rocketmq.v2.MessagingService`` (module doc): each RPC translates to one broker call
    and answers with a v2 status, never a failed gRPC call."""

    def __init__(
        self,
        broker: BrokerPort,
        store_host: Callable[[], str],
        *,
        auto_renew_invisible: float,
        real_peer: Callable[[str], str] = str,
        users: UserStore | None = None,
        authorizer: Authorizer | None = None,
    ) -> None:
        self._real_peer = real_peer  # the client behind the permissive-mode forwarder
        self._broker = broker  # in this process or behind a proxy (server/grpc/port.py)
        self._store_host = store_host
        self._auto_renew = auto_renew_invisible
        self.sessions = Sessions()
        self.guard = ClientGuard(users, authorizer)  # who calls, and what a session may do
        self._leaving: set[asyncio.Task[None]] = set()  # unregistering revoked sessions

    # -- routing and membership -----------------------------------------------------------

    async def QueryRoute(self, request: Any, context: Any) -> Any:
        """Every queue of the topic on the brokers that serve gRPC, with the message types the topic
        accepts (the clients refuse to send without them)."""
        try:
            topic = request.topic.name
            route = await self._broker.route(topic)
            own = self._broker.name
            own_write = masterless_write(route, own, await self._broker.topic_perm(topic))
            queues = message_queues(route, request.topic.resource_namespace, own, own_write)
            if not queues:
                raise V2Error(C.TOPIC_NOT_FOUND, f"no broker serves topic {topic!r} over gRPC")
            return s.QueryRouteResponse(status=OK, message_queues=queues)
        except Exception as exc:
            return s.QueryRouteResponse(status=error_status(exc, "QueryRoute"))

    async def QueryAssignment(self, request: Any, context: Any) -> Any:
        """One assignment per broker holding readable queues of the topic (queue id -1): the
        broker pops from all of its queues, so one long poll per broker is enough."""
        try:
            topic = request.topic.name
            await self._broker.group(request.group.name)
            route = await self._broker.route(topic)
            readable: dict[str, int] = {}
            for queue in route.queues:
                if queue.perm & 4:
                    readable[queue.broker_name] = readable.get(queue.broker_name, 0) | queue.perm
            addresses = grpc_addresses(route)
            accepted = ACCEPTED_TYPES.get(route.topic_type, (MT.NORMAL,))
            resource = {"name": topic, "resource_namespace": request.topic.resource_namespace}
            assignments = [
                {
                    "message_queue": {
                        "topic": resource,
                        "id": -1,
                        "permission": PERMISSION[perm & 6],
                        "broker": {"name": name, "id": 0, "endpoints": endpoints(address)},
                        "accept_message_types": accepted,
                    }
                }
                for name, perm in sorted(readable.items())
                if (address := addresses.get(name))
            ]
            return s.QueryAssignmentResponse(status=OK, assignments=assignments)
        except Exception as exc:
            return s.QueryAssignmentResponse(status=error_status(exc, "QueryAssignment"))

    async def Heartbeat(self, request: Any, context: Any) -> Any:
        """Keep a client's session alive; a consumer's heartbeat registers it in its group like a
        native consumer, a producer's its check-back channel."""
        try:
            user, client_id = self.guard.identity(context)
            session = self.sessions.touch(user, client_id)
            if session.client_type == ClientType.PRODUCER:
                await self._register_producer(session, client_info(context, self._real_peer))
            if request.HasField("group") and request.group.name:
                await self._broker.heartbeat_consumer(
                    client_id,
                    request.group.name,
                    dict(session.subscriptions),
                    client_info(context, self._real_peer),
                )
            return s.HeartbeatResponse(status=OK)
        except Exception as exc:
            return s.HeartbeatResponse(status=error_status(exc, "Heartbeat"))

    async def NotifyClientTermination(self, request: Any, context: Any) -> Any:
        """A client shutting down: leave its group and drop its check-back channel at once rather
        than after the expiry. Only the caller's own session (its user and client id) is ended,
        and a consumer group only with ``Sub`` on it (the interceptor checks a named one)."""
        try:
            user, client_id = self.guard.identity(context)
            session = self.sessions.get(user, client_id)
            if session is None:  # nothing of this user's client here
                return s.NotifyClientTerminationResponse(status=OK)
            group = request.group.name if request.HasField("group") else ""
            group = group or session.group
            if group:
                source = client_info(context, self._real_peer).address
                self.guard.check(user, [("Group", group, Action.SUB)], source)
            await self._broker.unregister(client_id, group, session)
            self.sessions.remove(user, client_id)
            return s.NotifyClientTerminationResponse(status=OK)
        except Exception as exc:
            return s.NotifyClientTerminationResponse(
                status=error_status(exc, "NotifyClientTermination")
            )

    def revoke_stale(self) -> None:
        """The users changed: end the Telemetry streams, sessions and registrations of those
        whose user was deleted or changed its secret since their stream opened."""
        for session in self.sessions.revoked():
            log.info("ending the session of %s: user %r is gone", session.client_id, session.user)
            if session.outbox is not None:
                session.outbox.put_nowait(_REVOKED)
            task = asyncio.ensure_future(
                self._broker.unregister(session.client_id, session.group, session)
            )
            self._leaving.add(task)
            task.add_done_callback(self._left)

    def _left(self, task: asyncio.Task[None]) -> None:
        self._leaving.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.debug("unregistering a revoked session failed: %s", task.exception())

    async def Telemetry(self, request_iterator: Any, context: Any) -> None:
        """Answer every Settings command with the broker's settings; write pushed commands.
        The stream ends (UNAUTHENTICATED) once its user is deleted or changes its secret."""
        user, client_id = self.guard.identity(context)
        session = self.sessions.touch(user, client_id)
        outbox: asyncio.Queue[Any] = asyncio.Queue()
        if session.outbox is not None:  # the client rebuilt its stream: the newest one wins
            session.outbox.put_nowait(None)
        session.outbox = outbox
        session.credential = credential = self.guard.credential(user)
        client = client_info(context, self._real_peer)
        reader = asyncio.create_task(
            self._read_telemetry(request_iterator, session, outbox, client)
        )
        try:
            while (command := await outbox.get()) is not None:
                if command is _REVOKED:
                    assert credential is not None
                    await context.abort(grpc.StatusCode.UNAUTHENTICATED, credential.why())
                await context.write(command)
        finally:
            reader.cancel()
            if session.outbox is outbox:
                session.outbox = None

    async def _read_telemetry(
        self,
        requests: AsyncIterator[Any],
        session: Any,
        outbox: asyncio.Queue[Any],
        client: ClientInfo,
    ) -> None:
        try:
            async for command in requests:
                session.last_seen = time.monotonic()
                if isinstance(command, Malformed):
                    detail = command.report(session.client_id)
                    outbox.put_nowait(s.TelemetryCommand(status=status(C.BAD_REQUEST, detail)))
                elif command.HasField("settings"):
                    outbox.put_nowait(await self._settings_reply(session, command.settings, client))
                # thread stack traces and verify results are not asked for; nothing to do
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the client went away mid-read
            log.debug("telemetry stream of %s ended: %s", session.client_id, exc)
        finally:
            outbox.put_nowait(None)

    async def _settings_reply(
        self, session: ClientSession, settings: Any, client: ClientInfo
    ) -> Any:
        try:
            self.guard.check_settings(session.user, settings, client.address)
            session.update(settings)
            limits = self._broker.limits
            if settings.client_type == ClientType.PRODUCER:
                reply = producer_settings(settings, limits.max_message_size)
                await self._register_producer(session, client)
            elif settings.client_type in CONSUMER_TYPES:
                group = await self._broker.group(settings.subscription.group.name)
                reply = consumer_settings(
                    settings, group, limits.delay_levels, limits.max_long_poll
                )
            else:
                raise V2Error(
                    C.UNRECOGNIZED_CLIENT_TYPE,
                    f"client type {d.ClientType.Name(settings.client_type)} is not supported",
                )
            return s.TelemetryCommand(status=OK, settings=reply)
        except Exception as exc:
            return s.TelemetryCommand(status=error_status(exc, "Telemetry"))

    # -- producing ------------------------------------------------------------------------

    async def _register_producer(self, session: ClientSession, client: ClientInfo) -> None:
        """Official producers have no producer group: each topic they publish is their group
        (:func:`official_producer_group`), so the broker's transaction checks for a topic reach
        them — only while their user may publish to the half message's topic
        (server/grpc/guard.py)."""
        if not session.topics:
            return
        store_host = self._store_host

        def check(request: TransactionCheck) -> bool:
            v2 = delivered_message(request.message, "", store_host())
            return bool(session.push(transaction_check_command(v2, request.transaction_id)))

        await self._broker.register_producer(
            session.client_id,
            sorted(official_producer_group(topic) for topic in session.topics),
            check,
            session,
            client,
            user=session.user,
            may_check=self.guard.may_check(session.user, session.credential, client.address),
        )

    async def SendMessage(self, request: Any, context: Any) -> Any:
        """Store the request's messages through the broker's send path; each entry gets its own
        status, so one refused message does not fail the others."""
        messages = request.messages
        if not messages:
            return s.SendMessageResponse(status=status(C.BAD_REQUEST, "no messages to send"))
        try:
            return await self._send(messages)
        except Exception as exc:
            return s.SendMessageResponse(status=error_status(exc, "SendMessage"))

    async def _send(self, messages: Sequence[Any]) -> Any:
        broker = self._broker
        now_ms = int(time.time() * 1000)
        entries: list[Any] = [None] * len(messages)
        inbound = []
        positions = []
        producer_group = ""
        max_body = broker.limits.max_message_size
        for number, message in enumerate(messages):
            try:
                item, kind = inbound_message(message, now_ms, max_body=max_body)
                if kind == MT.TRANSACTION:
                    producer_group = official_producer_group(item.topic)
            except Exception as exc:
                entries[number] = s.SendResultEntry(
                    status=error_status(exc, "SendMessage"),
                    message_id=message.system_properties.message_id,
                )
                continue
            inbound.append(item)
            positions.append(number)
        if inbound:
            born_host = host_port(messages[positions[0]].system_properties.born_host)
            outcomes = await broker.send(inbound, producer_group, born_host)
            for number, outcome in zip(positions, outcomes, strict=True):
                entries[number] = self._entry(outcome)
        return s.SendMessageResponse(status=overall([e.status for e in entries]), entries=entries)

    @staticmethod
    def _entry(outcome: SendOutcome) -> Any:
        if outcome.code is Code.SUCCESS:
            result_status = OK
        else:
            result_status = status(v2_code(outcome.code, outcome.rule), outcome.remark)
        return s.SendResultEntry(
            status=result_status,
            message_id=outcome.message_id,
            transaction_id=outcome.transaction_id,
            offset=outcome.queue_offset,
            recall_handle=outcome.recall_handle,
        )

    async def RecallMessage(self, request: Any, context: Any) -> Any:
        """Cancel a delayed message by its recall handle before it is due."""
        try:
            message_id = await self._broker.recall(request.topic.name, request.recall_handle)
            return s.RecallMessageResponse(status=OK, message_id=message_id)
        except Exception as exc:
            return s.RecallMessageResponse(status=error_status(exc, "RecallMessage"))

    async def EndTransaction(self, request: Any, context: Any) -> Any:
        """Commit or roll back a half message, of the producer group its send gave it
        (:func:`official_producer_group`)."""
        try:
            resolution = request.resolution
            if resolution not in (TransactionResolution.COMMIT, TransactionResolution.ROLLBACK):
                raise V2Error(C.BAD_REQUEST, "resolution must be COMMIT or ROLLBACK")
            await self._broker.end_transaction(
                official_producer_group(request.topic.name),
                request.topic.name,
                request.message_id,
                request.transaction_id,
                commit=resolution == TransactionResolution.COMMIT,
                from_check=request.source == TransactionSource.SOURCE_SERVER_CHECK,
                by=self.guard.identity(context)[0],
            )
            return s.EndTransactionResponse(status=OK)
        except Exception as exc:
            return s.EndTransactionResponse(status=error_status(exc, "EndTransaction"))

    # -- consuming: pop mode --------------------------------------------------------------

    @staticmethod
    def _expression(expression: Any) -> str:
        if expression.type == FilterType.SQL:
            raise V2Error(C.UNSUPPORTED, "SQL92 filters are not supported; filter by tag")
        return str(expression.expression) or "*"

    async def ReceiveMessage(self, request: Any, context: Any) -> AsyncIterator[Any]:
        """Pop from any queue of the topic, starting at the named one (the queue is a hint,
        docs/grpc.md "Choices"), long-polling within the call's deadline; streams a status, the
        messages, then a delivery timestamp."""
        try:
            queue = request.message_queue
            if request.HasField("invisible_duration"):
                invisible = seconds(request.invisible_duration)
            elif request.auto_renew:
                invisible = self._auto_renew
            else:
                raise V2Error(
                    C.ILLEGAL_INVISIBLE_TIME, "invisible_duration is required without auto_renew"
                )
            if invisible <= 0:
                raise V2Error(C.ILLEGAL_INVISIBLE_TIME, "invisible_duration must be positive")
            polling = (
                seconds(request.long_polling_timeout)
                if request.HasField("long_polling_timeout")
                else LONG_POLLING_TIMEOUT
            )
            remaining = context.time_remaining()
            if remaining is not None:
                polling = min(polling, remaining - _DEADLINE_MARGIN)
            client_id = caller_id(context)
            delivered = await self._broker.pop(
                request.group.name,
                queue.topic.name,
                max_count=request.batch_size or RECEIVE_BATCH_SIZE,
                invisible=invisible,
                max_wait=max(0.0, polling),
                expression=self._expression(request.filter_expression),
                consumer=client_id,
                queue_hint=queue.id,
                attempt_id=request.attempt_id if request.HasField("attempt_id") else "",
            )
        except Exception as exc:
            yield s.ReceiveMessageResponse(status=error_status(exc, "ReceiveMessage"))
            return
        if not delivered:
            yield s.ReceiveMessageResponse(status=_NO_MESSAGE)
            return
        yield s.ReceiveMessageResponse(status=OK)
        namespace = queue.topic.resource_namespace
        store_host = self._store_host()
        for message in delivered:
            response = s.ReceiveMessageResponse()
            delivered_message(message, namespace, store_host, response.message)
            yield response
        yield s.ReceiveMessageResponse(delivery_timestamp=timestamp(int(time.time() * 1000)))

    async def AckMessage(self, request: Any, context: Any) -> Any:
        """Acknowledge popped messages; each entry succeeds or fails on its own."""
        group, topic = request.group.name, request.topic.name
        results = []
        try:
            errors = await self._broker.ack(
                group, [(topic, entry.receipt_handle) for entry in request.entries]
            )
        except Exception as exc:  # the broker could not be asked: every entry failed alike
            errors = [exc] * len(request.entries)
        for entry, error in zip(request.entries, errors, strict=True):
            entry_status = OK if error is None else error_status(error, "AckMessage")
            results.append(
                s.AckMessageResultEntry(
                    message_id=entry.message_id,
                    receipt_handle=entry.receipt_handle,
                    status=entry_status,
                )
            )
        if not results:
            return s.AckMessageResponse(status=status(C.BAD_REQUEST, "no entries to ack"))
        return s.AckMessageResponse(status=overall([r.status for r in results]), entries=results)

    async def ChangeInvisibleDuration(self, request: Any, context: Any) -> Any:
        """Re-hide a popped message (a nack with a delay); a failure still answers the handle it was
        given, because the clients overwrite theirs before checking the status."""
        try:
            handle = await self._broker.change_invisible(
                request.group.name,
                request.topic.name,
                request.receipt_handle,
                seconds(request.invisible_duration),
            )
            return s.ChangeInvisibleDurationResponse(status=OK, receipt_handle=handle)
        except Exception as exc:
            return s.ChangeInvisibleDurationResponse(
                status=error_status(exc, "ChangeInvisibleDuration"),
                receipt_handle=request.receipt_handle,
            )

    async def ForwardMessageToDeadLetterQueue(self, request: Any, context: Any) -> Any:
        """A FIFO push consumer gave up on a message after its local retries: move it to the group's
        DLQ now."""
        try:
            await self._broker.forward_to_dead_letter(
                request.group.name,
                request.topic.name,
                request.receipt_handle,
                (
                    f"forwarded by the consumer after {request.delivery_attempt} of "
                    f"{request.max_delivery_attempts} attempts"
                ),
            )
            return s.ForwardMessageToDeadLetterQueueResponse(status=OK)
        except Exception as exc:
            return s.ForwardMessageToDeadLetterQueueResponse(
                status=error_status(exc, "ForwardMessageToDeadLetterQueue")
            )

    # -- consuming: pull mode and offsets -------------------------------------------------

    async def PullMessage(self, request: Any, context: Any) -> AsyncIterator[Any]:
        """Pull mode over the broker's pull (no official client calls it yet); streams a status, the
        messages, then the next offset."""
        try:
            queue = request.message_queue
            polling = seconds(request.long_polling_timeout)
            remaining = context.time_remaining()
            if remaining is not None:
                polling = min(polling, remaining - _DEADLINE_MARGIN)
            outcome = await self._broker.pull(
                request.group.name,
                queue.topic.name,
                queue.id,
                request.offset,
                max_count=request.batch_size or RECEIVE_BATCH_SIZE,
                expression=self._expression(request.filter_expression),
                max_wait=max(0.0, polling),
            )
        except Exception as exc:
            yield s.PullMessageResponse(status=error_status(exc, "PullMessage"))
            return
        if outcome.status == PullStatus.FOUND:
            yield s.PullMessageResponse(status=OK)
        elif outcome.status == PullStatus.OFFSET_ILLEGAL:
            yield s.PullMessageResponse(
                status=status(
                    C.ILLEGAL_OFFSET,
                    f"offset {request.offset} is outside "
                    f"[{outcome.min_offset}, {outcome.max_offset}]",
                )
            )
        elif outcome.status == PullStatus.OFFSET_MOVED:
            yield s.PullMessageResponse(
                status=status(
                    C.ILLEGAL_OFFSET,
                    f"an operator reset the group's offset: continue from {outcome.next_offset}",
                )
            )
        else:
            yield s.PullMessageResponse(status=_NO_MESSAGE)
        namespace = queue.topic.resource_namespace
        store_host = self._store_host()
        for message in outcome.messages:
            response = s.PullMessageResponse()
            delivered_message(message, namespace, store_host, response.message)
            yield response
        yield s.PullMessageResponse(next_offset=outcome.next_offset)

    async def UpdateOffset(self, request: Any, context: Any) -> Any:
        """Commit a pull consumer's offset for one queue."""
        try:
            queue = request.message_queue
            await self._broker.commit_offset(
                request.group.name, queue.topic.name, queue.id, request.offset
            )
            return s.UpdateOffsetResponse(status=OK)
        except Exception as exc:
            return s.UpdateOffsetResponse(status=error_status(exc, "UpdateOffset"))

    async def GetOffset(self, request: Any, context: Any) -> Any:
        """A group's committed offset in one queue."""
        try:
            queue = request.message_queue
            offset = await self._broker.query_offset(request.group.name, queue.topic.name, queue.id)
            return s.GetOffsetResponse(status=OK, offset=offset)
        except Exception as exc:
            return s.GetOffsetResponse(status=error_status(exc, "GetOffset"))

    async def QueryOffset(self, request: Any, context: Any) -> Any:
        """A queue's first or last offset; looking an offset up by time is UNSUPPORTED."""
        try:
            queue = request.message_queue
            policy = request.query_offset_policy
            if policy == QueryOffsetPolicy.TIMESTAMP:
                raise V2Error(C.UNSUPPORTED, "looking up an offset by time is not supported")
            bounds = await self._broker.queue_range(queue.topic.name, queue.id)
            if bounds is None:
                raise V2Error(C.BAD_REQUEST, f"topic {queue.topic.name!r} has no queue {queue.id}")
            offset = bounds[0] if policy == QueryOffsetPolicy.BEGINNING else bounds[1]
            return s.QueryOffsetResponse(status=OK, offset=offset)
        except Exception as exc:
            return s.QueryOffsetResponse(status=error_status(exc, "QueryOffset"))

    async def SyncLiteSubscription(self, request: Any, context: Any) -> Any:
        """Lite topics are not supported: an UNSUPPORTED status the clients can report."""
        return s.SyncLiteSubscriptionResponse(
            status=status(C.UNSUPPORTED, "lite topics are not supported")
        )
