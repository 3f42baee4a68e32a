"""The produce family: ``SEND``, ``END_TRANSACTION``, ``QUERY_TRANSACTION`` and ``SEND_BACK``.

``SEND`` is the hot path: the handler only turns the request into a :class:`SendBatch` and
returns it :class:`Joined`, so the sends one read of a connection brought reach the store as
one append (server/native/connection.py, docs/design.md "Sending").
"""

from __future__ import annotations

from collections.abc import Callable

from pocketmq.broker import Broker, SendBatch, SendOutcome
from pocketmq.errors import InvalidArgumentError, MessageNotFoundError, PocketMQError
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w
from pocketmq.server.native.connection import HandlerTable, Joined, ServerConnection
from pocketmq.server.native.convert import send_results_to_wire, transaction_to_wire
from pocketmq.server.native.validation import timestamp_problem

__all__ = ["ProduceHandlers"]

_new_tuple = tuple.__new__


class ProduceHandlers:
    """Sends, transactions and send-backs. ``may_relay``: whether a connection may name the
    host or user of the client it relays (the session family's gateway rule)."""

    def __init__(self, broker: Broker, may_relay: Callable[[ServerConnection], bool]) -> None:
        self._broker = broker
        self._name = broker.name
        self._may_relay = may_relay
        # one object for every send: the connection joins requests whose runner *is* the same
        # (a fresh bound method per request would never be joined)
        self._join_sends = self.send_joined

    def send(self, conn: ServerConnection, req: w.SendRequest) -> Joined:
        """One sender's batch, joined with the other sends of the same read."""
        conn.producing = True  # counted as a producer connection (rocketmq_producer_connections)
        born_host = req.born_host if req.born_host and self._may_relay(conn) else conn.remote
        # tuple.__new__: what the named tuples' generated ``__new__`` does, without its frame
        # (every field given: SendBatch's ``redrive`` default is False)
        batch = _new_tuple(SendBatch, (req.messages, req.producer_group, born_host, False))
        return _new_tuple(Joined, (self._join_sends, batch))

    def send_joined(self, batches: list[SendBatch]) -> list[object]:
        """The answers to the sends one read brought, stored in one append; each message is
        checked by the broker's send contract (a bad one is refused alone)."""
        answers: list[object] = []
        for answer in self._broker.send_now_many(batches):
            if isinstance(answer, PocketMQError):
                answers.append(answer)
            elif answer[1]:  # sync flush or replication: answer once the disk/slave has it
                answers.append(self._send_after_flush(*answer))
            else:  # _send_response without its frame
                answers.append(w.SendResponse(send_results_to_wire(answer[0]), self._name))
        return answers

    def _send_response(self, outcomes: list[SendOutcome]) -> w.SendResponse:
        return w.SendResponse(send_results_to_wire(outcomes), self._name)

    async def _send_after_flush(self, outcomes: list[SendOutcome], end: int) -> w.SendResponse:
        return self._send_response(await self._broker.settle(outcomes, end))

    async def end_transaction(
        self, conn: ServerConnection, req: w.EndTransactionRequest
    ) -> w.EndTransactionResponse:
        """Commit or roll back a half message; a gateway may name the user who decided."""
        by = req.user if req.user and conn.user and self._may_relay(conn) else conn.user
        outcome = await self._broker.end_transaction(
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
        self, conn: ServerConnection, req: w.TransactionStateRequest
    ) -> w.TransactionStateResponse:
        """The broker's record of a message's transaction."""
        status = self._broker.transaction_state(req.message_id)
        if status is None:
            raise MessageNotFoundError(f"no transaction for message {req.message_id} here")
        return transaction_to_wire(status)

    async def send_back(self, conn: ServerConnection, req: w.SendBackRequest) -> w.Empty:
        """A push consumer hands back a message it failed on (retry later or dead-letter)."""
        problem = timestamp_problem(req.delivered_at_ms, "delivered_at_ms")
        if problem is not None:
            raise InvalidArgumentError(problem)
        await self._broker.send_back(
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

    def table(self) -> HandlerTable:
        """The family's request codes and their handlers."""
        return {
            RequestCode.SEND: self.send,
            RequestCode.END_TRANSACTION: self.end_transaction,
            RequestCode.QUERY_TRANSACTION: self.transaction_state,
            RequestCode.SEND_BACK: self.send_back,
        }
