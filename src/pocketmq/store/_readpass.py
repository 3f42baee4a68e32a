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
from collections.abc import Callable
from typing import Final, Protocol

import msgspec

from pocketmq.store.checksum import crc32
from pocketmq.store.consumequeue import ENTRY
from pocketmq.store.message import StoredMessage
from pocketmq.store.record import (
    FIXED_HEADER_SIZE,
    MAGIC,
    MIN_RECORD_SIZE,
    RecordError,
    unpack_host,
)
from pocketmq.store.record import _host_texts as _hosts

__all__ = ["decode_at", "decode_run", "read_entries"]

#: the most log one read takes (a run of adjacent records is read at once up to this)
MAX_COALESCED_READ: Final = 1024 * 1024

_HEADER: Final = struct.Struct("<IIIIIQQQQ18s18sIQQ")
# bound once: a compiled call then skips the method's lookup by name
_unpack_header: Final = _HEADER.unpack_from
_u16: Final = struct.Struct("<H").unpack_from
_u32: Final = struct.Struct("<I").unpack_from
#: whether this is the compiled twin (a compiled module's file is its shared library): the
#: decode then takes the branch a compiled module runs fastest (docs/benchmarks.md, "Broker
#: consume path, compiled entries' loop (issue 32)")
_NATIVE: Final = not __file__.endswith(".py")
_iter_entries: Final = ENTRY.iter_unpack
# ISA-L's CRC-32 where installed: zlib's value at a tenth of the cost (store/checksum.py)
_crc32: Final = crc32
_decode_props: Final = msgspec.msgpack.Decoder(dict[str, str]).decode
# module-level names a compiled module reads from a static, not from the module's dict
_HOSTS: Final = _hosts
_STORED_MESSAGE: Final = StoredMessage


class _Last:
    """The previous record's topic and hosts, each as (raw, decoded): the records of a run
    (and of a queue) mostly share them, and comparing 18 bytes costs less than hashing them
    for the hosts' cache (``record.unpack_host``) or decoding a topic again. Each pair is
    replaced whole, so a reader on another thread never sees one pair's halves mixed."""

    def __init__(self) -> None:
        empty: tuple[bytes, str] = (b"", "")
        self.topic = empty
        self.born = empty
        self.stored = empty


_LAST: Final = _Last()

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
    born: bytes
    stored: bytes
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
    # compiled, the lengths are read byte by byte: bytes are indexed natively, where a
    # ``struct`` call costs ~700 instructions; pure, ``struct`` is the cheaper (the checks
    # above keep both inside ``buf``)
    topic_len: int = buf[cursor - 2] | buf[cursor - 1] << 8 if _NATIVE else _u16(buf, cursor - 2)[0]
    if cursor + topic_len + 4 > end:
        raise RecordError("bad topic length")
    # a run's records share their topic and hosts: compared with the previous record's
    topic, born_host, store_host = _texts(_LAST, buf[cursor : cursor + topic_len], born, stored)
    cursor += topic_len
    props_len: int = _u32_at(buf, cursor) if _NATIVE else _u32(buf, cursor)[0]
    cursor += 4
    if cursor + props_len + 4 > end:
        raise RecordError("bad properties length")
    props = _decode_props(buf[cursor : cursor + props_len]) if props_len else {}
    cursor += props_len
    body_len: int = _u32_at(buf, cursor) if _NATIVE else _u32(buf, cursor)[0]
    cursor += 4
    if cursor + body_len != end:
        raise RecordError("bad body length")
    record = _STORED_MESSAGE(
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
        born_host,
        store_host,
        reconsume_times,
        prepared_offset,
        code,
    )
    return record, total


def _u32_at(buf: bytes, at: int) -> int:
    """The little-endian u32 at ``buf[at:]``, byte by byte (what a compiled module does fastest)."""
    return buf[at] | buf[at + 1] << 8 | buf[at + 2] << 16 | buf[at + 3] << 24


def _texts(last: _Last, raw_topic: bytes, born: bytes, stored: bytes) -> tuple[str, str, str]:
    """A record's topic and the ``host:port`` texts of its two address fields
    (``record.unpack_host``), each compared with the previous record's first."""
    known = last.topic
    if raw_topic == known[0]:
        topic = known[1]
    else:
        topic = str(raw_topic, "utf-8")
        last.topic = (raw_topic, topic)
    known = last.born
    if born == known[0]:
        born_host = known[1]
    else:
        found = _HOSTS.get(born)
        born_host = unpack_host(born) if found is None else found
        last.born = (born, born_host)
    known = last.stored
    if stored == known[0]:
        return topic, born_host, known[1]
    found = _HOSTS.get(stored)
    store_host = unpack_host(stored) if found is None else found
    last.stored = (stored, store_host)
    return topic, born_host, store_host


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


class Entries(Protocol):
    """What :func:`read_entries` reads a queue's entries from (a ``ConsumeQueue``)."""

    def read_raw(self, offset: int, count: int) -> bytes:
        """Up to ``count`` packed entries from queue offset ``offset`` (none past the end)."""
        ...


