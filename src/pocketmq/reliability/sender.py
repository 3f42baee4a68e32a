"""What the relay and the resend scheduler send through: anything with ``async send(message)``.

The toolkit must not depend on how messages reach the broker (the SDK's ``Producer``, a test
double, a broker embedded in the same process), so it names the one method it needs as a
:class:`typing.Protocol`. The SDK's producer satisfies it structurally; :class:`InMemorySender`
is a small stand-in for unit tests and examples.

The sender must keep ``message.message_id`` as the message's id: that stable id is what lets the
consumer recognise a resend as a duplicate. A send that may or may not have been stored must raise
:class:`~pocketmq.errors.SendOutcomeUnknownError`; any other exception means "not stored".
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from pocketmq.client import Message, SendResult
from pocketmq.errors import InvalidArgumentError

__all__ = ["InMemorySender", "MessageSender"]


@runtime_checkable
class MessageSender(Protocol):
    """Sends one message and returns where the broker stored it.

    The one method the toolkit needs from a producer, as a protocol: the SDK's ``Producer`` fits
    it as is, and so can a gateway client or a test double.
    """

    async def send(self, message: Message) -> SendResult:
        """Send ``message`` keeping its id; raise ``SendOutcomeUnknownError`` when it may have been
        stored, anything else when it was not.
        """


class InMemorySender:
    """Records every send and assigns offsets per (topic, queue), like a one-broker cluster.

    Why it exists: the relay, the resend scheduler and the Spark resend job all need a sender
    to be tested without a broker, and one double means their tests agree on what a send does.
    Queues are chosen round-robin per topic. ``sent`` keeps every message with its result in
    send order, including resends of the same id. ``fail`` maps a message id to the exception
    each send of it raises (``SendOutcomeUnknownError`` for "may be stored", anything else for
    "not stored"); such sends are not recorded. Plain data only, so it pickles (a Spark worker
    can build one per partition).
    """

    def __init__(
        self,
        *,
        broker_name: str = "memory-broker",
        queues: int = 4,
        fail: Mapping[str, BaseException] | None = None,
    ) -> None:
        if queues < 1:
            raise InvalidArgumentError("queues must be at least 1")
        self.broker_name = broker_name
        self.queues = queues
        self.fail = dict(fail or {})
        self.sent: list[tuple[Message, SendResult]] = []
        self._next_queue: dict[str, int] = defaultdict(int)
        self._next_offset: dict[tuple[str, int], int] = defaultdict(int)

    @property
    def messages(self) -> list[Message]:
        """The messages sent, in order (``sent`` without the results)."""
        return [message for message, _ in self.sent]

    async def send(self, message: Message) -> SendResult:
        """Store the message on the next queue of its topic (round-robin) at the next offset, or
        raise what ``fail`` says.
        """
        if not message.message_id:
            raise InvalidArgumentError("the outbox always sends with a message id")
        error = self.fail.get(message.message_id)
        if error is not None:
            raise error
        queue_id = self._next_queue[message.topic] % self.queues
        self._next_queue[message.topic] += 1
        offset = self._next_offset[(message.topic, queue_id)]
        self._next_offset[(message.topic, queue_id)] = offset + 1
        result = SendResult(
            message_id=message.message_id,
            topic=message.topic,
            queue_id=queue_id,
            queue_offset=offset,
            broker_name=self.broker_name,
        )
        self.sent.append((message, result))
        return result

    def __repr__(self) -> str:
        return f"InMemorySender(broker_name={self.broker_name!r}, sent={len(self.sent)})"
