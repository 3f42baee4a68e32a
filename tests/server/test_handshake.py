"""The native handshake's pieces without a broker (docs/security.md, "The native handshake"):
the client's side (protocol/auth.py), the server's check (server/auth/handshake.py), the
failed-login buckets, the cluster key re-read on rotation, ``pocketmq cluster key``, and a
server's connections that never finish their handshake (server/native/tcp.py)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner

from pocketmq.cli import main
from pocketmq.client.connection import connect
from pocketmq.errors import (
    Code,
    NoPermissionError,
    ServerIdentityError,
    TooManyRequestsError,
)
from pocketmq.protocol import (
    MAX_FRAME_BODY,
    PROTOCOL_VERSION,
    FrameKind,
    RequestCode,
    decode_body,
    encode_body,
    encode_frame,
)
from pocketmq.protocol import structs as w
from pocketmq.protocol.auth import ClientHandshake, client_proof, server_proof
from pocketmq.server.auth.cluster import (
    CLUSTER_USER,
    ClusterKeyFile,
    create_cluster_key,
    load_cluster_key,
)
from pocketmq.server.auth.handshake import Attempt, Authenticator
from pocketmq.server.auth.throttle import FailureThrottle
from pocketmq.server.auth.users import GATEWAY_USER, UserStore
from pocketmq.server.native.connection import HandlerTable, ServerConnection
from pocketmq.server.native.handshake import authenticate_handler, greet, namesrv_permissions
from pocketmq.server.native.limits import ConnectionLimits
from pocketmq.server.native.tcp import FrameServer

from .conftest import FakeClock, RawClient

HERE = "127.0.0.1:10911"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _hello(challenge: str = "c" * 32, name: str = "broker-a") -> w.HelloResponse:
    return w.HelloResponse(PROTOCOL_VERSION, "x", name, "broker", MAX_FRAME_BODY, 1, 0, challenge)


# -- the client's side ---------------------------------------------------------------------


def test_a_client_with_credentials_insists_on_a_server_that_proves_itself() -> None:
    client = ClientHandshake("c1", "alice", "s3cret")
    with pytest.raises(ServerIdentityError, match="asks for no authentication"):
        client.authenticate(_hello(challenge=""), HERE, HERE)
    answer = client.authenticate(_hello(), HERE, HERE)
    assert answer is not None
    assert answer.server_address == HERE
    parts = ("c" * 32, client.client_nonce, "c1", "broker-a", HERE)
    assert answer.signature == client_proof("s3cret", *parts)
    for wrong in ("", "0" * 64, client_proof("s3cret", *parts), server_proof("other", *parts)):
        with pytest.raises(ServerIdentityError, match="did not prove it knows your secret"):
            client.check(w.AuthenticateResponse(wrong))
    client.check(w.AuthenticateResponse(server_proof("s3cret", *parts).upper()))


def test_a_client_without_credentials_is_told_what_to_set() -> None:
    client = ClientHandshake("c1", missing_credentials="set the keys")
    assert client.authenticate(_hello(challenge=""), HERE, HERE) is None
    with pytest.raises(NoPermissionError, match="requires authentication: set the keys"):
        client.authenticate(_hello(), HERE, HERE)
    assert len(client.client_nonce) == 32
    assert ClientHandshake("c1").client_nonce != client.client_nonce


# -- the server's check -----------------------------------------------------------------------


def _attempt(
    secret: str,
    *,
    access_key: str = "alice",
    address: str = HERE,
    local: str = HERE,
    nonce: str = "n" * 32,
    source: str = "10.0.0.7",
) -> Attempt:
    proof = client_proof(secret, "c" * 32, nonce, "c1", "broker-a", address)
    return Attempt(access_key, proof, address, "c" * 32, nonce, "c1", "broker-a", local, source)


@pytest.fixture
def users(tmp_path: Path) -> UserStore:
    store = UserStore(tmp_path / "users")
    store.create("alice", "alices-secret")
    return store


def test_the_server_proves_the_same_secret_back(users: UserStore) -> None:
    authenticator = Authenticator(users)
    proof = authenticator.verify(_attempt("alices-secret"))
    assert proof == server_proof("alices-secret", "c" * 32, "n" * 32, "c1", "broker-a", HERE)
    for wrong in ("alices-secre", ""):
        with pytest.raises(NoPermissionError, match="do not match"):
            authenticator.verify(_attempt(wrong))
    with pytest.raises(NoPermissionError, match="do not match"):
        authenticator.verify(_attempt("alices-secret", access_key="bob"))


def test_a_proof_made_for_another_address_is_a_relay(users: UserStore) -> None:
    authenticator = Authenticator(users, reachable=["203.0.113.5:30911"])
    with pytest.raises(NoPermissionError, match=r"127\.0\.0\.1:4000, which is not an address"):
        authenticator.verify(_attempt("alices-secret", address="127.0.0.1:4000"))
    # an address the operator declared (a port mapping) is this server's too
    authenticator.verify(_attempt("alices-secret", address="203.0.113.5:30911"))
    authenticator.reachable.add("127.0.0.1:4000")
    authenticator.verify(_attempt("alices-secret", address="127.0.0.1:4000"))


def test_a_client_of_the_first_handshake_is_told_to_upgrade(users: UserStore) -> None:
    with pytest.raises(NoPermissionError, match="upgrade pocketmq"):
        Authenticator(users).verify(_attempt("alices-secret", nonce=""))


def test_members_prove_any_line_of_the_cluster_key_and_the_gateway_its_secret(
    tmp_path: Path,
) -> None:
    old = create_cluster_key(tmp_path / "k")
    new = create_cluster_key(tmp_path / "k", keep=old.secrets)
    authenticator = Authenticator(None, ClusterKeyFile(tmp_path / "k"), gateway_secret="g" * 64)
    for secret in (old.current, new.current):
        proof = authenticator.verify(_attempt(secret, access_key=CLUSTER_USER))
        assert proof == server_proof(secret, "c" * 32, "n" * 32, "c1", "broker-a", HERE)
    with pytest.raises(NoPermissionError):
        authenticator.verify(_attempt("f" * 64, access_key=CLUSTER_USER))
    authenticator.verify(_attempt("g" * 64, access_key=GATEWAY_USER))
    for nobody in (Authenticator(None), Authenticator(None, gateway_secret="")):
        for key in (CLUSTER_USER, GATEWAY_USER):
            with pytest.raises(NoPermissionError):
                nobody.verify(_attempt("", access_key=key))


def test_failed_logins_are_throttled_per_source_address(users: UserStore) -> None:
    clock = Clock()
    authenticator = Authenticator(users, throttle=FailureThrottle(3, 0.5, clock=clock))
    for _ in range(3):
        with pytest.raises(NoPermissionError):
            authenticator.verify(_attempt("wrong"))
    # no token left: even the right secret waits, unchecked
    with pytest.raises(TooManyRequestsError, match=r"too many failed logins from 10\.0\.0\.7"):
        authenticator.verify(_attempt("alices-secret"))
    authenticator.verify(_attempt("alices-secret", source="10.0.0.8"))  # another address
    clock.now += 2.0  # one token back
    authenticator.verify(_attempt("alices-secret"))  # a success costs nothing
    with pytest.raises(NoPermissionError):
        authenticator.verify(_attempt("wrong"))
    with pytest.raises(TooManyRequestsError):
        authenticator.verify(_attempt("alices-secret"))


def test_the_throttle_remembers_a_bounded_number_of_addresses() -> None:
    clock = Clock()
    throttle = FailureThrottle(2, 1.0, clock=clock, max_sources=100)
    for number in range(1000):
        throttle.failed(f"10.0.{number // 256}.{number % 256}")
        throttle.failed(f"10.0.{number // 256}.{number % 256}")
    assert len(throttle._buckets) <= 100
    assert throttle.wait("10.0.3.231") > 0  # the latest are remembered
    clock.now += 10
    assert throttle.wait("10.0.3.231") == 0


# -- the cluster key --------------------------------------------------------------------------


def test_a_rotated_key_is_read_again_and_a_damaged_one_is_not(tmp_path: Path) -> None:
    clock = Clock()
    first = create_cluster_key(tmp_path / "k")
    holder = ClusterKeyFile(tmp_path / "k", clock=clock)
    rotated = create_cluster_key(tmp_path / "k", keep=first.secrets)
    assert holder.key() == first  # read at most once a second
    clock.now += 1.5
    assert holder.key().secrets == rotated.secrets
    (tmp_path / "k").write_text("half a key\n")
    os.chmod(tmp_path / "k", 0o600)
    clock.now += 1.5
    assert holder.key().secrets == rotated.secrets  # the last good one


def test_the_cluster_key_commands(tmp_path: Path) -> None:
    path = str(tmp_path / "cluster.key")
    runner = CliRunner()
    created = runner.invoke(main, ["cluster", "key", "create", path])
    assert created.exit_code == 0, created.output
    first = load_cluster_key(path)
    again = runner.invoke(main, ["cluster", "key", "create", path])
    assert again.exit_code != 0
    assert "exists already" in again.output
    rotated = runner.invoke(main, ["cluster", "key", "rotate", path])
    assert rotated.exit_code == 0, rotated.output
    assert "2 keys accepted" in rotated.output
    assert load_cluster_key(path).secrets[1:] == first.secrets
    pruned = runner.invoke(main, ["cluster", "key", "prune", path])
    assert pruned.exit_code == 0, pruned.output
    assert len(load_cluster_key(path).secrets) == 1
    assert load_cluster_key(path).current != first.current
    assert first.current not in created.output + rotated.output + pruned.output


# -- a server's connections in their handshake --------------------------------------------------


@asynccontextmanager
async def _server(
    users: UserStore, **limits: float
) -> AsyncIterator[tuple[FrameServer, FakeClock]]:
    authenticator = Authenticator(users)

    def hello(conn: ServerConnection, req: w.HelloRequest) -> w.HelloResponse:
        return _hello(greet(conn, req, authenticator), "namesrv")

    def route(conn: ServerConnection, req: w.GetRouteRequest) -> w.RouteResponse:
        return w.RouteResponse(req.topic, "normal", [], [])

    handlers: HandlerTable = {
        RequestCode.HELLO: hello,
        RequestCode.AUTHENTICATE: authenticate_handler(
            authenticator, lambda: "namesrv", namesrv_permissions
        ),
        RequestCode.GET_ROUTE: route,
        RequestCode.REGISTER_BROKER: route,
    }
    clock = FakeClock()
    server = FrameServer(handlers, limits=ConnectionLimits(**limits), clock=clock)  # type: ignore[arg-type]
    await server.start("127.0.0.1", 0)
    try:
        yield server, clock
    finally:
        await server.close()


async def _raw(server: FrameServer) -> RawClient:
    reader, writer = await asyncio.open_connection(server.host, server.port)
    return RawClient(reader, writer)


async def test_connections_that_never_authenticate_make_room_for_a_user(users: UserStore) -> None:
    async with _server(users, max_connections=8, max_pending_connections=3) as (server, _):
        waiting = []
        for _ in range(8):
            client = await _raw(server)
            assert (await client.hello()).code == Code.SUCCESS
            waiting.append(client)
        assert len(server.pending) == 3
        user = await connect(
            server.address, "user", timeout=3, credentials=("alice", "alices-secret")
        )
        try:
            assert await user.request(
                RequestCode.GET_ROUTE, w.GetRouteRequest("t"), w.RouteResponse, 3
            )
            # a user is limited to what users may ask a name server
            with pytest.raises(NoPermissionError, match="may not ask for operation REGISTER"):
                await user.request(
                    RequestCode.REGISTER_BROKER, w.GetRouteRequest("t"), w.RouteResponse, 3
                )
        finally:
            user.close()
        evicted = [c for c in waiting[:6] if (await c.until_closed())]
        assert len(evicted) == 6
        for client in waiting[:6]:
            assert client.frames[-1].code == Code.TOO_MANY_REQUESTS
            assert b"max_pending_connections 3" in client.frames[-1].body
        for client in waiting:
            client.close()


async def test_a_connection_must_authenticate_within_the_hello_timeout(users: UserStore) -> None:
    async with _server(users, hello_timeout=5) as (server, clock):
        client = await _raw(server)
        assert (await client.hello()).code == Code.SUCCESS
        await client.request(RequestCode.GET_ROUTE, w.GetRouteRequest("t"), 2)
        refused = await client.answer(2)
        assert refused.code == Code.NO_PERMISSION
        clock.now += 5.1
        server.sweep()
        frames = await client.until_closed()
        assert decode_body(frames[-1].body, w.ErrorBody).remark == "not authenticated within 5 s"
        client.close()


async def test_a_failed_login_closes_its_connection(users: UserStore) -> None:
    async with _server(users) as (server, _):
        client = await _raw(server)
        assert (await client.hello()).code == Code.SUCCESS
        wrong = encode_body(w.AuthenticateRequest("alice", "0" * 64, server.address))
        # two guesses in one write (one read for the server: no unread bytes to reset on close)
        await client.send(
            encode_frame(FrameKind.REQUEST, RequestCode.AUTHENTICATE, 2, wrong)
            + encode_frame(FrameKind.REQUEST, RequestCode.AUTHENTICATE, 3, wrong)
        )
        frames = await client.until_closed()
        assert [(f.request_id, f.code) for f in frames] == [(2, Code.NO_PERMISSION)]
        client.close()
