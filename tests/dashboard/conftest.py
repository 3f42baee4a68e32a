"""A broker with its dashboard and a failing consumer group (docs/operations.md, "Dashboard").

The scenario every dashboard test starts from: topic ``orders``; group ``payments`` whose consumer
raised ``card declined`` on every attempt, so its five messages (keys ``order-0`` … ``order-4``)
went to its dead-letter queue after three attempts; group ``audit`` consumed them all.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from pocketmq.client import Admin, ConsumeStatus, Message, MessageView, Producer, PushConsumer
from pocketmq.errors import TopicNotFoundError
from pocketmq.testing import BrokerProcess

from ..integration.conftest import FAST_BROKER, eventually

ERROR = "card declined: insufficient funds"
LETTERS = 5


@dataclass
class Scenario:
    broker: BrokerProcess
    base: str  # http://host:port
    sent: list[str]  # message ids, in send order


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path / "b", config=FAST_BROKER, grpc_port=None, http_port=0) as process:
        yield process


async def dead_letters_of(address: str, group: str) -> int:
    async with Admin(servers=address) as admin:
        try:
            return len(await admin.dead_letters(group))
        except TopicNotFoundError:  # no dead letter yet
            return 0


@pytest.fixture
async def scenario(broker: BrokerProcess) -> AsyncIterator[Scenario]:
    address = broker.address
    async with Admin(servers=address) as admin:
        await admin.create_topic("orders", queues=2)
        await admin.create_group("payments", max_retries=2, retry_delays=[0.1, 0.1])
        await admin.create_group("audit")
    async with Producer(servers=address) as producer:
        sent = [
            (
                await producer.send(
                    Message(
                        topic="orders",
                        body=b'{"order": %d, "amount": 12.5}' % i,
                        tag="paid",
                        keys=(f"order-{i}",),
                    )
                )
            ).message_id
            for i in range(LETTERS)
        ]
    audited: list[str] = []

    async def decline(messages: list[MessageView]) -> ConsumeStatus:
        raise RuntimeError(ERROR)

    async def audit(messages: list[MessageView]) -> ConsumeStatus:
        audited.extend(m.message_id for m in messages)
        return ConsumeStatus.SUCCESS

    async with (
        PushConsumer("payments", "orders", decline, servers=address),
        PushConsumer("audit", "orders", audit, servers=address),
    ):
        await eventually(lambda: _all(address, "payments", LETTERS), timeout=20, interval=0.2)
        await eventually(lambda: len(set(audited)) == LETTERS)
    return Scenario(broker, f"http://{broker.http}", sent)


async def _all(address: str, group: str, count: int) -> bool:
    return await dead_letters_of(address, group) == count


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    # unsafe=True: keep cookies of an IP-address host (127.0.0.1), as browsers do
    jar = aiohttp.CookieJar(unsafe=True)
    async with aiohttp.ClientSession(
        cookie_jar=jar, timeout=aiohttp.ClientTimeout(total=30)
    ) as session:
        yield session


# -- the browser (Debian's Chromium through Selenium) -----------------------------------------

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "dashboard"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    """Debian's Chromium, headless, at 1280×800, driven by Selenium (skipped, or failed on CI,
    when it is not installed)."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.path.exists(p)]
    if missing:
        reason = f"Chromium/ChromeDriver not installed ({', '.join(missing)}): run `make test`"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        # this machine's network is closed: no background connections to Google's hosts
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1280,800",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.implicitly_wait(0)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        yield driver
    finally:
        driver.quit()


def wait(driver: Any, css: str, count: int = 1, text: str = "", timeout: float = 15) -> list[Any]:
    """The elements matching ``css`` once there are at least ``count`` (containing ``text``)."""
    from selenium.webdriver.support.ui import WebDriverWait

    def found(d: Any) -> list[Any] | bool:
        elements = [e for e in d.find_elements("css selector", css) if text in e.text]
        return elements if len(elements) >= count else False

    result: list[Any] = WebDriverWait(driver, timeout).until(found)
    return result


def shot(driver: Any, name: str) -> None:
    path = ARTIFACTS / f"{name}.png"
    assert driver.save_screenshot(str(path)), name
    assert path.stat().st_size > 5000, f"{name}: the screenshot is blank"


def no_script_errors(driver: Any) -> None:
    severe = [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert not severe, severe
