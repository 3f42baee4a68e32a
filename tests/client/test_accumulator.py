"""The producer's batching (client/producer/accumulator.py, docs/semantics.md "Producer
batching"): adaptive by default — a lone send leaves at once, sends that arrive while one of
their topic is in flight leave together when it returns — and timed with a linger."""

from __future__ import annotations

import asyncio

from pocketmq.client import Message, Producer
from pocketmq.client.message import SendResult
from pocketmq.client.producer.accumulator import Accumulator
from pocketmq.client.producer.config import ProducerConfig
from pocketmq.protocol import structs as w


class FakeBroker:
    """Records each request; holds it until told to answer."""

    def __init__(self) -> None:
        self.requests: list[list[bytes]] = []
        self.gates: list[asyncio.Event] = []

    async def send_batch(self, topic: str, wires: list[w.InboundMessage]) -> list[SendResult]:
        self.requests.append([wire.body for wire in wires])
        gate = asyncio.Event()
        self.gates.append(gate)
        await gate.wait()
        return [
            SendResult(
                message_id=f"id-{wire.body.decode()}",
                topic=topic,
                queue_id=0,
                queue_offset=n,
                broker_name="b",
            )
            for n, wire in enumerate(wires)
        ]


def _wire(body: str) -> w.InboundMessage:
    return w.InboundMessage("orders", body.encode())


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_lone_send_leaves_at_once_and_what_waits_leaves_together() -> None:
    broker = FakeBroker()
    accumulator = Accumulator(ProducerConfig(), broker.send_batch)
    first = asyncio.ensure_future(accumulator.add(_wire("1")))
    await _settle()
    assert broker.requests == [[b"1"]]  # no timer, no waiting for company
    waiting = [asyncio.ensure_future(accumulator.add(_wire(str(n)))) for n in range(2, 6)]
    await _settle()
    assert broker.requests == [[b"1"]]  # they wait for the one in flight
    broker.gates[0].set()
    assert (await first).message_id == "id-1"
    await _settle()
    assert broker.requests == [[b"1"], [b"2", b"3", b"4", b"5"]]  # one request for the four
    broker.gates[1].set()
    results = await asyncio.gather(*waiting)
    assert [r.message_id for r in results] == ["id-2", "id-3", "id-4", "id-5"]
    assert not accumulator.in_flight or all(t.done() for t in accumulator.in_flight)


async def test_a_full_batch_does_not_wait_for_the_one_in_flight() -> None:
    broker = FakeBroker()
    accumulator = Accumulator(ProducerConfig(max_batch=3), broker.send_batch)
    tasks = [asyncio.ensure_future(accumulator.add(_wire(str(n)))) for n in range(1, 5)]
    await _settle()
    assert broker.requests == [[b"1"], [b"2", b"3", b"4"]]
    for gate in broker.gates:
        gate.set()
    assert len(await asyncio.gather(*tasks)) == 4


async def test_linger_holds_even_a_lone_send_until_the_timer() -> None:
    broker = FakeBroker()
    accumulator = Accumulator(ProducerConfig(linger=0.05), broker.send_batch)
    task = asyncio.ensure_future(accumulator.add(_wire("1")))
    await _settle()
    assert broker.requests == []
    await asyncio.sleep(0.1)
    assert broker.requests == [[b"1"]]
    broker.gates[0].set()
    assert (await task).message_id == "id-1"


async def test_a_failed_batch_fails_each_of_its_sends_and_the_next_still_leaves() -> None:
    calls: list[list[bytes]] = []
    release = asyncio.Event()

    async def failing(topic: str, wires: list[w.InboundMessage]) -> list[SendResult]:
        calls.append([wire.body for wire in wires])
        await release.wait()
        raise ConnectionError("broker gone")

    accumulator = Accumulator(ProducerConfig(), failing)
    first = asyncio.ensure_future(accumulator.add(_wire("1")))
    await _settle()
    others = [asyncio.ensure_future(accumulator.add(_wire(str(n)))) for n in (2, 3)]
    await _settle()
    release.set()
    outcomes = await asyncio.gather(first, *others, return_exceptions=True)
    assert all(isinstance(o, ConnectionError) for o in outcomes)
    assert calls == [[b"1"], [b"2", b"3"]]


