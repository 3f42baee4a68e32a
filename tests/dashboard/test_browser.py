"""The operator's path through the dashboard in a real browser (Debian's Chromium, headless,
driven by Selenium): a failing group comes first, its dead letters show their errors, a message's
timeline shows each attempt, a dry run and then a rate-limited resend deliver them again, and the
audit shows the redrive. Screenshots of every page, at 1280×800 and at a phone's width, go to
``test-artifacts/dashboard/``."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from pocketmq.client import ConsumeStatus, MessageView, PushConsumer

from ..integration.conftest import eventually
from .conftest import ERROR, LETTERS, Scenario, chromium
from .conftest import no_script_errors as _no_script_errors
from .conftest import shot as _shot
from .conftest import wait as _wait

pytestmark = pytest.mark.integration


@pytest.fixture
def browser() -> Iterator[Any]:
    with chromium() as driver:
        yield driver


def _walk_to_the_dead_letters(driver: Any, base: str) -> str:
    driver.get(base + "/")
    first = _wait(driver, "#groups tbody tr")[0]
    assert first.find_element("css selector", "a").text == "payments"
    assert "bad" in first.get_attribute("class")
    _shot(driver, "1-groups")
    first.find_element("css selector", "a").click()
    _wait(driver, "h1", text="Group payments")
    _shot(driver, "2-group")
    driver.find_element("partial link text", "dead letters").click()
    rows = _wait(driver, "#dead-letters tbody tr", LETTERS)
    assert len(rows) == LETTERS
    assert all(ERROR in row.text for row in rows)
    _shot(driver, "3-dead-letters")
    message_id = rows[0].find_element("css selector", "td a").text
    rows[0].find_element("css selector", "td a").click()
    timeline = _wait(driver, "#timeline tbody tr", 4)
    outcomes = [
        r.find_element("css selector", ".outcome").text for r in timeline if "payments" in r.text
    ]
    assert outcomes == ["EXCEPTION", "EXCEPTION", "EXCEPTION", "DLQ"]
    _shot(driver, "4-message")
    driver.back()
    _wait(driver, "#dead-letters tbody tr", LETTERS)
    _no_script_errors(driver)
    return str(message_id)


def _dry_run(driver: Any) -> None:
    driver.find_element("css selector", "#dead-letters thead input[type=checkbox]").click()
    boxes = driver.find_elements("css selector", "input[name=offset]")
    assert len(boxes) == LETTERS
    assert all(box.is_selected() for box in boxes)
    rate = driver.find_element("css selector", "input[name=rate]")
    rate.clear()
    rate.send_keys("2")
    driver.find_element("id", "dry-run").click()
    lines = _wait(driver, "#resend-lines tbody tr", LETTERS)
    assert [line.find_element("css selector", ".status").text for line in lines] == [
        "would resend"
    ] * LETTERS
    _shot(driver, "5-dry-run")


def _resend(driver: Any) -> None:
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    driver.find_element("id", "resend-now").click()
    WebDriverWait(driver, 5).until(expected_conditions.alert_is_present())
    driver.switch_to.alert.accept()
    # 5 at 2 per second: three rounds, about 2 s
    lines = _wait(driver, "#resend-lines tbody tr", LETTERS, text="resent", timeout=30)
    assert len(lines) == LETTERS
    _shot(driver, "6-resent")


def _audit_and_phone(driver: Any, base: str, message_id: str) -> None:
    driver.get(base + "/groups/payments/redrives")
    rows = _wait(driver, "#redrives tbody tr", LETTERS)
    assert all("dashboard" in row.text for row in rows)
    _shot(driver, "7-redrive-audit")
    driver.get(base + "/topics")
    _wait(driver, "#topics tbody tr", text="orders")
    _shot(driver, "8-topics")
    driver.set_window_size(390, 844)
    for name, path in (
        ("groups", "/"),
        ("dead-letters", "/groups/payments/dlq"),
        ("message", f"/messages?id={message_id}"),
    ):
        driver.get(base + path)
        _wait(driver, "main h1")
        _shot(driver, f"phone-{name}")
        width = driver.execute_script("return document.documentElement.scrollWidth")
        assert width <= 400, f"{name}: the page is {width}px wide at a phone's width"
    _no_script_errors(driver)


async def test_an_operator_finds_the_failing_group_and_redrives_its_dead_letters(
    scenario: Scenario, browser: Any
) -> None:
    message_id = await asyncio.to_thread(_walk_to_the_dead_letters, browser, scenario.base)
    assert message_id in scenario.sent
    await asyncio.to_thread(_dry_run, browser)
    received: list[str] = []

    async def accept(messages: list[MessageView]) -> ConsumeStatus:
        received.extend(m.message_id for m in messages)
        return ConsumeStatus.SUCCESS

    async with PushConsumer("payments", "orders", accept, servers=scenario.broker.address):
        await asyncio.to_thread(_resend, browser)
        await eventually(lambda: len(received) >= LETTERS)
    assert sorted(received) == sorted(scenario.sent)
    await asyncio.to_thread(_audit_and_phone, browser, scenario.base, message_id)
