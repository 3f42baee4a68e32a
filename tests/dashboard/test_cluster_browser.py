"""The cluster view and the charts in a real browser (Debian's Chromium, headless, through
Selenium), on one replicated group of three brokers behind a name server, with automatic
failover through a real etcd (docs/operations.md, "Cluster view" and "Charts").

- Charts: a producer at a known rate while the group's consumer is stopped; the rate chart's
  last points are that rate (within 20 %), the lag chart rises, and falls to zero once the
  consumer is back — read from what the page drew (``window.pocketmqCharts``), on a chart whose
  canvas has drawn pixels.
- Cluster view, on a slave's page: all three brokers with their roles; after ``kill -9`` of the
  master and the controller's failover, the page shows the new master, the old one as gone and
  the failover, within 10 s of the election and without a reload.

The group is shared by the module (its start is the expensive part); the chart test runs first,
the failover last. Screenshots go to ``test-artifacts/dashboard/``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pocketmq import ConsumeStatus, Message, MessageView
from pocketmq.client import Admin, Producer, PushConsumer, PushConsumerConfig
from pocketmq.errors import PocketMQError
from pocketmq.testing import BrokerProcess, EtcdProcess, NameServerProcess

from ..integration.conftest import eventually
from .conftest import chromium, no_script_errors, shot, wait

pytestmark = pytest.mark.integration

SAMPLE_SECONDS = 0.5  # the history's interval here (10 s by default)
RATE = 200  # messages per second of the scripted workload
WORKLOAD_SECONDS = 6.0

GROUP_CONFIG: dict[str, dict[str, Any]] = {
    "broker": {
        "replication": "sync",
        "state_persist_interval": 0.2,
        "max_queue_wait": 5.0,
        "ha_metadata_interval": 0.3,
    },
    "store": {"flush_interval": 0.05, "checkpoint_interval": 0.2},
    "server": {"history_interval": SAMPLE_SECONDS},
}


@dataclass
class Cluster:
    namesrv: NameServerProcess
    etcd: EtcdProcess
    members: list[BrokerProcess]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root: Path = tmp_path_factory.mktemp("cluster")
    started: list[Any] = []
    try:
        etcd = EtcdProcess(root / "etcd")
        started.append(etcd)
        namesrv = NameServerProcess(root / "namesrv")
        started.append(namesrv)
        controller = ("--controller", etcd.url)

        def broker(broker_id: int, *extra: str) -> BrokerProcess:
            process = BrokerProcess(
                root / f"b{broker_id}",
                namesrv=namesrv.address,
                broker_name="g1",
                config=GROUP_CONFIG,
                grpc_port=None,
                http_port=0,
                extra_args=(*extra, *controller),
            )
            started.append(process)
            return process

        master = broker(0)
        slaves = [broker(n, "--broker-id", str(n), "--master", master.ha) for n in (1, 2)]
        yield Cluster(namesrv, etcd, [master, *slaves])
    finally:
        for process in reversed(started):
            process.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as driver:
        yield driver


def _between_swaps(check: Callable[[], bool]) -> Callable[[], bool]:
    """``check`` reads elements the page's htmx polling may swap out while it reads them: a
    stale element means "read again", not a failure."""
    from selenium.common.exceptions import StaleElementReferenceException

    def read() -> bool:
        try:
            return check()
        except StaleElementReferenceException:
            return False

    return read


async def _in_sync(master: BrokerProcess, size: int) -> bool:
    try:
        async with Admin(servers=master.address) as admin:
            for item in await admin.broker_status():
                if item.address == master.address:
                    controller = dict(item.replication).get("controller") or {}
                    return len(controller.get("isr", [])) >= size
    except PocketMQError:
        return False
    return False


async def _role(address: str) -> str:
    try:
        async with Admin(servers=address) as admin:
            for item in await admin.broker_status():
                if item.address == address:
                    return str(dict(item.replication).get("role"))
    except PocketMQError:
        return "down"
    return "down"


async def _produce(address: str, rate: int, seconds: float) -> tuple[float, float]:
    """Send ``rate`` messages a second for ``seconds`` on a fixed beat (every 50 ms); returns
    when the first and the last batch left."""
    tick = 0.05
    per_tick = round(rate * tick)
    async with Producer(servers=address) as producer:
        started = time.time()
        beat = time.monotonic()
        for _ in range(round(seconds / tick)):
            await asyncio.gather(
                *(producer.send(Message(topic="orders", body=b"x" * 64)) for _ in range(per_tick))
            )
            beat += tick
            await asyncio.sleep(max(0.0, beat - time.monotonic()))
        return started, time.time()


def _chart(driver: Any, name: str) -> dict[str, Any]:
    """What the page drew for chart ``name``: uPlot's data, and the pixels its canvas holds."""
    return dict(
        driver.execute_script(
            """
            const plot = window.pocketmqCharts && window.pocketmqCharts[arguments[0]];
            if (!plot) return {ready: false};
            const canvas = plot.root.querySelector("canvas");
            const pixels = canvas.getContext("2d")
                .getImageData(0, 0, canvas.width, canvas.height).data;
            let inked = 0;
            for (let i = 3; i < pixels.length; i += 4) if (pixels[i] > 0) inked++;
            return {ready: true, data: plot.data, inked: inked};
            """,
            name,
        )
    )


