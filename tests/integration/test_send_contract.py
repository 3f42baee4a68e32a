"""The send contract on the native protocol: the broker checks every message against its
topic's type and the message rules, whichever client sent it (a delay message to a FIFO topic,
once accepted from native clients, would have broken the order of its message group)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from pocketmq.client import Admin, Message, Producer
from pocketmq.errors import InvalidArgumentError, MessageIllegalError
from pocketmq.testing import BrokerProcess

from .conftest import create


@pytest.mark.parametrize(
    ("topic_type", "fields", "words"),
    [
        ("fifo", {"delivery_time": time.time() + 60}, "accepts fifo messages, not a delay"),
        ("fifo", {}, "not a normal message"),
        ("delay", {}, "not a normal message"),
        ("transaction", {}, "not a normal message"),
    ],
)
async def test_a_message_its_topic_does_not_accept_is_refused(
    broker: BrokerProcess,
    names: Callable[[str], str],
    topic_type: str,
    fields: dict[str, object],
    words: str,
) -> None:
    topic = names(topic_type)
    async with Admin(servers=broker.address) as admin:
        await admin.create_topic(topic, queues=2, topic_type=topic_type)
    async with Producer(servers=broker.address) as producer:
        with pytest.raises(MessageIllegalError, match=words):
            await producer.send(Message(topic=topic, body=b"x", **fields))  # type: ignore[arg-type]


async def test_a_delivery_time_beyond_the_maximum_delay_is_refused(
    broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    topic = names("delay")
    await create(broker.address, topic=topic)
    async with Producer(servers=broker.address) as producer:
        with pytest.raises(MessageIllegalError, match="days ahead"):
            await producer.send(
                Message(topic=topic, body=b"x", delivery_time=time.time() + 10 * 86400)
            )


async def test_a_native_pop_retried_with_its_attempt_id_gets_the_same_messages(
    broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    """A pop whose answer was lost is retried with the same attempt id: it gets the same
    messages and receipt handles again instead of hiding a second batch (the broker keeps the
    last answer per consumer, group and topic, as it does for the official clients)."""
    from pocketmq.protocol import RequestCode
    from pocketmq.protocol import structs as w

    topic, group = names("pop"), names("g")
    await create(broker.address, topic=topic, group=group)
    async with Producer(servers=broker.address) as producer:
        for i in range(3):
            await producer.send(Message(topic=topic, body=b"%d" % i))
    request = w.PopRequest(group, topic, max_count=2, invisible_ms=30_000, attempt_id="a-1")
    async with Admin(servers=broker.address) as admin:
        first = await admin._call(broker.address, RequestCode.POP, request, w.PopResponse)
        again = await admin._call(broker.address, RequestCode.POP, request, w.PopResponse)
        fresh = await admin._call(
            broker.address,
            RequestCode.POP,
            w.PopRequest(group, topic, max_count=2, invisible_ms=30_000, attempt_id="a-2"),
            w.PopResponse,
        )
    assert len(first.messages) == 2
    assert [m.receipt_handle for m in again.messages] == [m.receipt_handle for m in first.messages]
    # a new attempt id pops anew: the one message the first pop left (which one depends on
    # the queue the pop started at)
    assert [m.body for m in fresh.messages] == sorted(
        {b"0", b"1", b"2"} - {m.body for m in first.messages}
    )


async def test_an_argument_is_one_exception_type_whether_the_sdk_or_the_broker_refused_it(
    broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    topic = names("fifo")
    async with Admin(servers=broker.address) as admin:
        await admin.create_topic(topic, queues=2, topic_type="fifo")
    caught: list[InvalidArgumentError] = []
    async with Producer(servers=broker.address) as producer:
        for message in (
            Message(topic="bad topic!", body=b"x"),  # the SDK refuses it, nothing is sent
            Message(topic=topic, body=b"x"),  # the broker refuses it (not a fifo message)
        ):
            try:
                await producer.send(message)
            except InvalidArgumentError as exc:
                caught.append(exc)
    assert [type(e).__name__ for e in caught] == ["InvalidArgumentError", "MessageIllegalError"]
