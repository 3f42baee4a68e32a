"""Issue 31, the broker's producer side over remoting, frame by frame against a real broker:
``SEND_MESSAGE`` (10) and ``SEND_MESSAGE_V2`` (310) in JSON and binary headers, compressed
bodies, ``SEND_BATCH_MESSAGE`` (320), pipelined sends, refusals; each message is then read back
by the pocketmq SDK with its body, tag, keys, properties and id (docs/remoting.md, "Broker,
producer side", "Messages", "Batches").

The frames follow RocketMQ's documented formats (apache/rocketmq 5.3.3):
``SendMessageRequestHeader``/``SendMessageRequestHeaderV2`` (the one-letter names),
``SendMessageResponseHeader`` (``msgId``, ``queueId``, ``queueOffset``, ``transactionId``),
``MessageDecoder.messageProperties2String`` (``name\\u0001value\\u0002``),
``MessageDecoder.encodeMessages``/``MessageBatch.encode`` (the batch body),
``MessageSysFlag`` (bit 0 compressed, bits 8-10 the algorithm) and
``MessageDecoder.createMessageId``/``decodeMessageId`` (the 16-byte ``offsetMsgId``).
"""

from __future__ import annotations

import time
import zlib

import pytest

from pocketmq.client.sync import SyncAdmin, SyncSimpleConsumer
from pocketmq.protocol.remoting import RequestCode as RC
from pocketmq.protocol.remoting import ResponseCode as R
from pocketmq.protocol.remoting.batch import BatchMessage, encode_batch
from pocketmq.protocol.remoting.msgid import decode_offset_msg_id
from pocketmq.protocol.remoting.properties import encode_properties
from pocketmq.testing import BrokerProcess

from ..integration.conftest import FAST_BROKER, unique
from ..scratch import scratch_broker
from .raw import Session

pytestmark = pytest.mark.integration


def _topic(broker: BrokerProcess, queues: int = 2) -> tuple[str, str]:
    topic, group = unique("rp-topic"), unique("rp-group")
    with SyncAdmin(servers=broker.address) as admin:
        admin.create_topic(topic, queues=queues)
        admin.create_group(group)
    return topic, group


def _v2(
    topic: str, properties: dict[str, str], *, queue: int = 0, sys_flag: int = 0
) -> dict[str, str]:
    return {"a": "PG", "b": topic, "c": "TBW102", "d": "4", "e": str(queue), "f": str(sys_flag),
            "g": "1700000000000", "h": "0", "i": encode_properties(properties), "j": "0",
            "k": "false", "m": "false"}  # fmt: skip


def _receive(broker: BrokerProcess, topic: str, group: str, count: int) -> list:  # type: ignore[type-arg]
    got: list = []  # type: ignore[type-arg]
    with SyncSimpleConsumer(group, topic, servers=broker.address, await_duration=2.0) as consumer:
        for _ in range(20):
            batch = consumer.receive(32)
            got += batch
            for message in batch:
                consumer.ack(message)
            if len(got) >= count:
                break
    return got


def test_send_v2_is_stored_and_read_back_by_the_sdk(broker: BrokerProcess) -> None:
    topic, group = _topic(broker)
    properties = {"UNIQ_KEY": "7F0000010001B4AAC2E1438E6F5A0000", "TAGS": "TagA",
                  "KEYS": "order-1 order-2", "WAIT": "true", "color": "blue"}  # fmt: skip
    with Session(broker.address) as client:
        answer = client.call(RC.SEND_MESSAGE_V2, _v2(topic, properties, queue=1), b"hello")
    assert answer.code == R.SUCCESS, answer.remark
    fields = answer.ext_fields
    assert fields["queueId"] == "1"
    assert fields["queueOffset"] == "0"
    assert fields["MSG_REGION"] == "DefaultRegion"
    assert fields["TRACE_ON"] == "true"
    where = decode_offset_msg_id(fields["msgId"])  # 16 bytes: the store host and offset
    assert f"{where.host}:{where.port}" == broker.address
    assert where.commit_log_offset >= 0
    [message] = _receive(broker, topic, group, 1)
    assert message.body == b"hello"
    assert message.tag == "TagA"
    assert message.keys == ("order-1", "order-2")
    assert message.message_id == properties["UNIQ_KEY"]
    assert message.properties.get("color") == "blue"
    assert message.queue_id == 1


def test_send_message_with_long_names_in_a_binary_header_and_a_compressed_body(
    broker: BrokerProcess,
) -> None:
    """``SEND_MESSAGE`` (10) names its fields in full; the binary (``ROCKETMQ``) header
    serialization; a body zlib-compressed as the Java producer compresses bodies over 4 KiB
    (``sysFlag`` bit 0, algorithm bits 8-10 = 3, ZLIB)."""
    topic, group = _topic(broker)
    body = b"0123456789abcdef" * 1024
    fields = {"producerGroup": "PG", "topic": topic, "defaultTopic": "TBW102",
              "defaultTopicQueueNums": "4", "queueId": "0", "sysFlag": str(1 | 3 << 8),
              "bornTimestamp": "1700000000000", "flag": "0",
              "properties": encode_properties({"TAGS": "big"})}  # fmt: skip
    with Session(broker.address) as client:
        answer = client.call(RC.SEND_MESSAGE, fields, zlib.compress(body, 5), binary=True)
        assert answer.serialize_type == 1
        assert answer.code == R.SUCCESS, answer.remark
        bomb = zlib.compress(bytes(64 << 20), 9)  # inflates past max_message_size
        refused = client.call(RC.SEND_MESSAGE, {**fields, "properties": ""}, bomb)
        assert refused.code == R.MESSAGE_ILLEGAL
        assert "inflates past" in (refused.remark or "")
    [message] = _receive(broker, topic, group, 1)
    assert message.body == body
    assert message.tag == "big"


