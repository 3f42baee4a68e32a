"""The pull read's per-record pass: decode and verify each record of a run read with one read,
and keep what the tag filter and the byte budget allow.

This is the pure-Python implementation that :mod:`pocketmq.store.reader` uses; the build also
compiles it with mypyc as ``_readpass_c`` (docs/design.md, "Compiled hot paths"), so it must
stay within what mypyc compiles, and correctness lives here. Every consumed message passes
here once: the record's decode was the broker's largest item per consumed message
(docs/benchmarks.md, "Compiled read pass (issue 32)").

:func:`decode_at` is :func:`pocketmq.store.record.decode_record` for a ``bytes`` buffer (what a
log read returns), the same checks in the same order with the same errors:
``tests/store/test_readpass.py`` feeds both, and the compiled twin, the same random and damaged
records. The general codec stays in ``record.py`` (pure): recovery and scans pass it
memoryviews, and keeping the twin out of it keeps ``record.py`` free of an import cycle.

What may fail is handed back to the caller's pure code (``unreadable``: the reader's repair and
quarantine, docs/storage-format.md §7), so a test that patches the reader still sees every call.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from typing import Final

import msgspec

from pocketmq.store.message import StoredMessage
from pocketmq.store.record import (
    FIXED_HEADER_SIZE,
    MAGIC,
    MIN_RECORD_SIZE,
    RecordError,
    unpack_host,
)
from pocketmq.store.record import _host_texts as _hosts

__all__ = ["decode_at", "decode_run"]

_HEADER: Final = struct.Struct("<IIIIIQQQQ18s18sIQQ")
# bound once: a compiled call then skips the method's lookup by name
_unpack_header: Final = _HEADER.unpack_from
_unpack_u16: Final = struct.Struct("<H").unpack_from
_unpack_u32: Final = struct.Struct("<I").unpack_from
_crc32: Final = zlib.crc32
_decode_props: Final = msgspec.msgpack.Decoder(dict[str, str]).decode

#: what the reader does with an entry whose record fails: (topic, queue id, queue offset,
#: physical offset, size, reason) -> the repaired record, or None (lost)
Unreadable = Callable[[str, int, int, int, int, str], "StoredMessage | None"]


def decode_at(buf: bytes, pos: int, expected_physical_offset: int) -> StoredMessage:
    """Decode and validate the record at ``buf[pos:]``, which must sit at log offset
    ``expected_physical_offset``; raises :class:`RecordError` exactly where
    :func:`pocketmq.store.record.decode_record` does."""
    return _decode(buf, pos, expected_physical_offset)[0]


def _decode(buf: bytes, pos: int, expected_physical_offset: int) -> tuple[StoredMessage, int]:
    """:func:`decode_at`, and the record's size (kept as a machine integer when compiled)."""
    available = len(buf) - pos
    if available < FIXED_HEADER_SIZE:
        raise RecordError("truncated header")
    # the fields compared or added are declared ``int`` (machine integers when compiled); the
    # rest, only passed on, are ``Any``: a compiled module hands the objects on as they are
    total: int
    magic: int
    crc: int
    physical_offset: int
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
        born,
        stored,
        reconsume_times,
        prepared_offset,
        code,
    ) = _unpack_header(buf, pos)
    if magic != MAGIC:
        raise RecordError("bad magic")
    if total < MIN_RECORD_SIZE:
        raise RecordError("bad size")
    if total > available:
        raise RecordError("truncated record")
    end = pos + total
    if _crc32(buf[pos + 12 : end]) != crc:
        raise RecordError("crc mismatch")
    if physical_offset != expected_physical_offset:
        raise RecordError("misplaced record")
    cursor = pos + FIXED_HEADER_SIZE + 2
    topic_len: int = _unpack_u16(buf, cursor - 2)[0]
    if cursor + topic_len + 4 > end:
        raise RecordError("bad topic length")
    topic = str(buf[cursor : cursor + topic_len], "utf-8")
    cursor += topic_len
    props_len: int = _unpack_u32(buf, cursor)[0]
    cursor += 4
    if cursor + props_len + 4 > end:
        raise RecordError("bad properties length")
    props = _decode_props(buf[cursor : cursor + props_len]) if props_len else {}
    cursor += props_len
    body_len: int = _unpack_u32(buf, cursor)[0]
    cursor += 4
    if cursor + body_len != end:
        raise RecordError("bad body length")
    born_host = _hosts.get(born)
    store_host = _hosts.get(stored)
    record = StoredMessage(
        topic,
        queue_id,
        queue_offset,
        physical_offset,
        total,
        buf[cursor:end],
        props,
        flags,
        born_ts,
        store_ts,
        unpack_host(born) if born_host is None else born_host,
        unpack_host(stored) if store_host is None else store_host,
        reconsume_times,
        prepared_offset,
        code,
    )
    return record, total


def decode_run(
    data: bytes,
    start: int,
    entries: list[tuple[int, int, int]],
    tags: frozenset[str] | None,
    messages: list[StoredMessage],
    size_total: int,
    max_bytes: int,
    stopped_at: int,
    topic: str,
    queue_id: int,
    unreadable: Unreadable,
) -> tuple[int, int, bool]:
    """Verify each record of ``entries`` (queue offset, log offset, size) in ``data``, the log
    read from offset ``start``, and append to ``messages`` what the filter and the byte budget
    allow (:meth:`pocketmq.store.reader.Reader._read_runs` says the rules).

    Returns the bytes kept, the queue offset of the first record past the budget (-1: none, or
    ``stopped_at`` as given) and whether an entry's record was lost (``unreadable`` said so)."""
    lost = False
    for queue_offset, physical, size in entries:
        try:
            record, kept = _decode(data, physical - start, physical)
        except RecordError as exc:
            repaired = unreadable(topic, queue_id, queue_offset, physical, size, exc.reason)
            if repaired is None:
                lost = True
                continue
            record, kept = repaired, repaired.size
        if stopped_at >= 0 or (tags is not None and record.tag not in tags):
            continue
        if messages and size_total + kept > max_bytes:
            stopped_at = record.queue_offset
            continue
        messages.append(record)
        size_total += kept
    return size_total, stopped_at, lost
