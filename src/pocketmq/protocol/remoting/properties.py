"""Message properties as RocketMQ's remoting protocol carries them: one string,
``name\\u0001value\\u0002`` per property (docs/remoting.md, "Messages").

The same string travels in a send's header (``SEND_MESSAGE_V2``'s field ``i``), in each message
of a batch and of a pull response. Decoding follows apache/rocketmq
``common/.../message/MessageDecoder.java`` (``string2messageProperties``): an entry without a
name or without a value is dropped, and a value may contain ``\\u0001`` (only the first one
separates). Names the remoting clients set that the native protocol spells differently, or does
not have, are listed here; the shared ones come from :mod:`pocketmq.properties`.
"""

from __future__ import annotations

from typing import Final, NoReturn

from pocketmq.errors import LocalProtocolError

__all__ = [
    "CRC32",
    "INNER_NUM",
    "MAX_OFFSET",
    "MAX_PROPERTIES_SIZE",
    "MIN_OFFSET",
    "NAME_VALUE_SEPARATOR",
    "PROPERTY_SEPARATOR",
    "SHARDING_KEY",
    "START_DELIVER_TIME",
    "TIMER_DELAY_MS",
    "TIMER_DELAY_SEC",
    "TIMER_DELIVER_MS",
    "TRANSACTION_ID",
    "WAIT_STORE_MSG_OK",
    "decode_properties",
    "decode_properties_bytes",
    "encode_properties",
    "encode_properties_bytes",
]

NAME_VALUE_SEPARATOR: Final = "\x01"
PROPERTY_SEPARATOR: Final = "\x02"
#: Properties are prefixed by a signed 16-bit byte count in every record that carries them: a
#: longer string would read as a negative length (Java silently drops the properties then).
MAX_PROPERTIES_SIZE: Final = 32767

#: ``MessageConst`` names the remoting clients use that pocketmq's own properties do not.
WAIT_STORE_MSG_OK: Final = "WAIT"
TRANSACTION_ID: Final = "__transactionId__"
MIN_OFFSET: Final = "MIN_OFFSET"
MAX_OFFSET: Final = "MAX_OFFSET"
INNER_NUM: Final = "INNER_NUM"
SHARDING_KEY: Final = "__SHARDINGKEY"
CRC32: Final = "__CRC32#"
#: A delivery time (epoch ms) set by ali-ons / Aliyun ONS producers (``setStartDeliverTime``).
START_DELIVER_TIME: Final = "__STARTDELIVERTIME"
#: RocketMQ 5's delay by time: absolute epoch ms, or a delay in seconds or milliseconds.
TIMER_DELIVER_MS: Final = "TIMER_DELIVER_MS"
TIMER_DELAY_SEC: Final = "TIMER_DELAY_SEC"
TIMER_DELAY_MS: Final = "TIMER_DELAY_MS"

_FORBIDDEN_IN_NAME: Final = (NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR)


def decode_properties(text: str) -> dict[str, str]:
    """The properties in ``text``; entries without a name or a value are dropped, as RocketMQ
    drops them, and a later duplicate name wins."""
    if not text:
        return {}
    properties: dict[str, str] = {}
    for entry in text.split(PROPERTY_SEPARATOR):
        name, _, value = entry.partition(NAME_VALUE_SEPARATOR)
        if name and value:
            properties[name] = value
    return properties


def decode_properties_bytes(raw: bytes | memoryview) -> dict[str, str]:
    """:func:`decode_properties` of UTF-8 bytes; bytes that are not UTF-8 are a
    :class:`ProtocolError`."""
    try:
        text = str(raw, "utf-8")
    except UnicodeDecodeError:
        raise LocalProtocolError("message properties are not UTF-8") from None
    return decode_properties(text)


def encode_properties(properties: dict[str, str]) -> str:
    """``properties`` as one string. A name holding a separator, or a value holding
    ``\\u0002``, would decode as something else: it is a :class:`ProtocolError` naming the
    property, never a silent change. An empty name or value is left out (it would not decode).
    """
    parts = [f"{name}\x01{value}\x02" for name, value in properties.items() if name and value]
    text = "".join(parts)
    if text.count(PROPERTY_SEPARATOR) != len(parts) or any(
        NAME_VALUE_SEPARATOR in name for name in properties
    ):
        _refuse(properties)
    return text


def encode_properties_bytes(properties: dict[str, str]) -> bytes:
    """:func:`encode_properties` as UTF-8, at most :data:`MAX_PROPERTIES_SIZE` bytes; text
    that is not encodable (a lone surrogate) or too long is a :class:`ProtocolError`."""
    try:
        raw = encode_properties(properties).encode()
    except UnicodeEncodeError:
        raise LocalProtocolError(
            "message properties hold text that is not encodable as UTF-8"
        ) from None
    if len(raw) > MAX_PROPERTIES_SIZE:
        raise LocalProtocolError(
            f"message properties of {len(raw)} bytes exceed {MAX_PROPERTIES_SIZE}"
        )
    return raw


def _refuse(properties: dict[str, str]) -> NoReturn:
    for name, value in properties.items():
        if any(separator in name for separator in _FORBIDDEN_IN_NAME):
            raise LocalProtocolError(
                f"property name {name!r} holds a separator (\\u0001 or \\u0002)"
            )
        if PROPERTY_SEPARATOR in value:
            raise LocalProtocolError(f"property {name!r} has a value holding the separator \\u0002")
    raise LocalProtocolError("message properties cannot be encoded")