class Log(Protocol):
    """What :func:`read_entries` reads records from (a ``CommitLog``)."""

    @property
    def min_offset(self) -> int:
        """The oldest log offset still kept (an entry below it was removed by retention)."""
        ...

    @property
    def segment_size(self) -> int:
        """A segment file's size: a run of records never crosses a segment's end."""
        ...

    def read(self, offset: int, size: int) -> bytes | None:
        """``size`` bytes of the log at ``offset``, or None where it holds no such range."""
        ...


class SetAside(Protocol):
    """What says which log offsets are set aside (a ``Quarantine`` that skips ranges)."""

    def covering(self, offset: int) -> object | None:
        """The set-aside range holding log offset ``offset``, or None."""
        ...


# Protocols, not the store's classes: a compiled module checks an argument's class, and the
# queue and the log may be another group's compiled twins (docs/design.md, "Compiled hot paths")
def read_entries(
    queue: Entries,
    commitlog: Log,
    offset: int,
    high: int,
    max_count: int,
    max_bytes: int,
    max_scan: int,
    codes: set[int] | None,
    tags: frozenset[str] | None,
    quarantine: SetAside | None,
    limit: int,
    topic: str,
    queue_id: int,
    unreadable: Unreadable,
    messages: list[StoredMessage],
) -> tuple[int, bool, bool]:
    """The entries' loop of :meth:`pocketmq.store.reader.Reader.get_messages` (its rules there):
    read entries from ``offset`` (below ``high``), note the runs of physically adjacent records
    and keep what :func:`decode_run` keeps of each into ``messages``. ``limit``: the visible
    limit (-1: none). Returns the cursor (where the next read starts), whether an entry's
    record was removed (retention, quarantine, lost) and whether a record not visible yet
    stopped the read."""
    log_min: int = commitlog.min_offset
    segment_size: int = commitlog.segment_size
    size_total = scanned = 0
    cursor = offset
    removed = held = False
    while cursor < high and len(messages) < max_count and scanned < max_scan and not held:
        raw = queue.read_raw(cursor, min(max_scan - scanned, max(max_count * 2, 64)))
        if not raw:
            break
        batch: list[tuple[int, int, int]] = []
        runs: list[tuple[int, int, int, int]] = []  # first, stop (in batch), start, end
        first = 0
        start = end = segment_end = cap = -1
        physical: int
        size: int
        for physical, size, code in _iter_entries(raw):
            if limit >= 0 and size != 0 and physical + size > limit:
                held = True
                break
            cursor += 1
            scanned += 1
            if physical < log_min or size == 0:
                removed = True
                continue
            if quarantine is not None and quarantine.covering(physical) is not None:
                removed = True  # set aside as damaged: consumers move past it
                continue
            if codes is not None and code not in codes:
                continue
            if physical != end or physical >= cap or physical + size > segment_end:
                if end >= 0:
                    runs.append((first, len(batch), start, end))
                first, start, cap = len(batch), physical, physical + MAX_COALESCED_READ
                segment_end = start - start % segment_size + segment_size
            end = physical + size
            batch.append((cursor - 1, physical, size))
            if len(batch) + len(messages) >= max_count or size_total + size > max_bytes:
                break
        if batch:
            runs.append((first, len(batch), start, end))
        size_total, stopped_at, lost = _read_runs(
            commitlog,
            batch,
            runs,
            tags,
            messages,
            size_total,
            max_bytes,
            topic,
            queue_id,
            unreadable,
        )
        removed = removed or lost
        if stopped_at >= 0 or size_total >= max_bytes:
            cursor = stopped_at if stopped_at >= 0 else cursor
            break
    return cursor, removed, held


def _read_runs(
    commitlog: Log,
    batch: list[tuple[int, int, int]],
    runs: list[tuple[int, int, int, int]],
    tags: frozenset[str] | None,
    messages: list[StoredMessage],
    size_total: int,
    max_bytes: int,
    topic: str,
    queue_id: int,
    unreadable: Unreadable,
) -> tuple[int, int, bool]:
    """Read each run of adjacent records of ``batch`` with one read, and keep its records as
    :func:`decode_run` says. Returns the bytes kept, the queue offset of the first record past
    the budget (-1: none) and whether an entry's record was lost (set aside, or gone under the
    read: retention). The records after the budget's stop are verified all the same, as every
    read record is: a damaged one is set aside now, as the read that picked it always did."""
    stopped_at = -1
    lost = False
    for first, stop, start, end in runs:
        data = commitlog.read(start, end - start)
        if data is None:
            lost = True  # gone under the read (retention)
            continue
        size_total, stopped_at, run_lost = decode_run(
            data,
            start,
            batch[first:stop],
            tags,
            messages,
            size_total,
            max_bytes,
            stopped_at,
            topic,
            queue_id,
            unreadable,
        )
        lost = lost or run_lost
    return size_total, stopped_at, lost
