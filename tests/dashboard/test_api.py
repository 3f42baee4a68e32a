"""The dashboard's JSON API and its HTML pages against a real broker: exact values for the
scenario of conftest.py, every action, and the CSRF rules (docs/operations.md, "Dashboard")."""

from __future__ import annotations

import csv
import io
from typing import Any

import aiohttp
import pytest

from pocketmq.client import ConsumeStatus, MessageView, PushConsumer

from ..integration.conftest import eventually
from .conftest import ERROR, LETTERS, Scenario

pytestmark = pytest.mark.integration


async def _csrf(http: aiohttp.ClientSession, base: str) -> dict[str, str]:
    """Open a page as a browser would: the response sets the CSRF cookie."""
    async with http.get(f"{base}/") as reply:
        assert reply.status == 200
    token = reply.cookies["pocketmq_csrf"].value
    return {"X-Pocketmq-Csrf": token}


async def _json(http: aiohttp.ClientSession, url: str) -> Any:
    async with http.get(url) as reply:
        assert reply.status == 200, await reply.text()
        return await reply.json()


async def test_the_failing_group_ranks_first_with_its_dead_letters_and_their_errors(
    scenario: Scenario, http: aiohttp.ClientSession
) -> None:
    groups = await _json(http, f"{scenario.base}/api/groups")
    assert [g["name"] for g in groups] == ["payments", "audit"]
    payments, audit = groups
    assert (payments["dlq_depth"], payments["dlq_last_hour"], payments["lag"]) == (5, 5, 0)
    # three attempts each, all failed: every one counts as a redelivery-worthy failure
    assert payments["redeliveries"] == 3 * LETTERS
    assert (audit["dlq_depth"], audit["redeliveries"], audit["lag"]) == (0, 0, 0)
    letters = (await _json(http, f"{scenario.base}/api/groups/payments/dlq"))["dead_letters"]
    assert sorted(d["message_id"] for d in letters) == sorted(scenario.sent)
    assert {d["last_error"] for d in letters} == {f"RuntimeError: {ERROR}"}
    assert {(d["attempts"], d["origin_topic"], d["tag"]) for d in letters} == {
        (3, "orders", "paid")
    }
    only = await _json(http, f"{scenario.base}/api/groups/payments/dlq?key=order-3")
    assert [d["keys"] for d in only["dead_letters"]] == ["order-3"]
    none = await _json(http, f"{scenario.base}/api/groups/payments/dlq?error=timeout")
    assert none["dead_letters"] == []
    detail = await _json(http, f"{scenario.base}/api/groups/payments")
    assert detail["retry_policy"] == {"max_retries": 2, "delays": [0.1, 0.1]}
    assert sum(q["committed"] for q in detail["queues"] if q["topic"] == "orders") == LETTERS


async def test_a_message_page_shows_each_attempt_of_its_timeline(
    scenario: Scenario, http: aiohttp.ClientSession
) -> None:
    message_id = scenario.sent[0]
    found = await _json(http, f"{scenario.base}/api/messages?id={message_id}")
    payments = [a for a in found["attempts"] if a["group"] == "payments"]
    assert [a["outcome"] for a in payments] == ["EXCEPTION", "EXCEPTION", "EXCEPTION", "DLQ"]
    assert [a["attempt"] for a in payments][:3] == [1, 2, 3]
    assert [a["outcome"] for a in found["attempts"] if a["group"] == "audit"] == ["SUCCESS"]
    assert {c["topic"] for c in found["copies"]} >= {"orders", "%DLQ%payments"}
    original = next(c for c in found["copies"] if c["topic"] == "orders")
    assert original["body_kind"] == "json"
    assert '"amount": 12.5' in original["body"]
    async with http.get(f"{scenario.base}/messages?id={message_id}") as reply:
        page = await reply.text()
    assert reply.status == 200
    assert ERROR in page
    assert "DLQ" in page
    async with http.get(f"{scenario.base}/api/messages?id=NOSUCHID") as reply:
        assert reply.status == 404


async def test_a_dry_run_changes_nothing_then_a_resend_delivers_each_dead_letter_once(
    scenario: Scenario, http: aiohttp.ClientSession
) -> None:
    base, address = scenario.base, scenario.broker.address
    headers = await _csrf(http, base)
    letters = (await _json(http, f"{base}/api/groups/payments/dlq"))["dead_letters"]
    offsets = [d["dlq_offset"] for d in letters]
    body = {"offset": offsets, "target": "retry", "rate": 2, "dry_run": True}
    async with http.post(f"{base}/api/groups/payments/dlq/resend", json=body, headers=headers) as r:
        assert r.status == 200, await r.text()
        dry = await r.json()
    assert {line["status"] for line in dry} == {"would resend"}
    assert {line["topic"] for line in dry} == {"%RETRY%payments"}
    assert await _json(http, f"{base}/api/groups/payments/redrives") == []

    received: list[str] = []

    async def accept(messages: list[MessageView]) -> ConsumeStatus:
        received.extend(m.message_id for m in messages)
        return ConsumeStatus.SUCCESS

    async with PushConsumer("payments", "orders", accept, servers=address):
        body["dry_run"] = False
        async with http.post(
            f"{base}/api/groups/payments/dlq/resend", json=body, headers=headers
        ) as r:
            assert r.status == 200, await r.text()
            done = await r.json()
        assert [line["status"] for line in done] == ["resent"] * LETTERS
        await eventually(lambda: len(received) >= LETTERS)
    assert sorted(received) == sorted(scenario.sent)  # the same ids: consumers deduplicate
    audit = await _json(http, f"{base}/api/groups/payments/redrives")
    assert sorted(r["dlq_offset"] for r in audit) == sorted(offsets)
    assert {r["operator"] for r in audit} == {"dashboard"}
    async with http.post(f"{base}/api/groups/payments/dlq/resend", json=body, headers=headers) as r:
        again = await r.json()
    assert {line["status"] for line in again} == {"already"}
    letters = (await _json(http, f"{base}/api/groups/payments/dlq"))["dead_letters"]
    assert all(d["redriven"] for d in letters)


