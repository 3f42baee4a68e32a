"""The consume family: ``PULL``, ``POP``, ``ACK``, ``CHANGE_INVISIBLE``, ``COMMIT_OFFSET``,
``QUERY_OFFSET``, ``GET_CONSUMERS``, ``LOCK_QUEUES`` and ``UNLOCK_QUEUES``.

A pull or pop that finds messages is answered at once; one that would wait returns a coroutine
the connection runs as a task (a long poll never holds up the connection's other requests).
"""

from __future__ import annotations

from collections.abc import Awaitable

from pocketmq.broker import Broker, PullOutcome
from pocketmq.errors import BrokerError, Code, InvalidArgumentError
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w
from pocketmq.protocol.paging import pop_byte_budget
from pocketmq.server.native.connection import HandlerTable, ServerConnection
from pocketmq.server.native.convert import to_wire
from pocketmq.server.serving import answers_expected

__all__ = ["ConsumeHandlers"]


class ConsumeHandlers:
    """Reading and acknowledging messages, offsets, and a group's members and queue locks."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._name = broker.name
        # a long poll woken by a send is answered in the send's loop turn (server/serving.py)
        broker.on_long_poll_wake(answers_expected)
        store = broker.config.store
        self._pop_bytes = pop_byte_budget(store.max_message_size, store.max_properties_size)

    def pull(
        self, conn: ServerConnection, req: w.PullRequest
    ) -> w.PullResponse | Awaitable[w.PullResponse]:
        """Messages of one queue from an offset (4.x push consumers)."""
        ready = self._broker.pull_now(
            req.group,
            req.topic,
            req.queue_id,
            req.offset,
            max_count=req.max_count,
            expression=req.expression,
        )
        if ready is not None:
            return self._pull_response(ready)
        return self._pull_waiting(req)

    async def _pull_waiting(self, req: w.PullRequest) -> w.PullResponse:
        outcome = await self._broker.pull(
            req.group,
            req.topic,
            req.queue_id,
            req.offset,
            max_count=req.max_count,
            expression=req.expression,
            max_wait=req.max_wait_ms / 1000,
        )
        return self._pull_response(outcome)

    def _pull_response(self, outcome: PullOutcome) -> w.PullResponse:
        # a pull's messages are built together and carry the broker's name already
        # (broker/pulling.py): the first one's is compared, and the list passed on as it is,
        # since every consumed message comes this way (docs/benchmarks.md, "Broker pull path,
        # fused (issue 32)")
        name = self._name
        messages = outcome.messages
        if messages and messages[0].broker_name != name:
            messages = [to_wire(m, name) for m in messages]
        return w.PullResponse(
            outcome.status, outcome.next_offset, outcome.min_offset, outcome.max_offset, messages
        )

    def pop(
        self, conn: ServerConnection, req: w.PopRequest
    ) -> w.PopResponse | Awaitable[w.PopResponse]:
        """Messages of a topic, invisible to others until acknowledged (simple consumers)."""
        consumer = req.consumer or conn.client_id
        if req.attempt_id:  # a retry of a pop may get its messages again: the broker decides
            return self._pop_waiting(req, consumer)
        ready = self._broker.pop_now(
            req.group,
            req.topic,
            max_count=req.max_count,
            invisible=req.invisible_ms / 1000,
            expression=req.expression,
            consumer=consumer,
            queue_hint=req.queue_hint,
            max_bytes=self._pop_bytes,
        )
        if ready or req.max_wait_ms <= 0:
            return w.PopResponse([to_wire(m, self._name) for m in ready])
        return self._pop_waiting(req, consumer)

    async def _pop_waiting(self, req: w.PopRequest, consumer: str) -> w.PopResponse:
        delivered = await self._broker.pop(
            req.group,
            req.topic,
            max_count=req.max_count,
            invisible=req.invisible_ms / 1000,
            max_wait=req.max_wait_ms / 1000,
            expression=req.expression,
            consumer=consumer,
            queue_hint=req.queue_hint,
            max_bytes=self._pop_bytes,
            attempt_id=req.attempt_id,
        )
        return w.PopResponse([to_wire(m, self._name) for m in delivered])

    def ack(self, conn: ServerConnection, req: w.AckRequest) -> w.AckResponse:
        """Acknowledge popped messages, one code per entry (a bad handle fails alone)."""
        codes: list[int] = []
        remarks: list[str] = []
        for entry in req.entries:
            try:
                self._broker.ack(req.group, entry.topic, entry.receipt_handle)
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
        self, conn: ServerConnection, req: w.ChangeInvisibleRequest
    ) -> w.ChangeInvisibleResponse:
        """Hide a popped message again for a while; answers its new receipt handle."""
        handle = self._broker.change_invisible(
            req.group, req.topic, req.receipt_handle, req.invisible_ms / 1000
        )
        return w.ChangeInvisibleResponse(handle)

    def commit_offset(self, conn: ServerConnection, req: w.CommitOffsetRequest) -> w.Empty:
        """A push consumer's progress."""
        entries = [(e.topic, e.queue_id, e.offset) for e in req.entries]
        self._broker.commit_offsets(req.group, entries)
        return w.Empty()

    def query_offset(
        self, conn: ServerConnection, req: w.QueryOffsetRequest
    ) -> w.QueryOffsetResponse:
        """Where a group goes on in a queue."""
        return w.QueryOffsetResponse(self._broker.query_offset(req.group, req.topic, req.queue_id))

    def get_consumers(
        self, conn: ServerConnection, req: w.GetConsumersRequest
    ) -> w.GetConsumersResponse:
        """A group's live members, for the client's rebalance."""
        return w.GetConsumersResponse(self._broker.consumer_ids(req.group))

    def lock_queues(self, conn: ServerConnection, req: w.LockQueuesRequest) -> w.LockQueuesResponse:
        """An orderly consumer's queue locks; answers the ones granted."""
        granted = self._broker.lock_queues(
            req.group, req.client_id, [(q.topic, q.queue_id) for q in req.queues]
        )
        return w.LockQueuesResponse([w.QueueRef(t, q) for t, q in granted])

    def unlock_queues(self, conn: ServerConnection, req: w.LockQueuesRequest) -> w.Empty:
        """Give back queue locks after a rebalance."""
        queues = [(q.topic, q.queue_id) for q in req.queues]
        self._broker.unlock_queues(req.group, req.client_id, queues)
        return w.Empty()

    def table(self) -> HandlerTable:
        """The family's request codes and their handlers."""
        return {
            RequestCode.PULL: self.pull,
            RequestCode.POP: self.pop,
            RequestCode.ACK: self.ack,
            RequestCode.CHANGE_INVISIBLE: self.change_invisible,
            RequestCode.COMMIT_OFFSET: self.commit_offset,
            RequestCode.QUERY_OFFSET: self.query_offset,
            RequestCode.GET_CONSUMERS: self.get_consumers,
            RequestCode.LOCK_QUEUES: self.lock_queues,
            RequestCode.UNLOCK_QUEUES: self.unlock_queues,
        }
