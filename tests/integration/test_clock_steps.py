"""A real broker whose wall clock steps back and is put right releases its delayed messages on
time (docs/operations.md, "When the wall clock steps").

The broker runs under libfaketime (Debian ``faketime``, scripts/prerequisites.sh) reading its
offset from a file on every clock call (``FAKETIME_TIMESTAMP_FILE``, ``FAKETIME_NO_CACHE=1``), so
the test steps the broker's wall clock while it runs; the monotonic clock is left alone
(``FAKETIME_DONT_FAKE_MONOTONIC=1``), as on a machine whose clock NTP steps.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pocketmq import properties as props
from pocketmq.client import Admin
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w
from pocketmq.testing import BrokerProcess

from ..scratch import scratch_dir

_LIBRARIES = (
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
)


def _libfaketime() -> str:
    for path in _LIBRARIES:
        if os.path.exists(path):
            return path
    reason = "libfaketime is not installed (scripts/prerequisites.sh installs faketime)"
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture
def stepped_broker(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[BrokerProcess, Path]]:
    library = _libfaketime()
    with scratch_dir(tmp_path_factory, "clock") as scratch:
        offset = scratch / "faketime.rc"
        offset.write_text("+0\n")
        env = {
            "LD_PRELOAD": library,
            "FAKETIME_TIMESTAMP_FILE": str(offset),
            "FAKETIME_NO_CACHE": "1",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            "NO_FAKE_STAT": "1",
        }
        config = {"broker": {"delay_levels": [1.0, 2.0], "max_queue_wait": 5.0}}
        process = BrokerProcess(scratch, config=config, grpc_port=None, env=env)
        try:
            yield process, offset
        finally:
            process.stop()


def _set_offset(path: Path, offset: str) -> None:
    """Replace the offset file at once (libfaketime reopens it on every clock call)."""
    temporary = path.with_suffix(".tmp")
    temporary.write_text(offset + "\n")
    os.replace(temporary, path)


async def _stored(admin: Admin, topic: str) -> int:
    return sum(q.max_offset for q in await admin.queue_status(topic))


async def test_a_step_back_of_the_wall_clock_does_not_hold_a_delayed_message(
    stepped_broker: tuple[BrokerProcess, Path],
) -> None:
    broker, offset = stepped_broker
    async with Admin(servers=broker.address) as admin:
        await admin.create_topic("steps", queues=1)
        # a raw frame: the SDK has no delay levels (the 4.x clients send them like this)
        wire = w.InboundMessage("steps", b"x", {props.DELAY_LEVEL: "2"})
        reply = await admin._call(
            broker.address, RequestCode.SEND, w.SendRequest([wire]), w.SendResponse
        )
        assert reply.results[0].code == 0
        _set_offset(offset, "-3600")  # back an hour, before the message is due (2 s)...
        await asyncio.sleep(3.0)  # ...and held back over the moment it was due
        assert await _stored(admin, "steps") == 0  # by the broker's clock it is not due yet
        _set_offset(offset, "+0")  # put right: the message is a second overdue
        put_right = time.monotonic()
        while await _stored(admin, "steps") == 0:
            assert time.monotonic() - put_right < 3.0, broker.log()[-3000:]
            await asyncio.sleep(0.1)
