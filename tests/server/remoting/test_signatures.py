"""A port with authentication, over remoting (docs/remoting.md, "Authentication"; docs/security.md,
"Who may do what, per port"): every request signed by a known user with RocketMQ 4.x's ACL
signature, refusals answered ``NO_PERMISSION`` (RocketMQ 5's ``AuthenticationPipeline`` answers
16), wrong signatures throttled per source, and until a connection's first signed request the
bounds of a native connection before its handshake."""

from __future__ import annotations

import asyncio

from pocketmq.protocol.remoting import RequestCode as RC
from pocketmq.protocol.remoting import ResponseCode as R
from pocketmq.server.auth.failures import FAILURES
from pocketmq.server.auth.throttle import FailureThrottle
from pocketmq.server.auth.users import UserStore
from pocketmq.server.remoting.signatures import UNSIGNED_REMARK

from .conftest import ALICE, StartDual, request

ROUTE = RC.GET_ROUTEINFO_BY_TOPIC
KiB = 1024


async def test_an_unsigned_request_is_refused_and_its_connection_closed(
    start_dual: StartDual, users: UserStore
) -> None:
    before = FAILURES[("remoting", "unauthenticated")]
    async with start_dual(users=users) as dual:
        client = await dual.remoting()
        await client.send(request(ROUTE, 1, {"topic": "t"}) + request(ROUTE, 2, {"topic": "u"}))
        received = await client.until_closed()
        assert [(c.opaque, c.code, c.remark) for c in received] == [
            (1, R.NO_PERMISSION, UNSIGNED_REMARK)
        ]
    assert FAILURES[("remoting", "unauthenticated")] == before + 1


async def test_a_signed_request_is_served_and_ends_the_handshake(
    start_dual: StartDual, users: UserStore
) -> None:
    async with start_dual(users=users) as dual:
        client = await dual.remoting()
        await client.send(request(ROUTE, 1, {"topic": "t"}, keys=ALICE, binary=True))
        answer = await client.answer(1)
        assert (answer.code, answer.body, answer.ext_fields["user"]) == (0, b"t", "alice")
        assert not dual.server.pending, "a signed request ends the connection's handshake"
        # from then on each request is still checked on its own, and a refusal keeps it open
        await client.send(request(ROUTE, 2, {"topic": "u"}))
        assert (await client.answer(2)).code == R.NO_PERMISSION
        tampered = bytearray(request(ROUTE, 3, {"topic": "v"}, keys=ALICE))
        tampered[tampered.index(b'"v"') + 1] = ord("w")  # signed "v", says "w"
        await client.send(bytes(tampered))
        answer = await client.answer(3)
        assert answer.code == R.NO_PERMISSION
        assert "do not match" in (answer.remark or "")
        await client.send(request(ROUTE, 4, {"topic": "x"}, keys=ALICE))
        assert (await client.answer(4)).body == b"x"


async def test_a_deleted_user_s_next_request_is_refused(
    start_dual: StartDual, users: UserStore
) -> None:
    async with start_dual(users=users) as dual:
        client = await dual.remoting()
        await client.send(request(ROUTE, 1, {"topic": "t"}, keys=ALICE))
        assert (await client.answer(1)).code == 0
        users.delete(ALICE[0])
        await client.send(request(ROUTE, 2, {"topic": "t"}, keys=ALICE))
        assert (await client.answer(2)).code == R.NO_PERMISSION


async def test_wrong_signatures_are_throttled_per_source(
    start_dual: StartDual, users: UserStore
) -> None:
    throttle = FailureThrottle(burst=3, rate=0.001)
    async with start_dual(users=users, throttle=throttle) as dual:
        for attempt in range(3):
            client = await dual.remoting()
            await client.send(request(ROUTE, 1, {"topic": "t"}, keys=(ALICE[0], "guess")))
            assert "do not match" in await client.refusal(), attempt
        client = await dual.remoting()
        await client.send(request(ROUTE, 1, {"topic": "t"}, keys=ALICE))
        assert "too many wrong signatures from 127.0.0.1" in await client.refusal()


