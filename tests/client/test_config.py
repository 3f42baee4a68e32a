"""How the SDK reads ``servers``: one string may name several, as ``POCKETMQ_SERVER`` does."""

from __future__ import annotations

import pytest

from pocketmq.client import Admin, Producer, SimpleConsumer
from pocketmq.client.config import default_servers


def test_a_string_of_several_servers_is_split() -> None:
    producer = Producer(servers="10.0.0.1:10911, 10.0.0.2:10911;10.0.0.3:10911")
    assert producer.client_config.servers == ("10.0.0.1:10911", "10.0.0.2:10911", "10.0.0.3:10911")
    admin = Admin(servers="a:1,b:2")
    assert admin.client_config.servers == ("a:1", "b:2")
    consumer = SimpleConsumer("g", "t", servers="a:1")
    assert consumer.client_config.servers == ("a:1",)


def test_a_sequence_is_taken_as_given() -> None:
    assert Producer(servers=["a:1", "b:2"]).client_config.servers == ("a:1", "b:2")


def test_the_environment_is_parsed_the_same_way(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POCKETMQ_SERVER", "a:1; b:2,")
    assert default_servers() == ("a:1", "b:2")
    assert Producer().client_config.servers == ("a:1", "b:2")
