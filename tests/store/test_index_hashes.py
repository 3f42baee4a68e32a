"""The index's keys hashed without being built, and its slot table written in place: the files
must be the bytes the key-by-key path writes (docs/storage-format.md §3), on either byte order."""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest

from pocketmq.store import MessageStore
from pocketmq.store import index as index_module
from pocketmq.store.index import (
    IndexFile,
    IndexService,
    id_hash,
    id_key,
    key_hashes,
    topic_key,
)

from .conftest import SMALL, message

TEXTS = ["", "a", "MSG000001", "0A1B2C3D4E5F60718293A4B5C6D7E8F9", "ключ", "键", "x" * 300]


@pytest.mark.parametrize("text", TEXTS)
def test_an_id_hash_is_the_crc_of_its_key(text: str) -> None:
    assert id_hash(text) == zlib.crc32(id_key(text))


@pytest.mark.parametrize("topic", ["orders", "%SYS%HISTORY", "тема"])
def test_key_hashes_are_the_crcs_of_the_keys_the_store_indexed(topic: str) -> None:
    keys = "  ".join(TEXTS[1:]) + " \t tail "
    assert key_hashes(topic, keys) == [zlib.crc32(topic_key(topic, k)) for k in keys.split()]
    assert key_hashes(topic, "") == []


def _reference(directory: Path, entries: list[tuple[bytes, int]]) -> None:
    """The index written one key at a time (``IndexFile.put``: built keys, ``struct`` slots)."""
    service = IndexService(str(directory), SMALL.index_max_entries)
    for key, physical in entries:
        service._writable(physical).put(zlib.crc32(key), physical)
    service.close()


def test_the_store_writes_the_index_the_key_by_key_path_writes(tmp_path: Path) -> None:
    with MessageStore.open(str(tmp_path / "s"), SMALL) as store:
        results = store.put([message(i) for i in range(150)])  # three files and a bit
    entries: list[tuple[bytes, int]] = []
    for i, result in enumerate(results):
        entries.append((id_key(f"MSG{i:06d}"), result.physical_offset))
        keys = f"order-{i} batch-{i // 10}".split()  # conftest.message's KEYS
        entries += [(topic_key("orders", k), result.physical_offset) for k in keys]
    _reference(tmp_path / "ref", entries)
    written = sorted((tmp_path / "s" / "index").iterdir())
    expected = sorted((tmp_path / "ref").iterdir())
    assert [p.name for p in written] == [p.name for p in expected]
    assert [p.read_bytes() for p in written] == [p.read_bytes() for p in expected]


def test_a_big_endian_host_writes_the_same_file(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    hashed = [((n * 2654435761) % 2**32, 1000 + n) for n in range(60)]
    hashed += [(hashed[3][0], 5000), (hashed[3][0], 5001)]  # one slot's chain in one batch
    little = IndexFile(str(tmp_path / "le"), max_entries=64, create=True)
    little.put_many(hashed)
    little.close()
    monkeypatch.setattr(index_module.sys, "byteorder", "big")
    big = IndexFile(str(tmp_path / "be"), max_entries=64, create=True)
    assert isinstance(big._slots, index_module._PackedSlots)
    big.put_many(hashed)
    assert big.lookup(hashed[3][0], 10) == [5001, 5000, 1003]
    big.close()
    assert (tmp_path / "le").read_bytes() == (tmp_path / "be").read_bytes()


def test_a_closed_file_reopens_with_its_entries(tmp_path: Path) -> None:
    service = IndexService(str(tmp_path), 64)
    service.put_hashed([(id_hash(f"M{n}"), n * 100) for n in range(100)])
    service.close()  # the slot table's view is let go before the map closes
    again = IndexService(str(tmp_path), 64)
    assert again.lookup(id_key("M7")) == [700]
    assert again.lookup(id_key("M99")) == [9900]
    again.close()
