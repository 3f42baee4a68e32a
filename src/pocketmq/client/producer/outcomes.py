"""What a transaction ends as, and the application callbacks that decide it.

Shared by the transaction producer (which runs the local transaction) and the check responder
(which runs the checker when a broker asks), so neither imports the other.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pocketmq.client.message import MessageView, SendResult
from pocketmq.client.producer.config import ProducerStatistics

__all__ = [
    "LocalTransaction",
    "TransactionChecker",
    "TransactionResolution",
    "TransactionResult",
    "TransactionStatistics",
    "call_user",
]

A = TypeVar("A")


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
        """The id of the message, the same before and after the commit."""
        return self.send_result.message_id

    @property
    def transaction_id(self) -> str:
        """The broker's id of the transaction (empty if the broker gave none)."""
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


async def call_user(function: Callable[[A], Any], argument: A) -> Any:
    """Run an application callback: await an async one on the loop, run a sync one in a worker
    thread (it may block on its database without stalling the producer)."""
    if inspect.iscoroutinefunction(function):
        return await function(argument)
    result = await asyncio.to_thread(function, argument)
    if inspect.isawaitable(result):
        return await result
    return result
