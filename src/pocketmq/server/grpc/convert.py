"""Between v2 protobuf structures and the broker core's values.

Outbound: a message goes into the store with pocketmq's property names (``UNIQ_KEY``, ``TAGS``,
``KEYS``, ``MSG_GROUP``, ``DELIVER_TIME_MS``), exactly as the native SDK writes them, so a message
sent through either protocol is consumed through the other. The client's message id is kept.

Inbound (delivery): every message carries what the official clients need to decode and settle it
(docs/grpc.md, "Message mapping"): ``body_encoding=IDENTITY``, an MD5 ``body_digest``,
``receipt_handle``, ``delivery_attempt`` (≥ 1), queue id and offset, store time and host.

The digest is MD5 in upper-case hex, as RocketMQ's proxy sends it, because it is the one digest
every official client verifies the same way. Their CRC32 checks disagree: Python compares 8
zero-padded hex digits, Java, Go and C# unpadded hex (one body in 16 has a leading zero), and
Node.js a decimal number, so no CRC32 string passes them all (docs/grpc.md, "Body digest").
"""

from __future__ import annotations

import hashlib
import ipaddress
from functools import lru_cache
from typing import Any, Final

from pocketmq import properties as props
from pocketmq.contract import ACCEPTED_KINDS, check_keys, check_user_properties
from pocketmq.model import Delivered, InboundMessage
from pocketmq.server.grpc.encoding import gunzip_body
from pocketmq.server.grpc.pb import AddressScheme, Code, DigestType, Encoding, MessageType, d
from pocketmq.server.grpc.status import V2Error

__all__ = [
    "ACCEPTED_TYPES",
    "SYSTEM_PROPERTIES",
    "delivered_message",
    "duration",
    "endpoints",
    "host_port",
    "inbound_message",
    "message_type_of",
    "seconds",
    "timestamp",
]

C = Code
MT = MessageType

SYSTEM_PROPERTIES: Final = props.SYSTEM_PROPERTIES

# What a topic of each type accepts. Normal topics also take DELAY: the broker schedules a
# delivery time on any topic (4.x semantics, and what the native SDK allows).
ACCEPTED_TYPES: Final[dict[str, tuple[int, ...]]] = {
    topic_type: tuple(sorted(getattr(MessageType, kind.name) for kind in kinds))
    for topic_type, kinds in ACCEPTED_KINDS.items()
}
"""The v2 message types each topic type accepts (the broker's rule: pocketmq.contract)."""

_NORMAL: Final[int] = MT.NORMAL
_FIFO: Final[int] = MT.FIFO
_IDENTITY: Final[int] = Encoding.IDENTITY
_MD5: Final[int] = DigestType.MD5
_GZIP: Final[int] = Encoding.GZIP
_md5: Final = hashlib.md5
_MESSAGE_ID: Final = props.MESSAGE_ID
_TAGS: Final = props.TAGS
_KEYS: Final = props.KEYS
_BORN_HOST: Final = props.BORN_HOST

DEFAULT_MAX_BODY: Final = 4 * 1024 * 1024  # the store's default max_message_size

# The Python client 5.1.2 writes Message.delivery_timestamp into Timestamp.seconds as given, and
# its docstring says milliseconds: a "seconds" value this large is such a millisecond value.
_MS_IN_SECONDS_FIELD: Final = 100_000_000_000  # year 5138 in seconds, 1973 in ms


def seconds(value: Any) -> float:
    """A ``google.protobuf.Duration`` in seconds."""
    return float(value.seconds) + float(value.nanos) / 1e9


def duration(value: float) -> Any:
    """Seconds as a ``google.protobuf.Duration`` (a dict the protobuf constructor accepts), for the
    settings the clients read."""
    whole = int(value)
    return {"seconds": whole, "nanos": round((value - whole) * 1e9)}


