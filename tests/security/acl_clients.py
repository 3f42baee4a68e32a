"""The attacker's (and the victim's) raw clients for tests/security/test_acl_holes.py: a native
connection signed in with any keys that records what the broker pushes, and a gRPC Telemetry
stream signed as the official clients sign, driven by hand."""

from __future__ import annotations

import hashlib
import hmac
import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2 as d
from rocketmq.grpc_protocol import service_pb2 as s
from rocketmq.grpc_protocol import service_pb2_grpc

from pocketmq.client.connection import ClientConnection, connect
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w

Pushes = list[tuple[int, bytes]]


async def native(
    address: str, keys: tuple[str, str], client_id: str
) -> tuple[ClientConnection, Pushes]:
    """A native connection signed in with ``keys`` (access key, secret) under ``client_id``,
    and the list the broker's one-way pushes land in."""
    pushes: Pushes = []
    connection = await connect(
        address,
        client_id,
        timeout=5.0,
        on_push=lambda conn, code, body: pushes.append((code, body)),
        credentials=keys,
    )
    return connection, pushes


def checks(pushes: Pushes) -> list[w.CheckTransactionRequest]:
    """The transaction checks among ``pushes``."""
    return [
        w.decode_body(body, w.CheckTransactionRequest)
        for code, body in pushes
        if code == RequestCode.CHECK_TRANSACTION
    ]


def signed(user: str, secret: str, client_id: str) -> tuple[tuple[str, str], ...]:
    """What an official client signs every call with (docs/security.md, "The signature")."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ")
    signature = hmac.new(secret.encode(), stamp.encode(), hashlib.sha1).hexdigest()
    header = (
        f"MQv2-HMAC-SHA1 Credential={user}, SignedHeaders=x-mq-date-time, Signature={signature}"
    )
    return (("authorization", header), ("x-mq-date-time", stamp), ("x-mq-client-id", client_id))


def producer_settings(*topics: str) -> Any:
    """A producer's Telemetry Settings naming the topics it publishes to."""
    return d.Settings(
        client_type=d.ClientType.PRODUCER,
        publishing=d.Publishing(topics=[d.Resource(name=t) for t in topics]),
    )


class Telemetry:
    """A raw Telemetry stream: one Settings command, then whatever the broker pushes."""

    def __init__(self, endpoint: str, metadata: Any, settings: Any) -> None:
        self._channel = grpc.insecure_channel(endpoint)
        self._requests: queue.Queue[Any] = queue.Queue()
        self._requests.put(s.TelemetryCommand(settings=settings))
        self.replies: list[Any] = []
        self.ended_with: grpc.StatusCode | None = None
        self.ended = threading.Event()
        stub = service_pb2_grpc.MessagingServiceStub(self._channel)
        self._call = stub.Telemetry(self._commands(), metadata=metadata)
        threading.Thread(target=self._read, daemon=True).start()

    def _commands(self) -> Iterator[Any]:
        while (command := self._requests.get()) is not None:
            yield command

    def _read(self) -> None:
        try:
            for reply in self._call:
                self.replies.append(reply)
        except grpc.RpcError as exc:
            self.ended_with = exc.code()
        finally:
            self.ended.set()

    def settings_status(self, timeout: float = 5.0) -> int:
        """The v2 status the broker answered the Settings with."""
        deadline = time.monotonic() + timeout
        while not self.replies and time.monotonic() < deadline and not self.ended.is_set():
            time.sleep(0.02)
        assert self.replies, f"no answer to the settings (ended with {self.ended_with})"
        return int(self.replies[0].status.code)

    def checks(self) -> list[Any]:
        """The transaction checks pushed on the stream so far."""
        return [
            r.recover_orphaned_transaction_command
            for r in self.replies
            if r.HasField("recover_orphaned_transaction_command")
        ]

    def close(self) -> None:
        """End the stream from the client's side."""
        self._requests.put(None)
        self._call.cancel()
        self.ended.wait(5)
        self._channel.close()
