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
