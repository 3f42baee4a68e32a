"""The native protocol's authentication: a challenge-response over the HELLO handshake.

A broker that requires authentication puts a random challenge in its HELLO answer; the client
answers with AUTHENTICATE: its access key and ``hex(HMAC-SHA256(secret key, challenge + ":" +
client id))``. The challenge is new for every connection, so a captured answer is worth nothing on
another one (unlike the gRPC clients' signature of a timestamp: docs/security.md).
"""

from __future__ import annotations

import hashlib
import hmac

__all__ = ["challenge_signature"]


def challenge_signature(secret: str, challenge: str, client_id: str) -> str:
    """What a client with ``secret`` answers to ``challenge`` (module doc)."""
    message = f"{challenge}:{client_id}".encode()
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()
