"""The native request handlers by family (server/native/handlers/): each family is importable and
answers alone, and the merged table is the families' tables without overlap."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pocketmq.broker import Broker, BrokerConfig, GroupConfig, InboundMessage, SendBatch
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w
from pocketmq.server.native.handlers import (
    AdminHandlers,
    ClusterHandlers,
    ConsumeHandlers,
    ProduceHandlers,
    SessionHandlers,
    broker_handlers,
)

NO_CONNECTION: Any = None  # these handlers do not look at the connection


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    broker = Broker(BrokerConfig(data_dir=str(tmp_path), broker_name="b1"))
    yield broker
    await broker.close()


async def _unused() -> Any:
    raise AssertionError("not asked")


def _tables(broker: Broker) -> list[dict[RequestCode, Any]]:
    session = SessionHandlers(broker)
    return [
        session.table(),
        ProduceHandlers(broker, session.may_relay).table(),
        ConsumeHandlers(broker).table(),
        AdminHandlers(broker, _unused).table(),
        ClusterHandlers(broker, lambda topic: _unused(), _unused).table(),
    ]


async def test_the_families_share_no_request_code_and_make_the_whole_table(broker: Broker) -> None:
    tables = _tables(broker)
    codes = [code for table in tables for code in table]
    assert len(codes) == len(set(codes)), "a request code answered by two families"
    merged = broker_handlers(broker, lambda topic: _unused(), _unused, _unused)
    assert set(merged) == set(codes)
    assert {RequestCode.SEND, RequestCode.POP, RequestCode.CREATE_TOPIC} <= set(merged)


async def test_the_produce_family_stores_a_read_s_sends_alone(broker: Broker) -> None:
    broker.create_topic("orders", queues=1)
    produce = ProduceHandlers(broker, lambda conn: False)
    batch = SendBatch([InboundMessage("orders", b"x"), InboundMessage("orders", b"y")])
    [answer] = produce.send_joined([batch])
    assert isinstance(answer, w.SendResponse)
    assert [r.queue_offset for r in answer.results] == [0, 1]
    assert answer.broker_name == "b1"


async def test_sends_of_one_read_are_joined_into_one_append(broker: Broker) -> None:
    """The connection joins requests whose runner is the same object (connection.py)."""
    produce = ProduceHandlers(broker, lambda conn: False)
    conn: Any = SimpleNamespace(producing=False, remote="10.0.0.1:5000")
    first = produce.send(conn, w.SendRequest([w.InboundMessage("orders", b"x")], "p"))
    second = produce.send(conn, w.SendRequest([w.InboundMessage("orders", b"y")], "p"))
    assert first.run is second.run
    assert first.item.born_host == "10.0.0.1:5000"


async def test_the_admin_and_consume_families_answer_alone(broker: Broker) -> None:
    admin = AdminHandlers(broker, _unused)
    broker.create_topic("orders", queues=2)
    listed = admin.list_topics(NO_CONNECTION, w.Empty())
    assert [t.name for t in listed.topics if t.name == "orders"] == ["orders"]
    consume = ConsumeHandlers(broker)
    broker.create_group(GroupConfig("g"))
    answer = consume.query_offset(NO_CONNECTION, w.QueryOffsetRequest("g", "orders", 0))
    assert answer.offset == 0
