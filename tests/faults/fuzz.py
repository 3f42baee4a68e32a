"""Request generators for the protocol fuzz test: seeded, so a failure can be replayed.

Three kinds of input, for every port (native, gRPC, and RocketMQ's remoting protocol, sniffed on
the native and name-server ports):

- **typed**: a request structure of the right shape whose values are chosen to hurt (integer
  extremes, nan and infinities, empty and huge strings, odd Unicode, names of system topics), so
  it decodes and reaches the handlers;
- **mutated**: a valid request with bytes flipped, cut, inserted or repeated;
- **noise**: random bytes, random operation codes and frame kinds.
"""

from __future__ import annotations

import math
import random
from typing import Any

import msgspec
from google.protobuf.descriptor import FieldDescriptor

from pocketmq.protocol.remoting import RemotingCommand, encode_command
from pocketmq.protocol.remoting.acl import ACCESS_KEY, SIGNATURE
from pocketmq.protocol.structs import REQUESTS

__all__ = ["FuzzNames", "mutate", "native_body", "protobuf_request", "remoting_request"]

_INTS = [0, 1, -1, 2, 7, 255, 256, 65535, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**53,
         2**63 - 1, -(2**31), -(2**63), 2**64 - 1, 1_000_000_000_000]  # fmt: skip
_FLOATS = [0.0, -0.0, 1.0, 2.0, 0.5, 1e-300, 1e308, -1e308, math.nan, math.inf, -math.inf]
_TEXT = ["", " ", "*", "||", "a" * 300, "%RETRY%x", "%DLQ%x", "%SYS%HISTORY", "a@b", "../x",
         "tag || other", "é", "\u0000", "\u202e", "😀" * 10, "x" * 5000]  # fmt: skip


class FuzzNames:
    """Names the fuzzer aims at: existing ones reach deeper into the handlers."""

    def __init__(self, topic: str, group: str) -> None:
        self.topic = topic
        self.group = group


def _int(rng: random.Random) -> int:
    return rng.choice(_INTS) if rng.random() < 0.8 else rng.randint(-(2**63), 2**64 - 1)


def _text(rng: random.Random, names: FuzzNames, hint: str = "") -> str:
    """A string; for a field named like a topic or a group, mostly an existing one."""
    roll = rng.random()
    if "topic" in hint and roll < 0.7:
        return names.topic
    if "group" in hint and roll < 0.7:
        return names.group
    if roll < 0.2:
        return rng.choice([names.topic, names.group])
    if roll < 0.8:
        return rng.choice(_TEXT)
    return "".join(chr(rng.choice([rng.randint(32, 126), rng.randint(0x80, 0xD7FF)]))
                   for _ in range(rng.randint(1, 40)))  # fmt: skip


def _value(info: Any, rng: random.Random, names: FuzzNames, depth: int = 0, hint: str = "") -> Any:
    inspect = msgspec.inspect
    if isinstance(info, inspect.IntType):
        return _int(rng)
    if isinstance(info, inspect.FloatType):
        return rng.choice(_FLOATS)
    if isinstance(info, inspect.BoolType):
        return rng.random() < 0.5
    if isinstance(info, inspect.StrType):
        return _text(rng, names, hint)
    if isinstance(info, inspect.BytesType):
        return rng.choice([b"", b"x", rng.randbytes(rng.randint(1, 3000))])
    if isinstance(info, inspect.ListType):
        count = 0 if depth > 2 else rng.choice([0, 1, 1, 2, 3, 8])
        return [_value(info.item_type, rng, names, depth + 1, hint) for _ in range(count)]
    if isinstance(info, inspect.DictType):
        return {_text(rng, names): _text(rng, names) for _ in range(rng.choice([0, 1, 3]))}
    if isinstance(info, inspect.StructType):
        return [_value(f.type, rng, names, depth + 1, f.name) for f in info.fields]
    if isinstance(info, inspect.AnyType):
        return rng.choice([0, "", [], {}])
    return None


def native_body(code: int, rng: random.Random, names: FuzzNames) -> bytes:
    """A body of the shape ``code`` expects, with hostile values (some fields left off)."""
    info = msgspec.inspect.type_info(REQUESTS[code])
    values = _value(info, rng, names)
    required = sum(1 for f in info.fields if f.required)  # type: ignore[attr-defined]
    keep = rng.randint(required, len(values)) if rng.random() < 0.3 else len(values)
    return msgspec.msgpack.encode(values[:keep])