def timestamp(ms: int) -> Any:
    """Epoch milliseconds as a ``google.protobuf.Timestamp`` (a dict the protobuf constructor
    accepts)."""
    return {"seconds": ms // 1000, "nanos": (ms % 1000) * 1_000_000}


def _timestamp_ms(value: Any) -> int:
    return int(value.seconds) * 1000 + int(value.nanos) // 1_000_000


@lru_cache(maxsize=256)
def endpoints(address: str) -> Any:
    """``host:port`` (or ``[v6]:port``) as v2 ``Endpoints`` with its address scheme."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        ip = ipaddress.ip_address(host)
        scheme = AddressScheme.IPv4 if ip.version == 4 else AddressScheme.IPv6
    except ValueError:
        scheme = AddressScheme.DOMAIN_NAME
    return d.Endpoints(scheme=scheme, addresses=[d.Address(host=host, port=int(port))])


@lru_cache(maxsize=256)
def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def message_type_of(message: Any) -> int:
    """The message type a v2 message declares, or the one its properties imply."""
    system = message.system_properties
    declared: int = system.message_type
    if declared:
        return declared
    if system.message_group:
        return MT.FIFO  # type: ignore[no-any-return]
    if system.HasField("delivery_timestamp"):
        return MT.DELAY  # type: ignore[no-any-return]
    return MT.NORMAL  # type: ignore[no-any-return]


def _conflict(message: str) -> V2Error:
    return V2Error(C.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, message)


def _check_type(kind: int, system: Any) -> None:
    """The declared message type must agree with the fields that imply one (a v2 message
    says its type twice; the broker's rules see only the fields)."""
    name = d.MessageType.Name
    if kind in (MT.LITE, MT.PRIORITY):
        raise V2Error(C.UNSUPPORTED, f"{name(kind)} messages are not supported")
    if kind not in (MT.NORMAL, MT.FIFO, MT.DELAY, MT.TRANSACTION):
        raise V2Error(C.BAD_REQUEST, f"unknown message type {kind}")
    if bool(system.message_group) != (kind == MT.FIFO):
        raise _conflict("a FIFO message, and only a FIFO message, carries a message group")
    if system.HasField("delivery_timestamp") != (kind == MT.DELAY):
        raise _conflict("a DELAY message, and only a DELAY message, carries a delivery timestamp")


def inbound_message(
    message: Any, now_ms: int, *, max_body: int = DEFAULT_MAX_BODY
) -> tuple[InboundMessage, int]:
    """A v2 message as the broker's ``InboundMessage``, and its message type.

    Only translation: what a message must be to be stored (its body, tag, delivery time, a type
    its topic accepts) is the broker's send contract (pocketmq.contract), checked for every
    protocol. What the v2 form adds is checked here: the declared type against the fields, user
    properties apart from system ones, keys that survive being joined with spaces. This runs
    once per official-client send: it reads each protobuf field once. ``max_body`` bounds a
    GZIP body's decompressed size (the broker's ``max_message_size``).
    """
    topic: str = message.topic.name
    if not topic:
        raise V2Error(C.ILLEGAL_TOPIC, "the message names no topic")
    system = message.system_properties
    body: bytes = message.body
    if system.body_encoding == _GZIP:
        body = gunzip_body(body, max_body)
    kind = message_type_of(message)
    group: str = system.message_group
    if kind != _NORMAL or group:
        _check_type(kind, system)
    elif system.HasField("delivery_timestamp"):
        raise _conflict("a DELAY message, and only a DELAY message, carries a delivery timestamp")
    user = message.user_properties
    properties: dict[str, str] = dict(user) if user else {}
    if properties:
        violation = check_user_properties(properties)
        if violation is not None:
            raise V2Error(C.ILLEGAL_MESSAGE_PROPERTY_KEY, violation.text)
    message_id: str = system.message_id
    if message_id:
        properties[_MESSAGE_ID] = message_id
    tag: str = system.tag
    if tag:
        properties[_TAGS] = tag
    keys = system.keys
    if keys:
        violation = check_keys(keys)
        if violation is not None:
            raise V2Error(C.ILLEGAL_MESSAGE_KEY, violation.text)
        properties[_KEYS] = " ".join(keys)
    if kind != _NORMAL:
        _special(kind, system, group, properties, now_ms)
    born_host: str = system.born_host
    if born_host and not _is_address(born_host):
        properties[_BORN_HOST] = born_host  # a host name: the record keeps addresses only
    born = system.born_timestamp
    born_ms = born.seconds * 1000 + born.nanos // 1_000_000
    return InboundMessage(topic, body, properties, -1, 0, born_ms), kind


def _special(
    kind: int,
    system: Any,
    group: str,
    properties: dict[str, str],
    now_ms: int,
) -> None:
    if kind == MT.FIFO:
        properties[props.MESSAGE_GROUP] = group
    elif kind == MT.DELAY:
        due = system.delivery_timestamp
        due_ms = (
            int(due.seconds)
            if due.seconds >= _MS_IN_SECONDS_FIELD
            else _timestamp_ms(due)  # proper seconds + nanos (every other client)
        )
        # kept even when already due: it makes the message a DELAY message to the broker's
        # rules (a delay topic takes only those), which delivers a past due time at once
        properties[props.DELIVER_TIME_MS] = str(due_ms)
    elif kind == MT.TRANSACTION:
        properties[props.TRANSACTION_PREPARED] = "true"


def delivered_message(message: Delivered, namespace: str, store_host: str, into: Any = None) -> Any:
    """A delivered message as the v2 ``Message`` the official clients decode.

    ``into`` is a ``Message`` field of a response to fill in place (filling fields one by one
    is about three times faster than building nested messages from dicts).
    """
    out = d.Message() if into is None else into
    properties = message.properties
    out.topic.name = message.topic
    if namespace:
        out.topic.resource_namespace = namespace
    out.body = message.body
    user = {k: v for k, v in properties.items() if k not in SYSTEM_PROPERTIES}
    if user:
        out.user_properties.update(user)
    system = out.system_properties
    system.message_id = properties.get(_MESSAGE_ID, "")
    digest = system.body_digest
    digest.type = _MD5
    digest.checksum = _md5(message.body, usedforsecurity=False).hexdigest().upper()
    system.body_encoding = _IDENTITY
    born = message.born_timestamp
    system.born_timestamp.seconds = born // 1000
    system.born_timestamp.nanos = born % 1000 * 1_000_000
    system.born_host = (
        properties.get(_BORN_HOST)
        or message.born_host.rpartition(":")[0].strip("[]")
        or message.born_host
    )
    stored = message.store_timestamp
    system.store_timestamp.seconds = stored // 1000
    system.store_timestamp.nanos = stored % 1000 * 1_000_000
    system.store_host = store_host
    system.queue_id = message.queue_id
    system.queue_offset = message.queue_offset
    system.delivery_attempt = max(1, message.delivery_attempt)
    if message.receipt_handle:
        system.receipt_handle = message.receipt_handle
    tag = properties.get(_TAGS)
    if tag:
        system.tag = tag
    keys = properties.get(_KEYS)
    if keys:
        system.keys.extend(keys.split())
    group = properties.get(props.MESSAGE_GROUP)
    if group:
        system.message_group = group
        system.message_type = _FIFO
    elif props.TRANSACTION_PREPARED in properties:
        system.message_type = MT.TRANSACTION
    else:
        system.message_type = _NORMAL
    return out


def host_port(host: str) -> str:
    """A v2 born host (an address without a port) in the store's ``host:port`` form."""
    if not host:
        return ""
    if host.count(":") > 1 and not host.startswith("["):  # bare IPv6
        return f"[{host}]:0"
    return host if ":" in host else f"{host}:0"
