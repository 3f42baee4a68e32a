"""A fuzz test of the remoting codec, as tests/faults/test_protocol_fuzz.py fuzzes the native
one: random and mutated frames, records, batches, bodies and ids, fed to every decoder.

Seeded (``POCKETMQ_FUZZ_SEED`` replays or varies a run) and bounded in time (half a second per
target here; ``POCKETMQ_FUZZ_SECONDS`` searches longer). Asserted: no exception but
:class:`ProtocolError`, and bounded memory — the frame decoder never holds more than one frame's
worth of bytes, and no input makes any decoder allocate more than a few MiB beyond its input
(a frame claiming 16 MiB, a body inflating to gigabytes, a batch claiming a huge body).
"""

from __future__ import annotations

import functools
import os
import random
import struct
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator

import pytest

from pocketmq.errors import ProtocolError
from pocketmq.protocol.remoting import RemotingCommand, RemotingFrameDecoder, encode_command
from pocketmq.protocol.remoting.batch import BatchMessage, decode_batch, encode_batch
from pocketmq.protocol.remoting.bodies import HeartbeatData, LockBatchRequest, decode_json_body
from pocketmq.protocol.remoting.codes import SerializeType
from pocketmq.protocol.remoting.command import decode_header
from pocketmq.protocol.remoting.msgid import decode_offset_msg_id
from pocketmq.protocol.remoting.sniff import sniff_protocol
from pocketmq.protocol.remoting.stored import StoredMessage, decode_stored, encode_stored
from pocketmq.protocol.remoting.sysflag import COMPRESSED, inflate_body

SEED = int(os.environ.get("POCKETMQ_FUZZ_SEED", "20261126"))
SECONDS = float(os.environ.get("POCKETMQ_FUZZ_SECONDS", "0.5"))
MAX_FRAME = 1 << 20  # a small frame limit, so "just under the limit" is cheap to reach
ALLOWANCE = 8 << 20  # bytes any decoder may allocate beyond its input


def mutate(data: bytes, rng: random.Random) -> bytes:
    """``data`` with a few random edits: bytes changed, inserted, deleted or repeated."""
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


_TEXT = ["", "t", "%RETRY%g", "a" * 300, "é", "\u0000", "😀", "x\x01y", "TAGS"]
_INTS = [0, 1, -1, 2**31 - 1, -(2**31), 2**32 - 1, 2**63 - 1, -(2**63), 200050]


def _command(rng: random.Random) -> bytes:
    fields = {
        rng.choice(_TEXT): rng.choice([*_TEXT, str(rng.choice(_INTS))])
        for _ in range(rng.randint(0, 6))
    }
    command = RemotingCommand(
        rng.choice([10, 11, 34, 105, 310, 320, 32767, -5]),
        opaque=rng.choice(_INTS[:5]),
        flag=rng.choice([0, 1, 2, 3, -1]),
        ext_fields=fields,
        remark=rng.choice([None, "", "err", "é" * 10]),
        body=rng.randbytes(rng.choice([0, 1, 50, 3000])),
        serialize_type=rng.choice([0, 1]),
    )
    return encode_command(command)


def _noise_prefix(rng: random.Random) -> bytes:
    """A frame prefix announcing sizes near and past the limits."""
    total = rng.choice([0, 3, 4, 8, MAX_FRAME - 4, MAX_FRAME - 3, 2**31, 2**32 - 1])
    header = rng.choice([0, 1, 20, 21, 256, total, 0xFFFFFF])
    return struct.pack(">II", total, rng.choice([0, 1, 2, 255]) << 24 | header & 0xFFFFFF)


def _stream(rng: random.Random) -> bytes:
    parts = [_command(rng) for _ in range(rng.randint(1, 5))]
    roll = rng.random()
    if roll < 0.5:
        parts[rng.randrange(len(parts))] = mutate(parts[0], rng)
    elif roll < 0.7:
        parts.append(_noise_prefix(rng) + rng.randbytes(rng.randint(0, 64)))
    elif roll < 0.85:
        parts.append(rng.randbytes(rng.randint(1, 200)))
    return b"".join(parts)


def _records(rng: random.Random) -> bytes:
    messages = [
        StoredMessage(
            rng.choice(["t", "x" * 200, "é"]),
            rng.randbytes(rng.randint(0, 100)),
            {"UNIQ_KEY": "A" * rng.randint(1, 40)},
            sys_flag=rng.choice([0, COMPRESSED, 0x30]),
            born_host=rng.choice(["127.0.0.1:1", "[::1]:2", ""]),
        )
        for _ in range(rng.randint(1, 4))
    ]
    return mutate(encode_stored(messages), rng)


