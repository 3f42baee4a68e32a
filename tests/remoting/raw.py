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


class RemotingClient:
    """A raw remoting connection for several requests: pipelined calls correlated by opaque,
    one-way requests, and the server's own requests (pushes) kept in ``pushed``."""

    def __init__(self, address: str, *, keys: tuple[str, str] | None = None,
                 timeout: float = 10.0) -> None:  # fmt: skip
        host, port = address.rsplit(":", 1)
        self._sock = socket.create_connection((host, int(port)), timeout=timeout)
        self._decoder = RemotingFrameDecoder()
        self._keys = keys
        self._opaque = 0
        self._answers: dict[int, RemotingCommand] = {}
        self.pushed: list[RemotingCommand] = []

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> RemotingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def frame(self, code: int, fields: dict[str, str] | None = None, body: bytes = b"", *,
              oneway: bool = False, binary: bool = False) -> tuple[int, bytes]:  # fmt: skip
        """A request's opaque and encoded frame (signed when the client has keys)."""
        self._opaque += 1
        command = RemotingCommand(
            code, self._opaque, 2 if oneway else 0, signed(fields or {}, self._keys, body),
            body=body, version=401,
        )  # fmt: skip
        command.serialize_type = 1 if binary else 0
        return self._opaque, encode_command(command)

    def send(self, frames: list[bytes]) -> None:
        self._sock.sendall(b"".join(frames))

    def answer(self, opaque: int) -> RemotingCommand:
        """The response to request ``opaque`` (reading until it arrives)."""
        while opaque not in self._answers:
            self._read()
        return self._answers.pop(opaque)

    def call(self, code: int, fields: dict[str, str] | None = None, body: bytes = b"", *,
             binary: bool = False) -> RemotingCommand:  # fmt: skip
        opaque, frame = self.frame(code, fields, body, binary=binary)
        self.send([frame])
        return self.answer(opaque)

    def wait_push(self, code: int) -> RemotingCommand:
        """The next request the server sends with ``code``."""
        while True:
            for number, command in enumerate(self.pushed):
                if command.code == code:
                    return self.pushed.pop(number)
            self._read()

    def _read(self) -> None:
        data = self._sock.recv(1 << 20)
        assert data, "the server closed the connection"
        for command in self._decoder.feed(data):
            if command.is_response:
                self._answers[command.opaque] = command
            else:
                self.pushed.append(command)
