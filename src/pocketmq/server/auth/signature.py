"""The ``authorization`` header of RocketMQ 5's clients, and its check.

``MQv2-HMAC-SHA1 Credential=<AK>, SignedHeaders=x-mq-date-time, Signature=<hex>`` with
``Signature = hex(HMAC-SHA1(SK, x-mq-date-time))``. What each official client really sends:
Java upper-case hex, Python and Go lower-case (compared without case); Go
``Credential=AK//Rocketmq`` (the access key is what comes before the first ``/``). The signature
covers only a timestamp the client chooses, in its local time with a literal ``Z``: it proves
the sender knows the secret, not that the request is fresh — TLS is what keeps it from being
replayed (docs/security.md).
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

__all__ = ["Authorization", "parse_authorization", "signature_matches"]

SCHEME = "MQv2-HMAC-SHA1"


@dataclass(frozen=True, slots=True)
class Authorization:
    """The parts of one header."""

    access_key: str
    signed_headers: str
    signature: str


def parse_authorization(header: str) -> Authorization | None:
    """The header's parts, or None when it is not one (wrong scheme, missing parts)."""
    scheme, _, rest = header.strip().partition(" ")
    if scheme != SCHEME:
        return None
    fields: dict[str, str] = {}
    for part in rest.split(","):
        name, sep, value = part.strip().partition("=")
        if sep:
            fields[name.strip()] = value.strip()
    credential = fields.get("Credential", "")
    access_key = credential.split("/", 1)[0]
    signature = fields.get("Signature", "")
    if not access_key or not signature:
        return None
    return Authorization(access_key, fields.get("SignedHeaders", ""), signature)


def signature_matches(secret: str, date_time: str, signature: str) -> bool:
    """Whether ``signature`` is HMAC-SHA1(secret, date_time) in hex, either case."""
    expected = hmac.new(secret.encode(), date_time.encode(), hashlib.sha1).hexdigest()
    # bytes: compare_digest refuses str with non-ASCII characters (a hostile header has them)
    return hmac.compare_digest(expected.encode(), signature.lower().encode("utf-8", "replace"))
