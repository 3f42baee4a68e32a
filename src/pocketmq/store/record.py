"""The commit-log record codec (docs/storage-format.md §1), pure functions over bytes.

Encoding returns the record as a list of byte pieces so a batch can be joined once and written
with one system call; the body is never copied twice. Decoding verifies the CRC and the record's
own physical offset, so a torn or misplaced record is never mistaken for a message.
"""

from __future__ import annotations

import ipaddress
import struct
import zlib
from typing import Any, Final, NamedTuple

import msgspec

from pocketmq.properties import TAGS
from pocketmq.store.checksum import crc32
from pocketmq.store.message import StoredMessage, StoreMessage

__all__ = [
    "BLANK_MAGIC",
    "FIXED_HEADER_SIZE",
    "MAGIC",
    "MIN_RECORD_SIZE",
    "RecordError",
    "RecordSkim",
    "compute_tag_code",
    "decode_record",
    "encode_properties",
    "encode_properties_fast",
    "encode_record",
    "encode_stored",
    "pack_host",
    "skim_record",
    "unpack_host",
]

MAGIC: Final = 0x504D5101
BLANK_MAGIC: Final = 0x504D51FF
FIXED_HEADER_SIZE: Final = 108
MIN_RECORD_SIZE: Final = FIXED_HEADER_SIZE + 2 + 1 + 4 + 1 + 4  # 1-byte topic, empty map, no body

# total_size, magic, crc
_PREFIX: Final = struct.Struct("<III")
# flags, queue_id, queue_offset, physical_offset, born_ts, store_ts, born_host, store_host,
# reconsume_times, prepared_transaction_offset, tag_code
_TAIL: Final = struct.Struct("<IIQQQQ18s18sIQQ")
_HEADER: Final = struct.Struct("<IIIIIQQQQ18s18sIQQ")
_U16: Final = struct.Struct("<H")
_U32: Final = struct.Struct("<I")
_NO_HOST: Final = b"\x00" * 18

_encode_props = msgspec.msgpack.Encoder().encode
encode_properties_fast: Final = _encode_props
"""The hot-path form of :func:`encode_properties` (the encoder's own method: no Python frame
per record)."""
_decode_props = msgspec.msgpack.Decoder(dict[str, str]).decode

_topic_blocks: dict[str, bytes] = {}
# the fixed fields, a topic block of n bytes and the properties' length, as one Struct per n
# (one pack per record instead of two and a longer join; the bytes are the same)
_metas: dict[int, struct.Struct] = {}
_host_texts: dict[bytes, str] = {_NO_HOST: ""}
_tag_codes: dict[str, int] = {}


class RecordError(ValueError):
    """A record that fails validation; ``reason`` says which rule it broke."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def compute_tag_code(tag: str | None) -> int:
    """The consume-queue tag code: CRC-32 of the tag, 0 for no tag."""
    if not tag:
        return 0
    code = _tag_codes.get(tag)
    if code is None:
        code = zlib.crc32(tag.encode()) or 1
        if len(_tag_codes) > 65536:
            _tag_codes.clear()
        _tag_codes[tag] = code
    return code


def pack_host(address: str) -> bytes:
    """``"host:port"`` (IPv4, or ``[v6]:port``) as 16 address bytes + u16 port; b'' for none."""
    if not address:
        return _NO_HOST
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return _NO_HOST
    raw = ip.packed if ip.version == 6 else ipaddress.IPv6Address(f"::ffff:{ip}").packed
    return raw + struct.pack("<H", int(port or 0) & 0xFFFF)


def unpack_host(raw: bytes) -> str:
    """The ``host:port`` text of a record's 18-byte address field ("" for none); remembered,
    because every read decodes two and a broker sees few distinct hosts."""
    text = _host_texts.get(raw)
    if text is not None:
        return text
    if raw == _NO_HOST:
        return ""
    ip = ipaddress.IPv6Address(raw[:16])
    (port,) = struct.unpack("<H", raw[16:18])
    text = f"{ip.ipv4_mapped}:{port}" if ip.ipv4_mapped is not None else f"[{ip}]:{port}"
    if len(_host_texts) > 65536:
        _host_texts.clear()
        _host_texts[_NO_HOST] = ""
    _host_texts[raw] = text
    return text


def topic_block(topic: str) -> bytes:
    """The record's topic field (u16 length + UTF-8), cached per topic."""
    block = _topic_blocks.get(topic)
    if block is None:
        raw = topic.encode()
        block = _U16.pack(len(raw)) + raw
        if len(_topic_blocks) > 65536:
            _topic_blocks.clear()
        _topic_blocks[topic] = block
    return block


