"""Establishing a replication link: the one place both ends meet (docs/replication.md §2).

The slave side opens the connection and says who it is (``HA_HELLO``); the master answers with
its identity and where the slave's copy goes on. Everything that must hold before a single log
byte moves — the group, the cluster, the master's right to lead, and (later) the credentials of
both ends — is checked here: :func:`open_link` for the side that connects, :func:`answer_hello`
for the side that listens. A follower and a *probe* (a master checking a claim that its group has
a newer master, §6) connect the same way; a probe only reads the answer and hangs up.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from pocketmq.broker.replica_log import ReplicaRefused
from pocketmq.errors import Code
from pocketmq.protocol import Frame, FrameKind, RequestCode, decode_body
from pocketmq.protocol import replication as ha
from pocketmq.protocol import structs as w
from pocketmq.server.ha.stream import FrameStream

__all__ = ["HANDSHAKE_TIMEOUT", "Link", "LinkRefused", "answer_hello", "open_link"]

HANDSHAKE_TIMEOUT = 2.0
"""How long a connecting side waits for the master's answer: a frozen master (its kernel still
accepts connections) must not hold a slave that should follow someone else."""


class LinkRefused(ReplicaRefused):
    """The master answered the handshake with a refusal; ``code`` says which kind:
    SERVICE_NOT_AVAILABLE when it is a master that may not write now (it may again later),
    NO_PERMISSION when it is not a master of this group and cluster at all."""

    def __init__(self, remark: str, code: int) -> None:
        super().__init__(remark)
        self.code = code


@dataclass(slots=True)
class Link:
    """An established link, seen from the side that connected: the framed connection, the frames
    still to come, and the master's answer."""

    address: str
    stream: FrameStream
    frames: AsyncIterator[Frame]
    reply: ha.HaHelloReply


async def open_link(
    address: str,
    hello: ha.HaHello,
    *,
    tls: ssl.SSLContext | None,
    opened: Callable[[FrameStream], None] | None = None,
    timeout: float = HANDSHAKE_TIMEOUT,
    idle: float | None = None,
) -> Link:
    """Connect to the replication port at ``address`` and make the handshake. ``opened`` gets
    the stream as soon as it exists (so another task can close it to abandon the attempt);
    ``idle``: the link's frames end with ConnectionError after that long without one. Raises
    ConnectionError/OSError (no connection, no answer in time) or :class:`LinkRefused`."""
    host, _, port = address.rpartition(":")
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, int(port), ssl=tls)
    except TimeoutError:
        raise ConnectionError(f"no connection to {address} within {timeout:.0f} s") from None
    stream = FrameStream(reader, writer)
    if opened is not None:
        opened(stream)
    try:
        frames = stream.frames(idle)
        request_id = stream.send(FrameKind.REQUEST, RequestCode.HA_HELLO, hello)
        try:
            async with asyncio.timeout(timeout):
                first = await anext(frames, None)
        except TimeoutError:
            raise ConnectionError(f"{address} did not answer the handshake in time") from None
        if first is None:
            raise ConnectionError("the master closed the link during the handshake")
        if first.request_id != request_id or first.kind != FrameKind.RESPONSE:
            raise LinkRefused("the master did not answer the handshake", Code.PROTOCOL_ERROR)
        if first.code != Code.SUCCESS:
            raise LinkRefused(decode_body(first.body, w.ErrorBody).remark, first.code)
        return Link(address, stream, frames, decode_body(first.body, ha.HaHelloReply))
    except BaseException:
        await stream.close()
        raise


def answer_hello(
    stream: FrameStream,
    first: Frame | None,
    answer: Callable[[ha.HaHello], tuple[ha.HaHelloReply, int]],
) -> tuple[ha.HaHello, int] | None:
    """The listening side's half: decode the slave's hello and answer it with ``answer`` (which
    raises :class:`LinkRefused` or ReplicaRefused to refuse). Returns the hello and the position
    the stream starts at, or None when the link ends here (a refusal, or a probe answered)."""
    if first is None or first.code != RequestCode.HA_HELLO:
        return None
    hello = decode_body(first.body, ha.HaHello)
    try:
        reply, position = answer(hello)
    except ReplicaRefused as exc:
        code = exc.code if isinstance(exc, LinkRefused) else Code.NO_PERMISSION
        stream.send(FrameKind.RESPONSE, code, w.ErrorBody(str(exc)), first.request_id)
        raise
    stream.send(FrameKind.RESPONSE, Code.SUCCESS, reply, first.request_id)
    if hello.probe:
        return None
    return hello, position
