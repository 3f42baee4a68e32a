"""The admin family: topics and groups (create, update, delete, list), ``BROKER_STATUS``,
``QUEUE_STATUS``, ``RESET_OFFSET``, message queries and history, ``BROWSE``, ``REDRIVE`` and
``REPORT_OUTCOMES``: what operators, the CLI and the dashboard's peers ask."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from pocketmq.broker import VERSION, Broker, ResetTarget
from pocketmq.broker.redrive import report_rows
from pocketmq.errors import InvalidArgumentError
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w
from pocketmq.protocol.paging import (
    MAX_QUERY_RESULTS,
    MAX_REDRIVE_OFFSETS,
    RESPONSE_BUDGET,
    fit,
)
from pocketmq.server.native.connection import HandlerTable, ServerConnection
from pocketmq.server.native.convert import group_from_spec, group_to_spec, to_wire, topic_spec
from pocketmq.server.native.validation import attempt_problem, attempts_out_of_range

__all__ = ["AdminHandlers"]


class AdminHandlers:
    """The catalog, the broker's status, offset resets, message queries and dead letters.
    ``topics_changed`` is awaited after topics or groups change: the app re-registers with the
    name server before answering, so a route is there as soon as the topic is created."""

    def __init__(self, broker: Broker, topics_changed: Callable[[], Awaitable[None]]) -> None:
        self._broker = broker
        self._name = broker.name
        self._topics_changed = topics_changed

    async def create_topic(self, conn: ServerConnection, req: w.TopicSpec) -> w.CreateTopicResponse:
        """Create a topic (the same settings again: nothing changes, others are refused)."""
        broker = self._broker
        existed = broker.topic(req.name) is not None
        broker.create_topic(req.name, queues=req.queues, topic_type=req.topic_type, perm=req.perm)
        if existed:
            return w.CreateTopicResponse(created=False)
        await self._topics_changed()
        return w.CreateTopicResponse()

    async def update_topic(
        self, conn: ServerConnection, req: w.UpdateTopicRequest
    ) -> w.UpdateTopicResponse:
        """Change a topic's queues, type or permission (or only say what would change)."""
        change = self._broker.update_topic(
            req.name,
            queues=req.queues,
            topic_type=req.topic_type,
            perm=req.perm,
            force=req.force,
            dry_run=req.dry_run,
        )
        if change.applied and change.before != change.after:
            await self._topics_changed()
        return w.UpdateTopicResponse(
            self._name,
            topic_spec(change.before),
            topic_spec(change.after),
            list(change.dropped),
            change.stored,
            change.unconsumed,
            change.refusal,
            change.applied,
        )

    async def delete_topic(self, conn: ServerConnection, req: w.NameRequest) -> w.Empty:
        """Delete a topic and its messages."""
        self._broker.delete_topic(req.name)
        await self._topics_changed()
        return w.Empty()

    def list_topics(self, conn: ServerConnection, req: w.Empty) -> w.ListTopicsResponse:
        """Every topic of this broker."""
        return w.ListTopicsResponse([topic_spec(t) for t in self._broker.list_topics()])

    async def create_group(self, conn: ServerConnection, req: w.GroupSpec) -> w.Empty:
        """Create or update a consumer group (and its retry topic)."""
        self._broker.create_group(group_from_spec(req, self._broker.config.max_delay))
        await self._topics_changed()  # the group's retry topic
        return w.Empty()

    async def delete_group(self, conn: ServerConnection, req: w.NameRequest) -> w.Empty:
        """Delete a consumer group with its offsets and pop state."""
        self._broker.delete_group(req.name)
        await self._topics_changed()
        return w.Empty()

    def list_groups(self, conn: ServerConnection, req: w.Empty) -> w.ListGroupsResponse:
        """Every consumer group of this broker."""
        return w.ListGroupsResponse([group_to_spec(g) for g in self._broker.list_groups()])

    def broker_status(self, conn: ServerConnection, req: w.Empty) -> w.BrokerStatusResponse:
        """The broker's counters, store, replication and uptime."""
        status: dict[str, Any] = self._broker.status()
        return w.BrokerStatusResponse(
            self._name,
            VERSION,
            status["counters"],
            status["store"],
            status["replication"],
            status["uptime_seconds"],
        )

    def queue_status(
        self, conn: ServerConnection, req: w.QueueStatusRequest
    ) -> w.QueueStatusResponse:
        """Each queue's range of a topic, with a group's committed offsets."""
        rows = self._broker.queue_status(req.topic, req.group)
        return w.QueueStatusResponse(
            req.topic, self._name, [w.QueueStatus(q, lo, hi, c) for q, lo, hi, c in rows]
        )

    def reset_offset(
        self, conn: ServerConnection, req: w.ResetOffsetRequest
    ) -> w.ResetOffsetResponse:
        """Move a group's offsets to a time, the earliest or the latest message."""
        try:
            target = ResetTarget(req.to)
        except ValueError:
            raise InvalidArgumentError(
                f"reset target {req.to!r} is not one of time, earliest, latest"
            ) from None
        moves = self._broker.reset_offsets(req.group, req.topic, target, req.at_ms)
        return w.ResetOffsetResponse(
            self._name, [w.QueueMove(m.queue_id, m.before, m.after) for m in moves]
        )

    def query_message(
        self, conn: ServerConnection, req: w.QueryMessageRequest
    ) -> w.QueryMessageResponse:
        """One page of results: at most ``max_count`` after the first ``skip``, cut to fit in a
        frame (``more`` then says to ask again from ``skip + len(messages)``)."""
        if req.skip < 0:
            raise InvalidArgumentError("skip must not be negative")
        if req.skip >= MAX_QUERY_RESULTS:
            return w.QueryMessageResponse([])
        wanted = max(1, min(req.max_count, MAX_QUERY_RESULTS - req.skip))
        found = self._broker.query_messages(
            message_id=req.message_id, topic=req.topic, key=req.key, max_count=req.skip + wanted
        )
        page = [to_wire(m, self._name) for m in found[req.skip :]]
        fitted = fit(page, RESPONSE_BUDGET)
        return w.QueryMessageResponse(fitted, len(fitted) < len(page))

    def report_outcomes(self, conn: ServerConnection, req: w.ReportOutcomesRequest) -> w.Empty:
        """Record how consumers' attempts ended; bad records are refused, the rest kept.

        The records go to the history as they came: it sets each one's group to the report's
        and its consumer to the reporter's where they differ (broker/history.py, ``_take``),
        so none is rebuilt here (docs/benchmarks.md, "Broker CPU per consumed message, wall
        clock")."""
        reporter = req.consumer or conn.client_id
        accepted = req.attempts
        problems: list[str] = []
        if attempts_out_of_range(accepted):
            checked = [(a, attempt_problem(a)) for a in accepted]
            problems = [problem for _, problem in checked if problem is not None]
            accepted = [a for a, problem in checked if problem is None]
        self._broker.report_outcomes(req.group, reporter, accepted)
        if problems:  # the others are recorded
            raise InvalidArgumentError(
                f"{len(problems)} of {len(req.attempts)} attempt records refused: {problems[0]}"
            )
        return w.Empty()

    def message_history(
        self, conn: ServerConnection, req: w.MessageHistoryRequest
    ) -> w.MessageHistoryResponse:
        """Every recorded delivery attempt of a message, oldest first."""
        return w.MessageHistoryResponse(self._broker.message_history(req.message_id))

    def browse(self, conn: ServerConnection, req: w.BrowseRequest) -> w.QueryMessageResponse:
        """Read any queue without consuming (dead letters and internal ledgers included)."""
        found = self._broker.browse(req.topic, req.queue_id, req.offset, req.max_count)
        return w.QueryMessageResponse([to_wire(m, self._name) for m in found])

    async def redrive(self, conn: ServerConnection, req: w.RedriveRequest) -> w.RedriveResponse:
        """Re-send dead letters; the audit names who signed in (docs/security.md)."""
        if len(req.dlq_offsets) > MAX_REDRIVE_OFFSETS:  # one result each must fit in a frame
            raise InvalidArgumentError(
                f"redrive at most {MAX_REDRIVE_OFFSETS} dead letters per request "
                f"(got {len(req.dlq_offsets)})"
            )
        operator = conn.user or req.operator or conn.client_id
        report = await self._broker.redrive(
            req.group, req.dlq_offsets, target=req.target, operator=operator
        )
        items = [w.RedriveItem(*row) for row in report_rows(report)]
        return w.RedriveResponse(items, sorted(self._broker.redriven(req.group)))

    def table(self) -> HandlerTable:
        """The family's request codes and their handlers."""
        return {
            RequestCode.QUERY_MESSAGE: self.query_message,
            RequestCode.CREATE_TOPIC: self.create_topic,
            RequestCode.UPDATE_TOPIC: self.update_topic,
            RequestCode.DELETE_TOPIC: self.delete_topic,
            RequestCode.LIST_TOPICS: self.list_topics,
            RequestCode.CREATE_GROUP: self.create_group,
            RequestCode.DELETE_GROUP: self.delete_group,
            RequestCode.LIST_GROUPS: self.list_groups,
            RequestCode.BROKER_STATUS: self.broker_status,
            RequestCode.QUEUE_STATUS: self.queue_status,
            RequestCode.RESET_OFFSET: self.reset_offset,
            RequestCode.REPORT_OUTCOMES: self.report_outcomes,
            RequestCode.MESSAGE_HISTORY: self.message_history,
            RequestCode.BROWSE: self.browse,
            RequestCode.REDRIVE: self.redrive,
        }
