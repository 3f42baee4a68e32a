"""Server → client commands on the Telemetry stream: the orphaned-transaction check-back hook
(``GrpcServer.check_transaction``) reaches the official producer's checker, and its answer
comes back as EndTransaction. Issue 6 will call the hook from the broker; until then the broker
answers that EndTransaction with UNSUPPORTED, which the client only logs.

The broker and adapter run in this process, on an event loop in a thread, so the test can call
the hook directly.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rocketmq import TransactionChecker, TransactionResolution

from pocketmq.broker import Broker, BrokerConfig
from pocketmq.protocol import structs as w
from pocketmq.server.grpc import GrpcServer


class _InProcess:
    """A broker with only the gRPC adapter, on a loop in a daemon thread."""

    def __init__(self, data_dir: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.grpc_address = ""
        self.broker = Broker(BrokerConfig(data_dir=str(data_dir)))
        self.server = GrpcServer(self.broker, self)
        self.run(self._start())

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    async def _start(self) -> None:
        await self.broker.start()
        self.broker.create_topic("TX", queues=1, topic_type="transaction")
        await self.server.start("127.0.0.1", 0)
        self.grpc_address = f"127.0.0.1:{self.server.port}"

    async def _route(self, topic: str) -> w.RouteResponse:
        config = self.broker.topics.require(topic)
        return w.RouteResponse(
            topic,
            config.topic_type.value,
            [w.BrokerAddress(self.broker.name, "", self.grpc_address)],
            [w.QueueRoute(self.broker.name, q, config.perm) for q in range(config.queues)],
        )

    def close(self) -> None:
        async def stop() -> None:
            await self.server.close()
            await self.broker.close()

        self.run(stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.loop.close()


@pytest.fixture
def in_process(tmp_path: Path) -> Iterator[_InProcess]:
    server = _InProcess(tmp_path)
    try:
        yield server
    finally:
        server.close()


class _Checker(TransactionChecker):  # type: ignore[misc]
    def __init__(self) -> None:
        self.checked: list[Any] = []

    def check(self, message: Any) -> Any:
        self.checked.append(message)
        return TransactionResolution.COMMIT
