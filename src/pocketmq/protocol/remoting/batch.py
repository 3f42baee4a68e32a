"""The body of a ``SEND_BATCH_MESSAGE``: the batch's messages, one record after another
(docs/remoting.md, "Batches").

Each record follows apache/rocketmq ``common/.../message/MessageDecoder.java``
(``encodeMessage``, ``decodeMessage``; ``MessageBatch.encode``): total size, magic code (0),
body CRC (0), flag, body (4-byte length), properties (2-byte length), big-endian. The topic,
queue, producer group and timestamps are the request header's, shared by every message; each
message carries its own properties (its ``UNIQ_KEY``, tags and keys). The Java producer never
compresses a batch (``DefaultMQProducerImpl.tryToCompressMessage``).

RocketMQ's broker reads the records sequentially and ignores the total size; this decoder also
checks that each record's total size matches its parts, so a corrupt batch is refused rather
than stored misaligned.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Final

import msgspec

from pocketmq.errors import LocalProtocolError
from pocketmq.protocol.remoting.properties import decode_properties_bytes, encode_properties_bytes

__all__ = ["BatchMessage", "decode_batch", "encode_batch"]

# total size, magic code, body CRC, flag, body length
_HEAD: Final = struct.Struct(">iiiIi")
_I16: Final = struct.Struct(">h")
_FIXED_SIZE: Final = _HEAD.size + _I16.size


class BatchMessage(msgspec.Struct, gc=False):
    """One message of a batch: its flag, body and properties (the rest is the request's)."""

    body: bytes
    properties: dict[str, str]
    flag: int = 0


def encode_batch(messages: Iterable[BatchMessage]) -> bytes:
    """A batch's body, as a Java producer's ``MessageBatch.encode`` writes it."""
    parts: list[bytes] = []
    for message in messages:
        properties = encode_properties_bytes(message.properties)
        total = _FIXED_SIZE + len(message.body) + len(properties)
        if total >= 2**31:
            raise LocalProtocolError(f"batch message of {total} bytes does not fit a record")
        parts += (
            _HEAD.pack(total, 0, 0, message.flag & 0xFFFFFFFF, len(message.body)),
            message.body,
            _I16.pack(len(properties)),
            properties,
        )
    return b"".join(parts)


def decode_batch(data: bytes, max_messages: int = 1 << 20) -> list[BatchMessage]:
    """The messages of a batch's body; a malformed record, or more than ``max_messages``
    records, is a :class:`ProtocolError` naming where."""
    messages: list[BatchMessage] = []
    view = memoryview(data)
    end = len(view)
    position = 0
    try:
        while position < end:
            if len(messages) >= max_messages:
                raise LocalProtocolError(f"a batch holds more than {max_messages} messages")
            if end - position < _FIXED_SIZE:
                raise LocalProtocolError(f"batch record {len(messages)} is truncated")
            total, _magic, _crc, flag, body_size = _HEAD.unpack_from(view, position)
            body_start = position + _HEAD.size
            if body_size < 0 or body_start + body_size + 2 > end:
                raise LocalProtocolError(
                    f"batch record {len(messages)}: body of {body_size} bytes overruns the batch"
                )
            properties_at = body_start + body_size
            (properties_size,) = _I16.unpack_from(view, properties_at)
            record_end = properties_at + 2 + properties_size
            if properties_size < 0 or record_end > end:
                raise LocalProtocolError(
                    f"batch record {len(messages)}: properties overrun the batch"
                )
            if total != record_end - position:
                raise LocalProtocolError(
                    f"batch record {len(messages)}: total size {total} is not its"
                    f" {record_end - position} bytes"
                )
            messages.append(
                BatchMessage(
                    bytes(view[body_start:properties_at]),
                    decode_properties_bytes(view[properties_at + 2 : record_end]),
                    flag,
                )
            )
            position = record_end
    finally:
        view.release()
    return messages
