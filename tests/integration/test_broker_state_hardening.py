"""Against real broker processes (issue 14, items 7, 9, 10): bad names are refused with a typed
error and never reach a state file, garbled state files do not stop a start, one unstorable
delayed message does not stall the others, and a redrive resends each dead letter once however
it overlaps or is killed."""

from __future__ import annotations

import asyncio
import collections
import time
from pathlib import Path

import pytest

from pocketmq import Message, MessageView
from pocketmq import properties as props
from pocketmq.client import Admin, ClientConfig, Producer, SimpleConsumer, StoredMessage
from pocketmq.errors import BrokerConnectionError, MessageIllegalError
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w
from pocketmq.store import MessageStore, StoreConfig, StoreMessage
from pocketmq.testing import BrokerProcess

from .conftest import FAST_BROKER, create, data_dir, eventually

pytestmark = pytest.mark.integration

STATE_FILES = [
    "offsets.json",
    "pop.json",
    "schedule.json",
    "transactions.json",
    "redrive.json",
    "topics.json",
    "groups.json",
]


async def test_an_offset_commit_naming_a_topic_with_at_is_refused_and_restarts_work(
    tmp_path: Path,
) -> None:
    with BrokerProcess(tmp_path, config=FAST_BROKER, grpc_port=None) as broker:
        await create(broker.address, topic="orders", group="g", queues=1)
        async with Producer(servers=broker.address) as producer:  # commits stop at the end
            await producer.send(Message(topic="orders", body=b"one"))
        async with Admin(servers=broker.address) as admin:  # raw frames: the SDK refuses early
            for topic in ("a@b", "x" * 128):
                with pytest.raises(MessageIllegalError, match="topic name"):
                    await admin._call(
                        broker.address,
                        RequestCode.COMMIT_OFFSET,
                        w.CommitOffsetRequest("g", [w.OffsetEntry(topic, 0, 5)]),
                        w.Empty,
                    )
            await admin._call(
                broker.address,
                RequestCode.COMMIT_OFFSET,
                w.CommitOffsetRequest("g", [w.OffsetEntry("orders", 0, 1)]),
                w.Empty,
            )
        broker.restart()  # offsets.json was saved on shutdown and is read again
        async with Admin(servers=broker.address) as admin:
            [queue] = await admin.queues("orders", "g")
        assert queue.committed_offset == 1


async def test_a_broker_whose_state_files_are_all_garbled_starts_and_serves(
    tmp_path: Path,
) -> None:
    config_dir = tmp_path / "data" / "config"
    config_dir.mkdir(parents=True)
    for name in STATE_FILES:
        (config_dir / name).write_bytes(b"\x00\xffnot json at all {" + name.encode())
    with BrokerProcess(tmp_path, config=FAST_BROKER, grpc_port=None) as broker:
        await create(broker.address, topic="orders", group="g", queues=1)
        async with Producer(servers=broker.address) as producer:
            sent = await producer.send(Message(topic="orders", body=b"still serving"))
        async with SimpleConsumer("g", "orders", servers=broker.address) as consumer:
            [got] = await consumer.receive(1)
        assert got.message_id == sent.message_id
        log = broker.log()
    for name in STATE_FILES:
        [aside] = config_dir.glob(name + ".corrupt-*")
        assert aside.read_bytes().endswith(name.encode())
        assert sum(name in line and "moved aside" in line for line in log.splitlines()) == 1
    assert "Traceback" not in log


def _plant_unstorable_retry(store_dir: Path) -> None:
    """What a broker from before group names were checked left behind: a retry of a group of
    125 characters, due at delay level 1 (its %RETRY% topic would be 132 characters)."""
    store = MessageStore.open(str(store_dir), StoreConfig(min_free_disk_bytes=0))
    try:
        now_ms = int(time.time() * 1000)
        [result] = store.append(
            [
                StoreMessage(
                    topic="%SYS%SCHEDULE",
                    queue_id=0,
                    body=b"poison",
                    properties={
                        props.MESSAGE_ID: "POISON",
                        props.REAL_TOPIC: "%RETRY%" + "g" * 125,
                        props.REAL_QUEUE_ID: "0",
                        props.DELAY_LEVEL: "1",
                    },
                    tag_code=now_ms,
                )
            ]
        )
        assert result.status.stored
    finally:
        store.close()


async def _receive_delayed(broker: BrokerProcess, level_2: bool = True) -> list[MessageView]:
    """A delivery-time message and (raw frame: the SDK has no levels) a level-2 message."""
    async with Producer(servers=broker.address) as producer:
        for delay in (0.3, 1.0):
            await producer.send(
                Message(topic="later", body=b"timer", delivery_time=time.time() + delay)
            )
    if level_2:
        async with Admin(servers=broker.address) as admin:
            wire = w.InboundMessage("later", b"level-2", {props.DELAY_LEVEL: "2"})
            reply = await admin._call(
                broker.address, RequestCode.SEND, w.SendRequest([wire]), w.SendResponse
            )
            assert reply.results[0].code == 0
    got: list[MessageView] = []
    async with SimpleConsumer("g", "later", servers=broker.address, await_duration=0.5) as c:
        deadline = time.monotonic() + 10
        while len(got) < 2 + level_2 and time.monotonic() < deadline:
            batch = await c.receive(8)
            for message in batch:
                await c.ack(message)
            got += batch
    return got


