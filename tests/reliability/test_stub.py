"""Stub and log rows: one mapping between the records and the table columns for every reader."""

from __future__ import annotations

from datetime import datetime

from pocketmq.client import Message
from pocketmq.reliability.schema import LOG_COLUMNS, STUB_COLUMNS
from pocketmq.reliability.stub import LogEntry, LogStatus, MessageStub, StubStatus

T0 = datetime(2026, 11, 22, 12, 0, 0)


def row(**fields: object) -> dict[str, object]:
    values: dict[str, object] = {
        "message_id": "id-1",
        "topic": "orders",
        "tag": "paid",
        "keys": "order-1 customer-9",
        "content": bytearray(b"x"),  # what Spark hands out for a binary column
        "status": "UNKNOWN",
        "send_count": 2,
        "broker_name": "broker-a",
        "queue_id": 3,
        "queue_offset": 41,
        "next_resend_at": T0,
        "created_at": T0,
        "updated_at": T0,
        "last_error": None,
        "max_logged_offset": 99,  # a column of the pipeline's resend list, not of the table
    }
    values.update(fields)
    return values


def test_a_stub_row_becomes_the_message_it_resends() -> None:
    stub = MessageStub.from_row(row())
    assert stub.status is StubStatus.UNKNOWN
    assert stub.content == b"x"
    assert stub.to_message() == Message(
        topic="orders", body=b"x", tag="paid", keys=("order-1", "customer-9"), message_id="id-1"
    )
    assert MessageStub.from_row(row(keys=None)).keys == ()
    assert MessageStub.from_row(row(keys="")).to_message().keys == ()


def test_stub_rows_round_trip_column_by_column() -> None:
    stub = MessageStub.from_row(row())
    assert tuple(stub.to_row()) == STUB_COLUMNS
    assert MessageStub.from_row(stub.to_row()) == stub
    assert MessageStub.from_row(row(keys=None)).to_row()["keys"] is None


def test_log_rows_become_entries() -> None:
    values = {
        "consumer_group": "billing",
        "message_id": "id-1",
        "topic": "orders",
        "broker_name": "broker-a",
        "queue_id": 0,
        "queue_offset": 7,
        "status": "CONSUMED",
        "receive_count": 2,
        "created_at": T0,
        "consumed_at": T0,
    }
    assert tuple(values) == LOG_COLUMNS
    entry = LogEntry.from_row(values)
    assert (entry.status, entry.receive_count) == (LogStatus.CONSUMED, 2)