async def test_unknown_codes_are_answered_before_any_signature(
    start_dual: StartDual, users: UserStore
) -> None:
    """As RocketMQ: a code no processor serves is REQUEST_CODE_NOT_SUPPORTED, signed or not."""
    async with start_dual(users=users) as dual:
        client = await dual.remoting()
        await client.send(request(4242, 1))
        assert (await client.answer(1)).code == R.REQUEST_CODE_NOT_SUPPORTED
        await client.send(request(ROUTE, 2, {"topic": "t"}, keys=ALICE))
        assert (await client.answer(2)).code == 0


async def test_no_signed_request_within_the_deadline_closes_the_connection(
    start_dual: StartDual, users: UserStore
) -> None:
    async with start_dual(users=users, hello_timeout=5) as dual:
        idle = await dual.remoting()
        await idle.send(request(ROUTE, 1, {"topic": "t"}, keys=ALICE)[:20])  # never finished
        signed = await dual.remoting()
        await signed.send(request(ROUTE, 1, {"topic": "t"}, keys=ALICE))
        await signed.answer(1)
        await asyncio.sleep(0.05)
        assert len(dual.server.pending) == 1
        dual.clock.now += 5.1
        dual.server.sweep()
        assert await idle.until_closed() == []
        await signed.send(request(ROUTE, 2, {"topic": "u"}, keys=ALICE))
        assert (await signed.answer(2)).body == b"u"
        assert dual.server.budget.used == 0


async def test_unsigned_connections_count_against_the_pending_cap(
    start_dual: StartDual, users: UserStore
) -> None:
    async with start_dual(users=users, max_pending_connections=2) as dual:
        first, second = await dual.remoting(), await dual.remoting()
        for client in (first, second):
            await client.send(request(4242, 1))  # sniffed as remoting, nothing signed
            await client.answer(1)
        third = await dual.remoting()
        assert await first.until_closed() == []  # the oldest made room
        await third.send(request(ROUTE, 1, {"topic": "t"}, keys=ALICE))
        assert (await third.answer(1)).code == 0
        await second.read_some(0.1)
        assert not second.closed


async def test_a_large_first_frame_needs_a_known_user_s_signature(
    start_dual: StartDual, users: UserStore
) -> None:
    """Before its first signed request a connection may not make the port buffer more than
    ``max_frame_before_hello``, unless the header names a known user and a signature (the
    signature is checked once the body is in)."""
    async with start_dual(users=users) as dual:
        body = b"b" * (200 * KiB)
        for keys in (None, ("mallory", "whatever")):
            client = await dual.remoting()
            frame = request(ROUTE, 1, {"topic": "t"}, body, keys=keys)
            await client.send(frame[: 100 * KiB])
            assert "needs the signature of a known user" in await client.refusal()
            assert dual.server.budget.used == 0
        client = await dual.remoting()
        frame = request(ROUTE, 1, {"topic": "t"}, body, keys=ALICE)
        for start in range(0, len(frame), 50 * KiB):
            await client.send(frame[start : start + 50 * KiB])
            await asyncio.sleep(0.01)
        assert (await client.answer(1)).body == b"t"
        forged = await dual.remoting()
        frame = request(ROUTE, 1, {"topic": "t"}, body, keys=(ALICE[0], "wrong"))
        await forged.send(frame[: 100 * KiB])
        await asyncio.sleep(0.05)
        await forged.send(frame[100 * KiB :])
        assert "do not match" in await forged.refusal()


async def test_a_header_that_never_ends_before_a_signed_request_closes(
    start_dual: StartDual, users: UserStore
) -> None:
    async with start_dual(users=users) as dual:
        client = await dual.remoting()
        header = b'{"code":105,"extFields":{"topic":"' + b"x" * (70 * KiB)
        frame_length = 4 + 200 * KiB + 10
        await client.send(frame_length.to_bytes(4, "big") + (200 * KiB).to_bytes(4, "big"))
        await client.send(header)
        assert await client.until_closed() == []
        assert dual.server.budget.used == 0
