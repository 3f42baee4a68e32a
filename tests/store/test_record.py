"""The record codec: what is encoded decodes to the same values, and damage never decodes."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pocketmq.names import is_storable_topic
from pocketmq.store.record import (
    MIN_RECORD_SIZE,
    RecordError,
    compute_tag_code,
    decode_record,
    encode_record,
    pack_host,
    skim_record,
    unpack_host,
)

topics = st.from_regex(r"[A-Za-z0-9_%|\-]{1,127}", fullmatch=True)
u32 = st.integers(0, 2**32 - 1)
u64 = st.integers(0, 2**64 - 1)
hosts = st.sampled_from(["", "127.0.0.1:10911", "10.1.2.3:0", "[::1]:8081", "[2001:db8::7]:65535"])


@settings(max_examples=300)
@given(
    topic=topics,
    queue_id=u32,
    queue_offset=u64,
    physical_offset=u64,
    body=st.binary(max_size=2048),
    properties=st.dictionaries(st.text(max_size=20), st.text(max_size=50), max_size=8),
    flags=u32,
    born=u64,
    stored=u64,
    born_host=hosts,
    store_host=hosts,
    reconsume=u32,
    prepared=u64,
    code=u64,
)
def test_round_trip(
    topic: str,
    queue_id: int,
    queue_offset: int,
    physical_offset: int,
    body: bytes,
    properties: dict[str, str],
    flags: int,
    born: int,
    stored: int,
    born_host: str,
    store_host: str,
    reconsume: int,
    prepared: int,
    code: int,
) -> None:
    raw = b"".join(
        encode_record(
            topic=topic,
            queue_id=queue_id,
            queue_offset=queue_offset,
            physical_offset=physical_offset,
            body=body,
            properties=properties,
            flags=flags,
            born_timestamp=born,
            store_timestamp=stored,
            born_host=pack_host(born_host),
            store_host=pack_host(store_host),
            reconsume_times=reconsume,
            prepared_transaction_offset=prepared,
            tag_code=code,
        )
    )
    record = decode_record(raw, expected_physical_offset=physical_offset)
    assert record.size == len(raw)
    assert (record.topic, record.queue_id, record.queue_offset) == (topic, queue_id, queue_offset)
    assert record.physical_offset == physical_offset
    assert record.body == body
    assert record.properties == properties
    assert (record.flags, record.born_timestamp, record.store_timestamp) == (flags, born, stored)
    assert (record.born_host, record.store_host) == (born_host, store_host)
    assert (record.reconsume_times, record.prepared_transaction_offset) == (reconsume, prepared)
    assert record.tag_code == code


def _sample() -> bytes:
    return b"".join(
        encode_record(
            topic="t",
            queue_id=1,
            queue_offset=2,
            physical_offset=4096,
            body=b"hello",
            properties={"UNIQ_KEY": "A"},
        )
    )


def test_smallest_record_matches_the_documented_minimum() -> None:
    raw = b"".join(
        encode_record(
            topic="t", queue_id=0, queue_offset=0, physical_offset=0, body=b"", properties={}
        )
    )
    assert len(raw) == MIN_RECORD_SIZE == 120


@settings(max_examples=200)
@given(data=st.data())
def test_any_single_bit_flip_is_detected(data: st.DataObject) -> None:
    raw = bytearray(_sample())
    bit = data.draw(st.integers(0, len(raw) * 8 - 1))
    raw[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(RecordError):
        decode_record(bytes(raw), expected_physical_offset=4096)


def test_every_truncation_is_detected() -> None:
    raw = _sample()
    for cut in range(len(raw)):
        with pytest.raises(RecordError):
            decode_record(raw[:cut], expected_physical_offset=4096)


def test_a_record_read_at_the_wrong_place_is_rejected() -> None:
    with pytest.raises(RecordError, match="misplaced"):
        decode_record(_sample(), expected_physical_offset=0)


def _verdict(check: Callable[[], object]) -> str:
    try:
        check()
    except RecordError as exc:
        return exc.reason
    return "valid"


@settings(max_examples=300)
@given(data=st.data())
def test_decode_and_skim_judge_every_damage_alike(data: st.DataObject) -> None:
    """decode_record writes out skim_record's checks (_parse) for speed: the same record, cut,
    flipped or read at another place, gets the same verdict from both, inside a larger buffer
    too."""
    raw = bytearray(b"\x00" * 7 + _sample() + b"\x00" * 5)
    for _ in range(data.draw(st.integers(0, 3))):
        bit = data.draw(st.integers(0, len(raw) * 8 - 1))
        raw[bit // 8] ^= 1 << (bit % 8)
    buf = bytes(raw[: data.draw(st.integers(0, len(raw)))])
    place = data.draw(st.sampled_from([4096, 0]))
    decoded = _verdict(lambda: decode_record(buf, 7, expected_physical_offset=place))
    assert decoded == _verdict(lambda: skim_record(buf, 7, place))
    if decoded == "valid":
        record, skim = decode_record(buf, 7), skim_record(buf, 7, place)
        assert (record.topic, record.size, record.body) == (skim.topic, skim.size, bytes(skim.body))


def test_topic_rule() -> None:
    assert is_storable_topic("%RETRY%group-1")
    assert is_storable_topic("a" * 127)
    assert not is_storable_topic("")
    assert not is_storable_topic("a" * 128)
    assert not is_storable_topic("has space")
    assert not is_storable_topic("../escape")


def test_tag_codes_are_stable_and_zero_means_no_tag() -> None:
    assert compute_tag_code(None) == 0
    assert compute_tag_code("") == 0
    assert compute_tag_code("TagA") == compute_tag_code("TagA") != compute_tag_code("TagB")


def test_host_round_trip() -> None:
    for address in ["127.0.0.1:1", "[::1]:2", ""]:
        assert unpack_host(pack_host(address)) == address
    assert unpack_host(pack_host("not-an-ip:80")) == ""


@settings(max_examples=200)
@given(
    topic=topics,
    body=st.binary(max_size=256),
    properties=st.dictionaries(st.text(max_size=10), st.text(max_size=20), max_size=4),
    fields=st.tuples(u32, u32, u64, u64, u64, u64, u32, u64, u64),
)
def test_the_bytes_are_the_documented_layout_field_by_field(
    topic: str,
    body: bytes,
    properties: dict[str, str],
    fields: tuple[int, int, int, int, int, int, int, int, int],
) -> None:
    """docs/storage-format.md §1, packed one field at a time: the encoder's fused packing (one
    Struct per topic length) writes the same bytes for every topic length."""
    flags, queue_id, queue_offset, physical, born, stored, reconsume, prepared, code = fields
    born_host, store_host = pack_host("10.1.2.3:7"), pack_host("[::1]:8081")
    props = msgspec.msgpack.encode(properties)
    raw_topic = topic.encode()
    after_crc = b"".join(
        [
            struct.pack("<IIQQQQ", flags, queue_id, queue_offset, physical, born, stored),
            born_host,
            store_host,
            struct.pack("<IQQ", reconsume, prepared, code),
            struct.pack("<H", len(raw_topic)),
            raw_topic,
            struct.pack("<I", len(props)),
            props,
            struct.pack("<I", len(body)),
            body,
        ]
    )
    total = 12 + len(after_crc)
    expected = struct.pack("<III", total, 0x504D5101, zlib.crc32(after_crc)) + after_crc
    pieces = encode_record(
        topic=topic,
        queue_id=queue_id,
        queue_offset=queue_offset,
        physical_offset=physical,
        body=body,
        properties=properties,
        flags=flags,
        born_timestamp=born,
        store_timestamp=stored,
        born_host=born_host,
        store_host=store_host,
        reconsume_times=reconsume,
        prepared_transaction_offset=prepared,
        tag_code=code,
    )
    assert b"".join(pieces) == expected
