"""The server's side of the native handshake: who may authenticate, and the check of a proof
(docs/security.md, "The native handshake"; the proofs are :mod:`pocketmq.protocol.auth`).

Three kinds of identity prove a secret the same way: the users of ``pocketmq user``; the cluster's
members (:data:`~pocketmq.server.auth.cluster.CLUSTER_USER`, any line of the cluster key); and a
broker's own proxy workers (:data:`~pocketmq.server.auth.users.GATEWAY_USER`, a secret the broker
makes at each start). A proof counts only for an address of this server — the one the
connection arrived at, or one the operator declared (``reachable_at``, the advertised address) —
so a relay's client, who signed the relay's address, is refused. Failures are throttled per
source address (:mod:`pocketmq.server.auth.throttle`).
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from dataclasses import dataclass

from pocketmq.errors import NoPermissionError, TooManyRequestsError
from pocketmq.protocol.auth import client_proof, new_nonce, normalize_address, server_proof
from pocketmq.server.auth.cluster import CLUSTER_USER, ClusterKeyFile
from pocketmq.server.auth.failures import count as count_failure
from pocketmq.server.auth.throttle import FailureThrottle
from pocketmq.server.auth.users import GATEWAY_USER, UserStore

__all__ = ["Attempt", "Authenticator", "parse_reachable"]


@dataclass(frozen=True, slots=True)
class Attempt:
    """One ``AUTHENTICATE``, with what the connection knows of its handshake."""

    access_key: str
    proof: str
    server_address: str  # as the client saw it
    challenge: str
    client_nonce: str
    client_id: str
    server_name: str
    local_address: str  # where the connection arrived (the accepting socket, normalized)
    source: str  # the peer's IP: the throttle's key


def parse_reachable(entries: Iterable[str]) -> set[str]:
    """``ip:port`` entries (``[server] reachable_at``), normalized; a malformed one is a
    ValueError naming it."""
    found: set[str] = set()
    for entry in entries:
        host, _, port = entry.strip().rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"reachable_at entry {entry!r} is not ip:port")
        found.add(normalize_address(host, int(port)))
    return found


class Authenticator:
    """The identities one port accepts and the check of their proofs (module doc).

    ``reachable``: addresses clients may reach this port at besides the one a connection
    arrives at (NAT, port forwarding, the advertised address); the app adds the advertised one
    once its port is known."""

    def __init__(
        self,
        users: UserStore | None,
        cluster_key: ClusterKeyFile | None = None,
        *,
        gateway_secret: str = "",
        throttle: FailureThrottle | None = None,
        reachable: Iterable[str] = (),
    ) -> None:
        self.users = users
        self.cluster_key = cluster_key
        self._gateway_secret = gateway_secret
        self.throttle = throttle or FailureThrottle()
        self.reachable = parse_reachable(reachable)

    @staticmethod
    def challenge() -> str:
        """A fresh challenge for a HELLO answer."""
        return new_nonce()

    def _secrets(self, access_key: str) -> tuple[str, ...]:
        if access_key == CLUSTER_USER:
            return self.cluster_key.key().secrets if self.cluster_key is not None else ()
        if access_key == GATEWAY_USER:
            return (self._gateway_secret,) if self._gateway_secret else ()
        if self.users is None:
            return ()
        self.users.refresh()
        secret = self.users.secret(access_key)
        return (secret,) if secret is not None else ()

    def verify(self, attempt: Attempt) -> str:
        """The server's proof for a valid attempt; else :class:`NoPermissionError` (counted
        against its source), or :class:`TooManyRequestsError` while its source may not try."""
        wait = self.throttle.wait(attempt.source)
        if wait > 0:
            count_failure("native", "throttled")
            raise TooManyRequestsError(
                f"too many failed logins from {attempt.source}: try again in {wait:.0f} s"
            )
        problem = self._problem(attempt)
        if isinstance(problem, str):
            self.throttle.failed(attempt.source)
            count_failure("native", "unauthenticated")
            raise NoPermissionError(problem)
        return problem[0]

    def _problem(self, attempt: Attempt) -> str | tuple[str]:
        """Why ``attempt`` fails, or (the server's proof,)."""
        if len(attempt.client_nonce) < 16:
            return (
                "this client speaks the first authentication handshake (no client nonce), which "
                'is no longer accepted: upgrade pocketmq (docs/protocol.md, "Handshake")'
            )
        if (
            attempt.server_address != attempt.local_address
            and attempt.server_address not in self.reachable
        ):
            return (
                f"you connected to {attempt.server_address or '?'}, which is not an address of "
                "this server: a relay between you and it? (a port mapping or load balancer of "
                "yours: declare it in reachable_at, docs/security.md)"
            )
        parts = (
            attempt.challenge,
            attempt.client_nonce,
            attempt.client_id,
            attempt.server_name,
            attempt.server_address,
        )
        given = attempt.proof.lower().encode("utf-8", "replace")  # bytes: any text compares
        # an unknown key is checked against a throwaway secret: the same work as a known one
        for secret in self._secrets(attempt.access_key) or (new_nonce(),):
            if hmac.compare_digest(client_proof(secret, *parts).encode(), given):
                return (server_proof(secret, *parts),)
        return f"access key {attempt.access_key!r} and proof do not match a user"