async def test_an_unstorable_delayed_message_is_parked_and_never_stalls_the_others(
    tmp_path: Path,
) -> None:
    with BrokerProcess(tmp_path, config=FAST_BROKER, grpc_port=None, flush="sync") as broker:
        await create(broker.address, topic="later", group="g", queues=1)
        broker.stop()
        _plant_unstorable_retry(data_dir(broker) / "store")
        broker.restart()
        got = await _receive_delayed(broker)
        assert sorted(m.body for m in got) == [b"level-2", b"timer", b"timer"]
        async with Admin(servers=broker.address) as admin:
            [status] = await admin.broker_status()
        assert status.counters.get("schedule_parked") == 1
        broker.restart()  # the parked message is past: nothing re-stalls, nothing re-parks
        got = await _receive_delayed(broker, level_2=False)
        assert [m.body for m in got] == [b"timer", b"timer"]
        log = broker.log()
    assert sum("POISON" in line and "parked" in line for line in log.splitlines()) == 1
    assert "Traceback" not in log


async def _dead_letters(broker: BrokerProcess, count: int) -> list[int]:
    """``count`` dead letters of group g from topic orders, fast: a retry-topic send that asks
    for the DLQ (delay level -1) is dead-lettered by the broker at once."""
    await create(broker.address, topic="orders", group="g", queues=1)
    async with Admin(servers=broker.address) as admin:
        for start in range(0, count, 256):
            wires = [
                w.InboundMessage(
                    "%RETRY%g",
                    b"dead %d" % n,
                    {
                        props.MESSAGE_ID: f"M{n}",
                        props.RETRY_TOPIC: "orders",
                        props.DELAY_LEVEL: "-1",
                    },
                )
                for n in range(start, min(count, start + 256))
            ]
            reply = await admin._call(
                broker.address, RequestCode.SEND, w.SendRequest(wires), w.SendResponse
            )
            assert {r.code for r in reply.results} == {0}
        letters = await admin.dead_letters("g")
    assert len(letters) == count
    return [letter.dlq_offset for letter in letters]


async def _copies(broker: BrokerProcess) -> collections.Counter[str]:
    async with Admin(servers=broker.address) as admin:
        [queue] = await admin.queues("orders")
        found: list[StoredMessage] = []
        while len(found) < queue.max_offset:
            found += await admin.browse(
                "orders", address=broker.address, offset=len(found), max_count=1024
            )
    return collections.Counter(m.message_id for m in found)


async def test_concurrent_redrives_resend_each_dead_letter_once(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path, config=FAST_BROKER, grpc_port=None, flush="sync") as broker:
        offsets = await _dead_letters(broker, 20)
        async with Admin(servers=broker.address) as one, Admin(servers=broker.address) as two:
            first, second = await asyncio.gather(
                one.redrive(broker.address, "g", offsets), two.redrive(broker.address, "g", offsets)
            )
        statuses = collections.Counter(i.status for i in first.items + second.items)
        assert statuses == {"resent": 20, "already": 20}
        assert await _copies(broker) == {f"M{n}": 1 for n in range(20)}


async def test_a_redrive_killed_half_way_resumes_without_resending(tmp_path: Path) -> None:
    count = 2000
    with BrokerProcess(tmp_path, config=FAST_BROKER, grpc_port=None, flush="sync") as broker:
        offsets = await _dead_letters(broker, count)
        async with Admin(servers=broker.address) as admin, Admin(servers=broker.address) as peek:
            running = asyncio.ensure_future(admin.redrive(broker.address, "g", offsets))

            async def some_resent() -> bool:
                [queue] = await peek.queues("orders")
                return queue.max_offset >= 100

            await eventually(some_resent, timeout=30, interval=0.01)
            broker.kill()  # SIGKILL in the middle of the redrive
            with pytest.raises(BrokerConnectionError):  # its connection broke
                await running
        broker.restart()
        resent_before = sum((await _copies(broker)).values())
        assert 100 <= resent_before < count, "the redrive was not killed half-way"
        patient = ClientConfig(servers=(broker.address,), request_timeout=60)
        async with Admin(client=patient) as admin:  # one request of 2000 fsynced resends
            reply = await admin.redrive(broker.address, "g", offsets)
        statuses = collections.Counter(i.status for i in reply.items)
        copies = await _copies(broker)
        assert set(copies) == {f"M{n}" for n in range(count)}  # every dead letter resent
        # Resent once each, except that a kill between a resend and its audit record (the one
        # window: docs/semantics.md, "overlapping or interrupted redrives") resends that one
        # message again, with the same id.
        twice = [message_id for message_id, n in copies.items() if n > 1]
        assert len(twice) <= 1
        assert sum(copies.values()) == count + len(twice)
        already = resent_before - len(twice)
        assert statuses == {"already": already, "resent": count - already}
