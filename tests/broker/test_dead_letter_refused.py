"""A dead letter the store refuses (disk full) is not counted as handled: the message stays."""

from __future__ import annotations

from pathlib import Path

import pytest

from pocketmq import properties as props
from pocketmq.broker import Broker, BrokerConfig, GroupConfig, InboundMessage
from pocketmq.broker.topics import dlq_topic
from pocketmq.errors import StorageFullError
from pocketmq.store import PutResult, PutStatus, StoreMessage


async def test_send_back_to_a_refused_dlq_fails_and_can_be_retried(tmp_path: Path) -> None:
    broker = Broker(BrokerConfig(data_dir=str(tmp_path)))
    await broker.start()
    try:
        broker.create_topic("orders", queues=1)
        broker.create_group(GroupConfig(name="g"))
        [sent] = await broker.send([InboundMessage("orders", b"x", {props.MESSAGE_ID: "M1"})])
        real_append = broker.store.append

        def refuse_dead_letters(messages: list[StoreMessage]) -> list[PutResult]:
            if any(m.topic == dlq_topic("g") for m in messages):
                return [PutResult(status=PutStatus.DISK_FULL) for _ in messages]
            return real_append(messages)

        broker.store.append = refuse_dead_letters  # type: ignore[method-assign]
        with pytest.raises(StorageFullError):
            await broker.send_back("g", sent.physical_offset, "M1", delay_level=-1)
        assert broker.counters["dead_lettered"] == 0
        assert broker.store.max_offset(dlq_topic("g"), 0) == 0

        broker.store.append = real_append  # type: ignore[method-assign]
        assert await broker.send_back("g", sent.physical_offset, "M1", delay_level=-1) == "dlq"
        assert broker.counters["dead_lettered"] == 1
        assert broker.store.max_offset(dlq_topic("g"), 0) == 1
    finally:
        await broker.close()
