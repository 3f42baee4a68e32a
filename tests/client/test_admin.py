"""The admin client answers with typed values of its own (never protocol structures), and reads
any topic without consuming it: dead letters and the broker's ledgers included. Against a real
broker process."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import msgspec
import pytest

from pocketmq import ConsumeStatus, Message, MessageView
from pocketmq import properties as props
from pocketmq.client import (
    Admin,
    BrokerInfo,
    BrokerStatus,
    DeliveryAttempt,
    Producer,
    PushConsumer,
    QueueInfo,
    RedriveReport,
    StoredMessage,
)
from pocketmq.errors import TopicNotFoundError
from pocketmq.testing import BrokerProcess

from ..integration.conftest import FAST_BROKER, create, eventually

pytestmark = pytest.mark.integration


def _typed(value: object) -> bool:
    return dataclasses.is_dataclass(value) and not isinstance(value, msgspec.Struct)


async def _dead_letter(address: str) -> str:
    """One message of topic ``orders`` dead-lettered by group ``g`` (no retries)."""
    await create(address, topic="orders", group="g", queues=1, max_retries=0)
    async with Producer(servers=address) as producer:
        sent = await producer.send(Message(topic="orders", body=b"poison"))

    async def refuse(messages: list[MessageView]) -> ConsumeStatus:
        return ConsumeStatus.RECONSUME_LATER

    async with (
        Admin(servers=address) as admin,
        PushConsumer("g", "orders", refuse, servers=address),
    ):

        async def dead() -> bool:
            return bool(await admin.dead_letters("g"))

        await eventually(dead, timeout=15)
    return sent.message_id


async def test_admin_results_are_typed_and_browse_reads_without_consuming(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path, config=FAST_BROKER, grpc_port=None) as broker:
        message_id = await _dead_letter(broker.address)
        async with Admin(servers=broker.address) as admin:
            assert not hasattr(admin, "call")  # the raw request is private
            [info] = await admin.brokers()
            assert isinstance(info, BrokerInfo)
            assert info.address == broker.address
            [status] = await admin.broker_status()
            assert isinstance(status, BrokerStatus)
            assert (status.address, status.broker_name) == (broker.address, info.name)

            # a dead-letter topic has no route, yet its queues and messages can be read
            [queue] = await admin.queue_status("%DLQ%g")
            assert isinstance(queue, QueueInfo)
            assert (queue.address, queue.min_offset, queue.max_offset) == (broker.address, 0, 1)
            for _ in range(2):  # browsing twice sees the same: nothing was consumed
                [letter] = await admin.browse("%DLQ%g", address=queue.address)
                assert isinstance(letter, StoredMessage)
                assert (letter.topic, letter.message_id, letter.body) == (
                    "%DLQ%g",
                    message_id,
                    b"poison",
                )
                assert letter.properties[props.RETRY_TOPIC] == "orders"  # system properties kept
                assert letter.properties[props.DLQ_REASON]

            # the attempt ledger, read as records and decoded into the history's values
            ledger: list[StoredMessage] = []
            for q in await admin.queue_status("%SYS%HISTORY"):
                ledger += await admin.browse(
                    "%SYS%HISTORY", address=q.address, queue_id=q.queue_id, max_count=1024
                )
            attempts = [a for m in ledger for a in DeliveryAttempt.from_ledger(m)]
            history = await admin.message_history(message_id)
            assert history
            assert all(_typed(a) for a in history)
            assert {a for a in attempts if a.message_id == message_id} == set(history)
            assert [a.outcome for a in history if a.group == "g"][-1] == "DLQ"

            report = await admin.redrive(queue.address, "g", [0])
            assert isinstance(report, RedriveReport)
            assert [(i.status, i.message_id) for i in report.items] == [("resent", message_id)]
            again = await admin.redrive(queue.address, "g", [0])
            assert [i.status for i in again.items] == ["already"]

            with pytest.raises(TopicNotFoundError, match="no-such-topic"):
                await admin.queue_status("no-such-topic")
