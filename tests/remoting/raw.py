"""A raw remoting client for the remoting suite: one request per connection, encoded with
pocketmq's codec (signed with the 4.x ACL signature when given keys), the response decoded —
or the connection's close when the server answered nothing."""

from __future__ import annotations

import socket

from pocketmq.protocol.remoting import RemotingCommand, RemotingFrameDecoder, encode_command
from pocketmq.protocol.remoting.acl import ACCESS_KEY, SIGNATURE, sign


def signed(
    fields: dict[str, str], keys: tuple[str, str] | None, body: bytes = b""
) -> dict[str, str]:
    """``fields`` with ``AccessKey`` and ``Signature`` added, as ``AclClientRPCHook`` adds them."""
    if keys is None:
        return dict(fields)
    fields = {**fields, ACCESS_KEY: keys[0]}
    return {**fields, SIGNATURE: sign(fields, body, keys[1])}


def ask(
    address: str,
    code: int,
    fields: dict[str, str] | None = None,
    *,
    keys: tuple[str, str] | None = None,
    version: int = 0,
    binary: bool = False,
    timeout: float = 10.0,
) -> RemotingCommand:
    """Send one request to ``address`` (``host:port``) and return its response."""
    host, port = address.rsplit(":", 1)
    command = RemotingCommand(code, 4242, 0, signed(fields or {}, keys), version=version)
    command.serialize_type = 1 if binary else 0
    decoder = RemotingFrameDecoder()
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(encode_command(command))
        while True:
            data = sock.recv(1 << 20)
            assert data, f"{address} closed the connection without answering code {code}"
            for answer in decoder.feed(data):
                assert answer.is_response
                assert answer.opaque == 4242
                return answer


class Session:
    """One long-lived remoting connection, as a client keeps it: requests pipelined (each its
    own opaque), responses matched by opaque in any order, and the server's own requests on it
    (``NOTIFY_CONSUMER_IDS_CHANGED``) kept in :attr:`pushed`."""

    def __init__(
        self, address: str, timeout: float = 10.0, keys: tuple[str, str] | None = None
    ) -> None:
        host, port = address.rsplit(":", 1)
        self.keys = keys  # every request signed with them
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self._decoder = RemotingFrameDecoder()
        self._next = 1
        self.answers: dict[int, RemotingCommand] = {}
        self.pushed: list[RemotingCommand] = []

    def send(
        self,
        code: int,
        fields: dict[str, str] | None = None,
        body: bytes = b"",
        *,
        oneway: bool = False,
        binary: bool = False,
    ) -> int:
        """Send a request (its header JSON, or binary: ``ROCKETMQ`` serialization); returns its
        opaque."""
        [opaque] = self.send_many([(code, fields, body)], oneway=oneway, binary=binary)
        return opaque

    def send_many(
        self,
        requests: list[tuple[int, dict[str, str] | None, bytes]],
        *,
        oneway: bool = False,
        binary: bool = False,
    ) -> list[int]:
        """Send requests pipelined in one write (as one read of the server may get them);
        returns their opaques."""
        opaques: list[int] = []
        frames: list[bytes] = []
        for code, fields, body in requests:
            opaque, self._next = self._next, self._next + 1
            fields = signed(fields or {}, self.keys, body)
            command = RemotingCommand(code, opaque, 2 if oneway else 0, fields, body=body)
            command.serialize_type = 1 if binary else 0
            frames.append(encode_command(command))
            opaques.append(opaque)
        self.sock.sendall(b"".join(frames))
        return opaques

    def answer(self, opaque: int) -> RemotingCommand:
        """The response to request ``opaque`` (waiting for it up to the socket's timeout)."""
        while opaque not in self.answers:
            self._read()
        return self.answers.pop(opaque)

    def call(
        self,
        code: int,
        fields: dict[str, str] | None = None,
        body: bytes = b"",
        *,
        binary: bool = False,
    ) -> RemotingCommand:
        """Send a request and wait for its response."""
        return self.answer(self.send(code, fields, body, binary=binary))

    def wait_push(self, code: int) -> RemotingCommand:
        """The next request of ``code`` the server sent on this connection."""
        while True:
            for index, command in enumerate(self.pushed):
                if command.code == code:
                    return self.pushed.pop(index)
            self._read()

    def _read(self) -> None:
        data = self.sock.recv(1 << 20)
        assert data, "the server closed the connection"
        for command in self._decoder.feed(data):
            if command.is_response:
                self.answers[command.opaque] = command
            else:
                self.pushed.append(command)

    def close(self) -> None:
        """Close the connection."""
        self.sock.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