async def test_changes_without_the_csrf_token_or_from_another_origin_are_refused(
    scenario: Scenario, http: aiohttp.ClientSession
) -> None:
    base = scenario.base
    url = f"{base}/api/groups/payments/policy"
    body = {"max_retries": 5, "delays": "1 2"}
    async with http.post(url, json=body) as reply:  # no cookie yet, no header
        assert reply.status == 403
    headers = await _csrf(http, base)
    async with http.post(url, json=body, headers={"X-Pocketmq-Csrf": "forged"}) as reply:
        assert reply.status == 403
    evil = headers | {"Origin": "http://evil.example"}
    async with http.post(url, json=body, headers=evil) as reply:
        assert reply.status == 403
    detail = await _json(http, f"{base}/api/groups/payments")
    assert detail["retry_policy"]["max_retries"] == 2  # nothing changed
    async with http.post(url, json=body, headers=headers) as reply:
        assert reply.status == 200, await reply.text()
    detail = await _json(http, f"{base}/api/groups/payments")
    assert detail["retry_policy"] == {"max_retries": 5, "delays": [1.0, 2.0]}
    token = (scenario.broker.data_dir / "data" / "config" / "http.token").read_text().strip()
    async with aiohttp.ClientSession() as other:  # no cookie at all: the Bearer token is enough
        async with other.post(
            url, json={"max_retries": 3}, headers={"Authorization": f"Bearer {token}"}
        ) as reply:
            assert reply.status == 200
        async with other.post(
            url, json={"max_retries": 4}, headers={"Authorization": "Bearer wrong"}
        ) as reply:
            assert reply.status == 403


async def test_actions_refuse_bad_input_with_a_clear_message(
    scenario: Scenario, http: aiohttp.ClientSession
) -> None:
    base = scenario.base
    headers = await _csrf(http, base)
    cases = [
        ("/api/groups/payments/policy", {"max_retries": 2, "delays": "0"}, 400, "above 0"),
        ("/api/groups/payments/policy", {"max_retries": "many"}, 400, "bad value"),
        ("/api/groups/nobody/policy", {"max_retries": 2}, 404, "nobody"),
        ("/api/groups/payments/dlq/resend", {"offset": []}, 400, "at least one"),
        ("/api/groups/payments/dlq/resend", {"offset": [0], "rate": 0}, 400, "rate"),
        ("/api/groups/payments/dlq/resend", {"offset": [0], "target": "x"}, 400, "target"),
        ("/api/groups/payments/reset-offset", {"topic": "orders", "to": "time"}, 400, "time"),
        ("/api/groups/payments/reset-offset", {"topic": "gone", "to": "latest"}, 404, "gone"),
        ("/api/topics/nosuch/messages", {"body": "x"}, 404, "nosuch"),
    ]
    for path, body, status, text in cases:
        async with http.post(base + path, json=body, headers=headers) as reply:
            assert reply.status == status, (path, body, await reply.text())
            assert text in (await reply.json())["error"], (path, body)
    async with http.post(base + "/api/groups/payments/policy", data=b"[1", headers={
        **headers, "Content-Type": "application/json"}) as reply:  # fmt: skip
        assert reply.status == 400


async def test_reset_test_send_topics_and_csv_export(
    scenario: Scenario, http: aiohttp.ClientSession
) -> None:
    base = scenario.base
    headers = await _csrf(http, base)
    async with http.post(
        f"{base}/api/groups/audit/reset-offset",
        json={"topic": "orders", "to": "earliest"},
        headers=headers,
    ) as reply:
        moves = await reply.json()
    assert sorted(m["after"] for m in moves) == [0, 0]
    assert sum(m["before"] for m in moves) == LETTERS
    async with http.post(
        f"{base}/api/topics/orders/messages",
        json={"body": "hello", "tag": "probe", "key": "k1"},
        headers=headers,
    ) as reply:
        sent = await reply.json()
    assert sent["code"] == "SUCCESS"
    assert sent["message_id"]
    topics = await _json(http, f"{base}/api/topics")
    [orders] = [t for t in topics if t["name"] == "orders"]
    assert (orders["stored"], orders["messages_in"]) == (LETTERS + 1, LETTERS + 1)
    assert orders["groups"] == {"audit": LETTERS + 1, "payments": 1}
    async with http.get(f"{base}/groups/payments/dlq.csv?tag=paid") as reply:
        rows = list(csv.DictReader(io.StringIO(await reply.text())))
    assert reply.headers["Content-Type"].startswith("text/csv")
    assert sorted(r["message_id"] for r in rows) == sorted(scenario.sent)
    assert {r["last_error"] for r in rows} == {f"RuntimeError: {ERROR}"}


@pytest.mark.parametrize(
    "path", ["/", "/groups/payments", "/groups/payments/dlq", "/groups/payments/redrives",
             "/topics", "/login", "/charts", "/charts?group=payments&span=day", "/cluster",
             "/cluster/body"],
)  # fmt: skip
async def test_every_page_renders(
    scenario: Scenario, http: aiohttp.ClientSession, path: str
) -> None:
    async with http.get(scenario.base + path) as reply:
        page = await reply.text()
    assert reply.status == 200, page
    if path != "/cluster/body":  # the part htmx swaps in
        assert page.startswith("<!doctype html>")
        assert "</html>" in page
    async with http.get(scenario.base + "/groups/nobody") as reply:
        assert reply.status == 404
        assert "nobody" in await reply.text()
