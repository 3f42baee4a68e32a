"""Delivered messages as the stored records a pull answers (docs/remoting.md, "Stored
messages"; ``server/remoting/records.py``), decoded back with the codec's decoder, which follows
apache/rocketmq ``MessageDecoder.decode``."""

from __future__ import annotations

from typing import Any

import msgspec

from pocketmq.broker import Delivered
from pocketmq.protocol.remoting.msgid import decode_offset_msg_id, encode_offset_msg_id
from pocketmq.protocol.remoting.stored import decode_stored
from pocketmq.server.remoting.records import stored_records

STORE_HOST = "10.1.2.3:10911"


def delivered(n: int, body: bytes = b"body", **changes: Any) -> Delivered:
    message = Delivered(
        topic="orders",
        queue_id=2,
        queue_offset=40 + n,
        body=body,
        properties={"UNIQ_KEY": f"id-{n}", "TAGS": "TagA", "KEYS": "k1 k2"},
        born_timestamp=1_700_000_000_000,
        store_timestamp=1_700_000_000_050,
        physical_offset=4096 * (n + 1),
        born_host="192.168.0.7:51000",
    )
    return msgspec.structs.replace(message, **changes)


def test_a_record_carries_what_a_consumer_reads() -> None:
    body, count = stored_records([delivered(0, delivery_attempt=3)], STORE_HOST)
    assert count == 1
    [record] = decode_stored(body)
    assert (record.topic, record.queue_id, record.queue_offset) == ("orders", 2, 40)
    assert record.body == b"body"
    assert record.properties == {"UNIQ_KEY": "id-0", "TAGS": "TagA", "KEYS": "k1 k2"}
    assert record.reconsume_times == 2  # the third delivery
    assert (record.born_host, record.store_host) == ("192.168.0.7:51000", STORE_HOST)
    assert (record.born_timestamp, record.store_timestamp) == (1_700_000_000_000, 1_700_000_000_050)
    assert record.commit_log_offset == 4096
    # the offsetMsgId a client computes from the record names the message's physical offset
    message_id = encode_offset_msg_id(record.store_host, record.commit_log_offset)
    assert decode_offset_msg_id(message_id).commit_log_offset == 4096


def test_the_transaction_id_takes_rocketmq_s_name() -> None:
    message = delivered(0, properties={"UNIQ_KEY": "id-0", "TRANSACTION_ID": "tx-1"})
    [record] = decode_stored(stored_records([message], STORE_HOST)[0])
    assert record.properties == {"UNIQ_KEY": "id-0", "__transactionId__": "tx-1"}


def test_an_answer_holds_what_fits_and_at_least_one_record() -> None:
    messages = [delivered(n, body=bytes(1000)) for n in range(10)]
    body, count = stored_records(messages, STORE_HOST, budget=3500)
    assert count == 3
    assert [r.queue_offset for r in decode_stored(body)] == [40, 41, 42]
    body, count = stored_records([delivered(0, body=bytes(5000))], STORE_HOST, budget=3500)
    assert count == 1  # a message larger than the budget still travels, alone
    assert len(decode_stored(body)) == 1
