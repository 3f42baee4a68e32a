"""Opening a replication link: who may, and the proofs both ends give (docs/replication.md §2).

Every link — a slave following its master, or a probe asking a claimed master who it is —
begins here, the slave's side in :func:`open_link` and the master's in :func:`accept_link`:

1. ``HA_LINK``: the slave names its group and broker id and sends a fresh nonce; the master
   answers whether it requires the cluster key, a fresh challenge, the name its proofs are made
   for (``ha:<group>``), and its role and epoch.
2. ``HA_LINK_PROOF`` (when the group authenticates: ``--authentication``): the slave proves it
   holds the cluster key (server/auth/cluster.py) with :func:`~pocketmq.protocol.auth.client_proof`
   and the master answers with :func:`~pocketmq.protocol.auth.server_proof`, which the slave
   checks. Both are bound to the two nonces, the slave's identity (``ha-slave:<id>``), the name
   ``ha:<group>`` and **the master's address as the slave's socket sees it**: a relay in between
   is refused, and a captured proof is worth nothing on another connection.
3. ``HA_HELLO`` (:meth:`HaLink.hello`; the master's ``master.py`` answers it): a slave says what
   it holds and learns where its copy goes on. A *probe* — a master checking the name server's
   claim that its group has a newer master (§6) — sends it with ``probe`` set: it reads who the
   claimed master is (its cluster and epochs), after that master proved the cluster key, and
   hangs up.

Each end refuses the other with the reason, which a slave shows as its ``link_error``: a master
that requires the key refuses a slave without it (or with another key), and a slave that has
the key refuses a master that cannot prove it — a rogue master learns nothing and truncates
nothing. Without authentication a master also accepts a link that begins with ``HA_HELLO``
(keep such a port on a private network: docs/security.md, "Replication port").
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import NoReturn

import msgspec

from pocketmq.broker.ha.replica_log import ReplicaRefused
from pocketmq.errors import Code
from pocketmq.protocol import Frame, FrameKind, RequestCode, decode_body
from pocketmq.protocol import replication as ha
from pocketmq.protocol import structs as w
from pocketmq.protocol.auth import client_proof, normalize_address, server_proof
from pocketmq.server.auth.cluster import ClusterKey, ClusterKeyFile
from pocketmq.server.ha.stream import FrameStream

__all__ = [
    "HANDSHAKE_TIMEOUT",
    "IDLE_TIMEOUT",
    "MAX_LINKS",
    "HaLink",
    "LinkPolicy",
    "LinkRefused",
    "Peer",
    "accept_link",
    "open_link",
]

HANDSHAKE_TIMEOUT = 5.0
"""Seconds from connecting to the answered ``HA_HELLO`` (TLS included), either side."""
IDLE_TIMEOUT = 20.0
"""Seconds a link may stay silent (a live one carries a heartbeat and its ack every second;
RocketMQ's HA housekeeping closes a silent connection after 20 s)."""
MAX_LINKS = 16
"""Connections a master's replication port holds at once, authenticated or not."""


@dataclass(frozen=True, slots=True)
class LinkPolicy:
    """Who may open a replication link, and what one may cost: the cluster key (None: the group
    does not authenticate) and the port's limits (docs/replication.md §2, "Limits")."""

    key: ClusterKeyFile | ClusterKey | None = None
    max_links: int = MAX_LINKS
    handshake_timeout: float = HANDSHAKE_TIMEOUT
    idle_timeout: float = IDLE_TIMEOUT

    def current_key(self) -> ClusterKey | None:
        """The key now: a key file is read again when it changed (a rotation needs no
        restart, docs/security.md "Trust inside the cluster")."""
        if isinstance(self.key, ClusterKeyFile):
            return self.key.key()
        return self.key


class LinkRefused(Exception):
    """The master refused a link (the slave was told why, when it was still listening)."""


@dataclass(frozen=True, slots=True)
class Peer:
    """Who opened a link, as the master knows it after :func:`accept_link`."""

    group: str
    broker_id: int | None  # named by HA_LINK (None: the link began with HA_HELLO)
    authenticated: bool  # proved the cluster key


@dataclass(slots=True)
class HaLink:
    """An open link, its handshake done (the slave's side): the frames that arrive, and what the
    master said of itself — ``master_role`` is ``master``, ``fenced`` (a master that may not
    write now) or ``slave``; believe it and ``master_epoch`` only when ``authenticated``, or on
    a private network. ``timeout``: the handshake's deadline, for :meth:`hello` too."""

    stream: FrameStream
    frames: AsyncIterator[Frame]
    address: str
    authenticated: bool
    master_role: str
    master_epoch: int
    timeout: float = HANDSHAKE_TIMEOUT

    async def hello(self, hello: ha.HaHello) -> ha.HaHelloReply:
        """Send ``HA_HELLO`` and read the master's answer within the handshake's deadline:
        where the slave's copy goes on, or (a probe) who the master is. Raises
        :class:`ReplicaRefused` with the master's reason, ``ConnectionError`` when it does not
        answer in time."""
        try:
            async with asyncio.timeout(self.timeout):
                answer = await _ask(self.stream, self.frames, RequestCode.HA_HELLO, hello)
        except TimeoutError:
            raise ConnectionError(
                f"{self.address} did not answer HA_HELLO in {self.timeout:g} s"
            ) from None
        return decode_body(answer.body, ha.HaHelloReply)

    async def close(self) -> None:
        """Close the connection."""
        await self.stream.close()


def _server_name(group: str) -> str:
    return f"ha:{group}"


def _client_id(broker_id: int) -> str:
    return f"ha-slave:{broker_id}"


def _same(given: str, expected: str) -> bool:
    """Constant-time comparison of a proof a peer sent (any characters) with ours (hex)."""
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), expected.encode())