def encode_record(
    *,
    topic: str,
    queue_id: int,
    queue_offset: int,
    physical_offset: int,
    body: bytes,
    properties: dict[str, str],
    flags: int = 0,
    born_timestamp: int = 0,
    store_timestamp: int = 0,
    born_host: bytes = _NO_HOST,
    store_host: bytes = _NO_HOST,
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    tag_code: int = 0,
    encoded_properties: bytes | None = None,
) -> list[bytes]:
    """The record's bytes as pieces to join; the first 4 bytes are its total size."""
    props = encoded_properties if encoded_properties is not None else _encode_props(properties)
    block = topic_block(topic)
    total = FIXED_HEADER_SIZE + len(block) + 8 + len(props) + len(body)
    message = StoreMessage(
        topic,
        queue_id,
        body,
        properties,
        flags,
        born_timestamp,
        born_host,
        reconsume_times,
        prepared_transaction_offset,
        tag_code,
    )
    prefix, meta, _ = encode_stored(
        message, block, props, queue_offset, physical_offset, store_timestamp, store_host, total
    )
    return [prefix, meta, body]


def encode_stored(
    message: StoreMessage,
    topic_block: bytes,
    encoded_properties: bytes,
    queue_offset: int,
    physical_offset: int,
    store_timestamp: int,
    store_host: bytes,
    total: int,
) -> tuple[bytes, bytes, int]:
    """The hot-path form of :func:`encode_record`, the one place a message's fields become a
    record (both shapes of the writer's append call it): the topic block, encoded properties
    and size precomputed (:meth:`Writer._prepare` checked them), the message's own fields read
    here. A message without a born host is stamped with ``store_host``; one without a tag code
    gets its ``TAGS`` property's (0: no tag).

    Returns ``(crc-carrying prefix, header and metadata, tag code)``; the record is written as
    ``prefix + meta + body``.
    """
    code = message.tag_code
    properties = message.properties
    if code is None:
        tag = properties.get(TAGS)
        code = compute_tag_code(tag) if tag else 0  # no tag: 0, without the call
    head = _metas.get(len(topic_block))
    if head is None:
        head = _metas[len(topic_block)] = struct.Struct(f"{_TAIL.format}{len(topic_block)}sI")
    body = message.body
    meta = b"".join(
        (
            head.pack(
                message.flags,
                message.queue_id,
                queue_offset,
                physical_offset,
                message.born_timestamp,
                store_timestamp,
                message.born_host or store_host,
                store_host,
                message.reconsume_times,
                message.prepared_transaction_offset,
                code,
                topic_block,
                len(encoded_properties),
            ),
            encoded_properties,
            _U32.pack(len(body)),
        )
    )
    return _PREFIX.pack(total, MAGIC, crc32(body, crc32(meta))), meta, code


def encode_properties(properties: dict[str, str]) -> bytes:
    """A message's properties as the record stores them (MessagePack map), encoded once so the
    writer can check their size before it builds the record."""
    return _encode_props(properties)


class RecordSkim(NamedTuple):
    """What dispatching a record needs (queue entry, index keys, tombstones), read without
    copying its body or decoding its hosts: a slave checks and dispatches every record it
    receives, so the full decode's cost would be paid twice per message."""

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    size: int
    tag_code: int
    properties: dict[str, str]
    body: memoryview


