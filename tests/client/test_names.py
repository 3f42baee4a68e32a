"""The SDK refuses topic and group names the broker would refuse (issue 14, items 7, 10) before
it connects: nothing listens on port 1."""

from __future__ import annotations

import pytest

from pocketmq import Message
from pocketmq.client import Admin, Producer, PushConsumer, SimpleConsumer
from pocketmq.errors import InvalidArgumentError


async def test_sdk_consumers_refuse_bad_group_and_topic_names() -> None:
    async def listener(messages: object) -> None:
        return None

    for bad_group in ("g" * 125, "a@b", ""):
        with pytest.raises(InvalidArgumentError):
            PushConsumer(bad_group, "orders", listener, servers="127.0.0.1:1")
        with pytest.raises(InvalidArgumentError):
            SimpleConsumer(bad_group, "orders", servers="127.0.0.1:1")
    with pytest.raises(InvalidArgumentError, match="topic name"):
        PushConsumer("g", ["orders", "a@b"], listener, servers="127.0.0.1:1")
    with pytest.raises(InvalidArgumentError, match="topic name"):
        SimpleConsumer("g", {"x" * 128: "*"}, servers="127.0.0.1:1")


async def test_sdk_producer_and_admin_refuse_bad_names_before_sending() -> None:
    async with Producer(servers="127.0.0.1:1") as producer:
        with pytest.raises(InvalidArgumentError, match="topic name"):
            await producer.send(Message(topic="a@b", body=b"x"))
    async with Admin(servers="127.0.0.1:1") as admin:
        with pytest.raises(InvalidArgumentError, match="retry and dead-letter topics"):
            await admin.create_group("g" * 121)
        with pytest.raises(InvalidArgumentError, match="topic name"):
            await admin.create_topic("a@b")
        with pytest.raises(InvalidArgumentError, match="reserved prefix"):
            await admin.create_topic("%SYS%mine")
