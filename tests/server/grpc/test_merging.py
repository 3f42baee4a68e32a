"""The sends of concurrent gRPC calls reach the store as one append through the port's
``send_many`` (server/grpc/merging.py): the broker in process merges them as the proxy does,
across clients, producer groups and born hosts, when its sends wait after their append (a sync
flush here); each call still gets its own outcomes. With nothing to wait for, each call is
stored at once in its own append (merging those cost more than it saved, docs/benchmarks.md)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from pocketmq.broker import Broker, BrokerConfig, InboundMessage
from pocketmq.errors import Code, InvalidArgumentError
from pocketmq.protocol import structs as w
from pocketmq.server.grpc.port import LocalPort
from pocketmq.store import FlushMode, StoreConfig


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    """A broker whose sends wait for their fsync (sync flush): a group commit to share."""
    store = StoreConfig(flush_mode=FlushMode.SYNC)
    broker = Broker(BrokerConfig(data_dir=str(tmp_path), max_batch_messages=4, store=store))
    await broker.start()
    broker.create_topic("T", queues=1)
    yield broker
    await broker.close()


async def _no_routes(topic: str) -> w.RouteResponse:
    raise AssertionError("not asked")


def _count_appends(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The real store, its appends counted: how many messages each one carried."""
    appends: list[int] = []
    append: Callable[..., Any] = broker.store.append

    def counted(messages: Any, *args: Any, **kwargs: Any) -> Any:
        appends.append(len(messages))
        return append(messages, *args, **kwargs)

    monkeypatch.setattr(broker.store, "append", counted)
    return appends


async def test_concurrent_calls_reach_the_store_in_one_append(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = LocalPort(broker, _no_routes)
    appends = _count_appends(broker, monkeypatch)
    calls = [
        port.send([InboundMessage("T", f"m{n}".encode())], "", f"10.0.0.{n}:5000")
        for n in range(20)
    ]
    answers = await asyncio.gather(*calls)
    # the first call leaves at once from its own task, the 19 that came while it waited for
    # its fsync together (one append each, as before, was 20)
    assert appends == [1, 19]
    assert [len(a) for a in answers] == [1] * 20
    assert all(a[0].code is Code.SUCCESS for a in answers)
    offsets = [a[0].queue_offset for a in answers]
    assert offsets == list(range(20))  # each call its own outcome, in the order of the calls
    stored = broker.store.get_messages("T", 0, 0, max_count=20).messages
    assert [m.body for m in stored] == [f"m{n}".encode() for n in range(20)]


async def test_a_call_refused_whole_fails_alone(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = LocalPort(broker, _no_routes)
    too_many = [InboundMessage("T", b"x")] * 5  # max_batch_messages is 4
    bad, good = await asyncio.gather(
        port.send(too_many, "", "10.0.0.1:1"),
        port.send([InboundMessage("T", b"fine")], "", "10.0.0.2:1"),
        return_exceptions=True,
    )
    assert isinstance(bad, InvalidArgumentError)
    assert isinstance(good, list)
    assert good[0].code is Code.SUCCESS


async def test_with_nothing_to_wait_for_each_call_is_stored_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = Broker(BrokerConfig(data_dir=str(tmp_path)))  # asynchronous flush, no slave
    await broker.start()
    try:
        broker.create_topic("T", queues=1)
        port = LocalPort(broker, _no_routes)
        appends = _count_appends(broker, monkeypatch)
        first = port.send([InboundMessage("T", b"m0")], "", "10.0.0.1:5000")
        with pytest.raises(StopIteration) as done:
            first.send(None)  # answered without suspending: no merger, no loop turn
        assert done.value.value[0].code is Code.SUCCESS
        answers = await asyncio.gather(
            *(port.send([InboundMessage("T", b"m")], "", "10.0.0.2:5000") for _ in range(5))
        )
        assert appends == [1] * 6
        assert [a[0].queue_offset for a in answers] == [1, 2, 3, 4, 5]
    finally:
        await broker.close()
