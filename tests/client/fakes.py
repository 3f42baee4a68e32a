"""A scripted broker for SDK tests: a real socket speaking the native protocol, answering as the
test says (httpx's mock-transport idea, one layer down). No broker process, no store: the tests
of the sender's retry rules run in milliseconds and can make a broker refuse, stay silent or
drop the connection at exactly the attempt they mean.

Only what the producer needs is answered: HELLO, GET_ROUTE (every scripted broker of the
cluster, ``queues`` queues each), HEARTBEAT and UNREGISTER_CLIENT, and SEND / END_TRANSACTION
through :attr:`ScriptedBroker.answer`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec

from pocketmq.errors import Code
from pocketmq.protocol import (
    PROTOCOL_VERSION,
    FrameDecoder,
    FrameKind,
    RequestCode,
    decode_body,
    encode_body,
    encode_frame,
)
from pocketmq.protocol import structs as w

SILENT = "silent"
"""An answer: say nothing (the request times out)."""
HANG_UP = "hang up"
"""An answer: close the connection after reading the request."""

Answer = msgspec.Struct | Code | str
"""What a script returns for a request: a reply body, an error code, :data:`SILENT` or
:data:`HANG_UP`."""


def stored(request: w.SendRequest, broker_name: str) -> w.SendResponse:
    """The answer of a broker that stored every message of ``request``."""
    return w.SendResponse(
        [
            w.SendResultItem(int(Code.SUCCESS), "", m.properties.get("UNIQ_KEY", ""), m.queue_id, n)
            for n, m in enumerate(request.messages)
        ],
        broker_name,
    )


@dataclass
class ScriptedBroker:
    """One fake broker. ``answer(code, body)`` decides every SEND and END_TRANSACTION (default:
    stored / committed); ``requests`` records them, with the time each arrived."""

    name: str
    cluster: list[ScriptedBroker] = field(default_factory=list)
    queues: int = 2
    answer: Callable[[int, msgspec.Struct], Answer] | None = None
    requests: list[tuple[int, msgspec.Struct, float]] = field(default_factory=list)
    address: str = ""
    _server: asyncio.Server | None = None
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.address = f"127.0.0.1:{port}"

    async def stop(self) -> None:
        """Close the listening socket and every connection (as a killed broker would)."""
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        with contextlib.suppress(Exception):
            await self._server.wait_closed()

    def sent(self, code: RequestCode) -> list[msgspec.Struct]:
        """The bodies of the requests with ``code`` received so far."""
        return [body for c, body, _ in self.requests if c == code]

    def _route(self, topic: str) -> w.RouteResponse:
        brokers = self.cluster or [self]
        return w.RouteResponse(
            topic,
            "normal",
            [w.BrokerAddress(b.name, b.address) for b in brokers],
            [w.QueueRoute(b.name, q, 6) for b in brokers for q in range(b.queues)],
        )

    def _reply(self, code: int, body: msgspec.Struct) -> Answer:
        if self.answer is not None:
            return self.answer(code, body)
        if isinstance(body, w.SendRequest):
            return stored(body, self.name)
        return w.EndTransactionResponse("COMMITTED")

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        decoder = FrameDecoder()
        loop = asyncio.get_running_loop()
        try:
            while data := await reader.read(65536):
                for frame in decoder.feed(data):
                    body = decode_body(frame.body, w.REQUESTS[frame.code])
                    reply: Answer
                    if frame.code == RequestCode.HELLO:
                        reply = w.HelloResponse(PROTOCOL_VERSION, "test", self.name, "broker",
                                                1 << 20, 1 << 20)  # fmt: skip
                    elif frame.code == RequestCode.GET_ROUTE:
                        assert isinstance(body, w.GetRouteRequest)
                        reply = self._route(body.topic)
                    elif frame.code in (RequestCode.HEARTBEAT, RequestCode.UNREGISTER_CLIENT):
                        reply = w.Empty()
                    else:
                        self.requests.append((frame.code, body, loop.time()))
                        reply = self._reply(frame.code, body)
                    if reply == SILENT:
                        continue
                    if reply == HANG_UP:
                        writer.close()
                        return
                    if isinstance(reply, Code):
                        out = encode_frame(FrameKind.RESPONSE, reply, frame.request_id,
                                           encode_body(w.ErrorBody(reply.name)))  # fmt: skip
                    else:
                        assert isinstance(reply, msgspec.Struct)
                        out = encode_frame(FrameKind.RESPONSE, Code.SUCCESS, frame.request_id,
                                           encode_body(reply))  # fmt: skip
                    writer.write(out)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()


async def cluster(*names: str, queues: int = 2) -> list[ScriptedBroker]:
    """Started scripted brokers that list each other in their routes."""
    brokers: list[ScriptedBroker] = []
    for name in names:
        broker = ScriptedBroker(name, brokers, queues)
        await broker.start()
        brokers.append(broker)
    return brokers
