"""The sender's one retry loop, request type by request type, against scripted brokers
(tests/client/fakes.py): where a retry goes, when it waits, and when a send is never repeated
(docs/semantics.md, "Producer" and "Transactions")."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator

import msgspec
import pytest

from pocketmq import Message, errors
from pocketmq.client import (
    Backoff,
    Producer,
    ProducerConfig,
    SendStatus,
    TransactionProducer,
    TransactionResolution,
)
from pocketmq.errors import Code, MessageIllegalError, SendOutcomeUnknownError
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w
from pocketmq.routing import queue_for_group

from ..fakes import HANG_UP, SILENT, Answer, ScriptedBroker, cluster, stored

SEND = RequestCode.SEND


@pytest.fixture
async def brokers() -> AsyncIterator[list[ScriptedBroker]]:
    """Two scripted brokers, ``a`` and ``b``, one queue each."""
    pair = await cluster("a", "b", queues=1)
    yield pair
    for broker in pair:
        await broker.stop()


def first_pick(index: int) -> random.Random:
    """A random source whose first round-robin pick over two queues is ``index``."""
    seed = next(s for s in range(1000) if random.Random(s).randrange(1 << 16) % 2 == index)
    return random.Random(seed)


def message(body: bytes = b"x", **fields: str) -> Message:
    return Message(topic="t", body=body, **fields)  # type: ignore[arg-type]


def ids(broker: ScriptedBroker) -> list[str]:
    return [
        m.properties["UNIQ_KEY"]
        for body in broker.sent(SEND)
        if isinstance(body, w.SendRequest)
        for m in body.messages
    ]


def refuse_first(code: Code, then: str) -> tuple[list[int], object]:
    calls: list[int] = []

    def answer(request_code: int, body: msgspec.Struct) -> Answer:
        calls.append(request_code)
        if len(calls) == 1:
            return code
        if isinstance(body, w.SendRequest):
            return stored(body, then)
        return w.EndTransactionResponse("COMMITTED")

    return calls, answer


async def test_a_retriable_refusal_moves_to_another_broker_and_sets_the_first_aside(
    brokers: list[ScriptedBroker],
) -> None:
    a, _ = brokers
    a.answer = lambda code, body: Code.SERVICE_NOT_AVAILABLE
    async with Producer(servers=a.address, rng=first_pick(0)) as producer:
        results = [await producer.send(message()) for _ in range(5)]
        stats = producer.statistics()
    assert {r.broker_name for r in results} == {"b"}
    assert len(a.sent(SEND)) == 1  # tried once, then isolated for the next sends too
    assert (stats.sent, stats.retries, stats.failed) == (5, 1, 0)


async def test_flow_control_is_waited_out_with_the_backoff(brokers: list[ScriptedBroker]) -> None:
    a, b = brokers
    _, answer = refuse_first(Code.TOO_MANY_REQUESTS, "a or b")
    a.answer = b.answer = answer  # type: ignore[assignment]
    config = ProducerConfig(backoff=Backoff(initial=0.3, jitter=0.0))
    async with Producer(servers=a.address, config=config) as producer:
        await producer.send(message())
        stats = producer.statistics()
    first, second = sorted(at for _, _, at in a.requests + b.requests)
    assert second - first >= 0.25  # the first attempt's start + 0.3 s, less its own time
    assert (stats.backoffs, stats.retries) == (1, 1)


async def test_a_lost_answer_is_sent_again_elsewhere_with_the_same_message_id(
    brokers: list[ScriptedBroker],
) -> None:
    a, b = brokers
    a.answer = lambda code, body: HANG_UP  # the request left; no answer will come
    async with Producer(servers=b.address, rng=first_pick(0)) as producer:
        result = await producer.send(message())
    assert result.broker_name == "b"
    assert ids(a) == ids(b) == [result.message_id]


async def test_a_send_that_never_learns_its_outcome_is_reported_unknown(
    brokers: list[ScriptedBroker],
) -> None:
    a, b = brokers
    a.answer = b.answer = lambda code, body: SILENT
    config = ProducerConfig(send_timeout=0.3)
    async with Producer(servers=a.address, config=config) as producer:
        with pytest.raises(SendOutcomeUnknownError) as caught:
            await producer.send(message())
        stats = producer.statistics()
    assert caught.value.message_id == (ids(a) + ids(b))[0]
    assert (stats.failed, stats.unknown_outcomes) == (1, 1)


async def test_an_error_retrying_cannot_fix_is_raised_after_one_attempt(
    brokers: list[ScriptedBroker],
) -> None:
    a, b = brokers

    def illegal(code: int, body: msgspec.Struct) -> Answer:
        return w.SendResponse([w.SendResultItem(int(Code.MESSAGE_ILLEGAL), "bad")], "a")

    a.answer = b.answer = illegal
    async with Producer(servers=a.address) as producer:
        with pytest.raises(MessageIllegalError):
            await producer.send(message())
        stats = producer.statistics()
    assert len(a.sent(SEND)) + len(b.sent(SEND)) == 1
    assert (stats.failed, stats.retries, stats.unknown_outcomes) == (1, 0, 0)


async def test_a_fifo_message_is_retried_on_its_own_queue(brokers: list[ScriptedBroker]) -> None:
    own = brokers[queue_for_group("order-7", 2)]
    other = brokers[1 - queue_for_group("order-7", 2)]
    _, answer = refuse_first(Code.SERVICE_NOT_AVAILABLE, own.name)
    own.answer = answer  # type: ignore[assignment]
    async with Producer(servers=own.address) as producer:
        result = await producer.send(message(message_group="order-7"))
        assert len(own.sent(SEND)) == 2
        assert other.sent(SEND) == []
        plain = {(await producer.send(message())).broker_name for _ in range(4)}
    assert result.broker_name == own.name
    assert plain == {"a", "b"}  # waiting for its queue did not set the broker aside


def _checker(message: object) -> TransactionResolution:
    return TransactionResolution.UNKNOWN


async def test_a_half_message_is_not_sent_again_once_it_may_be_stored(
    brokers: list[ScriptedBroker],
) -> None:
    a, b = brokers
    a.answer = b.answer = lambda code, body: HANG_UP
    config = ProducerConfig(group="pg")
    async with TransactionProducer(_checker, servers=a.address, config=config) as producer:
        with pytest.raises(SendOutcomeUnknownError, match="not sent again"):
            await producer.send_half_message(message())
        stats = producer.statistics()
    assert len(a.sent(SEND)) + len(b.sent(SEND)) == 1  # a plain send would have tried again
    assert (stats.retries, stats.unknown_outcomes) == (0, 1)


async def test_a_half_message_is_sent_again_while_certainly_not_sent(
    brokers: list[ScriptedBroker],
) -> None:
    a, b = brokers
    await a.stop()  # still in the route, refusing connections: nothing can have been written
    config = ProducerConfig(group="pg")
    async with TransactionProducer(
        _checker, servers=b.address, config=config, rng=first_pick(0)
    ) as producer:
        result = await producer.send_half_message(message())
        stats = producer.statistics()
    assert result.broker_name == "b"
    assert stats.retries == 1


async def test_ending_a_transaction_is_repeated_at_once_after_a_retriable_error(
    brokers: list[ScriptedBroker],
) -> None:
    ends: list[w.EndTransactionRequest] = []

    def answer(code: int, body: msgspec.Struct) -> Answer:
        if isinstance(body, w.SendRequest):
            return stored(body, "a")
        assert isinstance(body, w.EndTransactionRequest)
        ends.append(body)
        return Code.SERVICE_NOT_AVAILABLE if len(ends) == 1 else w.EndTransactionResponse("X")

    a, b = brokers
    a.answer = b.answer = answer
    config = ProducerConfig(group="pg", backoff=Backoff(initial=5.0))
    async with TransactionProducer(
        _checker, servers=a.address, config=config, rng=first_pick(0)
    ) as producer:
        half = await producer.send_half_message(message())
        assert await producer.end_transaction(half, TransactionResolution.COMMIT)
        stats = producer.statistics()
    [(_, _, first), (_, _, second)] = [r for r in a.requests if r[0] == RequestCode.END_TRANSACTION]
    assert [e.message_id for e in ends] == [half.message_id] * 2  # same broker, same message
    assert second - first < 1.0  # at once: no backoff for an idempotent end
    assert (stats.committed, stats.retries) == (1, 0)  # ends carry no message: not counted


class NameServer(ScriptedBroker):
    """A scripted name server whose route of every topic names ``master`` as group g1's master
    (None: g1 has only a slave, read-only)."""

    master: ScriptedBroker | None = None
    slave: ScriptedBroker | None = None

    def _route(self, topic: str) -> w.RouteResponse:
        if self.master is None:
            assert self.slave is not None
            only = w.BrokerAddress("g1", self.slave.address, role="slave")
            return w.RouteResponse(topic, "normal", [only], [w.QueueRoute("g1", 0, 4)])
        leader = w.BrokerAddress("g1", self.master.address, role="master")
        return w.RouteResponse(topic, "normal", [leader], [w.QueueRoute("g1", 0, 6)])


async def test_a_send_a_frozen_master_leaves_unanswered_moves_to_the_groups_new_master() -> None:
    """Issue 29 item 5: the master stops answering (SIGSTOP); the group elects another. The
    send waiting on the frozen one watches the route and is stored by the new master within a
    route poll of the change — not after its whole send_timeout — and the next send goes
    straight to the new master."""
    frozen, elected = await cluster("g1", queues=1), await cluster("g1", queues=1)
    namesrv = NameServer("namesrv")
    await namesrv.start()
    frozen[0].answer = lambda code, body: SILENT
    namesrv.master = frozen[0]
    config = ProducerConfig(send_timeout=5.0)
    try:
        async with Producer(servers=namesrv.address, config=config) as producer:
            sending = asyncio.ensure_future(producer.send(message(b"during")))
            await asyncio.sleep(0.3)
            namesrv.master = elected[0]  # the election: the name server names the new master
            started = asyncio.get_running_loop().time()
            result = await sending
            waited = asyncio.get_running_loop().time() - started
            await producer.send(message(b"after"))
    finally:
        for broker in (*frozen, *elected, namesrv):
            await broker.stop()
    assert result.status is SendStatus.OK
    assert waited < 1.5, f"the send waited {waited:.1f} s on the frozen master"
    assert len(elected[0].sent(SEND)) == 2
    assert len(frozen[0].sent(SEND)) == 1


async def test_a_send_while_the_group_has_no_master_raises_no_master_error() -> None:
    """Issue 29 (5d): no writable queue because the group has no master is its own retriable
    error, not TopicNotFoundError (the topic exists)."""
    slave = await cluster("g1", queues=1)
    namesrv = NameServer("namesrv")
    await namesrv.start()
    namesrv.slave = slave[0]
    config = ProducerConfig(send_timeout=0.6)
    try:
        async with Producer(servers=namesrv.address, config=config) as producer:
            with pytest.raises(errors.ServiceUnavailableError) as raised:
                await producer.send(message())
    finally:
        for broker in (*slave, namesrv):
            await broker.stop()
    assert type(raised.value).__name__ == "NoMasterError"
    assert raised.value.retriable
    assert not isinstance(raised.value, errors.TopicNotFoundError)
    assert "g1" in str(raised.value)