# -- the slave's side ---------------------------------------------------------------------


async def open_link(
    address: str,
    *,
    group: str,
    broker_id: int,
    policy: LinkPolicy,
    tls: ssl.SSLContext | None = None,
    opened: Callable[[FrameStream], None] | None = None,
    idle: float | None = None,
) -> HaLink:
    """Connect to the replication port at ``address`` and run the link's handshake up to, not
    including, ``HA_HELLO`` (:meth:`HaLink.hello`). Raises :class:`ReplicaRefused` with the
    reason when either side refuses, ``ConnectionError`` when the master is unreachable or too
    slow. ``opened`` gets the stream as soon as it exists (another task may close it to abandon
    the attempt: a slave told to follow another master, §9); ``idle``: the link's frames end
    with ``ConnectionError`` after that long without one (default ``policy.idle_timeout``)."""
    host, _, port = address.rpartition(":")
    timeout = policy.handshake_timeout
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(
                host.strip("[]"), int(port), ssl=tls, ssl_handshake_timeout=timeout if tls else None
            )
    except TimeoutError:
        raise ConnectionError(f"{address} did not accept a connection in {timeout:g} s") from None
    stream = FrameStream(reader, writer)
    if opened is not None:
        opened(stream)
    frames = stream.frames(policy.idle_timeout if idle is None else idle)
    try:
        async with asyncio.timeout(timeout):
            link = await _prove(stream, frames, address, group, broker_id, policy.current_key())
    except TimeoutError:
        await stream.close()
        raise ConnectionError(f"{address} did not finish the handshake in {timeout:g} s") from None
    except BaseException:
        await stream.close()
        raise
    stream.trust()
    link.timeout = timeout
    return link


async def _prove(
    stream: FrameStream,
    frames: AsyncIterator[Frame],
    address: str,
    group: str,
    broker_id: int,
    key: ClusterKey | None,
) -> HaLink:
    nonce = secrets.token_hex(16)
    opening = ha.HaLinkHello(group, broker_id, nonce)
    answer = await _ask(stream, frames, RequestCode.HA_LINK, opening)
    challenge = decode_body(answer.body, ha.HaLinkChallenge)
    if challenge.server_name != _server_name(group):
        raise ReplicaRefused(
            f"the replication port at {address} answers for {challenge.server_name!r}, not "
            f"group {group!r}"
        )
    link = HaLink(stream, frames, address, False, challenge.role, challenge.epoch)
    if key is None:
        if challenge.authentication:
            raise ReplicaRefused(
                f"the master at {address} requires the cluster key: start this broker with "
                "--authentication and the group's key (--cluster-key; docs/security.md)"
            )
        return link
    if not challenge.authentication:
        raise ReplicaRefused(
            f"the master at {address} does not authenticate its slaves (started without "
            "--authentication): this broker, which does, will not follow it"
        )
    peer = stream.writer.get_extra_info("peername")
    dialed = normalize_address(peer[0], peer[1]) if isinstance(peer, tuple) else address
    parts = (challenge.challenge, nonce, _client_id(broker_id), challenge.server_name, dialed)
    mine = client_proof(key.current, *parts)
    answer = await _ask(stream, frames, RequestCode.HA_LINK_PROOF, ha.HaLinkProof(mine))
    theirs = decode_body(answer.body, ha.HaLinkProof).proof
    if not any(_same(theirs, server_proof(secret, *parts)) for secret in key.secrets):
        raise ReplicaRefused(
            f"the master at {address} did not prove it holds the cluster key (another key, or "
            "a relay between the two brokers)"
        )
    link.authenticated = True
    return link


