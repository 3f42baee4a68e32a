"""Send-back: a consumer failed on a message and hands it back for a later retry.

The message is copied into ``%RETRY%<group>`` through the schedule topics, which hold it for its
delay (the group's retry policy, or the delay level the consumer asked for), or into
``%DLQ%<group>`` when its retries are used up. It keeps its message id; ``RETRY_TOPIC`` keeps
its original topic and ``ORIGIN_MESSAGE_ID`` its first id (docs/semantics.md, "Consumer retry").
"""

from __future__ import annotations

import logging

import msgspec

from pocketmq import properties as props
from pocketmq.broker.deadletters import DeadLetters
from pocketmq.broker.history import Outcome
from pocketmq.broker.parts import BrokerPart, Shared, require_dead_letter_stored
from pocketmq.broker.topics import (
    PERM_READ,
    PERM_WRITE,
    retry_topic,
)
from pocketmq.errors import (
    BrokerError,
    MessageNotFoundError,
)
from pocketmq.model.groups import GroupConfig
from pocketmq.store import (
    StoredMessage,
    StoreMessage,
)

__all__ = ["SendBack"]

log = logging.getLogger("pocketmq.broker")


class SendBack(BrokerPart):
    """Re-stores messages consumers failed on."""

    def __init__(self, shared: Shared, dead_letters: DeadLetters) -> None:
        super().__init__(shared)
        self._dead_letters = dead_letters

    async def send_back(
        self,
        group: str,
        physical_offset: int,
        message_id: str,
        *,
        delay_level: int = 0,
        max_reconsume_times: int = -1,
        outcome: str = Outcome.RECONSUME_LATER.value,
        error: str = "",
        consumer: str = "",
        delivered_at: float | None = None,
    ) -> str:
        """Re-store a message a consumer failed on: into ``%RETRY%<group>`` after a delay, or
        into ``%DLQ%<group>`` when its retries are used up (or ``delay_level`` < 0).

        Returns ``"retry"`` or ``"dlq"``. The message keeps its id; ``RETRY_TOPIC`` keeps its
        original topic and ``ORIGIN_MESSAGE_ID`` its first id (docs/semantics.md, "Consumer
        retry, delays and dead letters").
        """
        group_config = self._group(group)
        if self._fault("send_back"):
            raise BrokerError("injected send-back failure (store fault rules)")
        record = self.store.read_message(physical_offset)
        if record is None or record.message_id != message_id:
            raise MessageNotFoundError(
                f"no message {message_id!r} at offset {physical_offset} (removed by retention?)"
            )
        self.history.record(
            message_id=message_id,
            group=group,
            topic=record.properties.get(props.RETRY_TOPIC, record.topic),
            attempt=record.reconsume_times + 1,
            outcome=outcome,
            consumer=consumer,
            error=error,
            delivered_at=delivered_at,
            message_group=record.properties.get(props.MESSAGE_GROUP, ""),
        )
        properties = dict(record.properties)
        properties.setdefault(props.RETRY_TOPIC, record.topic)
        properties.setdefault(props.ORIGIN_MESSAGE_ID, message_id)
        limit = max_reconsume_times if max_reconsume_times >= 0 else group_config.retry.max_retries
        reconsume = record.reconsume_times
        if delay_level < 0 or (limit >= 0 and reconsume >= limit):
            reason = (
                "sent to DLQ by the consumer"
                if delay_level < 0
                else (f"consumed {reconsume + 1} times without success")
            )
            result = self._dead_letters.dead_letter(
                group, msgspec.structs.replace(record, properties=properties), reason=reason
            )
            require_dead_letter_stored(result)  # the consumer must not count it as handled
            return "dlq"
        held = self._held_retry(group, group_config, record, properties, delay_level)
        [result] = await self._appender.append_internal([held])
        if not result.status.stored:
            raise BrokerError(f"storing the retry failed: {result.reason or result.status.value}")
        self.counters["sent_back"] += 1
        return "retry"

    def _held_retry(
        self,
        group: str,
        group_config: GroupConfig,
        record: StoredMessage,
        properties: dict[str, str],
        delay_level: int,
    ) -> StoreMessage:
        """The retry of ``record`` for ``%RETRY%<group>``, wrapped for the schedule topic that
        holds it for its delay: ``delay_level`` when the consumer asked for one, else the delay
        of the group's retry policy for the next attempt (a delay level when one matches)."""
        retry = self.topics.ensure_system(
            retry_topic(group), max(1, group_config.retry_queues), PERM_READ | PERM_WRITE
        )
        reconsume = record.reconsume_times
        message = StoreMessage(
            topic=retry.name,
            queue_id=self._round_robin_next(retry.name) % retry.queues,
            body=record.body,
            properties=properties,
            flags=record.flags,
            born_timestamp=record.born_timestamp,
            reconsume_times=reconsume + 1,
        )
        now_ms = int(self._clock() * 1000)
        if delay_level > 0:
            return self.schedule.schedule_level(message, delay_level, now_ms)
        seconds = group_config.retry.delay(reconsume + 1, self.config.delay_levels)
        level = self.schedule.level_for(seconds)
        if level is not None:
            return self.schedule.schedule_level(message, level, now_ms)
        return self.schedule.schedule_at(message, now_ms + int(seconds * 1000))
