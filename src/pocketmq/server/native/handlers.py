"""The broker's native-protocol handlers: wire structures in, broker calls, wire structures out.

Fast operations return a structure; operations that may wait (send with sync flush, long polls)
return a coroutine and the connection runs it as a task.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from pocketmq.broker import (
    VERSION,
    Attempt,
    Broker,
    PullOutcome,
    ResetTarget,
    SendBatch,
    SendOutcome,
)
from pocketmq.errors import (
    BrokerError,
    Code,
    InvalidArgumentError,
    LocalProtocolError,
    MessageNotFoundError,
    PocketMQError,
    UnsupportedError,
)
from pocketmq.protocol import MAX_FRAME_BODY, PROTOCOL_VERSION, RequestCode
from pocketmq.protocol import structs as w
from pocketmq.protocol.paging import (
    MAX_QUERY_RESULTS,
    MAX_REDRIVE_OFFSETS,
    RESPONSE_BUDGET,
    fit,
    pop_byte_budget,
)
from pocketmq.server.auth.authorizer import Authorizer
from pocketmq.server.auth.handshake import Authenticator
from pocketmq.server.native.clients import client_handlers, relays
from pocketmq.server.native.connection import HandlerTable, Joined, ServerConnection
from pocketmq.server.native.convert import (
    group_from_spec,
    group_to_spec,
    send_result_to_wire,
    to_wire,
    topic_spec,
    transaction_to_wire,
)
from pocketmq.server.native.handshake import authenticate_handler, broker_permissions, greet
from pocketmq.server.native.validation import attempt_problem, timestamp_problem

__all__ = ["broker_handlers"]

RouteProvider = Callable[[str], Awaitable[w.RouteResponse]]
BrokerLister = Callable[[], Awaitable[w.ListBrokersResponse]]


def broker_handlers(
    broker: Broker,
    route: RouteProvider,
    list_brokers: BrokerLister,
    topics_changed: Callable[[], Awaitable[None]],
    promote: Callable[[bool], Awaitable[int]] | None = None,
    authenticator: Authenticator | None = None,
    authorizer: Authorizer | None = None,
) -> HandlerTable:
    """``topics_changed`` is awaited after topics or groups change: the app re-registers with
    the name server before answering, so a route is there as soon as the topic is created.
    ``authenticator``: authentication is required, of users, the cluster's members and the
    broker's own proxy workers (docs/security.md). ``authorizer``: the ACL, for what the request
    table of server/native/permissions.py cannot decide alone (which producers see a check,
    which groups an unregister may leave)."""
    name = broker.name
    store_config = broker.config.store
    pop_bytes = pop_byte_budget(store_config.max_message_size, store_config.max_properties_size)

    async def promote_broker(conn: ServerConnection, req: w.PromoteRequest) -> w.PromoteResponse:
        if promote is None:
            raise UnsupportedError("this broker cannot be promoted (no replication)")
        epoch = await promote(req.force)
        return w.PromoteResponse(epoch, broker.store.write_position)

    def hello(conn: ServerConnection, req: w.HelloRequest) -> w.HelloResponse:
        if req.protocol_version != PROTOCOL_VERSION:
            raise LocalProtocolError(
                f"protocol version {req.protocol_version} is not supported (this broker speaks "
                f"{PROTOCOL_VERSION})"
            )
        challenge = greet(conn, req, authenticator)
        return w.HelloResponse(
            PROTOCOL_VERSION,
            VERSION,
            name,
            "broker",
            MAX_FRAME_BODY,
            broker.config.store.max_message_size,
            int(conn.limits.idle_timeout * 1000),
            challenge,
        )

    users = authenticator.users if authenticator is not None else None

    def may_relay(conn: ServerConnection) -> bool:
        return relays(conn, users)

    def cancel(conn: ServerConnection, req: w.CancelRequest) -> None:
        conn.cancel(req.request_id)

    async def end_transaction(
        conn: ServerConnection, req: w.EndTransactionRequest
    ) -> w.EndTransactionResponse:
        by = req.user if req.user and conn.user and may_relay(conn) else conn.user
        outcome = await broker.end_transaction(
            req.producer_group,
            req.message_id,
            req.transaction_id,
            commit=req.commit,
            from_check=req.from_check,
            topic=req.topic,
            by=by,
        )
        return w.EndTransactionResponse(outcome.status.state.value, outcome.duplicate)

    def transaction_state(
        conn: ServerConnection, req: w.TransactionStateRequest
    ) -> w.TransactionStateResponse:
        status = broker.transaction_state(req.message_id)
        if status is None:
            raise MessageNotFoundError(f"no transaction for message {req.message_id} here")
        return transaction_to_wire(status)

    def send_response(outcomes: list[SendOutcome]) -> w.SendResponse:
        return w.SendResponse([send_result_to_wire(o) for o in outcomes], name)

    async def send_after_flush(outcomes: list[SendOutcome], end: int) -> w.SendResponse:
        return send_response(await broker.settle(outcomes, end))

    def send(conn: ServerConnection, req: w.SendRequest) -> Joined:
        conn.producing = True  # counted as a producer connection (rocketmq_producer_connections)
        born_host = req.born_host if req.born_host and may_relay(conn) else conn.remote
        return Joined(send_joined, SendBatch(req.messages, req.producer_group, born_host))

    def send_joined(batches: list[SendBatch]) -> list[object]:
        # the sends one read brought go to the store in one append; each message is checked by
        # the broker's send contract (a bad one is refused alone)
        answers: list[object] = []
        for answer in broker.send_now_many(batches):
            if isinstance(answer, PocketMQError):
                answers.append(answer)
            elif answer[1]:  # sync flush or replication: answer once the disk/slave has it
                answers.append(send_after_flush(*answer))
            else:
                answers.append(send_response(answer[0]))
        return answers

    def pull_response(outcome: PullOutcome) -> w.PullResponse:
        return w.PullResponse(
            outcome.status,
            outcome.next_offset,
            outcome.min_offset,
            outcome.max_offset,
            [to_wire(m, name) for m in outcome.messages],
        )

    def pull(
        conn: ServerConnection, req: w.PullRequest
    ) -> w.PullResponse | Awaitable[w.PullResponse]:
        ready = broker.pull_now(
            req.group,
            req.topic,
            req.queue_id,
            req.offset,
            max_count=req.max_count,
            expression=req.expression,
        )
        if ready is not None:
            return pull_response(ready)
        return pull_waiting(req)

    async def pull_waiting(req: w.PullRequest) -> w.PullResponse:
        outcome = await broker.pull(
            req.group,
            req.topic,
            req.queue_id,
            req.offset,
            max_count=req.max_count,
            expression=req.expression,
            max_wait=req.max_wait_ms / 1000,
        )
        return pull_response(outcome)

    def pop(conn: ServerConnection, req: w.PopRequest) -> w.PopResponse | Awaitable[w.PopResponse]:
        consumer = req.consumer or conn.client_id
        if req.attempt_id:  # a retry of a pop may get its messages again: the broker decides
            return pop_waiting(req, consumer)
        ready = broker.pop_now(
            req.group,
            req.topic,
            max_count=req.max_count,
            invisible=req.invisible_ms / 1000,
            expression=req.expression,
            consumer=consumer,
            queue_hint=req.queue_hint,
            max_bytes=pop_bytes,
        )
        if ready or req.max_wait_ms <= 0:
            return w.PopResponse([to_wire(m, name) for m in ready])
        return pop_waiting(req, consumer)

    async def pop_waiting(req: w.PopRequest, consumer: str) -> w.PopResponse:
        delivered = await broker.pop(
            req.group,
            req.topic,
            max_count=req.max_count,
            invisible=req.invisible_ms / 1000,
            max_wait=req.max_wait_ms / 1000,
            expression=req.expression,
            consumer=consumer,
            queue_hint=req.queue_hint,
            max_bytes=pop_bytes,
            attempt_id=req.attempt_id,
        )
        return w.PopResponse([to_wire(m, name) for m in delivered])

    def ack(conn: ServerConnection, req: w.AckRequest) -> w.AckResponse:
        codes: list[int] = []
        remarks: list[str] = []
        for entry in req.entries:
            try:
                broker.ack(req.group, entry.topic, entry.receipt_handle)
                codes.append(Code.SUCCESS)
                remarks.append("")
            except BrokerError as exc:
                codes.append(exc.wire_code)
                remarks.append(str(exc))
            except InvalidArgumentError as exc:
                codes.append(Code.MESSAGE_ILLEGAL)
                remarks.append(str(exc))
        return w.AckResponse(codes, remarks)

    def change_invisible(
        conn: ServerConnection, req: w.ChangeInvisibleRequest
    ) -> w.ChangeInvisibleResponse:
        handle = broker.change_invisible(
            req.group, req.topic, req.receipt_handle, req.invisible_ms / 1000
        )
        return w.ChangeInvisibleResponse(handle)

    def commit_offset(conn: ServerConnection, req: w.CommitOffsetRequest) -> w.Empty:
        broker.commit_offsets(req.group, [(e.topic, e.queue_id, e.offset) for e in req.entries])
        return w.Empty()

    def query_offset(conn: ServerConnection, req: w.QueryOffsetRequest) -> w.QueryOffsetResponse:
        return w.QueryOffsetResponse(broker.query_offset(req.group, req.topic, req.queue_id))

    def get_consumers(conn: ServerConnection, req: w.GetConsumersRequest) -> w.GetConsumersResponse:
        return w.GetConsumersResponse(broker.consumer_ids(req.group))

    def lock_queues(conn: ServerConnection, req: w.LockQueuesRequest) -> w.LockQueuesResponse:
        granted = broker.lock_queues(
            req.group, req.client_id, [(q.topic, q.queue_id) for q in req.queues]
        )
        return w.LockQueuesResponse([w.QueueRef(t, q) for t, q in granted])

    def unlock_queues(conn: ServerConnection, req: w.LockQueuesRequest) -> w.Empty:
        broker.unlock_queues(req.group, req.client_id, [(q.topic, q.queue_id) for q in req.queues])
        return w.Empty()

    def query_message(conn: ServerConnection, req: w.QueryMessageRequest) -> w.QueryMessageResponse:
        """One page of results: at most ``max_count`` after the first ``skip``, cut to fit in a
        frame (``more`` then says to ask again from ``skip + len(messages)``)."""
        if req.skip < 0:
            raise InvalidArgumentError("skip must not be negative")
        if req.skip >= MAX_QUERY_RESULTS:
            return w.QueryMessageResponse([])
        wanted = max(1, min(req.max_count, MAX_QUERY_RESULTS - req.skip))
        found = broker.query_messages(
            message_id=req.message_id, topic=req.topic, key=req.key, max_count=req.skip + wanted
        )
        page = [to_wire(m, name) for m in found[req.skip :]]
        fitted = fit(page, RESPONSE_BUDGET)
        return w.QueryMessageResponse(fitted, len(fitted) < len(page))

    async def create_topic(conn: ServerConnection, req: w.TopicSpec) -> w.CreateTopicResponse:
        existed = broker.topics.get(req.name) is not None
        broker.create_topic(req.name, queues=req.queues, topic_type=req.topic_type, perm=req.perm)
        if existed:  # the same settings: nothing changed (others are refused)
            return w.CreateTopicResponse(created=False)
        await topics_changed()
        return w.CreateTopicResponse()

    async def update_topic(
        conn: ServerConnection, req: w.UpdateTopicRequest
    ) -> w.UpdateTopicResponse:
        change = broker.update_topic(
            req.name,
            queues=req.queues,
            topic_type=req.topic_type,
            perm=req.perm,
            force=req.force,
            dry_run=req.dry_run,
        )
        if change.applied and change.before != change.after:
            await topics_changed()
        return w.UpdateTopicResponse(
            name,
            topic_spec(change.before),
            topic_spec(change.after),
            list(change.dropped),
            change.stored,
            change.unconsumed,
            change.refusal,
            change.applied,
        )

    async def delete_topic(conn: ServerConnection, req: w.NameRequest) -> w.Empty:
        broker.delete_topic(req.name)
        await topics_changed()
        return w.Empty()

    def list_topics(conn: ServerConnection, req: w.Empty) -> w.ListTopicsResponse:
        return w.ListTopicsResponse([topic_spec(t) for t in broker.topics.all()])

    async def create_group(conn: ServerConnection, req: w.GroupSpec) -> w.Empty:
        broker.create_group(group_from_spec(req, broker.config.max_delay))
        await topics_changed()  # the group's retry topic
        return w.Empty()

    async def delete_group(conn: ServerConnection, req: w.NameRequest) -> w.Empty:
        broker.delete_group(req.name)
        await topics_changed()
        return w.Empty()

    def list_groups(conn: ServerConnection, req: w.Empty) -> w.ListGroupsResponse:
        return w.ListGroupsResponse([group_to_spec(g) for g in broker.groups.all()])

    def broker_status(conn: ServerConnection, req: w.Empty) -> w.BrokerStatusResponse:
        status: dict[str, Any] = broker.status()
        return w.BrokerStatusResponse(
            name,
            VERSION,
            status["counters"],
            status["store"],
            status["replication"],
            status["uptime_seconds"],
        )

    def queue_status(conn: ServerConnection, req: w.QueueStatusRequest) -> w.QueueStatusResponse:
        rows = broker.queue_status(req.topic, req.group)
        return w.QueueStatusResponse(
            req.topic, name, [w.QueueStatus(q, lo, hi, c) for q, lo, hi, c in rows]
        )

    def reset_offset(conn: ServerConnection, req: w.ResetOffsetRequest) -> w.ResetOffsetResponse:
        try:
            target = ResetTarget(req.to)
        except ValueError:
            raise InvalidArgumentError(
                f"reset target {req.to!r} is not one of time, earliest, latest"
            ) from None
        moves = broker.reset_offsets(req.group, req.topic, target, req.at_ms)
        return w.ResetOffsetResponse(
            name, [w.QueueMove(m.queue_id, m.before, m.after) for m in moves]
        )

    async def get_route(conn: ServerConnection, req: w.GetRouteRequest) -> w.RouteResponse:
        return await route(req.topic)

    async def brokers(conn: ServerConnection, req: w.Empty) -> w.ListBrokersResponse:
        return await list_brokers()

    async def send_back(conn: ServerConnection, req: w.SendBackRequest) -> w.Empty:
        problem = timestamp_problem(req.delivered_at_ms, "delivered_at_ms")
        if problem is not None:
            raise InvalidArgumentError(problem)
        await broker.send_back(
            req.group,
            req.physical_offset,
            req.message_id,
            delay_level=req.delay_level,
            max_reconsume_times=req.max_reconsume_times,
            outcome=req.outcome,
            error=req.error,
            consumer=req.consumer or conn.client_id,
            delivered_at=req.delivered_at_ms / 1000 if req.delivered_at_ms else None,
        )
        return w.Empty()

    def report_outcomes(conn: ServerConnection, req: w.ReportOutcomesRequest) -> w.Empty:
        reporter = req.consumer or conn.client_id
        accepted: list[Attempt] = []
        problems: list[str] = []
        for a in req.attempts:
            problem = attempt_problem(a)
            if problem is not None:
                problems.append(problem)
                continue
            accepted.append(
                Attempt(
                    a.message_id,
                    req.group,
                    a.topic,
                    a.attempt,
                    reporter or a.consumer,
                    a.outcome,
                    a.error,
                    a.delivered_at,
                    a.finished_at,
                    a.message_group,
                )
            )
        broker.report_outcomes(req.group, reporter, accepted)
        if problems:  # the others are recorded
            raise InvalidArgumentError(
                f"{len(problems)} of {len(req.attempts)} attempt records refused: {problems[0]}"
            )
        return w.Empty()

    def message_history(
        conn: ServerConnection, req: w.MessageHistoryRequest
    ) -> w.MessageHistoryResponse:
        return w.MessageHistoryResponse(broker.message_history(req.message_id))

    def browse(conn: ServerConnection, req: w.BrowseRequest) -> w.QueryMessageResponse:
        found = broker.browse(req.topic, req.queue_id, req.offset, req.max_count)
        return w.QueryMessageResponse([to_wire(m, name) for m in found])

    async def redrive(conn: ServerConnection, req: w.RedriveRequest) -> w.RedriveResponse:
        if len(req.dlq_offsets) > MAX_REDRIVE_OFFSETS:  # one result each must fit in a frame
            raise InvalidArgumentError(
                f"redrive at most {MAX_REDRIVE_OFFSETS} dead letters per request "
                f"(got {len(req.dlq_offsets)})"
            )
        # the audit names who signed in, not whom the client says it is (docs/security.md)
        operator = conn.user or req.operator or conn.client_id
        report = await broker.redrive(
            req.group, req.dlq_offsets, target=req.target, operator=operator
        )
        items = [
            w.RedriveItem(
                offset,
                message_id,
                status,
                outcome.topic if outcome else "",
                outcome.queue_id if outcome else -1,
                outcome.queue_offset if outcome else -1,
            )
            for offset, message_id, status, outcome in report
        ]
        return w.RedriveResponse(items, sorted(broker.redriven(req.group)))

    return {
        RequestCode.HELLO: hello,
        RequestCode.AUTHENTICATE: authenticate_handler(
            authenticator, lambda: name, broker_permissions
        ),
        **client_handlers(broker, users, authorizer),
        RequestCode.CANCEL: cancel,
        RequestCode.SEND: send,
        RequestCode.END_TRANSACTION: end_transaction,
        RequestCode.QUERY_TRANSACTION: transaction_state,
        RequestCode.PULL: pull,
        RequestCode.POP: pop,
        RequestCode.ACK: ack,
        RequestCode.CHANGE_INVISIBLE: change_invisible,
        RequestCode.COMMIT_OFFSET: commit_offset,
        RequestCode.QUERY_OFFSET: query_offset,
        RequestCode.GET_CONSUMERS: get_consumers,
        RequestCode.LOCK_QUEUES: lock_queues,
        RequestCode.UNLOCK_QUEUES: unlock_queues,
        RequestCode.QUERY_MESSAGE: query_message,
        RequestCode.CREATE_TOPIC: create_topic,
        RequestCode.UPDATE_TOPIC: update_topic,
        RequestCode.DELETE_TOPIC: delete_topic,
        RequestCode.LIST_TOPICS: list_topics,
        RequestCode.CREATE_GROUP: create_group,
        RequestCode.DELETE_GROUP: delete_group,
        RequestCode.LIST_GROUPS: list_groups,
        RequestCode.BROKER_STATUS: broker_status,
        RequestCode.PROMOTE: promote_broker,
        RequestCode.QUEUE_STATUS: queue_status,
        RequestCode.RESET_OFFSET: reset_offset,
        RequestCode.GET_ROUTE: get_route,
        RequestCode.LIST_BROKERS: brokers,
        RequestCode.SEND_BACK: send_back,
        RequestCode.REPORT_OUTCOMES: report_outcomes,
        RequestCode.MESSAGE_HISTORY: message_history,
        RequestCode.BROWSE: browse,
        RequestCode.REDRIVE: redrive,
    }