async def test_the_rate_and_lag_charts_follow_a_scripted_workload(
    cluster: Cluster, browser: Any
) -> None:
    master = cluster.members[0]
    async with Admin(servers=master.address) as admin:
        await admin.create_topic("orders", queues=2)
        await admin.create_group("billing")
    consumed: list[str] = []

    def listener(messages: list[MessageView]) -> ConsumeStatus:
        consumed.extend(m.message_id for m in messages)
        return ConsumeStatus.SUCCESS

    quick = PushConsumerConfig(offset_persist_interval=0.5)
    # the group consumes once (it has committed positions), then stops
    async with PushConsumer("billing", "orders", listener, servers=master.address, config=quick):
        await _produce(master.address, 20, 1.0)  # 20 messages
        await eventually(lambda: len(consumed) >= 20, timeout=20)
        await asyncio.sleep(1.0)  # their offsets committed
    base = f"http://{master.http}"
    await asyncio.to_thread(browser.get, base + "/charts?group=billing")
    started, ended = await _produce(master.address, RATE, WORKLOAD_SECONDS)
    await asyncio.sleep(4 * SAMPLE_SECONDS)  # the last samples of the workload, then drawn

    rate = await asyncio.to_thread(_chart, browser, "rate")
    assert rate["ready"], rate
    times, rates_in = rate["data"][0], rate["data"][1]
    during = [v for t, v in zip(times, rates_in, strict=True)
              if started + 1.0 <= t <= ended - 0.2 and v is not None]  # fmt: skip
    print(f"rate chart during {RATE} msg/s: {during}")
    assert len(during) >= 4, (times[-20:], rates_in[-20:], started, ended)
    last = during[-4:]
    assert all(abs(v - RATE) <= 0.2 * RATE for v in last), last
    assert rate["inked"] > 500, "the rate chart has no drawn points"

    lag = await asyncio.to_thread(_chart, browser, "lag")
    lags = [v for v in lag["data"][1] if v is not None]
    assert max(lags) >= 0.8 * RATE * WORKLOAD_SECONDS, lags[-10:]
    assert lag["inked"] > 500
    await asyncio.to_thread(shot, browser, "10-charts")

    async with PushConsumer("billing", "orders", listener, servers=master.address, config=quick):

        async def drained() -> bool:
            values = (await asyncio.to_thread(_chart, browser, "lag"))["data"][1]
            return values[-1] == 0

        await eventually(drained, timeout=30, interval=0.5)
    values = (await asyncio.to_thread(_chart, browser, "lag"))["data"][1]
    peak = max(range(len(values)), key=lambda i: values[i] or 0)
    assert values[peak] >= 0.8 * RATE * WORKLOAD_SECONDS
    assert values[-1] == 0  # it fell after the consumer came back
    await asyncio.to_thread(shot, browser, "11-charts-drained")
    await asyncio.to_thread(no_script_errors, browser)


