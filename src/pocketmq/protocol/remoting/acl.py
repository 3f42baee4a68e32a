"""RocketMQ 4.x's remoting signature: how a request proves its access key's secret
(docs/remoting.md, "Authentication").

The client adds ``AccessKey`` (and ``SecurityToken`` when it has one) to the request's ext
fields, concatenates the values of all ext fields sorted by name, appends the body, and sends
``Signature = base64(HMAC-SHA1(secret key, that))`` as one more ext field (apache/rocketmq
``acl/common/AclClientRPCHook.java``, ``AclUtils.combineRequestContent``, ``AclSigner``). The
broker recomputes it over every ext field but ``Signature``
(``PlainAccessValidator.parse``; ``DefaultAuthenticationContextBuilder`` in 5.x). Names sort as
Java strings do, by UTF-16 code unit. ali-ons signs the same way and also sends
``OnsChannel`` (``lib/channel.js``, ``beforeRequest``), which is simply one more field.

One detail differs between RocketMQ versions: ``QUERY_MESSAGE`` carries a ``_UNIQUE_KEY_QUERY``
field that 4.x brokers left out of the signed content and 5.x brokers leave out only for clients
older than 4.9.4 (apache/rocketmq #5310). :func:`verify_signature` accepts either form, both
being computed with the same secret.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from typing import Final

__all__ = [
    "ACCESS_KEY",
    "SECURITY_TOKEN",
    "SIGNATURE",
    "UNIQUE_KEY_QUERY",
    "sign",
    "signed_content",
    "verify_signature",
]

ACCESS_KEY: Final = "AccessKey"
SIGNATURE: Final = "Signature"
SECURITY_TOKEN: Final = "SecurityToken"
UNIQUE_KEY_QUERY: Final = "_UNIQUE_KEY_QUERY"


def _java_order(name: str) -> bytes:
    return name.encode("utf-16-be", "surrogatepass")


def signed_content(
    ext_fields: Mapping[str, str], body: bytes, leave_out: tuple[str, ...] = ()
) -> bytes:
    """What the signature covers: the ext-field values (all but ``Signature`` and
    ``leave_out``) in the order of their names, then the body."""
    names = sorted(
        (name for name in ext_fields if name != SIGNATURE and name not in leave_out),
        key=_java_order,
    )
    return "".join([ext_fields[name] for name in names]).encode() + body


def sign(ext_fields: Mapping[str, str], body: bytes, secret_key: str) -> str:
    """The ``Signature`` of a request whose ext fields (``AccessKey`` included) and body are
    these, as a client computes it."""
    digest = hmac.new(secret_key.encode(), signed_content(ext_fields, body), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def verify_signature(ext_fields: Mapping[str, str], body: bytes, secret_key: str) -> bool:
    """Whether the request's ``Signature`` was made with ``secret_key``. Compared in constant
    time; a request without a signature is not verified."""
    claimed = ext_fields.get(SIGNATURE)
    if not claimed:
        return False
    forms: tuple[tuple[str, ...], ...] = ((),)
    if UNIQUE_KEY_QUERY in ext_fields:
        forms = ((), (UNIQUE_KEY_QUERY,))
    key = secret_key.encode()
    for leave_out in forms:
        content = signed_content(ext_fields, body, leave_out)
        expected = base64.b64encode(hmac.new(key, content, hashlib.sha1).digest()).decode()
        if hmac.compare_digest(expected.encode(), claimed.encode()):
            return True
    return False
