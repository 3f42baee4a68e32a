"""The stored-message records a ``PULL_MESSAGE`` response carries (and ``VIEW_MESSAGE_BY_ID``,
``QUERY_MESSAGE``, ``CHECK_TRANSACTION_STATE``): RocketMQ's commit-log layout, big-endian, one
record after another (docs/remoting.md, "Stored messages").

The layout follows apache/rocketmq ``common/.../message/MessageDecoder.java`` (``encode`` and
``decode``): total size, magic code, body CRC, queue id, flag, queue offset, commit-log offset,
sysFlag, born timestamp, born host (4- or 16-byte address + port), store timestamp, store
host, reconsume times, prepared-transaction offset, body (length-prefixed), topic (1-byte
length, or 2 bytes with the V2 magic code for topics over 127 bytes) and properties (2-byte
length). ali-ons reads IPv4 hosts and 1-byte topic lengths only
(``lib/message/message_decoder.js``), which is what the encoder writes for IPv4 addresses and
topics of at most 127 bytes (every topic pocketmq stores).

The encoder packs each record's fixed part with one precompiled ``struct`` call.
"""

from __future__ import annotations

import functools
import ipaddress
import struct
import zlib
from collections.abc import Iterable
from typing import Final

import msgspec

from pocketmq.errors import LocalProtocolError
from pocketmq.protocol.remoting.properties import decode_properties_bytes, encode_properties_bytes
from pocketmq.protocol.remoting.sysflag import BORNHOST_V6, COMPRESSED, STOREHOST_V6, inflate_body

__all__ = [
    "MAGIC_V1",
    "MAGIC_V2",
    "StoredMessage",
    "body_crc",
    "decode_stored",
    "encode_stored",
    "pack_address",
]

#: ``MESSAGE_MAGIC_CODE`` (-626843481) and ``MESSAGE_MAGIC_CODE_V2`` (-626843477), unsigned.
MAGIC_V1: Final = 0xDAA320A7
MAGIC_V2: Final = 0xDAA320AB
_MAX_V1_TOPIC: Final = 127

# total, magic, crc, queue id, flag, queue offset, commit-log offset, sysFlag, born timestamp
_FRONT: Final = ">iIIiIqqIq"
# born timestamp .. body length, for each (born host v6, store host v6)
_FIXED: Final = {
    (born, store): struct.Struct(f"{_FRONT}{born}siq{store}siiqi")
    for born in ("4", "16")
    for store in ("4", "16")
}
_I32: Final = struct.Struct(">i")
_I16: Final = struct.Struct(">h")
_U8: Final = struct.Struct(">B")
_HOST_SIZES: Final = {False: 4, True: 16}


class StoredMessage(msgspec.Struct, gc=False):
    """One message as RocketMQ's ``MessageExt``: what a consumer receives, with the store's
    fields. ``body`` is the body as it travels (compressed when ``sys_flag`` says so);
    ``born_host`` and ``store_host`` are ``ip:port`` (``[v6]:port`` for IPv6; a host name or
    an empty text travels as 0.0.0.0:0). ``body_crc`` is filled by the decoder; the encoder
    computes it."""

    topic: str
    body: bytes
    properties: dict[str, str]
    queue_id: int = 0
    queue_offset: int = 0
    commit_log_offset: int = 0
    sys_flag: int = 0
    flag: int = 0
    born_timestamp: int = 0
    born_host: str = ""
    store_timestamp: int = 0
    store_host: str = ""
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    body_crc: int = 0


def body_crc(body: bytes) -> int:
    """RocketMQ's body checksum: CRC32 masked to 31 bits (``UtilAll.crc32``)."""
    return zlib.crc32(body) & 0x7FFFFFFF


@functools.lru_cache(maxsize=4096)
def pack_address(address: str) -> tuple[bytes, int, bool]:
    """``ip:port`` (or ``[v6]:port``) as the record's address bytes, port and whether it is
    IPv6; anything else (a host name, "") as 0.0.0.0 port 0. Cached: a broker sees few hosts."""
    host, _, port = address.rpartition(":")
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
        number = int(port)
    except ValueError:
        return bytes(4), 0, False
    if not 0 <= number <= 65535:
        return bytes(4), 0, False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.packed, number, ip.version == 6


@functools.lru_cache(maxsize=4096)
def _address_text(raw: bytes, port: int) -> str:
    ip = ipaddress.ip_address(raw)
    return f"{ip}:{port}" if ip.version == 4 else f"[{ip}]:{port}"


@functools.lru_cache(maxsize=4096)
def _topic_block(topic: str) -> tuple[bytes, int]:
    try:
        raw = topic.encode()
    except UnicodeEncodeError:
        raise LocalProtocolError(f"topic {topic!r} is not encodable as UTF-8") from None
    if len(raw) <= _MAX_V1_TOPIC:
        return _U8.pack(len(raw)) + raw, MAGIC_V1
    if len(raw) >= 2**15:
        raise LocalProtocolError(f"topic of {len(raw)} bytes does not fit a stored record")
    return _I16.pack(len(raw)) + raw, MAGIC_V2