def _roles(driver: Any) -> dict[int, tuple[str, str]]:
    rows = driver.find_elements("css selector", "section[data-group=g1] tbody tr")
    return {
        int(row.get_attribute("data-broker-id")): (
            row.get_attribute("data-role"),
            row.get_attribute("data-state"),
        )
        for row in rows
    }


async def test_the_cluster_view_shows_every_broker_and_a_failover_without_a_reload(
    cluster: Cluster, browser: Any
) -> None:
    master, *slaves = cluster.members
    await eventually(lambda: _in_sync(master, 3), timeout=30, interval=0.2)
    watcher = slaves[-1]  # a slave's page: it outlives the master
    await asyncio.to_thread(browser.get, f"http://{watcher.http}/cluster")

    def all_three() -> bool:
        return _roles(browser) == {
            0: ("master", "ok"),
            1: ("slave", "ok"),
            2: ("slave", "ok"),
        }

    await eventually(lambda: asyncio.to_thread(_between_swaps(all_three)), timeout=15, interval=0.3)
    links = browser.find_elements("css selector", "section[data-group=g1] tbody tr td a")
    assert {link.get_attribute("href") for link in links} == {
        f"http://{member.http}/" for member in cluster.members
    }
    await asyncio.to_thread(shot, browser, "12-cluster")
    browser.execute_script("window.sameDocument = true")

    master.kill()
    killed = time.monotonic()
    survivors = {m.address: n for n, m in enumerate(cluster.members) if n}

    async def elected() -> int | None:
        roles = await asyncio.gather(*(_role(address) for address in survivors))
        masters = [survivors[a] for a, r in zip(survivors, roles, strict=True) if r == "master"]
        return masters[0] if masters else None

    new_master: int | None = None

    async def found() -> bool:
        nonlocal new_master
        new_master = await elected()
        return new_master is not None

    await eventually(found, timeout=30, interval=0.1)
    elected_at = time.monotonic()
    assert new_master is not None

    def shows_failover() -> bool:
        section = browser.find_element("css selector", "section[data-group=g1]")
        roles = _roles(browser)
        return (
            section.get_attribute("data-master-id") == str(new_master)
            and roles.get(new_master) == ("master", "ok")
            and roles.get(0, ("", ""))[1] in ("gone", "unreachable")
            and f"to id {new_master}" in section.find_element("css selector", ".failover").text
        )

    await eventually(
        lambda: asyncio.to_thread(_between_swaps(shows_failover)), timeout=10, interval=0.2
    )
    shown = time.monotonic()
    print(
        f"failover: elected {elected_at - killed:.1f} s after the kill, "
        f"on the page {shown - elected_at:.1f} s after the election"
    )
    assert browser.execute_script("return window.sameDocument === true"), "the page reloaded"
    await asyncio.to_thread(shot, browser, "13-cluster-after-failover")
    browser.set_window_size(390, 844)
    try:
        for name, path in (("cluster", "/cluster"), ("charts", "/charts")):
            await asyncio.to_thread(browser.get, f"http://{watcher.http}{path}")
            await asyncio.to_thread(wait, browser, "main h1")
            await asyncio.sleep(1)
            await asyncio.to_thread(shot, browser, f"phone-{name}")
            width = browser.execute_script("return document.documentElement.scrollWidth")
            assert width <= 400, f"{name}: the page is {width}px wide at a phone's width"
    finally:
        browser.set_window_size(1280, 800)
    await asyncio.to_thread(no_script_errors, browser)
