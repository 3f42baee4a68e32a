"""Requests the server sends on a client's own connection (docs/remoting.md, "Server-initiated
requests"): ``NOTIFY_CONSUMER_IDS_CHANGED`` and ``CHECK_TRANSACTION_STATE`` one-way,
``GET_CONSUMER_RUNNING_INFO`` and ``CONSUME_MESSAGE_DIRECTLY`` answered by the client.

They carry the server's own ``opaque`` counter: a client's requests and the server's travel in
opposite directions and are told apart by the response flag, so the two counters never meet
(RocketMQ's ``NettyRemotingAbstract.invoke0`` keeps a response table by opaque the same way). A
response is matched to its request by opaque; one nobody waits for (late, or forged) is dropped.
At most ``limit`` requests wait for an answer at once, so a client that never answers cannot
make the server hold an unbounded table; the connection's close fails them all.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final

from pocketmq.errors import BrokerConnectionError, RequestTimeoutError, TooManyRequestsError
from pocketmq.protocol.remoting.codes import VERSION_V4_9_4
from pocketmq.protocol.remoting.command import RemotingCommand, encode_command, request_command

__all__ = ["DEFAULT_WAITING_LIMIT", "Outbound"]

#: Requests awaiting a client's answer on one connection, at most.
DEFAULT_WAITING_LIMIT: Final = 64
_MAX_OPAQUE: Final = 2**31 - 1


class Outbound:
    """The server's requests on one connection: its opaque counter and the answers awaited.
    ``write`` sends an encoded frame (the connection's, coalesced with its responses)."""

    def __init__(self, write: Callable[[bytes], None], limit: int = DEFAULT_WAITING_LIMIT) -> None:
        self._write = write
        self._limit = limit
        self._next = 1
        self._waiting: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._closed: BrokerConnectionError | None = None

    @property
    def waiting(self) -> int:
        """Requests sent and not answered yet."""
        return len(self._waiting)

    def _opaque(self) -> int:
        opaque = self._next
        self._next = opaque + 1 if opaque < _MAX_OPAQUE else 1
        return opaque

    def push(self, code: int, ext_fields: dict[str, str], body: bytes, serialize_type: int) -> None:
        """Send a one-way request (no answer is expected, none is awaited)."""
        if self._closed is not None:
            raise self._closed
        command = request_command(
            code, self._opaque(), ext_fields, body, True, serialize_type, VERSION_V4_9_4
        )
        self._write(encode_command(command))

    async def request(
        self,
        code: int,
        ext_fields: dict[str, str],
        body: bytes,
        serialize_type: int,
        timeout: float,
    ) -> RemotingCommand:
        """Send a request and wait for the client's response (any code: the caller reads it);
        :class:`RequestTimeoutError` after ``timeout`` seconds, :class:`TooManyRequestsError`
        when ``limit`` requests already wait, :class:`BrokerConnectionError` once closed."""
        if self._closed is not None:
            raise self._closed
        if len(self._waiting) >= self._limit:
            raise TooManyRequestsError(
                f"{len(self._waiting)} requests to this client await its answer already"
            )
        opaque = self._opaque()
        command = request_command(
            code, opaque, ext_fields, body, False, serialize_type, VERSION_V4_9_4
        )
        frame = encode_command(command)  # a ProtocolError here leaves nothing waiting
        answer: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self._waiting[opaque] = answer
        try:
            self._write(frame)
            return await asyncio.wait_for(answer, timeout)
        except TimeoutError:
            raise RequestTimeoutError(
                f"the client did not answer request {code} within {timeout:g} s"
            ) from None
        finally:
            if self._waiting.get(opaque) is answer:
                del self._waiting[opaque]

    def resolve(self, response: RemotingCommand) -> bool:
        """Hand a client's response to the request it answers; False when none waits for it."""
        answer = self._waiting.pop(response.opaque, None)
        if answer is None or answer.done():
            return False
        answer.set_result(response)
        return True

    def close(self, reason: str) -> None:
        """The connection is gone: every waiting request fails, and so does any new one."""
        self._closed = BrokerConnectionError(reason)
        waiting, self._waiting = self._waiting, {}
        for answer in waiting.values():
            if not answer.done():
                answer.set_exception(self._closed)
