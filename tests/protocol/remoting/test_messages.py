"""Messages on RocketMQ's remoting wire: properties, sysFlag compression, the stored records a
pull returns and the batch encoding of a send. Expected bytes are written out field by field
from apache/rocketmq ``common/.../message/MessageDecoder.java`` (``encode``/``decode``,
``encodeMessage``/``decodeMessage``, ``messageProperties2String``/``string2messageProperties``),
``MessageSysFlag.java``, ``CompressionType.java`` and ``UtilAll.crc32``."""

from __future__ import annotations

import socket
import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pocketmq.errors import ProtocolError
from pocketmq.protocol.remoting.batch import BatchMessage, decode_batch, encode_batch
from pocketmq.protocol.remoting.properties import decode_properties, encode_properties
from pocketmq.protocol.remoting.stored import (
    MAGIC_V1,
    MAGIC_V2,
    StoredMessage,
    decode_stored,
    encode_stored,
)
from pocketmq.protocol.remoting.sysflag import (
    BORNHOST_V6,
    COMPRESSED,
    COMPRESSION_ZLIB,
    STOREHOST_V6,
    compress_body,
    inflate_body,
)

# -- properties ------------------------------------------------------------------------------


def test_properties_are_name_value_pairs_with_control_separators() -> None:
    text = encode_properties({"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "ABC"})
    assert text == "TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01ABC\x02"
    assert decode_properties(text) == {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "ABC"}


def test_decoding_drops_entries_without_a_name_or_a_value_as_rocketmq_does() -> None:
    # string2messageProperties keeps an entry only when the name and the value are non-empty;
    # only the first \u0001 separates, so a value may hold more of them
    text = "a\x01\x02\x01b\x02noseparator\x02c\x01d\x01e\x02\x02last\x01v"
    assert decode_properties(text) == {"c": "d\x01e", "last": "v"}
    assert decode_properties("") == {}


@pytest.mark.parametrize(
    "properties",
    [{"a\x01b": "v"}, {"a\x02": "v"}, {"name": "x\x02y"}],
)
def test_a_property_the_encoding_cannot_carry_is_refused(properties: dict[str, str]) -> None:
    with pytest.raises(ProtocolError, match="separator"):
        encode_properties(properties)


# text as it can travel: UTF-8, so no lone surrogates (category Cs)
_NAMES = st.text(
    st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=20,
)
_VALUES = st.text(
    st.characters(blacklist_characters="\x02", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=40,
)
_TOPICS = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=60)


@settings(max_examples=300)
@given(st.dictionaries(_NAMES, _VALUES, max_size=10))
def test_any_representable_properties_round_trip(properties: dict[str, str]) -> None:
    assert decode_properties(encode_properties(properties)) == properties


# -- compression -----------------------------------------------------------------------------


def test_a_zlib_body_inflates_and_its_size_is_bounded() -> None:
    body = b"hello " * 2000
    packed = compress_body(body)
    assert zlib.decompress(packed) == body  # zlib framing, as java.util.zip.Deflater writes
    assert inflate_body(packed, COMPRESSED | COMPRESSION_ZLIB, len(body)) == body
    assert inflate_body(packed, COMPRESSED, len(body)) == body  # type 0: older clients' zlib
    with pytest.raises(ProtocolError, match="past 11999"):
        inflate_body(packed, COMPRESSED, len(body) - 1)


def test_a_decompression_bomb_costs_no_memory() -> None:
    bomb = zlib.compress(bytes(200 * 1024 * 1024), 9)  # 200 MiB of zeros in ~200 KiB
    with pytest.raises(ProtocolError, match="past 4194304"):
        inflate_body(bomb, COMPRESSED, 4 * 1024 * 1024)


@pytest.mark.parametrize(("kind", "name"), [(1, "LZ4"), (2, "ZSTD"), (5, "type 5")])
def test_other_compressions_are_refused_by_name(kind: int, name: str) -> None:
    with pytest.raises(ProtocolError, match=name):
        inflate_body(b"x", COMPRESSED | kind << 8, 100)


@pytest.mark.parametrize("body", [b"not zlib", zlib.compress(b"abc" * 100)[:-3]])
def test_a_corrupt_or_truncated_stream_is_refused(body: bytes) -> None:
    with pytest.raises(ProtocolError):
        inflate_body(body, COMPRESSED, 10_000)


# -- stored records --------------------------------------------------------------------------


def _java_record(
    *,
    topic: bytes,
    body: bytes,
    properties: bytes,
    queue_id: int,
    flag: int,
    queue_offset: int,
    commit_log_offset: int,
    sys_flag: int,
    born_timestamp: int,
    born: tuple[bytes, int],
    store_timestamp: int,
    store: tuple[bytes, int],
    reconsume_times: int,
    magic: int = MAGIC_V1,
) -> bytes:
    """MessageDecoder.encode, field by field (the numbers are its comments')."""
    fields = [
        struct.pack(">I", magic),  # 2 MAGICCODE
        struct.pack(">i", zlib.crc32(body) & 0x7FFFFFFF),  # 3 BODYCRC (UtilAll.crc32)
        struct.pack(">i", queue_id),  # 4 QUEUEID
        struct.pack(">i", flag),  # 5 FLAG
        struct.pack(">q", queue_offset),  # 6 QUEUEOFFSET
        struct.pack(">q", commit_log_offset),  # 7 PHYSICALOFFSET
        struct.pack(">i", sys_flag),  # 8 SYSFLAG
        struct.pack(">q", born_timestamp),  # 9 BORNTIMESTAMP
        born[0] + struct.pack(">i", born[1]),  # 10 BORNHOST
        struct.pack(">q", store_timestamp),  # 11 STORETIMESTAMP
        store[0] + struct.pack(">i", store[1]),  # 12 STOREHOST
        struct.pack(">i", reconsume_times),  # 13 RECONSUMETIMES
        struct.pack(">q", 0),  # 14 Prepared Transaction Offset
        struct.pack(">i", len(body)) + body,  # 15 BODY
        (bytes([len(topic)]) if magic == MAGIC_V1 else struct.pack(">h", len(topic))) + topic,
        struct.pack(">h", len(properties)) + properties,  # 17 properties
    ]
    rest = b"".join(fields)
    return struct.pack(">i", 4 + len(rest)) + rest  # 1 TOTALSIZE


def test_a_stored_record_has_rocketmqs_layout() -> None:
    message = StoredMessage(
        topic="TopicTest",
        body=b"Hello RocketMQ",
        properties={"TAGS": "TagA", "UNIQ_KEY": "AC1100020001"},
        queue_id=3,
        queue_offset=12,
        commit_log_offset=0x489A3AA09E,
        sys_flag=0,
        flag=7,
        born_timestamp=1_700_000_000_123,
        born_host="10.0.0.9:53211",
        store_timestamp=1_700_000_000_456,
        store_host="100.81.0.250:10911",
        reconsume_times=2,
    )
    expected = _java_record(
        topic=b"TopicTest",
        body=b"Hello RocketMQ",
        properties=b"TAGS\x01TagA\x02UNIQ_KEY\x01AC1100020001\x02",
        queue_id=3,
        flag=7,
        queue_offset=12,
        commit_log_offset=0x489A3AA09E,
        sys_flag=0,
        born_timestamp=1_700_000_000_123,
        born=(socket.inet_aton("10.0.0.9"), 53211),
        store_timestamp=1_700_000_000_456,
        store=(socket.inet_aton("100.81.0.250"), 10911),
        reconsume_times=2,
    )
    assert encode_stored([message]) == expected
    [decoded] = decode_stored(expected)
    assert decoded.body_crc == zlib.crc32(b"Hello RocketMQ") & 0x7FFFFFFF
    decoded.body_crc = 0
    assert decoded == message


def test_ipv6_hosts_set_their_sysflag_bits_and_take_16_bytes() -> None:
    message = StoredMessage("t", b"x", {}, born_host="[2001:db8::1]:4000", store_host="[::1]:10911")
    raw = encode_stored([message])
    (sys_flag,) = struct.unpack_from(">i", raw, 36)
    assert sys_flag == BORNHOST_V6 | STOREHOST_V6
    assert len(raw) == 88 + 24 + 1 + 1 + 1 + 2  # 12 more bytes per host
    [decoded] = decode_stored(raw)
    assert (decoded.born_host, decoded.store_host) == ("[2001:db8::1]:4000", "[::1]:10911")


def test_a_host_name_or_no_host_travels_as_zero_address() -> None:
    [decoded] = decode_stored(encode_stored([StoredMessage("t", b"", {}, born_host="db-7:1")]))
    assert (decoded.born_host, decoded.store_host) == ("0.0.0.0:0", "0.0.0.0:0")


def test_a_long_topic_uses_the_v2_magic_and_a_two_byte_length() -> None:
    topic = "t" * 200
    raw = encode_stored([StoredMessage(topic, b"b", {})])
    assert struct.unpack_from(">I", raw, 4)[0] == MAGIC_V2
    assert decode_stored(raw)[0].topic == topic


def test_a_compressed_record_is_inflated_on_decoding_unless_asked_not_to() -> None:
    body = b"payload " * 1000
    flags = COMPRESSED | COMPRESSION_ZLIB
    raw = encode_stored([StoredMessage("t", compress_body(body), {}, sys_flag=flags)])
    [plain] = decode_stored(raw)
    assert plain.body == body
    assert plain.sys_flag == COMPRESSION_ZLIB  # the compressed bit cleared, as Java's decode does
    [packed] = decode_stored(raw, decompress=False)
    assert packed.sys_flag == flags
    assert zlib.decompress(packed.body) == body


def test_properties_over_32_kib_cannot_be_stored() -> None:
    # the length prefix is a signed short (a Java decoder would read a negative length)
    with pytest.raises(ProtocolError, match="exceed 32767"):
        encode_stored([StoredMessage("t", b"", {"big": "v" * 40_000})])
    with pytest.raises(ProtocolError, match="exceed 32767"):
        encode_batch([BatchMessage(b"", {"big": "v" * 40_000})])


@pytest.mark.parametrize(
    "message",
    [
        StoredMessage("t", b"", {}, queue_id=2**31),
        StoredMessage("t", b"", {}, queue_offset=2**63),
        StoredMessage("t", b"", {}, reconsume_times=-(2**31) - 1),
    ],
)
def test_a_field_beyond_its_java_type_is_a_protocol_error(message: StoredMessage) -> None:
    with pytest.raises(ProtocolError, match="out of range"):
        encode_stored([message])


def test_text_utf8_cannot_carry_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="UTF-8"):
        encode_stored([StoredMessage("t", b"", {"\ud800": "v"})])
    with pytest.raises(ProtocolError, match="UTF-8"):
        encode_stored([StoredMessage("t\udfff", b"", {})])
    with pytest.raises(ProtocolError, match="UTF-8"):
        encode_batch([BatchMessage(b"", {"k": "\ud800"})])


@pytest.mark.parametrize(
    "cut",
    [
        lambda raw: raw[:-1],
        lambda raw: raw[:50],
        lambda raw: struct.pack(">i", 3) + raw[4:],
        lambda raw: raw[:4] + b"\x00\x00\x00\x00" + raw[8:],  # magic
        lambda raw: raw + b"\x00",
        lambda raw: raw[:84] + struct.pack(">i", 10_000) + raw[88:],  # body length
        lambda raw: raw[:-2] + b"\xff\xfe",  # properties not UTF-8
    ],
)
def test_a_malformed_record_is_a_protocol_error(cut: object) -> None:
    raw = encode_stored([StoredMessage("topic", b"body", {"a": "bb"})])
    with pytest.raises(ProtocolError):
        decode_stored(cut(raw))  # type: ignore[operator]


_HOSTS = st.sampled_from(["127.0.0.1:10911", "10.1.2.3:1", "[::1]:9876", "", "0.0.0.0:0"])


@settings(max_examples=200)
@given(
    st.lists(
        st.builds(
            StoredMessage,
            topic=_TOPICS,
            body=st.binary(max_size=300),
            properties=st.dictionaries(_NAMES, _VALUES, max_size=5),
            queue_id=st.integers(0, 2**31 - 1),
            queue_offset=st.integers(0, 2**63 - 1),
            commit_log_offset=st.integers(0, 2**63 - 1),
            flag=st.integers(0, 2**32 - 1),
            born_timestamp=st.integers(0, 2**63 - 1),
            born_host=_HOSTS,
            store_timestamp=st.integers(0, 2**63 - 1),
            store_host=_HOSTS,
            reconsume_times=st.integers(0, 2**31 - 1),
        ),
        max_size=5,
    )
)
def test_stored_records_round_trip(messages: list[StoredMessage]) -> None:
    decoded = decode_stored(encode_stored(messages))
    assert [(m.topic, m.body, m.properties, m.flag, m.queue_offset) for m in decoded] == [
        (m.topic, m.body, m.properties, m.flag, m.queue_offset) for m in messages
    ]
    assert [m.body_crc for m in decoded] == [zlib.crc32(m.body) & 0x7FFFFFFF for m in messages]
    assert [m.born_host or "0.0.0.0:0" for m in messages] == [m.born_host for m in decoded]


# -- batches ---------------------------------------------------------------------------------


def _java_batch_record(body: bytes, properties: bytes, flag: int) -> bytes:
    """MessageDecoder.encodeMessage: TOTALSIZE, MAGICCODE 0, BODYCRC 0, FLAG, BODY,
    properties."""
    size = 4 + 4 + 4 + 4 + 4 + len(body) + 2 + len(properties)
    return (
        struct.pack(">iiiii", size, 0, 0, flag, len(body))
        + body
        + struct.pack(">h", len(properties))
        + properties
    )


def test_a_java_batch_decodes_into_its_messages() -> None:
    raw = _java_batch_record(b"first", b"UNIQ_KEY\x01A1\x02TAGS\x01x\x02", 0) + _java_batch_record(
        b"", b"UNIQ_KEY\x01A2\x02", 5
    )
    assert decode_batch(raw) == [
        BatchMessage(b"first", {"UNIQ_KEY": "A1", "TAGS": "x"}, 0),
        BatchMessage(b"", {"UNIQ_KEY": "A2"}, 5),
    ]
    assert encode_batch(decode_batch(raw)) == raw


@pytest.mark.parametrize(
    "raw",
    [
        _java_batch_record(b"abc", b"", 0)[:-1],
        _java_batch_record(b"abc", b"", 0)[:10],
        struct.pack(">i", 99) + _java_batch_record(b"abc", b"", 0)[4:],  # wrong total size
        _java_batch_record(b"abc", b"", 0)[:16] + struct.pack(">i", -1) + b"abc\x00\x00",
        _java_batch_record(b"abc", b"a\x01b\x02", 0)[:-4] + b"\x00\x00\xff\xfe",
        _java_batch_record(b"abc", b"", 0)[:-2] + struct.pack(">h", -3),
    ],
)
def test_a_malformed_batch_is_refused_whole(raw: bytes) -> None:
    with pytest.raises(ProtocolError, match=r"batch|UTF-8"):
        decode_batch(raw)


def test_a_batch_has_a_message_count_limit() -> None:
    raw = _java_batch_record(b"", b"", 0) * 4
    assert len(decode_batch(raw, max_messages=4)) == 4
    with pytest.raises(ProtocolError, match="more than 3"):
        decode_batch(raw, max_messages=3)


@settings(max_examples=200)
@given(
    st.lists(
        st.builds(
            BatchMessage,
            body=st.binary(max_size=200),
            properties=st.dictionaries(_NAMES, _VALUES, max_size=4),
            flag=st.integers(0, 2**32 - 1),
        ),
        max_size=8,
    )
)
def test_batches_round_trip(messages: list[BatchMessage]) -> None:
    assert decode_batch(encode_batch(messages)) == messages