async def _ask(
    stream: FrameStream, frames: AsyncIterator[Frame], code: RequestCode, body: msgspec.Struct
) -> Frame:
    """One request of the handshake and its answer; ReplicaRefused when it is a refusal."""
    request_id = stream.send(FrameKind.REQUEST, code, body)
    await stream.drain()
    answer = await anext(frames, None)
    if answer is None:
        raise ConnectionError("the master closed the link during the handshake")
    if answer.kind != FrameKind.RESPONSE or answer.request_id != request_id:
        raise ReplicaRefused("the master did not answer the handshake")
    if answer.code != Code.SUCCESS:
        raise ReplicaRefused(decode_body(answer.body, w.ErrorBody).remark)
    return answer


# -- the master's side --------------------------------------------------------------------


async def accept_link(
    stream: FrameStream,
    frames: AsyncIterator[Frame],
    *,
    group: str,
    policy: LinkPolicy,
    standing: Callable[[], tuple[str, int]],
) -> tuple[Peer, Frame]:
    """The master's side of the handshake, up to the slave's ``HA_HELLO``, which is returned
    unanswered with who sent it. ``standing``: this broker's role and epoch now. Raises
    :class:`LinkRefused` (the slave was told why) or ``ConnectionError``; the caller bounds the
    time it takes (``policy.handshake_timeout``)."""
    key = policy.current_key()
    first = await _next(frames)
    if first.code == RequestCode.HA_HELLO and first.kind == FrameKind.REQUEST:
        if key is not None:
            await _refuse(
                stream,
                first,
                "this master requires the cluster key: start the slave with --authentication "
                "and the group's key (--cluster-key; docs/security.md)",
            )
        return Peer(group, None, False), first
    if first.code != RequestCode.HA_LINK or first.kind != FrameKind.REQUEST:
        raise LinkRefused(f"the first frame is code {first.code}, not HA_LINK")
    hello = decode_body(first.body, ha.HaLinkHello)
    if hello.group != group:
        await _refuse(stream, first, f"this master is of group {group!r}, not {hello.group!r}")
    challenge = secrets.token_hex(16) if key is not None else ""
    role, epoch = standing()
    name = _server_name(group)
    reply = ha.HaLinkChallenge(key is not None, challenge, name, role, epoch)
    stream.send(FrameKind.RESPONSE, Code.SUCCESS, reply, first.request_id)
    await stream.drain()
    second = await _next(frames)
    if key is None:
        if second.code == RequestCode.HA_LINK_PROOF:
            await _refuse(
                stream,
                second,
                "this master has no cluster key (started without --authentication); it cannot "
                "prove itself",
            )
        return Peer(group, hello.broker_id, False), _hello(second)
    if second.code != RequestCode.HA_LINK_PROOF or second.kind != FrameKind.REQUEST:
        await _refuse(stream, second, "prove the cluster key first (HA_LINK_PROOF)")
    proof = decode_body(second.body, ha.HaLinkProof).proof
    sock = stream.writer.get_extra_info("sockname")
    own = normalize_address(sock[0], sock[1]) if isinstance(sock, tuple) else ""
    parts = (challenge, hello.nonce, _client_id(hello.broker_id), name, own)
    matched = next((s for s in key.secrets if _same(proof, client_proof(s, *parts))), None)
    if matched is None:
        await _refuse(
            stream,
            second,
            "the cluster key's proof does not verify: the slave holds another key, or it "
            f"reached this master through a relay (this master is {own})",
        )
    answer = ha.HaLinkProof(server_proof(matched, *parts))
    stream.send(FrameKind.RESPONSE, Code.SUCCESS, answer, second.request_id)
    await stream.drain()
    return Peer(group, hello.broker_id, True), _hello(await _next(frames))


def _hello(frame: Frame) -> Frame:
    if frame.code != RequestCode.HA_HELLO or frame.kind != FrameKind.REQUEST:
        raise LinkRefused(f"code {frame.code} where HA_HELLO was due")
    return frame


async def _next(frames: AsyncIterator[Frame]) -> Frame:
    frame = await anext(frames, None)
    if frame is None:
        raise ConnectionError("the peer closed the link during the handshake")
    return frame


async def _refuse(stream: FrameStream, frame: Frame, reason: str) -> NoReturn:
    """Tell the peer why (when it still listens), then raise LinkRefused."""
    stream.send(FrameKind.RESPONSE, Code.NO_PERMISSION, w.ErrorBody(reason), frame.request_id)
    try:
        async with asyncio.timeout(1.0):
            await stream.drain()
    except (TimeoutError, ConnectionError, OSError):
        pass
    raise LinkRefused(reason)
