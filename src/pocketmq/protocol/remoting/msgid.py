"""``offsetMsgId``: the id RocketMQ derives from where a message is stored (docs/remoting.md,
"Message ids").

32 upper-case hex digits for an IPv4 store host (4 address bytes, a 4-byte port, the 8-byte
commit-log offset) or 56 for IPv6 (16 + 4 + 8), as apache/rocketmq
``common/.../message/MessageDecoder.java`` (``createMessageId``, ``decodeMessageId``) builds it.
A send's response names it (``msgId``), a consumer computes it from a pulled record's store host
and commit-log offset (ali-ons uses it as the message's id, having no ``UNIQ_KEY``), and
``VIEW_MESSAGE_BY_ID`` and ``CONSUMER_SEND_MSG_BACK`` name a message by it. The producer's own
id, ``UNIQ_KEY``, is a property (:data:`pocketmq.properties.MESSAGE_ID`).
"""

from __future__ import annotations

import binascii
import functools
import ipaddress
import struct
from typing import Final, NamedTuple

from pocketmq.errors import LocalProtocolError
from pocketmq.protocol.remoting.stored import pack_address

__all__ = ["OffsetMessageId", "decode_offset_msg_id", "encode_offset_msg_id"]

_TAIL: Final = struct.Struct(">iq")
_I32: Final = struct.Struct(">i")


class OffsetMessageId(NamedTuple):
    """What an ``offsetMsgId`` says: the store host and the commit-log offset."""

    host: str
    port: int
    commit_log_offset: int


@functools.lru_cache(maxsize=64)
def _host_prefix(store_host: str) -> str:
    address, port, _ = pack_address(store_host)
    return (address + _I32.pack(port)).hex().upper()


def encode_offset_msg_id(store_host: str, commit_log_offset: int) -> str:
    """The ``offsetMsgId`` of the message stored at ``commit_log_offset`` by the broker whose
    address (``ip:port``) is ``store_host`` (the host's part is computed once per host: a
    send's answer names one per message)."""
    return f"{_host_prefix(store_host)}{commit_log_offset & 0xFFFFFFFFFFFFFFFF:016X}"


def decode_offset_msg_id(msg_id: str) -> OffsetMessageId:
    """The store host and commit-log offset an ``offsetMsgId`` names; anything but 32 or 56 hex
    digits is a :class:`ProtocolError`."""
    if len(msg_id) not in (32, 56):
        raise LocalProtocolError(f"offsetMsgId {msg_id[:64]!r} is not 32 or 56 hex digits")
    try:
        raw = binascii.unhexlify(msg_id)
    except (binascii.Error, ValueError):
        raise LocalProtocolError(f"offsetMsgId {msg_id!r} is not hexadecimal") from None
    size = 4 if len(raw) == 16 else 16
    port, offset = _TAIL.unpack_from(raw, size)
    return OffsetMessageId(str(ipaddress.ip_address(raw[:size])), port, offset)
