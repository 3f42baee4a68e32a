"""Alert hooks against real local endpoints: an HTTP server and an SMTP sink on 127.0.0.1:0."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from email import message_from_bytes
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from pocketmq.errors import InvalidArgumentError
from pocketmq.reliability.alerts import EmailAlert, LoggingAlert, ManualHandlingEvent, WebhookAlert
from pocketmq.reliability.stub import MessageStub, StubStatus

NOW = datetime(2026, 11, 22, 12, 0, 0)


def event() -> ManualHandlingEvent:
    stub = MessageStub(
        message_id="ABC123",
        topic="orders",
        tag="paid",
        keys=("order-42",),
        content=b"x" * 10,
        status=StubStatus.UNKNOWN,
        send_count=5,
        next_resend_at=NOW,
        created_at=NOW,
        updated_at=NOW,
        last_error="SendOutcomeUnknownError: timed out",
    )
    return ManualHandlingEvent(stub=stub, max_sends=5, detected_at=NOW)


class _Hook(BaseHTTPRequestHandler):
    received: list[tuple[dict[str, str], bytes]]
    status = 204

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        type(self).received.append((dict(self.headers), self.rfile.read(length)))
        self.send_response(type(self).status)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return None


@pytest.fixture
def webhook() -> Iterator[tuple[str, type[_Hook]]]:
    handler = type("Hook", (_Hook,), {"received": [], "status": 204})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/alerts", handler
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


async def test_webhook_posts_json(webhook: tuple[str, type[_Hook]]) -> None:
    url, handler = webhook
    await WebhookAlert(url, headers={"X-Token": "s3cret"}).notify(event())
    ((headers, body),) = handler.received
    assert headers["Content-Type"] == "application/json"
    assert headers["X-Token"] == "s3cret"
    payload = json.loads(body)
    assert payload["message_id"] == "ABC123"
    assert payload["status"] == "UNKNOWN"
    assert payload["keys"] == ["order-42"]
    assert payload["body_size"] == 10
    assert payload["created_at"] == "2026-11-22T12:00:00Z"


async def test_webhook_error_status_raises(webhook: tuple[str, type[_Hook]]) -> None:
    url, handler = webhook
    handler.status = 500
    with pytest.raises(OSError, match="500"):
        await WebhookAlert(url).notify(event())


def test_webhook_needs_http() -> None:
    with pytest.raises(InvalidArgumentError):
        WebhookAlert("file:///etc/passwd")


class _Sink:
    def __init__(self) -> None:
        self.envelopes: list[Any] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.envelopes.append(envelope)
        return "250 OK"


@pytest.fixture
async def smtp_sink() -> AsyncIterator[tuple[int, _Sink]]:
    from aiosmtpd.smtp import SMTP

    sink = _Sink()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: SMTP(sink), "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], sink
    finally:
        server.close()
        await server.wait_closed()


async def test_email_goes_through_smtp(smtp_sink: tuple[int, _Sink]) -> None:
    port, sink = smtp_sink
    alert = EmailAlert(
        host="127.0.0.1", port=port, sender="mq@example.test", recipients=["ops@example.test"]
    )
    await alert.notify(event())
    (envelope,) = sink.envelopes
    assert envelope.mail_from == "mq@example.test"
    assert envelope.rcpt_tos == ["ops@example.test"]
    mail = message_from_bytes(envelope.content)
    assert mail["Subject"] == "[pocketmq] manual handling: orders ABC123"
    text = mail.get_payload(decode=True).decode()
    assert "still UNKNOWN after 5 of 5 sends" in text
    assert '"message_id": "ABC123"' in text


async def test_email_failure_raises() -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    alert = EmailAlert(host="127.0.0.1", port=port, recipients=["ops@example.test"], timeout=2)
    with pytest.raises(ConnectionRefusedError):
        await alert.notify(event())
    with pytest.raises(InvalidArgumentError):
        EmailAlert(recipients=[])


async def test_logging_alert(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="pocketmq.reliability.alerts"):
        await LoggingAlert().notify(event())
    (record,) = caplog.records
    assert "ABC123" in record.getMessage()
    assert record.pocketmq_event["send_count"] == 5  # type: ignore[attr-defined]
