"""Pull-consume throughput, side by side on one broker (docs/benchmarks.md, "Remoting pull
consume"): pocketmq's native SDK ``PushConsumer``, a raw remoting puller (Python: pipelined
``PULL_MESSAGE`` frames, one in flight per queue, 32 messages each, records decoded), and an
ali-ons push consumer (tests/remoting/node; 32 messages handled at once, counted only).

N messages of 200 bytes are stored in a 4-queue topic first; each consumer reads them all from
the start with a group of its own; two rounds. Printed per run: msg/s and the broker's CPU
seconds. ``HISTORY=0`` starts the broker without the attempt history, ``REPORT=0`` stops the
native consumer reporting its successes (remoting clients report none).

    PYTHONPATH=src python scripts/remoting_consume_throughput.py   # N=40000 by default
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import sys
import tempfile
import time

sys.path.insert(0, os.getcwd())  # tests.remoting: the raw client and the ali-ons driver

from tests.remoting.node.conftest import OnsDriver
from tests.remoting.raw import Session

from pocketmq.client import ConsumeStatus, Message, PushConsumer, PushConsumerConfig
from pocketmq.client.sync import SyncAdmin, SyncProducer
from pocketmq.protocol.remoting import RequestCode, ResponseCode
from pocketmq.protocol.remoting.stored import decode_stored
from pocketmq.testing import BrokerProcess

N = int(os.environ.get("N", "40000"))
QUEUES = 4
BODY = b"x" * 200


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def remoting_pull(address: str, group: str, topic: str) -> int:
    """Read every queue to its end with pipelined pulls (commit flag on, no long poll)."""
    session = Session(address)
    offsets = dict.fromkeys(range(QUEUES), 0)

    def ask(queue: int) -> int:
        fields = {
            "consumerGroup": group,
            "topic": topic,
            "queueId": str(queue),
            "queueOffset": str(offsets[queue]),
            "maxMsgNums": "32",
            "sysFlag": "5",
            "commitOffset": str(offsets[queue]),
            "suspendTimeoutMillis": "0",
            "subscription": "*",
            "subVersion": "0",
        }
        return session.send(RequestCode.PULL_MESSAGE, fields)

    waiting = {ask(queue): queue for queue in range(QUEUES)}
    got = 0
    while waiting:
        opaque = next(iter(waiting))
        answer = session.answer(opaque)
        queue = waiting.pop(opaque)
        if answer.code == ResponseCode.SUCCESS:
            got += len(decode_stored(answer.body))
            offsets[queue] = int(answer.ext_fields["nextBeginOffset"])
            waiting[ask(queue)] = queue
    session.close()
    return got


async def native(address: str, group: str, topic: str) -> int:
    """The SDK's push consumer until it handled N messages."""
    done = asyncio.Event()
    count = 0

    def listener(messages: list[object]) -> ConsumeStatus:
        # SUCCESS, not None: None is a failure, and each message would be sent back (the
        # first measurements did that: docs/benchmarks.md, "Remoting pull consume")
        nonlocal count
        count += len(messages)
        if count >= N:
            done.set()
        return ConsumeStatus.SUCCESS

    config = PushConsumerConfig(report_outcomes=os.environ.get("REPORT", "1") == "1")
    async with PushConsumer(group, topic, listener, servers=address, config=config):
        await asyncio.wait_for(done.wait(), 300)
    return count


def ali_ons(driver: OnsDriver, namesrv: str, group: str, topic: str) -> int:
    """An ali-ons push consumer until it handled N messages."""
    client = driver.call(
        "consumer", nameSrv=namesrv, group=group, topic=topic, countOnly=True, parallel=32
    )["client"]
    while (got := int(driver.call("count", client=client)["count"])) < N:
        time.sleep(0.05)
    driver.call("close", client=client)
    return got


def main() -> None:
    root = pathlib.Path(tempfile.mkdtemp(prefix="remoting-consume-bench-"))
    config = {"broker": {"record_history": os.environ.get("HISTORY", "1") == "1"}}
    with BrokerProcess(root / "broker", grpc_port=None, config=config) as broker:
        assert broker.process is not None
        pid = broker.process.pid
        kinds = ("native", "remoting", "ons")
        with (
            SyncAdmin(servers=broker.address) as admin,
            SyncProducer(servers=broker.address) as producer,
        ):
            admin.create_topic("bench", queues=QUEUES)
            for kind in kinds:
                for run in (1, 2):
                    admin.create_group(f"{kind}-{run}")
            for _ in range(0, N, 100):
                producer.send_batch([Message(topic="bench", body=BODY) for _ in range(100)])
        driver = OnsDriver(root)
        for run in (1, 2):
            for kind in kinds:
                group = f"{kind}-{run}"
                cpu, started = cpu_seconds(pid), time.perf_counter()
                if kind == "native":
                    got = asyncio.run(native(broker.address, group, "bench"))
                elif kind == "remoting":
                    got = remoting_pull(broker.address, group, "bench")
                else:
                    got = ali_ons(driver, broker.namesrv, group, "bench")
                elapsed, used = time.perf_counter() - started, cpu_seconds(pid) - cpu
                print(
                    f"{kind:8s} run {run}: {got} messages in {elapsed:.2f} s = "
                    f"{got / elapsed:,.0f} msg/s; broker CPU {used:.2f} s",
                    flush=True,
                )
        driver.close()


if __name__ == "__main__":
    main()
