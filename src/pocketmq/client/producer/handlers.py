"""The requests the sender retries, one handler class per request type.

A handler says where its request goes (a topic's queue, or a fixed broker), what it carries, what
an answer means, and which failures are worth another attempt; the retry loop itself lives once,
in :class:`~pocketmq.client.producer.sender.Sender`. An attempt fails in one of three ways, and
the difference decides what a retry may do (docs/semantics.md, "Producer" and "Transactions"):

- **not sent**: the connection could not be opened, so the request never left: certainly not
  stored, safe to repeat for any request;
- **refused**: the broker answered with an error code: not stored; the error says whether
  repeating may help (``retriable``);
- **unknown**: the request left but no answer came (timeout, connection lost) or the broker
  wrote it before its disk failed: it may be stored. A plain send repeats it anyway (same
  message id, consumers deduplicate) and reports :class:`SendOutcomeUnknownError` if it never
  learns; a half message is never repeated then (transactional sends are retried only when
  certainly not stored); ending a transaction is idempotent at the broker, so it is repeated.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, Final, Generic, TypeVar

import msgspec

from pocketmq import properties as props
from pocketmq.client.connection import ClientConnection
from pocketmq.client.message import SendResult, SendStatus
from pocketmq.client.routes import QueueRef
from pocketmq.errors import (
    BrokerConnectionError,
    Code,
    PocketMQError,
    SendOutcomeUnknownError,
    TooManyRequestsError,
    TopicNotFoundError,
    error_from_code,
)
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w

__all__ = [
    "AttemptFailed",
    "EndTransaction",
    "Failure",
    "Next",
    "Prepare",
    "Request",
    "SendBack",
    "SendHalfMessage",
    "SendMessages",
    "with_queue",
]

R = TypeVar("R")

Prepare = Callable[[QueueRef, ClientConnection], Awaitable[None]]
"""Run on the connection before the request is written (a failure there means "not sent")."""


class Failure(enum.Enum):
    """How an attempt failed, as far as the message is concerned."""

    NOT_SENT = "not sent"
    REFUSED = "refused"
    UNKNOWN = "unknown"


class AttemptFailed(Exception):
    """One attempt failed with ``error``; ``kind`` says whether the request may have been
    acted on. Internal to the sender: callers see ``error`` or an unknown-outcome error."""

    def __init__(self, error: PocketMQError, kind: Failure) -> None:
        super().__init__(str(error))
        self.error = error
        self.kind = kind


class Next(enum.Enum):
    """What the retry loop does after a failed attempt: a handler's verdict."""

    STOP = enum.auto()
    """Give up now."""
    AGAIN = enum.auto()
    """Try again at once, choosing the destination as before (a FIFO group keeps its queue)."""
    ELSEWHERE = enum.auto()
    """Try again at once on another broker if there is one."""
    ISOLATE = enum.auto()
    """Like ``ELSEWHERE``, and keep every send away from that broker for a while."""
    REFRESH_ROUTE = enum.auto()
    """The topic's route may be stale: forget it and try again."""
    BACK_OFF = enum.auto()
    """Flow control: try again after the backoff schedule's wait (docs/semantics.md, "Producer")."""


class Request(Generic[R]):
    """One request type the sender knows how to retry.

    Subclasses set ``code`` and ``reply`` and implement :meth:`body`, :meth:`outcome`,
    :meth:`next_step` and :meth:`give_up`. ``messages`` is how many messages the request carries
    (for the producer's statistics; a request carrying none is counted nowhere). A request goes
    to ``fixed`` when set, else to a queue of ``topic`` (``group``'s queue for a FIFO message).
    """

    code: ClassVar[RequestCode]
    reply: ClassVar[type[Any]]
    # what most requests leave as is; a handler's __init__ sets the others (no super() call:
    # a handler is built for every send, on the hot path)
    topic: str = ""
    messages: int = 0
    group: str | None = None
    fixed: QueueRef | None = None
    prepare: Prepare | None = None

    def body(self, queue: QueueRef) -> msgspec.Struct:
        """The request body for an attempt on ``queue``."""
        raise NotImplementedError

    def outcome(self, response: Any, queue: QueueRef) -> R:
        """The caller's result from the broker's answer; raises :class:`AttemptFailed` when the
        answer reports a failure (a per-message error code)."""
        raise NotImplementedError

    def next_step(self, failure: AttemptFailed, attempt: int) -> Next:
        """Whether and how to try again after ``failure`` of attempt number ``attempt`` (0 is
        the first); the loop also stops when attempts or time run out."""
        raise NotImplementedError

    def give_up(self, last: AttemptFailed | None, unknown: bool) -> PocketMQError:
        """The error to raise when the loop stops: ``last`` failure (None when the time ran out
        before any attempt), ``unknown`` when any attempt may have been stored."""
        raise NotImplementedError