async def test_a_lone_send_is_made_by_its_callers_own_task_and_a_flush_waits_for_it() -> None:
    broker = FakeBroker()
    senders: list[asyncio.Task[object] | None] = []
    send_batch = broker.send_batch

    async def recording(topic: str, wires: list[w.InboundMessage]) -> list[SendResult]:
        senders.append(asyncio.current_task())
        return await send_batch(topic, wires)

    accumulator = Accumulator(ProducerConfig(), recording)
    caller = asyncio.ensure_future(accumulator.add(_wire("1")))
    await _settle()
    assert senders == [caller]  # no task of its own: one event-loop turn less per send
    flushed = asyncio.ensure_future(asyncio.gather(*accumulator.in_flight))
    await _settle()
    assert not flushed.done()  # a flush waits for the lone send in flight
    broker.gates[0].set()
    await flushed
    assert (await caller).message_id == "id-1"
    assert not accumulator.in_flight


async def test_a_cancelled_lone_send_lets_what_waited_behind_it_leave() -> None:
    broker = FakeBroker()
    accumulator = Accumulator(ProducerConfig(), broker.send_batch)
    first = asyncio.ensure_future(accumulator.add(_wire("1")))
    await _settle()
    behind = asyncio.ensure_future(accumulator.add(_wire("2")))
    await _settle()
    first.cancel()
    await _settle()
    assert first.cancelled()
    assert broker.requests == [[b"1"], [b"2"]]  # the one waiting left when the first ended
    broker.gates[1].set()
    assert (await behind).message_id == "id-2"
    await _settle()  # ``behind`` is the message's own future, set before its batch task ends
    assert not accumulator.in_flight


async def test_a_waiter_cancelled_on_a_lone_send_does_not_jam_its_topic() -> None:
    broker = FakeBroker()
    accumulator = Accumulator(ProducerConfig(), broker.send_batch)
    first = asyncio.ensure_future(accumulator.add(_wire("1")))
    await _settle()
    impatient = asyncio.gather(*accumulator.in_flight)  # what a flush did before asyncio.wait
    impatient.cancel()  # and cancels what it waits on
    await _settle()
    broker.gates[0].set()
    assert (await first).message_id == "id-1"  # the message was stored: its caller hears so
    second = asyncio.ensure_future(accumulator.add(_wire("2")))
    await _settle()
    assert broker.requests == [[b"1"], [b"2"]]  # the topic still sends
    broker.gates[1].set()
    assert (await second).message_id == "id-2"


async def test_a_cancelled_flush_leaves_the_sends_it_waited_for_alone() -> None:
    broker = FakeBroker()
    async with Producer(servers="127.0.0.1:9") as producer:  # nothing is sent over the network
        producer._accumulator = Accumulator(producer.config, broker.send_batch)
        lone = producer.send_async(Message(topic="orders", body=b"1"))
        await _settle()
        behind = producer.send_async(Message(topic="orders", body=b"2"))
        await _settle()
        flush = asyncio.ensure_future(producer.flush())
        await _settle()
        flush.cancel()
        await _settle()
        assert not lone.done()  # still waiting for the broker
        assert not behind.done()
        broker.gates[0].set()
        await _settle()
        broker.gates[1].set()
        assert (await lone).message_id == "id-1"
        assert (await behind).message_id == "id-2"


async def test_a_wave_of_sends_leaves_in_several_requests_by_default() -> None:
    # one request for all of them would leave the producer idle while the broker stores it,
    # and the broker idle while the producer handles the answers (docs/benchmarks.md)
    broker = FakeBroker()
    accumulator = Accumulator(ProducerConfig(), broker.send_batch)
    sends = [asyncio.ensure_future(accumulator.add(_wire(str(n)))) for n in range(128)]
    await _settle()
    assert [len(request) for request in broker.requests] == [1, 64]  # 63 wait for both
    broker.gates[0].set()
    broker.gates[1].set()
    await _settle()
    assert [len(request) for request in broker.requests] == [1, 64, 63]
    for gate in broker.gates:
        gate.set()
    assert len(await asyncio.gather(*sends)) == 128
