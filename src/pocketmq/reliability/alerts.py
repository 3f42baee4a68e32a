"""Manual handling: tell a human when a stub ran out of sends (docs/reliability.md "Resend
scheduler and manual handling").

Why hooks rather than one mechanism: where alerts go is an operations decision (a log line picked
up by monitoring, a chat webhook, e-mail to the on-call address). The scheduler calls every
configured :class:`Alert` once per stub, recording the hand-over in the stub's ``last_error``
(``manual: ...``) *before* calling them so that several schedulers do not alert twice; if an alert
raises, the record is undone and the next run tries again.

The blocking clients of the standard library (``urllib``, ``smtplib``) run in a worker thread
(``asyncio.to_thread``), so an unreachable mail server never stalls the event loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import smtplib
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from email.message import EmailMessage
from typing import Any, Protocol, runtime_checkable

from pocketmq.errors import InvalidArgumentError
from pocketmq.reliability.stub import MessageStub

__all__ = ["Alert", "EmailAlert", "LoggingAlert", "ManualHandlingEvent", "WebhookAlert"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ManualHandlingEvent:
    """A stub that used up its sends without being confirmed: what every alert hook is told.

    One value for all hooks, so a log line, a webhook and a mail say the same thing.
    """

    stub: MessageStub
    max_sends: int
    detected_at: datetime

    @property
    def summary(self) -> str:
        """One sentence for a log line, a mail subject or a chat message: what is stuck and why a
        human is needed.
        """
        s = self.stub
        return (
            f"message {s.message_id} to topic {s.topic!r} is still {s.status.value} after "
            f"{s.send_count} of {self.max_sends} sends; manual handling needed"
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready description (the body is summarised by size, not included)."""
        s = self.stub

        def iso(value: datetime | None) -> str | None:
            return None if value is None else value.isoformat() + "Z"

        return {
            "event": "pocketmq.manual_handling",
            "summary": self.summary,
            "message_id": s.message_id,
            "topic": s.topic,
            "tag": s.tag,
            "keys": list(s.keys),
            "status": s.status.value,
            "send_count": s.send_count,
            "max_sends": self.max_sends,
            "broker_name": s.broker_name,
            "queue_id": s.queue_id,
            "queue_offset": s.queue_offset,
            "last_error": s.last_error,
            "body_size": len(s.content),
            "created_at": iso(s.created_at),
            "detected_at": iso(self.detected_at),
        }


@runtime_checkable
class Alert(Protocol):
    """Delivers one manual-handling event; raise to have the scheduler try again later.

    A protocol, not a base class: where alerts go is an operations decision, and any object with
    ``notify`` (a pager client, a ticket system) plugs in.
    """

    async def notify(self, event: ManualHandlingEvent) -> None:
        """Deliver the event; raise when it reached no one, so the scheduler keeps the stub for its
        next run.
        """


class LoggingAlert:
    """Logs the event (default: logger ``pocketmq.reliability.alerts`` at ERROR).

    The default hook: every deployment has logs, and log-based monitoring can page from there.
    """

    def __init__(self, logger: logging.Logger | None = None, *, level: int = logging.ERROR) -> None:
        self.logger = logger if logger is not None else logging.getLogger(__name__)
        self.level = level

    async def notify(self, event: ManualHandlingEvent) -> None:
        """Log one line with the event attached (``extra["pocketmq_event"]``) for log-based
        monitoring to pick up.
        """
        self.logger.log(self.level, "%s", event.summary, extra={"pocketmq_event": event.to_dict()})

    def __repr__(self) -> str:
        return f"LoggingAlert({self.logger.name!r})"


class WebhookAlert:
    """POSTs the event as JSON to ``url``; a non-2xx answer counts as a failure."""

    def __init__(
        self, url: str, *, timeout: float = 10.0, headers: Mapping[str, str] | None = None
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise InvalidArgumentError("webhook url must be http:// or https://")
        self.url = url
        self.timeout = timeout
        self.headers = dict(headers or {})

    def __repr__(self) -> str:
        return f"WebhookAlert({self.url!r})"

    async def notify(self, event: ManualHandlingEvent) -> None:
        """POST the event from a worker thread, so a slow endpoint never stalls the event loop."""
        await asyncio.to_thread(self._post, json.dumps(event.to_dict()).encode())

    def _post(self, payload: bytes) -> None:
        request = urllib.request.Request(
            self.url,
            data=payload,
            method="POST",
            headers={"Content-Type": "application/json", **self.headers},
        )
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            if not 200 <= response.status < 300:
                raise OSError(f"webhook answered {response.status}")


class EmailAlert:
    """Sends the event by e-mail through an SMTP server (plain, or STARTTLS with a login)."""

    def __init__(
        self,
        *,
        recipients: Sequence[str],
        host: str = "127.0.0.1",
        port: int = 25,
        sender: str = "pocketmq@localhost",
        subject_prefix: str = "[pocketmq]",
        username: str | None = None,
        password: str | None = None,
        starttls: bool = False,
        timeout: float = 10.0,
    ) -> None:
        if not recipients:
            raise InvalidArgumentError("EmailAlert needs at least one recipient")
        self.recipients = tuple(recipients)
        self.host = host
        self.port = port
        self.sender = sender
        self.subject_prefix = subject_prefix
        self.username = username
        self.password = password
        self.starttls = starttls
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"EmailAlert({self.host}:{self.port} -> {', '.join(self.recipients)})"

    def build(self, event: ManualHandlingEvent) -> EmailMessage:
        """The mail for ``event``, built apart from sending so that it can be checked without a
        server.
        """
        mail = EmailMessage()
        mail["From"] = self.sender
        mail["To"] = ", ".join(self.recipients)
        mail["Subject"] = (
            f"{self.subject_prefix} manual handling: {event.stub.topic} {event.stub.message_id}"
        )
        details = json.dumps(event.to_dict(), indent=2)
        mail.set_content(f"{event.summary}.\n\n{details}\n")
        return mail

    async def notify(self, event: ManualHandlingEvent) -> None:
        """Send the mail from a worker thread (``smtplib`` blocks)."""
        await asyncio.to_thread(self._send, self.build(event))

    def _send(self, mail: EmailMessage) -> None:
        with smtplib.SMTP(self.host, self.port, timeout=self.timeout) as smtp:
            if self.starttls:
                smtp.starttls()
            if self.username is not None:
                smtp.login(self.username, self.password or "")
            smtp.send_message(mail)