def mutate(data: bytes, rng: random.Random) -> bytes:
    """``data`` with a few random edits."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        action = rng.random()
        position = rng.randint(0, len(out)) if out else 0
        if action < 0.4 and out:
            out[min(position, len(out) - 1)] = rng.randint(0, 255)
        elif action < 0.6:
            out[position:position] = rng.randbytes(rng.randint(1, 8))
        elif action < 0.8 and out:
            del out[position : position + rng.randint(1, 8)]
        else:
            out[position:position] = out[position : position + rng.randint(1, 64)] * 3
    return bytes(out)


def _proto_scalar(field: Any, rng: random.Random, names: FuzzNames, hint: str = "") -> Any:
    kind = field.type
    if kind == FieldDescriptor.TYPE_STRING:
        return _text(rng, names, hint)
    if kind == FieldDescriptor.TYPE_BYTES:
        return rng.choice([b"", b"body", rng.randbytes(rng.randint(1, 2000))])
    if kind == FieldDescriptor.TYPE_BOOL:
        return rng.random() < 0.5
    if kind == FieldDescriptor.TYPE_ENUM:
        values = [v.number for v in field.enum_type.values]
        return rng.choice(values) if rng.random() < 0.9 else rng.randint(-5, 99)
    if kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return rng.choice(_FLOATS)
    bits = 32 if kind in (FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_SINT32,
                          FieldDescriptor.TYPE_SFIXED32) else 64  # fmt: skip
    unsigned = kind in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_UINT64,
                        FieldDescriptor.TYPE_FIXED32, FieldDescriptor.TYPE_FIXED64)  # fmt: skip
    low, high = (0, 2**bits - 1) if unsigned else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    return max(low, min(high, _int(rng)))


def _fill(
    message: Any, rng: random.Random, names: FuzzNames, depth: int = 0, hint: str = ""
) -> None:
    """Set most fields of ``message``; ``hint`` is the name of the field that holds it (a
    ``Resource`` under ``topic`` names a topic)."""
    for field in message.DESCRIPTOR.fields:
        if rng.random() < 0.25:
            continue  # leave it unset
        repeated = field.is_repeated
        count = rng.choice([0, 1, 2]) if repeated else 1
        for _ in range(count):
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                if depth > 3:
                    break
                if field.message_type.GetOptions().map_entry:
                    target = getattr(message, field.name)
                    key = _text(rng, names)
                    value_field = field.message_type.fields_by_name["value"]
                    if value_field.type == FieldDescriptor.TYPE_MESSAGE:
                        _fill(target[key], rng, names, depth + 1, field.name)
                    else:
                        target[key] = _proto_scalar(value_field, rng, names)
                    continue
                child = (
                    getattr(message, field.name).add() if repeated else getattr(message, field.name)
                )
                _fill(child, rng, names, depth + 1, field.name)
                child.SetInParent()
            else:
                value = _proto_scalar(field, rng, names, f"{hint}.{field.name}")
                if repeated:
                    getattr(message, field.name).append(value)
                else:
                    setattr(message, field.name, value)


def protobuf_request(request_class: Any, rng: random.Random, names: FuzzNames) -> bytes:
    """A serialized ``request_class`` with hostile values (well-formed protobuf)."""
    request = request_class()
    _fill(request, rng, names)
    if hasattr(request, "long_polling_timeout"):
        request.long_polling_timeout.seconds = rng.choice([0, 1])  # no 20 s waits
    return bytes(request.SerializeToString())


# the name server's and the broker's remoting codes, neighbours, and the 5.x pop codes
_REMOTING_CODES = [10, 11, 12, 14, 15, 17, 21, 28, 29, 30, 31, 33, 34, 35, 36, 37, 38, 39, 40,
                   41, 42, 101, 103, 104, 105, 106, 200, 206, 208, 215, 222, 307, 310, 320,
                   200050, 200051, 200053]  # fmt: skip
_REMOTING_FIELDS = ["topic", "consumerGroup", "producerGroup", "queueId", "queueOffset",
                    "maxMsgNums", "sysFlag", "properties", "acceptStandardJsonOnly", "namespace",
                    "key", "brokerName", "brokerAddr", "a", "b", "e", "i", "m"]  # fmt: skip


def _remoting_fields(rng: random.Random, names: FuzzNames) -> dict[str, str]:
    fields = {
        name: (_text(rng, names, name) if rng.random() < 0.6 else str(_int(rng)))
        for name in rng.sample(_REMOTING_FIELDS, rng.randint(0, 6))
    }
    if rng.random() < 0.2:  # a signature of no one (or of someone, badly)
        fields[ACCESS_KEY] = rng.choice(["", "alice", "cluster/inner", _text(rng, names)])
        fields[SIGNATURE] = rng.choice(["", "AAAA", "x" * 28, _text(rng, names)])
    if rng.random() < 0.1:
        fields["acceptStandardJsonOnly"] = rng.choice(["true", "false", "1"])
    return fields


def remoting_request(
    rng: random.Random, names: FuzzNames, opaque: int, odd_headers: float = 0.15
) -> bytes:
    """A remoting frame: a request (sometimes one-way, or flagged as a response) with hostile
    ext fields, either header serialization, or (with probability ``odd_headers``) a JSON header
    whose fields have the wrong types (numbers, booleans, nulls, nesting: what a lenient JSON
    client might send; most close the connection)."""
    code = rng.choice(_REMOTING_CODES) if rng.random() < 0.85 else _int(rng) % 2**31
    flag = rng.choice([0, 0, 0, 2, 1, 3, _int(rng) % 2**31])
    if rng.random() < odd_headers:
        raw = rng.choice(
            [
                b'{"code":%d,"opaque":%d,"extFields":{"topic":%s}}'
                % (code, opaque, rng.choice([b"1", b"true", b"null", b"[1]", b"{}", b"1e999"])),
                b'{"code":"105","opaque":%d}' % opaque,
                b'{"code":%d,"opaque":%d,"language":%d,"version":-1}' % (code, opaque, _int(rng)),
                b"{" * rng.randint(1, 200),
            ]
        )
        body = rng.randbytes(rng.randint(0, 64))
        return (
            (4 + len(raw) + len(body)).to_bytes(4, "big") + len(raw).to_bytes(4, "big") + raw + body
        )
    command = RemotingCommand(
        code,
        opaque,
        flag,
        _remoting_fields(rng, names),
        rng.choice([None, "", "x" * 300]),
        rng.choice(["JAVA", "GO", "NODE_JS", "OTHER"]),
        rng.choice([0, 121, 399, 401, 32767]),
        rng.choice([b"", rng.randbytes(rng.randint(1, 3000)), b'{"clientID":"x"}']),
        rng.choice([0, 1]),
    )
    try:
        return encode_command(command)
    except Exception:  # a binary header cannot hold that code: JSON can
        command.serialize_type = 0
        return encode_command(command)
