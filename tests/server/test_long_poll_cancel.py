"""A long poll the client gave up on takes nothing (docs/protocol.md, ``CANCEL``): neither a
cancelled request nor one whose connection closed hides a message that arrives afterwards."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from pocketmq.client import Admin, Message, Producer
from pocketmq.client.connection import ClientConnection, connect
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w
from pocketmq.testing import BrokerProcess

from ..integration.conftest import FAST_BROKER
from ..scratch import scratch_broker

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with scratch_broker(tmp_path_factory, "cancel-broker", config=FAST_BROKER) as process:
        yield process


async def _topic_and_group(broker: BrokerProcess, name: str) -> None:
    async with Admin(servers=broker.address) as admin:
        await admin.create_topic(name, queues=1)
        await admin.create_group(name)


def _pop(name: str, wait_ms: int) -> w.PopRequest:
    return w.PopRequest(name, name, 32, 60_000, wait_ms)  # hidden a minute once taken


async def _gives_up(connection: ClientConnection, name: str, *, close: bool) -> None:
    poll = asyncio.create_task(
        connection.request(RequestCode.POP, _pop(name, 20_000), w.PopResponse, 30)
    )
    await asyncio.sleep(0.3)  # the broker is waiting for a message now
    if close:
        connection.close()
    else:
        poll.cancel()
    with pytest.raises((asyncio.CancelledError, Exception)):
        await poll
    await asyncio.sleep(0.3)


@pytest.mark.parametrize("close", [False, True], ids=["cancelled", "connection-closed"])
async def test_a_long_poll_given_up_on_takes_nothing(broker: BrokerProcess, close: bool) -> None:
    name = f"cancel-{'closed' if close else 'cancelled'}"
    await _topic_and_group(broker, name)
    first = await connect(broker.address, "gives-up", timeout=5)
    await _gives_up(first, name, close=close)
    async with Producer(servers=broker.address) as producer:
        await producer.send(Message(topic=name, body=b"for whoever is still there"))
    second = await connect(broker.address, "still-there", timeout=5)
    try:
        answer = await second.request(RequestCode.POP, _pop(name, 3_000), w.PopResponse, 10)
    finally:
        second.close()
        first.close()
    assert [m.body for m in answer.messages] == [b"for whoever is still there"]