def _parse(
    buf: bytes | bytearray | memoryview,
    pos: int,
    expected_physical_offset: int | None,
    verify_crc: bool,
) -> tuple[tuple[Any, ...], memoryview, str, dict[str, str], int]:
    """Validate the record at ``buf[pos:]``: its header fields, the record's view, its topic,
    its properties and where its body starts (in the view); raises :class:`RecordError`."""
    available = len(buf) - pos
    if available < FIXED_HEADER_SIZE:
        raise RecordError("truncated header")
    header = _HEADER.unpack_from(buf, pos)
    total, magic, crc = header[0], header[1], header[2]
    if magic != MAGIC:
        raise RecordError("bad magic")
    if total < MIN_RECORD_SIZE:
        raise RecordError("bad size")
    if total > available:
        raise RecordError("truncated record")
    view = memoryview(buf)[pos : pos + total]
    if verify_crc and crc32(view[12:]) != crc:
        raise RecordError("crc mismatch")
    if expected_physical_offset is not None and header[6] != expected_physical_offset:
        raise RecordError("misplaced record")
    (topic_len,) = _U16.unpack_from(view, FIXED_HEADER_SIZE)
    cursor = FIXED_HEADER_SIZE + 2
    if cursor + topic_len + 4 > total:
        raise RecordError("bad topic length")
    topic = bytes(view[cursor : cursor + topic_len]).decode()
    cursor += topic_len
    (props_len,) = _U32.unpack_from(view, cursor)
    cursor += 4
    if cursor + props_len + 4 > total:
        raise RecordError("bad properties length")
    props = _decode_props(view[cursor : cursor + props_len]) if props_len else {}
    cursor += props_len
    (body_len,) = _U32.unpack_from(view, cursor)
    cursor += 4
    if cursor + body_len != total:
        raise RecordError("bad body length")
    return header, view, topic, props, cursor


def skim_record(
    buf: bytes | bytearray | memoryview, pos: int, expected_physical_offset: int
) -> RecordSkim:
    """Validate the record at ``buf[pos:]`` exactly as :func:`decode_record` does (CRC and
    place included) and return what dispatching it needs; raises :class:`RecordError`."""
    header, view, topic, props, body_at = _parse(buf, pos, expected_physical_offset, True)
    return RecordSkim(
        topic, header[4], header[5], header[6], header[0], header[13], props, view[body_at:]
    )


def decode_record(
    buf: bytes | bytearray | memoryview,
    pos: int = 0,
    *,
    expected_physical_offset: int | None = None,
    verify_crc: bool = True,
) -> StoredMessage:
    """Decode and validate the record at ``buf[pos:]``; raises :class:`RecordError` if invalid.

    The same checks as :func:`_parse`, in the same order, written out here once more: every
    pulled message passes here, and going through :func:`_parse` (its tuple, its memoryviews)
    and building the message by keyword cost 18 % more per record; :func:`skim_record` keeps
    :func:`_parse`, which spares it the body's copy (docs/benchmarks.md, "Broker consume path
    (issue 32, third slice)")."""
    available = len(buf) - pos
    if available < FIXED_HEADER_SIZE:
        raise RecordError("truncated header")
    (
        total,
        magic,
        crc,
        flags,
        queue_id,
        queue_offset,
        physical_offset,
        born_ts,
        store_ts,
        born_host,
        store_host,
        reconsume_times,
        prepared_offset,
        code,
    ) = _HEADER.unpack_from(buf, pos)
    if magic != MAGIC:
        raise RecordError("bad magic")
    if total < MIN_RECORD_SIZE:
        raise RecordError("bad size")
    if total > available:
        raise RecordError("truncated record")
    # slices, not memoryviews: copying a 1 KiB record's pieces costs less than making the views
    end = pos + total
    if verify_crc and crc32(buf[pos + 12 : end]) != crc:
        raise RecordError("crc mismatch")
    if expected_physical_offset is not None and physical_offset != expected_physical_offset:
        raise RecordError("misplaced record")
    cursor = pos + FIXED_HEADER_SIZE + 2
    (topic_len,) = _U16.unpack_from(buf, cursor - 2)
    if cursor + topic_len + 4 > end:
        raise RecordError("bad topic length")
    topic = str(buf[cursor : cursor + topic_len], "utf-8")
    cursor += topic_len
    (props_len,) = _U32.unpack_from(buf, cursor)
    cursor += 4
    if cursor + props_len + 4 > end:
        raise RecordError("bad properties length")
    props = _decode_props(buf[cursor : cursor + props_len]) if props_len else {}
    cursor += props_len
    (body_len,) = _U32.unpack_from(buf, cursor)
    cursor += 4
    if cursor + body_len != end:
        raise RecordError("bad body length")
    hosts = _host_texts
    return StoredMessage(
        topic,
        queue_id,
        queue_offset,
        physical_offset,
        total,
        bytes(buf[cursor:end]),
        props,
        flags,
        born_ts,
        store_ts,
        hosts[born_host] if born_host in hosts else unpack_host(born_host),
        hosts[store_host] if store_host in hosts else unpack_host(store_host),
        reconsume_times,
        prepared_offset,
        code,
    )
