"""Every SDK resource refuses work before its start and after its close with a
:class:`ClosedError` that says which (nothing here reaches a broker: a closed port)."""

from __future__ import annotations

import pytest

from pocketmq import Message
from pocketmq.client import (
    Producer,
    ProducerConfig,
    SimpleConsumer,
    TransactionProducer,
    TransactionResolution,
)
from pocketmq.errors import ClosedError

NOWHERE = "127.0.0.1:9"  # discard port: nothing listens
MESSAGE = Message(topic="t", body=b"x")


async def test_a_producer_refuses_sends_before_start_and_after_close() -> None:
    producer = Producer(servers=NOWHERE)
    with pytest.raises(ClosedError, match="producer not started"):
        await producer.send(MESSAGE)
    async with producer:
        pass
    with pytest.raises(ClosedError, match="producer was closed"):
        await producer.send_batch([MESSAGE])
    with pytest.raises(ClosedError, match="producer was closed"):
        await producer.start()


async def test_a_transaction_producer_refuses_half_messages_before_start_and_after_close() -> None:
    producer = TransactionProducer(
        lambda view: TransactionResolution.UNKNOWN,
        servers=NOWHERE,
        config=ProducerConfig(group="pg"),
    )
    with pytest.raises(ClosedError, match="producer not started"):
        await producer.send_half_message(MESSAGE)
    async with producer:  # no topics: nothing to heartbeat, nothing sent
        pass
    with pytest.raises(ClosedError, match="producer was closed"):
        await producer.send_half_message(MESSAGE)
    with pytest.raises(ClosedError, match="producer was closed"):
        await producer.send(MESSAGE)


async def test_a_simple_consumer_refuses_to_receive_before_start_and_after_close() -> None:
    consumer = SimpleConsumer("g", "t", servers=NOWHERE)
    with pytest.raises(ClosedError, match="consumer not started"):
        await consumer.receive()
    await consumer.aclose()
    with pytest.raises(ClosedError, match="consumer was closed"):
        await consumer.receive()
    with pytest.raises(ClosedError, match="consumer was closed"):
        await consumer.start()
