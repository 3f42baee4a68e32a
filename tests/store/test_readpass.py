"""The pull read's per-record pass (``store/_readpass.py``) against the record codec and against
its compiled twin (docs/design.md, "Compiled hot paths"): the same random records, whole,
damaged, cut or read at another place, give the same messages and the same errors from
``record.decode_record``, the pure ``decode_at`` and the compiled one; and ``decode_run`` keeps
the same messages, stops at the same offset and hands the same entries back, either way.

Without a compiled build the twin's comparisons are skipped, unless
``POCKETMQ_REQUIRE_EXTENSIONS=1`` says the build must be there (``make test``)."""

from __future__ import annotations

import contextlib
import random
import struct
import zlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

import msgspec
import pytest

from pocketmq.store import StoredMessage
from pocketmq.store import _readpass as pure
from pocketmq.store.record import RecordError, decode_record, encode_record, pack_host
from tests.twins import compiled_twin

PURE = "pocketmq.store._readpass"
HOSTS = ["", "127.0.0.1:10911", "10.1.2.3:0", "[::1]:8081", "[2001:db8::7]:65535"]


def _outcome(call: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[str, Any]:
    try:
        result = call(*args, **kwargs)
    except RecordError as exc:
        return "record error", exc.reason
    except Exception as exc:
        return "error", (type(exc).__name__, str(exc))
    return "value", msgspec.structs.astuple(result)


def _record(rng: random.Random, physical: int) -> bytes:
    properties = {f"k{i}": "v" * rng.randrange(20) for i in range(rng.randrange(4))}
    if rng.random() < 0.5:
        properties["TAGS"] = rng.choice(["a", "b"])
    return b"".join(
        encode_record(
            topic=rng.choice(["t", "backlog", "%RETRY%g", "é" * 3]),
            queue_id=rng.randrange(2**32),
            queue_offset=rng.randrange(2**64),
            physical_offset=physical,
            body=rng.randbytes(rng.choice([0, 1, 100, 1024, 5000])),
            properties=properties,
            flags=rng.randrange(2**32),
            born_timestamp=rng.randrange(2**64),
            store_timestamp=rng.randrange(2**64),
            born_host=pack_host(rng.choice(HOSTS)),
            store_host=pack_host(rng.choice(HOSTS)),
            reconsume_times=rng.randrange(2**32),
            prepared_transaction_offset=rng.randrange(2**64),
            tag_code=rng.randrange(2**64),
        )
    )


def _recrc(raw: bytearray) -> None:
    """Make a record's CRC right again over damage inside it (a writer's bug, not a disk's)."""
    if len(raw) >= 12:
        struct.pack_into("<I", raw, 8, zlib.crc32(bytes(raw[12:])))


def _damaged(rng: random.Random, raw: bytes) -> bytes:
    """The record whole, bit-flipped, with a field overwritten (its CRC fixed or not), or cut."""
    out = bytearray(raw)
    what = rng.randrange(5)
    if what == 1:
        for _ in range(rng.randrange(1, 4)):
            bit = rng.randrange(len(out) * 8)
            out[bit // 8] ^= 1 << (bit % 8)
    elif what == 2:  # lengths, topic bytes, properties bytes: past the CRC when fixed
        at = rng.choice([108, 109, 110, 111, 112, rng.randrange(108, len(out))])
        out[at] = rng.choice([0, 0xFF, 0xC1, 0x80, rng.randrange(256)])
        if rng.random() < 0.8:
            _recrc(out)
    elif what == 3:
        out = out[: rng.randrange(len(out))]
    elif what == 4:  # the header's size or magic
        struct.pack_into("<I", out, rng.choice([0, 4]), rng.choice([0, 119, 120, 2**32 - 1]))
    return bytes(out)


def test_decode_at_matches_decode_record_on_random_and_damaged_records() -> None:
    implementations = [pure.decode_at]
    with contextlib.suppress(pytest.skip.Exception):  # the codec's side runs pure-only too
        implementations.append(compiled_twin(PURE).decode_at)
    rng = random.Random(32)
    verdicts = set()
    for _ in range(3000):
        pad = rng.randrange(8)
        raw = _damaged(rng, _record(rng, 4096 + pad))
        buf = b"\x00" * pad + raw + b"\x00" * rng.randrange(3)
        place = rng.choice([4096 + pad, 4096 + pad, 0])
        expected = _outcome(decode_record, buf, pad, expected_physical_offset=place)
        verdicts.add(expected[1] if expected[0] == "record error" else expected[0])
        for decode_at in implementations:
            assert _outcome(decode_at, buf, pad, place) == expected
    # the damage reached every check and the errors past them
    assert {"value", "crc mismatch", "misplaced record", "truncated record"} <= verdicts
    assert {"bad magic", "bad size", "truncated header", "error"} <= verdicts
    assert {"bad topic length", "bad properties length", "bad body length"} <= verdicts


def _run_outcome(module: ModuleType, case: dict[str, Any]) -> Any:
    calls: list[tuple[Any, ...]] = []
    repaired = case["repaired"]

    def unreadable(*args: Any) -> StoredMessage | None:
        calls.append(args)
        return repaired if len(calls) % 2 else None

    messages: list[StoredMessage] = list(case["kept"])
    try:
        answer = module.decode_run(
            case["data"],
            case["start"],
            case["entries"],
            case["tags"],
            messages,
            case["size_total"],
            case["max_bytes"],
            case["stopped_at"],
            "topic",
            3,
            unreadable,
        )
    except Exception as exc:
        answer = (type(exc).__name__, str(exc))
    return answer, [msgspec.structs.astuple(m) for m in messages], calls


def test_decode_run_is_the_same_pure_and_compiled() -> None:
    fast = compiled_twin(PURE)
    rng = random.Random(33)
    start = 8192
    for _ in range(300):
        pieces, entries, place = [], [], start
        for n in range(rng.randrange(1, 8)):
            raw = _record(rng, place)
            if rng.random() < 0.2:
                raw = _damaged(rng, raw)
            size = len(raw) if rng.random() > 0.1 else len(raw) + rng.choice([-1, 1])
            entries.append((n, place, size))
            pieces.append(raw)
            place += len(raw)
        data = b"".join(pieces)
        repaired = decode_record(_record(rng, 0), expected_physical_offset=0)
        case = {
            "data": data,
            "start": start,
            "entries": entries,
            "tags": rng.choice([None, frozenset({"a"}), frozenset({"a", "b"})]),
            "kept": [] if rng.random() < 0.5 else [repaired],
            "size_total": rng.choice([0, 100]),
            "max_bytes": rng.choice([1, 2000, 6000, 4 * 1024 * 1024]),
            "stopped_at": rng.choice([-1, -1, 5]),
            "repaired": repaired,
        }
        assert _run_outcome(fast, case) == _run_outcome(pure, case)
