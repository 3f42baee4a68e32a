"""The clients connected over gRPC, as their Telemetry streams and heartbeats describe them.

A client announces itself on its Telemetry stream (a ``Settings`` command: type, group,
subscriptions or published topics) and then heartbeats every 10 s. The session keeps what the
broker may need later: the subscriptions for heartbeats (v2 heartbeats carry only the group),
and the stream to push commands on — an orphaned transaction's check-back goes to a producer
that publishes the message's topic (docs/transactions.md, "4. Check-back" and "8. For protocol
adapters").

Sessions are keyed by (user, client id): the ``x-mq-client-id`` header is only what a client
calls itself, so a second user naming the same id gets a session of its own and can neither take
over the first one's Telemetry stream nor end it (docs/security.md). Without authentication the
user is "" and the key is the client id alone, as before.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from pocketmq.server.auth.credential import Credential
from pocketmq.server.grpc.pb import Code, d, s

__all__ = ["ClientSession", "Sessions", "transaction_check_command"]


@dataclass(slots=True)
class ClientSession:
    """What the adapter knows of one client between its RPCs: its type, group, topics and
    subscriptions, and the Telemetry stream to push commands on."""

    client_id: str
    user: str = ""  # who signed the client's calls ("" without authentication)
    client_type: int = 0
    group: str = ""
    topics: frozenset[str] = frozenset()  # producers: the topics they publish
    subscriptions: dict[str, str] = field(default_factory=dict)  # consumers: topic → filter
    last_seen: float = 0.0
    language: str = ""  # from the Settings' user agent: java, golang, python, node_js, ...
    # commands to write on the client's Telemetry stream; None ends the stream
    outbox: asyncio.Queue[Any] | None = None
    # what stops the session when its user goes (server/auth/credential.py); None: no auth
    credential: Credential | None = None

    def update(self, settings: Any) -> None:
        """Take in a Settings command: the client's type and, for producers, its topics, for
        consumers, its group and subscriptions."""
        self.client_type = int(settings.client_type)
        if settings.HasField("user_agent"):
            language = d.Language.Name(settings.user_agent.language)
            self.language = "" if language == "LANGUAGE_UNSPECIFIED" else language.lower()
        if settings.HasField("publishing"):
            self.topics = frozenset(t.name for t in settings.publishing.topics)
        if settings.HasField("subscription"):
            subscription = settings.subscription
            self.group = subscription.group.name
            self.subscriptions = {
                entry.topic.name: entry.expression.expression or "*"
                for entry in subscription.subscriptions
            }

    def push(self, command: Any) -> bool:
        """Queue a server command for the client's stream; False without an open stream."""
        if self.outbox is None:
            return False
        self.outbox.put_nowait(command)
        return True


class Sessions:
    """Every client the adapter has heard from, by user and client id (module doc)."""

    def __init__(self) -> None:
        self._sessions: dict[tuple[str, str], ClientSession] = {}

    def get(self, user: str, client_id: str) -> ClientSession | None:
        """The session of ``client_id`` signed by ``user``, or None."""
        return self._sessions.get((user, client_id))

    def touch(self, user: str, client_id: str) -> ClientSession:
        """The session of ``client_id`` signed by ``user``, created on first contact, marked as
        heard from now."""
        session = self._sessions.get((user, client_id))
        if session is None:
            session = self._sessions[(user, client_id)] = ClientSession(client_id, user)
        session.last_seen = time.monotonic()
        return session

    def remove(self, user: str, client_id: str) -> None:
        """Forget a client that said goodbye. Its Telemetry stream stays open until the
        client closes it: ending it from here makes the Python client log a read error."""
        self._sessions.pop((user, client_id), None)

    def expire(self, max_idle: float) -> None:
        """Forget clients silent for ``max_idle`` seconds (crashed without terminating)."""
        cutoff = time.monotonic() - max_idle
        for key, session in list(self._sessions.items()):
            if session.last_seen < cutoff and session.outbox is None:
                del self._sessions[key]

    def revoked(self) -> list[ClientSession]:
        """Take out the sessions whose user was deleted or changed its secret since their
        stream opened (they are forgotten; the caller ends their streams)."""
        gone = [
            (key, session)
            for key, session in self._sessions.items()
            if session.credential is not None and not session.credential.holds()
        ]
        for key, _ in gone:
            del self._sessions[key]
        return [session for _, session in gone]

    def __len__(self) -> int:
        return len(self._sessions)

    def kinds(self) -> tuple[dict[str, int], dict[str, int]]:
        """Producer sessions and consumer sessions by language (apache.rocketmq.v2 ClientType:
        1 producer, 2-4 consumers), for the connection metrics."""
        producers: dict[str, int] = {}
        consumers: dict[str, int] = {}
        for session in self._sessions.values():
            into = producers if session.client_type == 1 else consumers
            if session.client_type in (1, 2, 3, 4):
                into[session.language] = into.get(session.language, 0) + 1
        return producers, consumers


def transaction_check_command(message: Any, transaction_id: str) -> Any:
    """The Telemetry command that asks a producer to resolve an orphaned half message."""
    return s.TelemetryCommand(
        status={"code": Code.OK, "message": "OK"},
        recover_orphaned_transaction_command={
            "message": message,
            "transaction_id": transaction_id,
        },
    )
