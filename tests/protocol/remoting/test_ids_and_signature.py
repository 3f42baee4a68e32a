"""Message ids, tag codes and the ACL signature of RocketMQ's remoting protocol.

- offsetMsgId: apache/rocketmq ``MessageDecoder.createMessageId``/``decodeMessageId`` (the id
  ``645100FA00002A9F000000489A3AA09E`` is ``MessageDecoderTest``'s: 100.81.0.250:10911, offset
  0x489A3AA09E);
- tagsCode: Java's ``String.hashCode`` (``MessageExtBrokerInner.tagsString2tagsCode``,
  ``FilterAPI.buildSubscriptionData``);
- the signature: ``AclClientRPCHook``, ``AclUtils.combineRequestContent``, ``AclSigner``
  (HMAC-SHA1, base64) over the ext fields sorted as Java's ``TreeMap`` sorts strings.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pocketmq.errors import ProtocolError
from pocketmq.protocol.remoting.acl import sign, signed_content, verify_signature
from pocketmq.protocol.remoting.filters import parse_subscription, tags_code
from pocketmq.protocol.remoting.msgid import decode_offset_msg_id, encode_offset_msg_id


def test_message_decoder_tests_offset_msg_id_decodes() -> None:
    decoded = decode_offset_msg_id("645100FA00002A9F000000489A3AA09E")
    assert decoded == ("100.81.0.250", 10911, 0x489A3AA09E)
    assert encode_offset_msg_id("100.81.0.250:10911", 0x489A3AA09E) == (
        "645100FA00002A9F000000489A3AA09E"
    )


def test_an_ipv6_store_host_makes_a_56_digit_id() -> None:
    msg_id = encode_offset_msg_id("[2001:db8::7]:10911", 42)
    assert len(msg_id) == 56
    assert decode_offset_msg_id(msg_id) == ("2001:db8::7", 10911, 42)


@pytest.mark.parametrize(
    "msg_id", ["", "ABC", "Z" * 32, "0" * 33, "645100FA00002A9F000000489A3AA0"]
)
def test_a_malformed_offset_msg_id_is_a_protocol_error(msg_id: str) -> None:
    with pytest.raises(ProtocolError):
        decode_offset_msg_id(msg_id)


@given(st.ip_addresses(v=4), st.integers(0, 65535), st.integers(0, 2**63 - 1))
def test_offset_msg_ids_round_trip(address: object, port: int, offset: int) -> None:
    assert decode_offset_msg_id(encode_offset_msg_id(f"{address}:{port}", offset)) == (
        str(address),
        port,
        offset,
    )


@pytest.mark.parametrize(
    ("tags", "code"),
    [
        ("", 0),
        ("Aa", 2112),  # the classic String.hashCode collision
        ("BB", 2112),
        ("hello", 99162322),
        ("TagA", 2598919),  # ((84*31 + 97)*31 + 103)*31 + 65
        ("polygenelubricants", -(2**31)),  # hashes to Integer.MIN_VALUE
        ("é", 233),
        ("\U0001f600", 31 * 0xD83D + 0xDE00),  # over UTF-16 code units, not code points
    ],
)
def test_tags_code_is_javas_string_hash(tags: str, code: int) -> None:
    assert tags_code(tags) == code


def test_a_subscription_expression_splits_on_double_bars() -> None:
    every = parse_subscription("*")
    assert every.everything
    assert every.matches("")
    assert every.matches("x")
    assert parse_subscription("").everything
    some = parse_subscription(" TagA || TagB ||")
    assert some.tags == {"TagA", "TagB"}
    assert some.codes == {tags_code("TagA"), tags_code("TagB")}
    assert some.matches("TagB")
    assert not some.matches("TagC")
    assert not some.matches("")
    assert not parse_subscription(" || ").matches("x")  # separators only: nothing matches


def _expected(secret: str, content: bytes) -> str:
    return base64.b64encode(hmac.new(secret.encode(), content, hashlib.sha1).digest()).decode()


def test_the_signature_covers_the_sorted_values_then_the_body() -> None:
    fields = {"b": "2", "AccessKey": "ak", "a": "1", "Signature": "ignored"}
    # TreeMap order: "AccessKey" < "a" < "b" (upper case first); Signature left out
    assert signed_content(fields, b"body") == b"ak12body"
    assert sign(fields, b"body", "secret") == _expected("secret", b"ak12body")
    signed = {**fields, "Signature": _expected("secret", b"ak12body")}
    assert verify_signature(signed, b"body", "secret")
    assert not verify_signature(signed, b"body", "other secret")
    assert not verify_signature(signed, b"tampered", "secret")
    assert not verify_signature({**signed, "b": "3"}, b"body", "secret")
    assert not verify_signature(fields | {"Signature": ""}, b"body", "secret")


def test_names_sort_by_utf16_code_unit_as_java_strings_do() -> None:
    # U+FF61 sorts after U+1F600 by code point, before it by UTF-16 unit (0xFF61 > 0xD83D)
    fields = {"\uff61": "1", "\U0001f600": "2", "AccessKey": "k"}
    assert signed_content(fields, b"") == b"k21"


def test_a_unique_key_query_flag_may_be_signed_or_not() -> None:
    fields = {"AccessKey": "ak", "topic": "t", "key": "k", "_UNIQUE_KEY_QUERY": "true"}
    with_flag = _expected("sk", b"aktruekt")  # AccessKey, _UNIQUE_KEY_QUERY, key, topic
    without = _expected("sk", b"akkt")
    assert verify_signature({**fields, "Signature": with_flag}, b"", "sk")  # 5.x, 4.9.4+
    assert verify_signature({**fields, "Signature": without}, b"", "sk")  # 4.x brokers
    assert not verify_signature({**fields, "Signature": _expected("sk", b"x")}, b"", "sk")
