"""Attempt history records: up to 32 attempts to a store record, found under each message id;
records written before packing (one attempt each) still read."""

from __future__ import annotations

from pathlib import Path

import msgspec

from pocketmq import properties as props
from pocketmq.broker import Broker, BrokerConfig
from pocketmq.broker.history import HISTORY_TOPIC, decode_attempts
from pocketmq.client.admin_types import DeliveryAttempt, StoredMessage
from pocketmq.model import Attempt
from pocketmq.store import StoreMessage


def _success(message_id: str, attempt: int = 1) -> Attempt:
    return Attempt(message_id, "g", "orders", attempt, "c-1", "SUCCESS", "", 1_000, 2_000)


async def test_attempts_are_packed_32_to_a_record_and_each_is_found_by_its_id(
    tmp_path: Path,
) -> None:
    broker = Broker(BrokerConfig(data_dir=str(tmp_path)))
    await broker.start()
    try:
        # 100 messages, two attempts of M00000007 in different records
        broker.report_outcomes("g", "", [_success(f"M{n:08d}") for n in range(100)])
        broker.history.flush()
        broker.report_outcomes("g", "", [_success("M00000007", attempt=2)])
        assert [a.attempt for a in broker.message_history("M00000007")] == [1, 2]
        assert broker.store.max_offset(HISTORY_TOPIC, 0) == 5  # 32 + 32 + 32 + 4, then 1
        for n in (0, 31, 32, 99):
            [found] = broker.message_history(f"M{n:08d}")
            assert found == _success(f"M{n:08d}")
        [record] = broker.browse(HISTORY_TOPIC, 0, 0, max_count=1)
        assert len(decode_attempts(record.body)) == 32
        assert len(record.properties[props.KEYS].split()) == 32
    finally:
        await broker.close()


async def test_a_record_written_before_packing_still_reads(tmp_path: Path) -> None:
    broker = Broker(BrokerConfig(data_dir=str(tmp_path)))
    await broker.start()
    try:
        old = msgspec.msgpack.encode(_success("OLD1"))  # one attempt, the format before packing
        broker.store.append([StoreMessage(HISTORY_TOPIC, 0, old, properties={props.KEYS: "OLD1"})])
        broker.report_outcomes("g", "", [_success("OLD1", attempt=2)])
        assert [a.attempt for a in broker.message_history("OLD1")] == [1, 2]
        assert decode_attempts(old) == [_success("OLD1")]
    finally:
        await broker.close()


def test_the_admin_client_reads_both_record_formats() -> None:
    def stored(body: bytes) -> StoredMessage:
        return StoredMessage(topic=HISTORY_TOPIC, queue_id=0, queue_offset=0, body=body)

    one = stored(msgspec.msgpack.encode(_success("A")))
    packed = stored(msgspec.msgpack.encode([_success("A"), _success("B", attempt=3)]))
    assert [a.message_id for a in DeliveryAttempt.from_ledger(one)] == ["A"]
    assert [(a.message_id, a.attempt) for a in DeliveryAttempt.from_ledger(packed)] == [
        ("A", 1),
        ("B", 3),
    ]
