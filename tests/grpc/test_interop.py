"""One broker core, two protocols: what the native SDK sends the official client receives,
and the other way round, with ids, tags, keys, properties and message groups intact."""

from __future__ import annotations

import time

from pocketmq.client import Message as NativeMessage
from pocketmq.client.sync import SyncAdmin, SyncProducer, SyncSimpleConsumer
from pocketmq.testing import BrokerProcess

from .conftest import OfficialClients, message, unique, wait_until


def test_native_producer_to_official_consumer(
    official: OfficialClients, broker: BrokerProcess, topic: str, group: str
) -> None:
    with SyncProducer(servers=broker.native) as producer:
        sent = producer.send(
            NativeMessage(
                topic=topic,
                body=b"from native",
                tag="native",
                keys=("k1", "k2"),
                properties={"origin": "sdk"},
            )
        )
        delayed = producer.send(
            NativeMessage(topic=topic, body=b"delayed", delivery_time=time.time() + 1)
        )
    consumer = official.simple(group, topic)
    got: list = []
    wait_until(lambda: got.extend(consumer.receive(8, 30)) or len(got) >= 2, timeout=10)
    by_id = {m.message_id: m for m in got}
    assert set(by_id) == {sent.message_id, delayed.message_id}
    plain = by_id[sent.message_id]
    assert plain.body == b"from native"
    assert plain.tag == "native"
    assert plain.keys == {"k1", "k2"}
    assert plain.properties == {"origin": "sdk"}
    assert not plain.corrupted
    for m in got:
        consumer.ack(m)


def test_official_fifo_producer_to_native_consumer(
    official: OfficialClients, admin: SyncAdmin, broker: BrokerProcess, group: str
) -> None:
    topic = unique("fifo")
    admin.create_topic(topic, queues=2, topic_type="fifo")
    receipt = official.producer(topic).send(
        message(topic, b"ordered", message_group="order-42", tag="t", keys="k")
    )
    consumer = SyncSimpleConsumer(group, topic, servers=broker.native, await_duration=1)
    try:
        got: list = []
        wait_until(lambda: got.extend(consumer.receive(8, 30)) or bool(got), timeout=10)
        [view] = got
        assert view.message_id == receipt.message_id
        assert view.message_group == "order-42"
        assert (view.tag, view.keys) == ("t", ("k",))
        consumer.ack(view)
    finally:
        consumer.close()


def test_a_message_consumed_over_grpc_is_gone_for_native_consumers_of_the_group(
    official: OfficialClients, broker: BrokerProcess, topic: str, group: str
) -> None:
    """Both protocols share the group's pop state and committed offsets."""
    official.producer(topic).send(message(topic, b"once"))
    consumer = official.simple(group, topic)
    got: list = []
    wait_until(lambda: got.extend(consumer.receive(8, 30)) or bool(got))
    consumer.ack(got[0])
    native = SyncSimpleConsumer(group, topic, servers=broker.native, await_duration=0.5)
    try:
        assert native.receive(8, 30) == []
    finally:
        native.close()
