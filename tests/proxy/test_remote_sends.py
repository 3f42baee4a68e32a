"""A proxy merges the sends of all its clients (server/grpc/merging.py, docs/proxy.md
"Batching"): clients on different machines (born hosts) and of different producer groups share
merged sends, where each used to have a batcher of its own that was never forgotten."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from pocketmq.client import Admin
from pocketmq.errors import Code
from pocketmq.model import InboundMessage
from pocketmq.proxy.remote import RemotePort
from pocketmq.testing import BrokerProcess

from ..integration.conftest import FAST_BROKER
from ..scratch import scratch_broker

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with scratch_broker(tmp_path_factory, "proxy-sends", config=FAST_BROKER, grpc_port=None) as b:
        yield b


async def test_sends_from_many_hosts_and_groups_share_merged_sends(broker: BrokerProcess) -> None:
    async with Admin(servers=broker.address) as admin:
        for topic in ("T0", "T1"):
            await admin.create_topic(topic, queues=1)
    port = RemotePort(broker.address)
    await port.start()
    try:
        calls = [
            port.send([InboundMessage(f"T{n % 2}", b"x")], f"T{n % 2}", f"10.0.{n}.1:5000")
            for n in range(40)
        ]
        answers = await asyncio.gather(*calls)
    finally:
        await port.close()
    assert all(a[0].code is Code.SUCCESS for a in answers)
    sizes = port.batch_sizes
    assert sizes.sums["send"] == 40
    # the first call leaves at once, the 39 that came meanwhile in one merged send (per host and
    # group, as before, that was 40 sends of one message each)
    assert sum(sizes.counts["send"]) == 2
