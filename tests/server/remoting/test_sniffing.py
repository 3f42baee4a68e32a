"""One port, two protocols: each connection is served by the protocol its first bytes name
(docs/remoting.md, "Where it listens"), however they arrive, and both kinds share the port's
connection cap, its cap on connections not yet established and its deadline for that."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest
import trustme

from pocketmq.errors import Code
from pocketmq.protocol import PROTOCOL_VERSION, FrameKind, RequestCode, encode_body, encode_frame
from pocketmq.protocol import structs as w
from pocketmq.protocol.remoting import RequestCode as RC
from pocketmq.server.native.tcp import FrameServer
from pocketmq.server.remoting import RemotingConnection, RemotingPort

from ..conftest import RawClient, Toy, toy_handlers
from .conftest import RemotingClient, RemotingToy, StartDual, remoting_handlers, request

ROUTE = RC.GET_ROUTEINFO_BY_TOPIC


def _hello(request_id: int = 1) -> bytes:
    body = encode_body(w.HelloRequest(PROTOCOL_VERSION, "raw"))
    return encode_frame(FrameKind.REQUEST, RequestCode.HELLO, request_id, body)


async def test_native_and_remoting_clients_share_a_port(start_dual: StartDual) -> None:
    async with start_dual() as dual:
        native, remoting, binary = await dual.native(), await dual.remoting(), await dual.remoting()
        assert (await native.hello()).code == Code.SUCCESS
        await remoting.send(request(ROUTE, 7, {"topic": "json"}))
        await binary.send(request(ROUTE, 8, {"topic": "binary"}, binary=True))
        answer = await remoting.answer(7)
        assert (answer.code, answer.body, answer.serialize_type) == (0, b"json", 0)
        answer = await binary.answer(8)
        assert (answer.code, answer.body, answer.serialize_type) == (0, b"binary", 1)
        await native.request(RequestCode.GET_ROUTE, w.GetRouteRequest("still native"), 2)
        assert (await native.answer(2)).code == Code.SUCCESS
        assert len(dual.server.connections) == 1
        assert len(dual.port.connections) == 2
        assert all(isinstance(c, RemotingConnection) for c in dual.server.others)


async def test_first_bytes_may_arrive_one_at_a_time(start_dual: StartDual) -> None:
    """A decision waits for the bytes it needs (at most 13) and loses none of them."""
    async with start_dual() as dual:
        native, remoting = await dual.native(), await dual.remoting()
        hello = _hello()
        frame = request(ROUTE, 3, {"topic": "slow"})
        for index in range(20):
            await native.send(hello[index : index + 1])
            await remoting.send(frame[index : index + 1])
            await asyncio.sleep(0.002)
        await native.send(hello[20:])
        await remoting.send(frame[20:])
        assert (await native.answer(1)).code == Code.SUCCESS
        assert (await remoting.answer(3)).body == b"slow"


async def test_bytes_of_neither_protocol_get_the_native_error(start_dual: StartDual) -> None:
    async with start_dual() as dual:
        client = await dual.native()
        await client.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        frames = await client.until_closed()
        assert frames[-1].code == Code.PROTOCOL_ERROR


async def test_a_port_without_remoting_reads_remoting_bytes_as_native() -> None:
    server = FrameServer(toy_handlers(Toy()))
    await server.start("127.0.0.1", 0)
    try:
        reader, writer = await asyncio.open_connection(server.host, server.port)
        client = RawClient(reader, writer)
        await client.send(request(ROUTE, 3, {"topic": "t"}))
        frames = await client.until_closed()
        assert frames[-1].code == Code.PROTOCOL_ERROR
        writer.close()
    finally:
        await server.close()


async def test_a_silent_connection_gets_the_native_deadline_error(start_dual: StartDual) -> None:
    async with start_dual(hello_timeout=5) as dual:
        silent = await dual.native()
        partial = await dual.native()
        await partial.send(_hello()[:3])  # too few bytes to tell
        await asyncio.sleep(0.05)
        dual.clock.now += 4.9
        dual.server.sweep()
        await silent.read_some(0.1)
        assert not silent.closed
        dual.clock.now += 0.2
        dual.server.sweep()
        for client in (silent, partial):
            frames = await client.until_closed()
            assert frames[-1].code == Code.PROTOCOL_ERROR
        assert not dual.server.pending
        assert not dual.server.others


async def test_the_deadline_counts_from_the_connect_not_from_the_sniff(
    start_dual: StartDual,
) -> None:
    """A native client that sends its first bytes late has what is left of ``hello_timeout``,
    not a fresh one."""
    async with start_dual(hello_timeout=5) as dual:
        late = await dual.native()
        await asyncio.sleep(0.05)
        dual.clock.now += 4
        # the first bytes of a HELLO, not all of it: sniffed, but no HELLO yet
        await late.send(_hello()[:14])
        await asyncio.sleep(0.05)
        assert len(dual.server.connections) == 1
        dual.clock.now += 1.1
        dual.server.sweep()
        frames = await late.until_closed()
        assert frames[-1].code == Code.PROTOCOL_ERROR


async def test_connections_of_both_protocols_count_against_max_connections(
    start_dual: StartDual,
) -> None:
    async with start_dual(max_connections=3) as dual:
        remoting = await dual.remoting()
        await remoting.send(request(ROUTE, 1, {"topic": "a"}))
        assert (await remoting.answer(1)).code == 0
        native = await dual.native()
        assert (await native.hello()).code == Code.SUCCESS
        unsniffed = await dual.native()
        await asyncio.sleep(0.05)
        assert dual.server.open_count == 3
        refused = await dual.native()
        frames = await refused.until_closed()
        assert [(f.code, f.request_id) for f in frames] == [(Code.TOO_MANY_REQUESTS, 0)]
        # the connection still unsniffed was in its handshake: it made room, the others stay
        unsniffed_frames = await unsniffed.until_closed()
        assert unsniffed_frames[-1].code == Code.TOO_MANY_REQUESTS
        await remoting.send(request(ROUTE, 2, {"topic": "b"}))
        assert (await remoting.answer(2)).body == b"b"


async def test_the_oldest_unsniffed_connection_makes_room_first(start_dual: StartDual) -> None:
    """Sniffing keeps a connection's place among those in their handshake: a client cannot move
    itself to the back of the queue by sending its first bytes."""
    async with start_dual(max_connections=8, max_pending_connections=2) as dual:
        oldest = await dual.native()
        await asyncio.sleep(0.02)
        younger = await dual.native()
        await asyncio.sleep(0.02)
        await oldest.send(_hello()[:14])  # sniffed as native, still no HELLO
        await asyncio.sleep(0.05)
        third = await dual.native()
        frames = await oldest.until_closed()
        assert frames[-1].code == Code.TOO_MANY_REQUESTS
        await younger.read_some(0.1)
        assert not younger.closed
        assert (await third.hello()).code == Code.SUCCESS


async def test_remoting_over_tls_is_sniffed_on_the_decrypted_stream(tmp_path: Path) -> None:
    authority = trustme.CA()
    certificate = authority.issue_cert("127.0.0.1")
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    certificate.configure_cert(server_tls)
    client_tls = ssl.create_default_context()
    authority.configure_trust(client_tls)
    server = FrameServer(
        toy_handlers(Toy()),
        tls=server_tls,
        remoting=RemotingPort(remoting_handlers(RemotingToy())),
    )
    await server.start("127.0.0.1", 0)
    try:
        reader, writer = await asyncio.open_connection(
            server.host, server.port, ssl=client_tls, server_hostname="127.0.0.1"
        )
        client = RemotingClient(reader, writer)
        await client.send(request(ROUTE, 9, {"topic": "secret"}))
        assert (await client.answer(9)).body == b"secret"
        reader, writer2 = await asyncio.open_connection(
            server.host, server.port, ssl=client_tls, server_hostname="127.0.0.1"
        )
        native = RawClient(reader, writer2)
        assert (await native.hello()).code == Code.SUCCESS
        writer.close()
        writer2.close()
    finally:
        await server.close()


@pytest.mark.parametrize("limits", [{}, {"max_connections": 64}])
async def test_books_are_empty_after_every_kind_of_close(
    start_dual: StartDual, limits: dict[str, int]
) -> None:
    async with start_dual(**limits) as dual:
        remoting, native = await dual.remoting(), await dual.native()
        await dual.native()  # never says anything
        await remoting.send(request(ROUTE, 1, {"topic": "a"}))
        await remoting.answer(1)
        assert (await native.hello()).code == Code.SUCCESS
        await asyncio.sleep(0.05)
        for writer in dual.writers:
            writer.close()
        for _ in range(100):
            if not dual.server.open_count:
                break
            await asyncio.sleep(0.02)
        assert dual.server.open_count == 0
        assert not dual.server.pending
        assert not dual.port.connections
        assert dual.server.budget.used == 0
