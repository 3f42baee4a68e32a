"""Handing failed messages back for a later retry (clustering consumers).

A failed message is first *sent back*: the broker stores it in ``%RETRY%<group>`` after a
growing delay, or in ``%DLQ%<group>`` once the group's retries are used up. If the broker cannot
take it back, the consumer re-sends it to the retry topic itself, as a plain message carrying
the retry properties (delay level ``3 + reconsume times``, or -1 for the dead-letter queue).
Both requests go through a :class:`~pocketmq.client.producer.sender.Sender` configured without
retries: one attempt each, the next step being the fallback. If that fails too,
the message stays in the process queue and is consumed again after ``local_retry_delay``
(5 s); the committed offset never passes it (docs/semantics.md, "send-back fails").
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pocketmq import properties as props
from pocketmq.client.consumer.state import ConsumerState
from pocketmq.client.producer.handlers import SendBack
from pocketmq.client.producer.sender import Sender
from pocketmq.errors import ClosedError, PocketMQError
from pocketmq.protocol import structs as w

if TYPE_CHECKING:  # the per-message path imports this module: no import cycle at run time
    from pocketmq.client.consumer._process_queue import ProcessQueue

__all__ = ["FailedAttempt", "RetryHandBack"]

log = logging.getLogger("pocketmq.client")


@dataclass(frozen=True, slots=True)
class FailedAttempt:
    """One failed delivery of ``message``: its outcome and error text for the attempt history,
    and when the attempt started (epoch seconds)."""

    message: w.Delivered
    outcome: str
    error: str
    started: float


class RetryHandBack:
    """Gives failed messages back to the broker, or keeps them for a local re-consume."""

    def __init__(self, state: ConsumerState, sender: Sender) -> None:
        self._state = state
        self._sender = sender

    async def hand_back(self, pq: ProcessQueue, attempt: FailedAttempt, delay_level: int) -> bool:
        """Send ``attempt``'s message back, or re-send it to the retry topic; False if neither
        worked (the caller keeps the message)."""
        state = self._state
        message = attempt.message
        message_id = message.properties.get(props.MESSAGE_ID, "")
        request = w.SendBackRequest(
            state.group,
            message.physical_offset,
            message_id,
            delay_level,
            state.config.max_reconsume_times,
            message.properties.get(props.RETRY_TOPIC, message.topic),
            attempt.error,
            state.client_id,
            attempt.outcome,
            int(attempt.started * 1000),
        )
        try:
            await self._sender.run(SendBack(pq.address, request))
            state.counters.sent_back += 1
            return True
        except PocketMQError as exc:
            log.warning(
                "send-back of %s failed (%s); re-sending to the retry topic", message_id, exc
            )
        try:
            await self._resend_to_retry(message, delay_level)
            state.counters.resent += 1
            return True
        except PocketMQError as exc:
            log.warning("re-send of %s failed (%s); consuming it again locally", message_id, exc)
            return False

    async def _resend_to_retry(self, message: w.Delivered, delay_level: int) -> None:
        state = self._state
        retry_topic = "%RETRY%" + state.group
        route = await state.client.routes.get(retry_topic)
        queues = route.writable
        if not queues:
            raise ClosedError(f"{retry_topic} has no writable queue")
        reconsume = message.delivery_attempt  # = reconsume times + 1
        properties = dict(message.properties)
        properties.setdefault(props.RETRY_TOPIC, message.topic)
        properties.setdefault(props.ORIGIN_MESSAGE_ID, properties.get(props.MESSAGE_ID, ""))
        properties[props.RECONSUME_TIMES] = str(reconsume)
        if state.config.max_reconsume_times >= 0:
            properties[props.MAX_RECONSUME_TIMES] = str(state.config.max_reconsume_times)
        # RocketMQ's rule: the retry waits on delay level 3 + reconsume times (-1: to the DLQ)
        properties[props.DELAY_LEVEL] = str(delay_level if delay_level else 3 + reconsume - 1)
        queue = queues[reconsume % len(queues)]
        wire = w.InboundMessage(
            retry_topic, message.body, properties, queue.queue_id, 0, message.born_timestamp
        )
        await self._sender.send_to(queue, wire)

    def later(self, pq: ProcessQueue, messages: list[w.Delivered]) -> None:
        """Keep ``messages`` (they could not be handed back) and consume them again after
        ``local_retry_delay``, each counted as one more delivery attempt."""
        state = self._state
        for message in messages:
            pq.local_attempts[message.queue_offset] = (
                pq.local_attempts.get(message.queue_offset, 0) + 1
            )
        state.counters.local_retries += len(messages)

        async def again() -> None:
            await asyncio.sleep(state.config.local_retry_delay)
            if not pq.dropped and state.work is not None:
                await state.work.put((pq, messages))

        state.spawn(again())
