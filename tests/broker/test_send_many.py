"""Several senders' batches stored in one append (``Broker.send_now_many``, docs/design.md
"Sending"): each batch is answered as if sent alone, a bad message or an oversize batch is
refused alone, and the batches reach the store in the order given."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from pocketmq import properties as props
from pocketmq.broker import Broker, BrokerConfig, InboundMessage, SendBatch
from pocketmq.broker.topics import PERM_READ, PERM_WRITE
from pocketmq.errors import Code, InvalidArgumentError, ServiceUnavailableError
from pocketmq.store import FlushMode, StoreConfig


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    broker = Broker(BrokerConfig(data_dir=str(tmp_path), max_batch_messages=3))
    await broker.start()
    broker.create_topic("T", queues=1)
    yield broker
    await broker.close()


def _batch(*bodies: bytes, topic: str = "T", host: str = "") -> SendBatch:
    return SendBatch([InboundMessage(topic, body) for body in bodies], born_host=host)


async def test_each_batch_gets_its_own_outcomes_and_the_store_keeps_their_order(
    broker: Broker,
) -> None:
    appends: list[int] = []
    append = broker.store.append

    def counting_append(messages: list) -> list:  # type: ignore[type-arg]
        appends.append(len(messages))
        return append(messages)

    broker.store.append = counting_append  # type: ignore[method-assign]
    answers = broker.send_now_many(
        [
            _batch(b"a1", b"a2", host="10.0.0.1:1"),
            _batch(b"x", topic="Missing"),  # refused message by message
            _batch(b"1", b"2", b"3", b"4"),  # over max_batch_messages: refused whole
            _batch(b"b1", b"", host="10.0.0.2:2"),  # an empty body breaks the contract
            _batch(b"c1"),
        ]
    )
    assert appends == [4]  # one append for every message that could be stored
    first, missing, oversize, second, third = answers
    assert isinstance(oversize, InvalidArgumentError)
    assert not isinstance(first, Exception)
    assert not isinstance(missing, Exception)
    assert not isinstance(second, Exception)
    assert not isinstance(third, Exception)
    assert [o.code for o in first[0]] == [Code.SUCCESS, Code.SUCCESS]
    assert [o.code for o in missing[0]] == [Code.TOPIC_NOT_EXIST]
    assert [o.code for o in second[0]] == [Code.SUCCESS, Code.MESSAGE_ILLEGAL]
    assert second[0][1].rule  # names the contract rule it broke
    assert [o.queue_offset for o in first[0] + second[0][:1] + third[0]] == [0, 1, 2, 3]
    stored = broker.store.get_messages("T", 0, 0, max_count=10).messages
    assert [m.body for m in stored] == [b"a1", b"a2", b"b1", b"c1"]
    assert stored[0].born_host.startswith("10.0.0.1")
    assert stored[2].born_host.startswith("10.0.0.2")
    ids = [o.message_id for o in first[0] + second[0][:1] + third[0]]
    assert ids == [m.properties[props.MESSAGE_ID] for m in stored]


async def test_a_refusal_of_the_broker_answers_every_batch(broker: Broker) -> None:
    broker._shared.closed = True  # shutting down: nothing may be stored
    answers = broker.send_now_many([_batch(b"a"), _batch(b"b")])
    assert all(isinstance(a, ServiceUnavailableError) for a in answers)
    broker._shared.closed = False
    assert broker.store.max_offset("T", 0) == 0


async def test_a_topic_changed_between_sends_is_checked_again(broker: Broker) -> None:
    """What a send call found about a topic is reused by the next call only while the topic
    manager holds the same config: made read-only, retyped, deleted or auto-created, the next
    send sees the change (broker/sending.py, ``SendPath._prepare``)."""

    def codes(batch: SendBatch) -> list[Code]:
        [answer] = broker.send_now_many([batch])
        assert not isinstance(answer, Exception)
        return [o.code for o in answer[0]]

    assert codes(_batch(b"a")) == [Code.SUCCESS]
    broker.update_topic("T", perm=PERM_READ)
    assert codes(_batch(b"b")) == [Code.NO_PERMISSION]
    broker.update_topic("T", perm=PERM_READ | PERM_WRITE)
    assert codes(_batch(b"c")) == [Code.SUCCESS]
    broker.update_topic("T", topic_type="fifo")  # a FIFO topic takes only grouped messages
    assert codes(_batch(b"d")) == [Code.MESSAGE_ILLEGAL]
    grouped = InboundMessage("T", b"e", {props.MESSAGE_GROUP: "g"})
    assert codes(SendBatch([grouped])) == [Code.SUCCESS]
    broker.delete_topic("T")
    assert codes(_batch(b"f")) == [Code.TOPIC_NOT_EXIST]
    broker.create_topic("T", queues=1)
    assert codes(_batch(b"g")) == [Code.SUCCESS]


@pytest.mark.parametrize("flush", [FlushMode.SYNC, FlushMode.ASYNC])
async def test_each_batch_settles_at_the_end_of_its_own_records(
    tmp_path: Path, flush: FlushMode
) -> None:
    """With a sync flush each batch of one call waits for the log offset its own stored
    records reach (a refused message adds nothing, a batch of refused ones waits for none); a
    delayed message is answered with its real topic and a recall handle; without a wait every
    batch answers 0 (``SendPath._store``: one pass fills the outcomes and the offsets)."""
    broker = Broker(BrokerConfig(data_dir=str(tmp_path), store=StoreConfig(flush_mode=flush)))
    await broker.start()
    try:
        broker.create_topic("T", queues=1)
        delayed = InboundMessage("T", b"later", {props.DELAY_LEVEL: "1"})
        answers = broker.send_now_many(
            [
                _batch(b"a1", b"", b"a2"),
                _batch(b""),  # refused whole, message by message
                SendBatch([delayed]),
                _batch(b"c1"),
            ]
        )
        first, refused, held, last = answers
        assert not isinstance(first, Exception)
        assert not isinstance(refused, Exception)
        assert not isinstance(held, Exception)
        assert not isinstance(last, Exception)
        assert [o.code for o in first[0]] == [Code.SUCCESS, Code.MESSAGE_ILLEGAL, Code.SUCCESS]
        assert [o.code for o in refused[0]] == [Code.MESSAGE_ILLEGAL]
        [later] = held[0]
        assert (later.code, later.topic, later.queue_offset) == (Code.SUCCESS, "T", -1)
        assert later.recall_handle
        assert later.message_id
        [c1] = last[0]
        end = broker.store.statistics().write_position
        if flush is FlushMode.SYNC:
            assert (first[1], refused[1], held[1], last[1]) == (
                later.physical_offset,
                0,
                c1.physical_offset,
                end,
            )
        else:
            assert (first[1], refused[1], held[1], last[1]) == (0, 0, 0, 0)
        assert [o.queue_offset for o in first[0]] == [0, -1, 1]
        assert c1.queue_offset == 2
    finally:
        await broker.close()