_replace: Final = msgspec.structs.replace
_MESSAGE_ID: Final = props.MESSAGE_ID


def with_queue(message: w.InboundMessage, queue_id: int) -> w.InboundMessage:
    """``message`` addressed to ``queue_id`` (``msgspec.structs.replace``: a copy made in C, the
    cheapest on the send hot path)."""
    return _replace(message, queue_id=queue_id)


_STORED: Final[dict[int, SendStatus]] = {
    Code.SUCCESS: SendStatus.OK,
    Code.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    Code.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
    Code.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
}


class SendMessages(Request[list[SendResult]]):
    """SEND of one or more messages of one topic, as one request to one queue.

    Retried on another broker (which is then set aside) for retriable errors, after the backoff
    for flow control, at once after a stale route; a FIFO message only ever on its own queue.
    """

    code = RequestCode.SEND
    reply = w.SendResponse

    def __init__(
        self,
        topic: str,
        wires: list[w.InboundMessage],
        producer_group: str,
        group: str | None = None,
        queue: QueueRef | None = None,
    ) -> None:
        # positional or keyword: one is built per send, and a call with keywords cost 4,010
        # instructions against ~2,300 (docs/benchmarks.md, "Producer send path, fewer levels")
        self.topic = topic
        self.messages = len(wires)
        self.group = group
        self.fixed = queue
        self.wires = wires
        self.producer_group = producer_group

    def body(self, queue: QueueRef) -> w.SendRequest:
        """The messages, addressed to ``queue``."""
        queue_id = queue.queue_id
        wires = self.wires
        # with_queue's copy without its Python frame: one per message per attempt; a lone
        # message (an await-each producer) without the list comprehension's frame either
        if len(wires) == 1:
            return w.SendRequest([_replace(wires[0], queue_id=queue_id)], self.producer_group)
        return w.SendRequest([_replace(m, queue_id=queue_id) for m in wires], self.producer_group)

    def outcome(self, response: w.SendResponse, queue: QueueRef) -> list[SendResult]:
        """One result per message; a message the broker did not store fails the attempt."""
        results: list[SendResult] = []
        broker_name = response.broker_name or queue.broker_name
        stored, message_id = _STORED, _MESSAGE_ID
        wires, items = self.wires, response.results
        count, index = len(wires), 0
        # a result per message, checked as zip(strict=True) did, without its zip object: it
        # cost more than the rest of the loop for one message (docs/benchmarks.md, "Producer
        # send path, fewer levels")
        for item in items:
            if index == count:
                raise ValueError(f"the broker answered {len(items)} results for {count} messages")
            wire = wires[index]
            index += 1
            status = stored.get(item.code)
            if status is None:
                # STORAGE_FAILED: written before the broker's fsync failed, maybe durable
                kind = Failure.UNKNOWN if item.code == Code.STORAGE_FAILED else Failure.REFUSED
                raise AttemptFailed(error_from_code(item.code, item.remark), kind)
            results.append(
                SendResult(
                    message_id=item.message_id or wire.properties.get(message_id, ""),
                    topic=wire.topic,
                    queue_id=item.queue_id,
                    queue_offset=item.queue_offset,
                    broker_name=broker_name,
                    status=status,
                    transaction_id=item.transaction_id or None,
                )
            )
        if index != count:
            raise ValueError(f"the broker answered {len(items)} results for {count} messages")
        return results

    def next_step(self, failure: AttemptFailed, attempt: int) -> Next:
        """Stale route: refresh; flow control: back off; other retriable errors: elsewhere
        (FIFO: again, on its own queue); anything else: stop.
        """
        error = failure.error
        if isinstance(error, TopicNotFoundError) and attempt == 0:
            return Next.REFRESH_ROUTE  # the route may be stale: ask again once
        if not error.retriable:
            return Next.STOP
        if isinstance(error, TooManyRequestsError):
            return Next.BACK_OFF
        return Next.AGAIN if self.group else Next.ISOLATE

    def give_up(self, last: AttemptFailed | None, unknown: bool) -> PocketMQError:
        """The last error if no attempt may have stored the messages, else an unknown outcome."""
        if last is not None and not unknown:
            return last.error
        cause = last.error if last is not None else None
        return SendOutcomeUnknownError(
            f"send to topic {self.topic!r} may or may not have been stored "
            f"({cause or 'timed out'}); sending again with the same message id is safe "
            "for deduplicating consumers",
            message_id=self.wires[0].properties.get(props.MESSAGE_ID, ""),
            cause=cause,
        )