def _batch(rng: random.Random) -> bytes:
    messages = [
        BatchMessage(rng.randbytes(rng.randint(0, 80)), {"UNIQ_KEY": "B"}, rng.randint(0, 9))
        for _ in range(rng.randint(1, 5))
    ]
    raw = encode_batch(messages)
    if rng.random() < 0.2:  # a record claiming an enormous body
        return struct.pack(">iiiIi", 22, 0, 0, 0, 2**31 - 1) + raw
    return mutate(raw, rng)


def _json_body(rng: random.Random) -> bytes:
    seeds = [
        b'{"clientID":"c","producerDataSet":[{"groupName":"p"}],"consumerDataSet":[{"groupName":'
        b'"g","subscriptionDataSet":[{"topic":"t","codeSet":[1],"tagsSet":["a"]}]}]}',
        b'{"consumerGroup":"g","clientId":"c","mqSet":[{"topic":"t","brokerName":"b",'
        b'"queueId":1}]}',
    ]
    return mutate(rng.choice(seeds), rng)


@functools.cache
def _bomb(size: int) -> bytes:
    return zlib.compress(bytes(size), 9)


def _compressed(rng: random.Random) -> bytes:
    roll = rng.random()
    if roll < 0.3:  # inflates past any bound
        return _bomb(rng.choice([(1 << 20) + 1, 64 << 20]))
    valid = zlib.compress(rng.randbytes(200) * 4)
    return valid if roll < 0.5 else mutate(valid, rng)


def _msg_id(rng: random.Random) -> bytes:
    return mutate(b"645100FA00002A9F000000489A3AA09E", rng)


_JSON_FIELDS = [b'"code":105', b'"code":"105"', b'"opaque":7', b'"flag":2', b'"version":401',
                b'"language":"JAVA"', b'"language":13', b'"remark":null', b'"remark":5',
                b'"extFields":{"topic":"t","e":1,"k":false,"n":null,"f":1.5}',
                b'"extFields":{"a":[1]}', b'"serializeTypeCurrentRPC":"JSON"']  # fmt: skip


def _json_header(rng: random.Random) -> bytes:
    """A JSON header as a lenient client might write it — numbers, booleans and nulls where
    strings go — then often damaged: whichever field the strict decoder stops at, the rest of
    the text must still be checked."""
    fields = rng.sample(_JSON_FIELDS, rng.randint(1, len(_JSON_FIELDS)))
    header = b"{" + b",".join(fields) + b"}"
    return mutate(header, rng) if rng.random() < 0.7 else header


def _feed_stream(data: bytes, rng: random.Random) -> None:
    decoder = RemotingFrameDecoder(max_frame=MAX_FRAME)
    position = 0
    while position < len(data):
        step = rng.randint(1, 700)
        decoder.feed(data[position : position + step])
        position += step
        assert decoder.buffered <= MAX_FRAME
        if rng.random() < 0.05:
            decoder.abandon_partial()


Target = tuple[Callable[[random.Random], bytes], Callable[[bytes, random.Random], object]]
TARGETS: dict[str, Target] = {
    "frames": (_stream, _feed_stream),
    "json-header": (_json_header, lambda data, _: decode_header(SerializeType.JSON, data)),
    "stored": (_records, lambda data, _: decode_stored(data, max_body=1 << 20)),
    "batch": (_batch, lambda data, _: decode_batch(data)),
    "heartbeat": (_json_body, lambda data, _: decode_json_body(data, HeartbeatData)),
    "lock": (_json_body, lambda data, _: decode_json_body(data, LockBatchRequest)),
    "inflate": (_compressed, lambda data, _: inflate_body(data, COMPRESSED, 1 << 20)),
    "msgid": (_msg_id, lambda data, _: decode_offset_msg_id(data.decode("latin-1"))),
    "sniff": (lambda rng: rng.randbytes(rng.randint(0, 20)), lambda data, _: sniff_protocol(data)),
}


@pytest.fixture
def traced() -> Iterator[None]:
    tracemalloc.start()
    try:
        yield
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_decoders_raise_only_protocol_errors_in_bounded_memory(target: str, traced: None) -> None:
    generate, decode = TARGETS[target]
    rng = random.Random(f"{SEED}-{target}")
    end = time.monotonic() + SECONDS
    cases = refused = 0
    worst = 0
    while time.monotonic() < end or cases < 50:
        data = generate(rng)
        tracemalloc.reset_peak()
        before, _ = tracemalloc.get_traced_memory()
        try:
            decode(data, rng)
        except ProtocolError:
            refused += 1
        except Exception as exc:  # pragma: no cover - the finding, reported with its input
            pytest.fail(f"{target}: {type(exc).__name__}: {exc} <- {data[:200]!r} (seed {SEED})")
        _, peak = tracemalloc.get_traced_memory()
        worst = max(worst, peak - before - len(data))
        cases += 1
    assert worst < ALLOWANCE, f"{target} allocated {worst} bytes beyond its input"
    if target != "sniff":  # the generators reach both outcomes: the fuzzing is not vacuous
        assert 0 < refused < cases, (target, refused, cases)
