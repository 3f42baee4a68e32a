"""Dead letters: where messages go when their consumers have given up on them, and back.

A message that used up its delivery attempts (or that its consumer sent to the DLQ) is copied to
``%DLQ%<group>``, which normal consumers cannot read; operators list, inspect and redrive it
(broker/redrive.py does the redrive's bookkeeping). A dead letter the store refuses is never
counted as handled: the message stays pending and the move is tried again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from pocketmq import properties as props
from pocketmq.broker.history import Outcome
from pocketmq.broker.parts import BrokerPart, require_dead_letter_stored
from pocketmq.broker.pop import Handle, InFlight, PopQueue
from pocketmq.broker.redrive import RedriveService
from pocketmq.broker.topics import (
    PERM_WRITE,
    RETRY_PREFIX,
    dlq_topic,
)
from pocketmq.errors import (
    InvalidArgumentError,
)
from pocketmq.model.messages import SendOutcome
from pocketmq.store import (
    PutResult,
    StoredMessage,
    StoreMessage,
)

__all__ = ["DeadLetters"]

log = logging.getLogger("pocketmq.broker")


class DeadLetters(BrokerPart):
    """Copies messages into dead-letter topics and redrives them out again."""

    redrives: RedriveService
    """Set by the broker once it has built the redrive service (it sends through the broker's
    send path, built after this)."""

    def dead_letter(self, group: str, message: StoredMessage, *, reason: str) -> PutResult:
        """Store a copy of ``message`` in ``%DLQ%<group>`` (write-only for consumers)."""
        dlq = self.topics.ensure_system(dlq_topic(group), 1, PERM_WRITE)
        properties = dict(message.properties)
        original = properties.get(props.RETRY_TOPIC) or message.topic
        if original.startswith(RETRY_PREFIX):
            original = properties.get(props.RETRY_TOPIC, original)
        properties[props.RETRY_TOPIC] = original
        properties.setdefault(props.ORIGIN_MESSAGE_ID, properties.get(props.MESSAGE_ID, ""))
        properties[props.DLQ_REASON] = reason
        [result] = self.store.append(
            [
                StoreMessage(
                    topic=dlq.name,
                    queue_id=0,
                    body=message.body,
                    properties=properties,
                    flags=message.flags,
                    born_timestamp=message.born_timestamp,
                    reconsume_times=message.reconsume_times,
                )
            ]
        )
        if not result.status.stored:
            log.error(
                "message %s of group %s could not be dead-lettered (%s); it stays pending",
                message.message_id,
                group,
                result.reason or result.status.value,
            )
            return result
        self.counters["dead_lettered"] += 1
        self.traffic.dead_lettered[(original, group)] += 1
        self.history.record(
            message_id=message.message_id,
            group=group,
            topic=original,
            attempt=message.reconsume_times + 1,
            outcome=Outcome.DLQ,
            error=reason,
            message_group=properties.get(props.MESSAGE_GROUP, ""),
        )
        log.info("message %s of group %s dead-lettered: %s", message.message_id, group, reason)
        return result

    def dead_letter_offset(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        state: PopQueue,
        message: StoredMessage | None = None,
        entry: InFlight | None = None,
    ) -> None:
        """Dead-letter a popped message that used up its attempts and finish it in its pop queue; if
        the DLQ refuses it, it stays in flight and the move is retried when it expires again."""
        message = message or self._message_at(topic, queue_id, offset)
        if message is not None:
            result = self.dead_letter(group, message, reason="max delivery attempts reached")
            if not result.status.stored:
                # Not finished, not committed: it expires again and the move is retried.
                if entry is not None:
                    state.requeue(offset, entry)
                return
        state.finish(offset)
        self.offsets.commit(group, topic, queue_id, state.committed)
        self.pop_state.dirty = True

    def forward_to_dead_letter(
        self,
        group: str,
        topic: str,
        receipt_handle: str,
        *,
        reason: str = "",
    ) -> None:
        """Move a popped message to ``%DLQ%<group>`` now (a FIFO consumer gave up on it
        after its local retries); its receipt handle must still be valid. ``reason`` is kept
        with the letter (empty: a generic one)."""
        reason = reason or "forwarded to the DLQ by the consumer"
        self._group(group)
        handle = Handle.parse(receipt_handle)
        state, _ = self.pop_state.lookup(group, topic, handle)
        message = self._message_at(topic, handle.queue_id, handle.offset)
        if message is not None:  # None: removed by retention, nothing left to keep
            require_dead_letter_stored(self.dead_letter(group, message, reason=reason))
        state.finish(handle.offset)
        self.offsets.commit(group, topic, handle.queue_id, state.committed)
        self.pop_state.dirty = True

    async def redrive(
        self, group: str, dlq_offsets: Sequence[int], *, target: str = "origin", operator: str = ""
    ) -> list[tuple[int, str, str, SendOutcome | None]]:
        """Re-send dead letters of ``group`` (by their offset in ``%DLQ%<group>``), each once
        (broker/redrive.py: one redrive per group at a time, progress recorded per message).

        ``target``: ``origin`` re-sends to the original topic (every subscribed group sees it),
        ``retry`` to ``%RETRY%<group>`` (only this group). Returns
        ``(offset, message id, "resent" | "already" | "missing" | "failed: ...", outcome)``.
        """
        self._group(group)
        if target not in ("origin", "retry"):
            raise InvalidArgumentError("redrive target must be 'origin' or 'retry'")
        return await self.redrives.redrive(group, dlq_offsets, target, operator)

    def redriven(self, group: str) -> set[int]:
        """The DLQ offsets of ``group`` already redriven, so an operator's listing and a second
        redrive can skip them."""
        return self.redrives.ledger.offsets(group)