class SendHalfMessage(Request[SendResult]):
    """SEND of a transaction's half message: repeated only while certainly not stored.

    ``prepare`` runs on the connection first (the transaction producer heartbeats its group
    there, so the broker can check the transaction back); its failure counts as "not sent".
    """

    code = RequestCode.SEND
    reply = w.SendResponse

    def __init__(
        self,
        wire: w.InboundMessage,
        *,
        producer_group: str,
        send_timeout: float,
        group: str | None = None,
        prepare: Prepare | None = None,
    ) -> None:
        self.topic = wire.topic
        self.messages = 1
        self.group = group
        self.prepare = prepare
        self.wire = wire
        self.producer_group = producer_group
        self.send_timeout = send_timeout
        self.message_id = wire.properties.get(props.MESSAGE_ID, "")

    def body(self, queue: QueueRef) -> w.SendRequest:
        """The half message, addressed to ``queue``."""
        return w.SendRequest([with_queue(self.wire, queue.queue_id)], self.producer_group)

    def outcome(self, response: w.SendResponse, queue: QueueRef) -> SendResult:
        """The half message's result, with its transaction id."""
        [item] = response.results
        status = _STORED.get(item.code)
        if status is None:
            raise AttemptFailed(error_from_code(item.code, item.remark), Failure.REFUSED)
        return SendResult(
            message_id=item.message_id or self.message_id,
            topic=self.topic,
            queue_id=item.queue_id,
            queue_offset=item.queue_offset,
            broker_name=response.broker_name or queue.broker_name,
            status=status,
            transaction_id=item.transaction_id or None,
        )

    def next_step(self, failure: AttemptFailed, attempt: int) -> Next:
        """Again elsewhere only while the request never left; otherwise stop."""
        return Next.ELSEWHERE if failure.kind is Failure.NOT_SENT else Next.STOP

    def give_up(self, last: AttemptFailed | None, unknown: bool) -> PocketMQError:
        """An unknown outcome if it may be stored, else the last error."""
        if last is None:
            return SendOutcomeUnknownError(
                f"half message {self.message_id} was not sent within {self.send_timeout:.1f}s",
                message_id=self.message_id,
            )
        if last.kind is not Failure.UNKNOWN:
            return last.error
        why = str(last.error) or "no answer in time"
        return SendOutcomeUnknownError(
            f"half message {self.message_id} may or may not have been stored ({why}); it is "
            "not sent again (transactional sends are retried only when certainly not "
            "stored). If it was stored, the broker checks it back.",
            message_id=self.message_id,
            cause=last.error,
        )


class _ToBroker(Request[None]):
    """A request to one given broker whose answer only says "done"."""

    def __init__(self, address: str, request: msgspec.Struct, topic: str) -> None:
        self.topic = topic
        self.fixed = QueueRef("", address, -1, 0)
        self.address = address
        self.request = request

    def body(self, queue: QueueRef) -> msgspec.Struct:
        """The request as given."""
        return self.request

    def outcome(self, response: Any, queue: QueueRef) -> None:
        """Nothing: an answer means the broker did it."""
        return None

    def give_up(self, last: AttemptFailed | None, unknown: bool) -> PocketMQError:
        """The last error, or a timeout if no attempt was made."""
        if last is not None:
            return last.error
        return BrokerConnectionError(f"{self.code.name} to {self.address} timed out")


class EndTransaction(_ToBroker):
    """END_TRANSACTION to the broker holding the half message. The broker treats a repeated end
    as a duplicate, so every retriable failure is repeated at once."""

    code = RequestCode.END_TRANSACTION
    reply = w.EndTransactionResponse

    def __init__(self, address: str, request: w.EndTransactionRequest) -> None:
        super().__init__(address, request, request.topic)

    def next_step(self, failure: AttemptFailed, attempt: int) -> Next:
        """Again at once for any retriable error (a repeated end is a duplicate)."""
        return Next.AGAIN if failure.error.retriable else Next.STOP


class SendBack(_ToBroker):
    """SEND_BACK of a message a consumer failed, to the broker it came from: the broker stores
    it for a later retry (or dead-letters it). Never repeated: if it fails, the consumer re-sends
    the message to its retry topic instead (docs/semantics.md, "send-back fails")."""

    code = RequestCode.SEND_BACK
    reply = w.Empty

    def __init__(self, address: str, request: w.SendBackRequest) -> None:
        super().__init__(address, request, request.origin_topic)

    def next_step(self, failure: AttemptFailed, attempt: int) -> Next:
        """Stop: the fallback is a re-send, not the same request again."""
        return Next.STOP