def _encode_one(message: StoredMessage) -> bytes:
    topic, magic = _topic_block(message.topic)
    properties = encode_properties_bytes(message.properties)
    born, born_port, born_v6 = pack_address(message.born_host)
    store, store_port, store_v6 = pack_address(message.store_host)
    sys_flag = message.sys_flag & ~(BORNHOST_V6 | STOREHOST_V6)
    sys_flag |= (BORNHOST_V6 if born_v6 else 0) | (STOREHOST_V6 if store_v6 else 0)
    fixed = _FIXED["16" if born_v6 else "4", "16" if store_v6 else "4"]
    body = message.body
    total = fixed.size + len(body) + len(topic) + 2 + len(properties)
    return b"".join(
        (
            fixed.pack(
                total,
                magic,
                body_crc(body),
                message.queue_id,
                message.flag & 0xFFFFFFFF,
                message.queue_offset,
                message.commit_log_offset,
                sys_flag & 0xFFFFFFFF,
                message.born_timestamp,
                born,
                born_port,
                message.store_timestamp,
                store,
                store_port,
                message.reconsume_times,
                message.prepared_transaction_offset,
                len(body),
            ),
            body,
            topic,
            _I16.pack(len(properties)),
            properties,
        )
    )


def encode_stored(messages: Iterable[StoredMessage]) -> bytes:
    """The records of ``messages``, one after another, as a pull response's body. A message
    that cannot be represented (properties over 32 KiB, a separator inside a property name) is a
    :class:`ProtocolError` naming why."""
    try:
        return b"".join([_encode_one(message) for message in messages])
    except struct.error as exc:  # a field outside its Java type's range
        raise LocalProtocolError(f"stored message field out of range: {exc}") from None


def _decode_one(
    data: memoryview, position: int, decompress: bool, max_body: int
) -> tuple[StoredMessage, int]:
    end = len(data)
    if end - position < 8:
        raise LocalProtocolError("stored message record is truncated")
    total, magic = struct.unpack_from(">iI", data, position)
    record_end = position + total
    if total < 8 or record_end > end:
        raise LocalProtocolError(f"stored message record of {total} bytes overruns its buffer")
    if magic not in (MAGIC_V1, MAGIC_V2):
        raise LocalProtocolError(f"stored message record has an unknown magic code {magic:#x}")
    (sys_flag,) = struct.unpack_from(">I", data, position + 36)
    fixed = _FIXED[
        "16" if sys_flag & BORNHOST_V6 else "4", "16" if sys_flag & STOREHOST_V6 else "4"
    ]
    if position + fixed.size > record_end:
        raise LocalProtocolError("stored message record is shorter than its fixed fields")
    (_total, _magic, crc, queue_id, flag, queue_offset, commit_log_offset, _sys, born_timestamp,
     born, born_port, store_timestamp, store, store_port, reconsume_times, prepared,
     body_size) = fixed.unpack_from(data, position)  # fmt: skip
    cursor = position + fixed.size
    if body_size < 0 or cursor + body_size > record_end:
        raise LocalProtocolError(f"stored message body of {body_size} bytes overruns its record")
    body = bytes(data[cursor : cursor + body_size])
    cursor += body_size
    width = 1 if magic == MAGIC_V1 else 2
    if cursor + width > record_end:
        raise LocalProtocolError("stored message topic overruns its record")
    topic_size = data[cursor] if width == 1 else _I16.unpack_from(data, cursor)[0]
    cursor += width
    if topic_size < 0 or cursor + topic_size + 2 > record_end:
        raise LocalProtocolError("stored message topic overruns its record")
    try:
        topic = str(data[cursor : cursor + topic_size], "utf-8")
    except UnicodeDecodeError:
        raise LocalProtocolError("stored message topic is not UTF-8") from None
    cursor += topic_size
    (properties_size,) = _I16.unpack_from(data, cursor)
    cursor += 2
    if properties_size < 0 or cursor + properties_size != record_end:
        raise LocalProtocolError("stored message properties do not end their record")
    properties = decode_properties_bytes(data[cursor:record_end])
    if decompress and sys_flag & COMPRESSED:
        body = inflate_body(body, sys_flag, max_body)
        sys_flag &= ~COMPRESSED
    message = StoredMessage(
        topic, body, properties, queue_id, queue_offset, commit_log_offset, sys_flag, flag,
        born_timestamp, _address_text(born, born_port), store_timestamp,
        _address_text(store, store_port), reconsume_times, prepared, crc,
    )  # fmt: skip
    return message, record_end


def decode_stored(
    data: bytes, decompress: bool = True, max_body: int = 16 * 1024 * 1024
) -> list[StoredMessage]:
    """The records in ``data`` (a pull response's body). Compressed bodies are inflated (at most
    ``max_body`` bytes each) and their flag cleared, as RocketMQ's client decoder does, unless
    ``decompress`` is false. A malformed record is a :class:`ProtocolError`."""
    messages: list[StoredMessage] = []
    view = memoryview(data)
    position = 0
    try:
        while position < len(view):
            message, position = _decode_one(view, position, decompress, max_body)
            messages.append(message)
    finally:
        view.release()
    return messages
