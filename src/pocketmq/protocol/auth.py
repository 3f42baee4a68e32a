"""The native protocol's authentication: a mutual, channel-bound challenge-response over HELLO.

A server that requires authentication puts a random ``challenge`` in its HELLO answer; the
client sent a random ``client_nonce`` in its HELLO. The client then proves it knows its secret
with :func:`client_proof` in AUTHENTICATE, and the server answers with :func:`server_proof`, which
the client checks: each side shows the other it holds the same secret (docs/security.md,
"The native handshake").

Both proofs are bound to the connection they were made on: the two nonces, the client id, the
server's name as its HELLO gave it, and **the server address as the client's socket sees it**
(``ip:port`` of its peer). A relay in the middle — a rogue broker that forwards the real broker's
challenge to a client and the client's answer back — fails: the client signs the relay's address,
and the real broker refuses a proof made for an address that is not its own. A captured answer
is worth nothing on any other connection (new nonces).

Proofs are ``hex(HMAC-SHA256(secret, label | challenge | client_nonce | client_id | server_name
| server_address))`` with the labels below, so a client's proof can never be replayed as a
server's (or the other way round).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets

from pocketmq.errors import NoPermissionError, ServerIdentityError
from pocketmq.protocol.membership import (
    AuthenticateRequest,
    AuthenticateResponse,
    HelloRequest,
    HelloResponse,
)

__all__ = [
    "ClientHandshake",
    "client_proof",
    "new_nonce",
    "normalize_address",
    "server_proof",
]

_CLIENT_LABEL = "pocketmq-auth-2 client"
_SERVER_LABEL = "pocketmq-auth-2 server"


def _proof(
    label: str,
    secret: str,
    challenge: str,
    client_nonce: str,
    client_id: str,
    server_name: str,
    server_address: str,
) -> str:
    message = "|".join(
        (label, challenge, client_nonce, client_id, server_name, server_address)
    ).encode("utf-8", "surrogatepass")
    return hmac.new(secret.encode("utf-8", "surrogatepass"), message, hashlib.sha256).hexdigest()


def client_proof(
    secret: str,
    challenge: str,
    client_nonce: str,
    client_id: str,
    server_name: str,
    server_address: str,
) -> str:
    """What a client holding ``secret`` sends in AUTHENTICATE (module doc)."""
    return _proof(
        _CLIENT_LABEL, secret, challenge, client_nonce, client_id, server_name, server_address
    )


def server_proof(
    secret: str,
    challenge: str,
    client_nonce: str,
    client_id: str,
    server_name: str,
    server_address: str,
) -> str:
    """What the server answers to a valid AUTHENTICATE, proving it knows the same secret."""
    return _proof(
        _SERVER_LABEL, secret, challenge, client_nonce, client_id, server_name, server_address
    )


def normalize_address(host: str, port: int) -> str:
    """``ip:port`` in one spelling for both ends of a connection: an IPv4-mapped IPv6 address
    becomes IPv4, IPv6 is compressed and bracketed, and a name is kept as it is (lower case)."""
    try:
        ip = ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return f"{host.lower()}:{port}"
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if isinstance(ip, ipaddress.IPv6Address):
        return f"[{ip.compressed}]:{port}"
    return f"{ip}:{port}"


def new_nonce() -> str:
    """A fresh random nonce or challenge: 16 bytes as 32 hex digits."""
    return secrets.token_hex(16)


class ClientHandshake:
    """The client's side of the handshake, without I/O (module doc): the ``HELLO`` to send, the
    ``AUTHENTICATE`` that answers the server's challenge, and the check of the server's proof.

    A client holding credentials (``access_key``) insists on a server that proves it knows the
    secret: one that asks for no authentication, or proves nothing, is a
    :class:`~pocketmq.errors.ServerIdentityError` — a relay or a rogue, not the server meant.
    ``missing_credentials`` completes the error of a client without credentials asked for them
    (what to configure)."""

    def __init__(
        self,
        client_id: str,
        access_key: str = "",
        secret_key: str = "",
        *,
        missing_credentials: str = "",
    ) -> None:
        self.client_id = client_id
        self.client_nonce = new_nonce()
        self._access_key = access_key
        self._secret_key = secret_key
        self._missing = missing_credentials
        self._expected = ""
        self._where = ""

    def hello(self, client_version: str, protocol_version: int) -> HelloRequest:
        """The first frame of the connection."""
        return HelloRequest(
            protocol_version, self.client_id, client_version, client_nonce=self.client_nonce
        )

    def authenticate(
        self, hello: HelloResponse, server_address: str, where: str
    ) -> AuthenticateRequest | None:
        """What answers ``hello`` from the server at ``server_address`` (``ip:port`` of the
        socket's peer, normalized) — None when neither side asks for authentication. ``where``
        names the server in errors."""
        self._where = where
        challenge = hello.auth_challenge
        if not challenge:
            if self._access_key:
                raise ServerIdentityError(
                    f"the server at {where} asks for no authentication, so it cannot prove it "
                    'knows your secret: not the broker you meant? (docs/security.md, "The '
                    'native handshake")',
                    address=where,
                )
            return None
        if not self._access_key:
            raise NoPermissionError(
                f"the {hello.role or 'server'} at {where} requires authentication"
                + (f": {self._missing}" if self._missing else "")
            )
        parts = (challenge, self.client_nonce, self.client_id, hello.server_name, server_address)
        self._expected = server_proof(self._secret_key, *parts)
        return AuthenticateRequest(
            self._access_key, client_proof(self._secret_key, *parts), server_address
        )

    def check(self, answer: AuthenticateResponse) -> None:
        """Verify the server's proof (constant time); a wrong or missing one is a
        :class:`~pocketmq.errors.ServerIdentityError`."""
        given = answer.server_proof.lower().encode("utf-8", "replace")
        if not self._expected or not hmac.compare_digest(self._expected.encode(), given):
            raise ServerIdentityError(
                f"the server at {self._where} did not prove it knows your secret: not the broker "
                'you meant? (docs/security.md, "The native handshake")',
                address=self._where,
            )