def test_a_batch_is_stored_as_its_messages(broker: BrokerProcess) -> None:
    topic, group = _topic(broker)
    batch = [BatchMessage(f"m{n}".encode(), {"UNIQ_KEY": f"ID{n:030d}", "TAGS": f"t{n}",
                                             "KEYS": f"k{n}"}) for n in range(3)]  # fmt: skip
    with Session(broker.address) as client:
        answer = client.call(RC.SEND_BATCH_MESSAGE, {**_v2(topic, {}), "m": "true"},
                             encode_batch(batch))  # fmt: skip
        assert answer.code == R.SUCCESS, answer.remark
        ids = answer.ext_fields["msgId"].split(",")
        assert len(ids) == 3
        assert answer.ext_fields["queueOffset"] == "0"
        offsets = [decode_offset_msg_id(i).commit_log_offset for i in ids]
        assert offsets == sorted(offsets)
        assert len(set(offsets)) == 3
        corrupt = client.call(RC.SEND_BATCH_MESSAGE, {**_v2(topic, {}), "m": "true"},
                              encode_batch(batch)[:-3])  # fmt: skip
        assert corrupt.code == R.MESSAGE_ILLEGAL
    got = sorted(_receive(broker, topic, group, 3), key=lambda m: m.queue_offset)
    assert [(m.body, m.tag, m.keys, m.message_id) for m in got] == [
        (f"m{n}".encode(), f"t{n}", (f"k{n}",), f"ID{n:030d}") for n in range(3)
    ]


def test_pipelined_sends_are_answered_each_in_order_of_the_queue(broker: BrokerProcess) -> None:
    """Sends one read brings are stored in one append (as native sends are): each answered by
    its opaque, their queue offsets in arrival order."""
    topic, _ = _topic(broker, queues=1)
    with Session(broker.address) as client:
        sent = client.send_many(
            [(RC.SEND_MESSAGE_V2, _v2(topic, {"TAGS": "p"}), b"x%d" % n) for n in range(50)]
        )
        offsets = [int(client.answer(opaque).ext_fields["queueOffset"]) for opaque in sent]
    assert offsets == list(range(50))


def test_refusals_carry_rocketmq_s_codes(broker: BrokerProcess) -> None:
    topic, _ = _topic(broker)
    with Session(broker.address) as client:
        missing = client.call(RC.SEND_MESSAGE_V2, _v2(unique("nowhere"), {}), b"x")
        assert missing.code == R.TOPIC_NOT_EXIST
        no_topic = client.call(RC.SEND_MESSAGE_V2, {"a": "PG"}, b"x")
        assert no_topic.code == R.SYSTEM_ERROR
        assert "'b'" in (no_topic.remark or "")  # SEND_MESSAGE_V2's name for the topic
        bad_queue = client.call(RC.SEND_MESSAGE_V2, _v2(topic, {}, queue=9), b"x")
        assert bad_queue.code == R.MESSAGE_ILLEGAL
        lz4 = client.call(RC.SEND_MESSAGE_V2, _v2(topic, {}, sys_flag=1 | 1 << 8), b"x")
        assert lz4.code == R.MESSAGE_ILLEGAL
        assert "LZ4" in (lz4.remark or "")


def test_delay_level_and_ali_ons_delivery_time_hold_a_message_until_due(
    broker: BrokerProcess,
) -> None:
    """``DELAY`` (a level: the suite's broker has 0.1 s steps, level 5 = 0.5 s) and ali-ons'
    ``__STARTDELIVERTIME`` (epoch ms): answered at once with queue offset -1 (the message is
    held), delivered when due."""
    topic, group = _topic(broker, queues=1)
    due = int(time.time() * 1000) + 1500
    with Session(broker.address) as client:
        for properties in ({"DELAY": "5", "TAGS": "level"},
                           {"__STARTDELIVERTIME": str(due), "TAGS": "timed"}):  # fmt: skip
            answer = client.call(RC.SEND_MESSAGE_V2, _v2(topic, properties), b"later")
            assert answer.code == R.SUCCESS, answer.remark
            assert answer.ext_fields["queueOffset"] == "-1"
    sent_at = time.time()
    got = _receive(broker, topic, group, 2)
    assert sorted(m.tag for m in got) == ["level", "timed"]
    timed = next(m for m in got if m.tag == "timed")
    assert "__STARTDELIVERTIME" not in timed.properties
    assert timed.store_timestamp >= due - 100  # stored in its queue when due, not before
    assert time.time() - sent_at >= 0.4


def test_flow_control_is_system_busy(tmp_path_factory: pytest.TempPathFactory) -> None:
    """A queue past its backlog cap refuses sends as flow control (seed 004): remoting's
    ``SYSTEM_BUSY`` (2), which RocketMQ's producers retry on another broker."""
    config = {"broker": {**FAST_BROKER["broker"], "max_queue_backlog": 2},
              "store": FAST_BROKER["store"]}  # fmt: skip
    with scratch_broker(tmp_path_factory, "remoting-busy", config=config,
                        grpc_port=None) as busy:  # fmt: skip
        topic, group = _topic(busy, queues=1)
        with Session(busy.address) as client:
            committed = client.call(
                RC.UPDATE_CONSUMER_OFFSET,
                {"consumerGroup": group, "topic": topic, "queueId": "0", "commitOffset": "0"},
            )
            assert committed.code == R.SUCCESS, committed.remark
            codes = [client.call(RC.SEND_MESSAGE_V2, _v2(topic, {}), b"x").code for _ in range(3)]
    assert codes == [R.SUCCESS, R.SUCCESS, R.SYSTEM_BUSY]
